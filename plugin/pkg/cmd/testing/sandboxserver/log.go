package sandboxserver

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxregistry "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/registry/sandbox"
)

// taskLogKey names one attempt's log: the current one, or the previous.
type taskLogKey struct {
	name     string
	replica  int32
	previous bool
}

// SetTaskLog sets the log of the current task attempt of a sandbox's replica, or of the
// previous attempt, which the log subresource serves.
func (s *Server) SetTaskLog(name string, replica int32, previous bool, log string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		s.logs = map[taskLogKey]string{}
	}
	s.logs[taskLogKey{name, replica, previous}] = log
}

// logCodec decodes the log options from the query, as the real server's parameter codec does.
var logCodec = func() runtime.ParameterCodec {
	scheme := runtime.NewScheme()
	if err := sandboxv1alpha1.AddToServerScheme(scheme); err != nil {
		panic(err)
	}
	return runtime.NewParameterCodec(scheme)
}()

// serveLog answers GET .../sandboxes/NAME/log as the real server does, with the log set by
// SetTaskLog: tailLines and limitBytes applied, follow ending with the log (the test's task
// has ended). Its refusals are the real server's: invalid options, a sandbox without a task,
// a replica it does not have, a replica whose pod status lists it not ready (503), a replica
// without a log yet.
func (s *Server) serveLog(w http.ResponseWriter, req *http.Request, name string) {
	if req.Method != http.MethodGet {
		writeStatus(w, apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes/log"), req.Method))
		return
	}
	opts := &sandboxv1alpha1.SandboxLogOptions{}
	if err := logCodec.DecodeParameters(req.URL.Query(), sandboxv1alpha1.SchemeGroupVersion, opts); err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	if err := sandboxregistry.ValidateLogOptions(name, opts); err != nil {
		writeStatus(w, err)
		return
	}
	if opts.Process != "" {
		s.serveProcessLog(w, name, opts)
		return
	}
	sb := s.Sandbox(name)
	if sb.Spec.TaskTemplate == nil {
		writeStatus(w, sandboxregistry.NoTaskError(name))
		return
	}
	replicas := int32(1)
	if sb.Spec.Replicas != nil {
		replicas = *sb.Spec.Replicas
	}
	if opts.Replica >= replicas {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("sandbox %q has %d replica(s); replica %d does not exist", name, replicas, opts.Replica)))
		return
	}
	for _, p := range sb.Status.Pods {
		if p.Replica == opts.Replica && !p.Ready {
			writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("sandbox %q is not ready: pod %s of replica %d is being set up (its execd is not certified or allocated yet)", name, p.Name, p.Replica)))
			return
		}
	}
	s.mu.Lock()
	log, ok := s.logs[taskLogKey{name, opts.Replica, opts.Previous}]
	s.mu.Unlock()
	if !ok {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("replica %d of sandbox %q has no task log yet", opts.Replica, name)))
		return
	}
	if opts.TailLines != nil {
		lines := strings.SplitAfter(log, "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		log = strings.Join(lines[max(0, len(lines)-int(*opts.TailLines)):], "")
	}
	if opts.LimitBytes != nil && int64(len(log)) > *opts.LimitBytes {
		log = log[:*opts.LimitBytes]
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, log)
}
