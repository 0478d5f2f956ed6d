package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// maxLogErrorBytes bounds what this server reads of an error execd answers a log request
// with: a Status or a line of text, a few hundred bytes. A sandbox that sends more is cut
// short, not read into memory.
const maxLogErrorBytes = 64 << 10

var logOptionsKind = sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxLogOptions").GroupKind()

// LogREST implements the log subresource: the output of a replica's task, as pods/log serves a
// container's, or of one of its processes (process=ID, from a byte offset if asked), streamed
// from the execd of the replica's pod (never through the kubelet) with every write flushed, so
// that a follow shows output as it comes.
//
// Reading output runs nothing, so unlike exec, files and proxy it is authorized as what it is,
// get on sandboxes/log (which the view role has, as it has pods/log), and a sandbox whose pods
// are beyond a sandbox's asks no right to create pods of its readers: that check guards running
// code with the pods' privileges. It counts as use for auto-renew, as a download does.
type LogREST struct {
	Access
	// Reader reads the BatchSandbox of a replica that has no pod to read from, to say why
	// (the sandbox runs no task, or the pod was released); nil: the resolver's error as it is.
	Reader client.Reader
}

var (
	_ rest.Connecter       = &LogREST{}
	_ rest.StorageMetadata = &LogREST{}
)

// New implements rest.Storage.
func (r *LogREST) New() runtime.Object { return &sandboxv1alpha1.SandboxLogOptions{} }

// Destroy implements rest.Storage.
func (r *LogREST) Destroy() {}

// NewConnectOptions implements rest.Connecter.
func (r *LogREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &sandboxv1alpha1.SandboxLogOptions{}, false, ""
}

// ConnectMethods implements rest.Connecter. GET only, so that RBAC's verb is always get.
func (r *LogREST) ConnectMethods() []string { return []string{"GET"} }

// ProducesMIMETypes implements rest.StorageMetadata: the log is text, as pods/log's.
func (r *LogREST) ProducesMIMETypes(string) []string { return []string{"text/plain"} }

// ProducesObject implements rest.StorageMetadata: a string, in the OpenAPI of the route.
func (r *LogREST) ProducesObject(string) interface{} { return "" }

// Connect implements rest.Connecter.
func (r *LogREST) Connect(ctx context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	logOpts, ok := opts.(*sandboxv1alpha1.SandboxLogOptions)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("invalid options object: %T", opts))
	}
	if err := ValidateLogOptions(name, logOpts); err != nil {
		return nil, err
	}
	namespace := genericapirequest.NamespaceValue(ctx)
	ep, err := r.Resolver.Resolve(ctx, namespace, name, logOpts.Replica)
	if err != nil {
		if logOpts.Process != "" {
			return nil, err
		}
		return nil, r.noPod(ctx, namespace, name, logOpts.Replica, err)
	}
	if logOpts.Process == "" {
		if err := runsTask(ep.Sandbox, name); err != nil {
			return nil, err
		}
	}
	if r.Renewer != nil {
		r.Renewer.Touch(ctx, ep.Sandbox)
	}
	// The files transport: its response-header timeout bounds only the wait for execd's
	// headers, which execd sends before the log (a follow of a quiet task too); the body then
	// streams for as long as it lasts.
	transport, err := r.Transport.Current()
	if err != nil {
		return nil, upstreamError(ep, err)
	}
	location := execdclient.URL(ep.Target, execdapi.TaskLogPath, logQuery(logOpts).Encode())
	if logOpts.Process != "" {
		// execd's offset headers pass back as they came.
		location = execdclient.URL(ep.Target, execdapi.ProcessLogPath(logOpts.Process), processLogQuery(logOpts).Encode())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rp := &httputil.ReverseProxy{
			// Rewrite, not Director: no X-Forwarded-* headers, hop-by-hop headers removed.
			Rewrite:   rewriteTo(location, ep),
			Transport: transport,
			// Every write of execd reaches the caller at once: a follow must not wait for
			// a buffer to fill.
			FlushInterval: -1,
			ModifyResponse: func(resp *http.Response) error {
				if resp.StatusCode < 200 || resp.StatusCode > 299 {
					if logOpts.Process != "" {
						return processLogError(resp, ep, name, logOpts)
					}
					return logError(resp, ep, name, logOpts)
				}
				if resp.Header.Get("Content-Type") == "" {
					resp.Header.Set("Content-Type", "text/plain; charset=utf-8")
				}
				return nil
			},
			ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) {
				var statusErr *apierrors.StatusError
				if errors.As(err, &statusErr) {
					responder.Error(statusErr)
					return
				}
				responder.Error(upstreamError(ep, err))
			},
		}
		rp.ServeHTTP(w, toPod(req, ep))
	}), nil
}

// ValidateLogOptions checks the options of a log request for sandbox name as pods/log checks
// its own: a 422 Invalid with the fields at fault, nil when they are fine.
func ValidateLogOptions(name string, opts *sandboxv1alpha1.SandboxLogOptions) *apierrors.StatusError {
	if errs := validateLogOptions(opts); len(errs) > 0 {
		return apierrors.NewInvalid(logOptionsKind, name, errs)
	}
	return nil
}

func validateLogOptions(opts *sandboxv1alpha1.SandboxLogOptions) field.ErrorList {
	var errs field.ErrorList
	if opts.Replica < 0 {
		errs = append(errs, field.Invalid(field.NewPath("replica"), opts.Replica, "must be greater than or equal to 0"))
	}
	if opts.TailLines != nil && *opts.TailLines < 0 {
		errs = append(errs, field.Invalid(field.NewPath("tailLines"), *opts.TailLines, "must be greater than or equal to 0"))
	}
	if opts.LimitBytes != nil && *opts.LimitBytes < 1 {
		errs = append(errs, field.Invalid(field.NewPath("limitBytes"), *opts.LimitBytes, "must be greater than 0"))
	}
	return append(errs, validateProcessLogOptions(opts)...)
}

// logQuery is what execd is asked for: the options it knows, and nothing else of the caller's
// query.
func logQuery(opts *sandboxv1alpha1.SandboxLogOptions) url.Values {
	q := url.Values{}
	if opts.Follow {
		q.Set(execdapi.TaskLogFollowParam, "true")
	}
	if opts.Previous {
		q.Set(execdapi.TaskLogPreviousParam, "true")
	}
	if opts.TailLines != nil {
		q.Set(execdapi.TaskLogTailLinesParam, strconv.FormatInt(*opts.TailLines, 10))
	}
	if opts.LimitBytes != nil {
		q.Set(execdapi.TaskLogLimitBytesParam, strconv.FormatInt(*opts.LimitBytes, 10))
	}
	return q
}

// runsTask refuses a sandbox without a task: it has no output to read.
func runsTask(bs *controlv1alpha1.BatchSandbox, name string) error {
	if bs != nil && bs.Spec.TaskTemplate == nil {
		return NoTaskError(name)
	}
	return nil
}

// NoTaskError is the answer to a log request for sandbox name, which has no spec.taskTemplate.
func NoTaskError(name string) *apierrors.StatusError {
	return apierrors.NewBadRequest(fmt.Sprintf("sandbox %q runs no task (it has no spec.taskTemplate), so it has no task log; use exec to run commands in it", name))
}

// noPod explains why a replica has no pod to read the log from, when the resolver could not
// find one (a 503): a sandbox without a task has no log at all, and a replica whose task ended
// under taskResourcePolicyWhenCompleted Release has had its pod, and the log on it, deleted
// (410 Gone: it will not come back). Otherwise, and for every other error, the resolver's
// error stands: a replica still waiting for its pod is a 503 worth retrying.
func (r *LogREST) noPod(ctx context.Context, namespace, name string, replica int32, err error) error {
	if r.Reader == nil || !apierrors.IsServiceUnavailable(err) {
		return err
	}
	bs := &controlv1alpha1.BatchSandbox{}
	if getErr := r.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, bs); getErr != nil {
		return err
	}
	if noTask := runsTask(bs, name); noTask != nil {
		return noTask
	}
	if bs.Spec.TaskResourcePolicyWhenCompleted != controlv1alpha1.TaskResourceRelease {
		return err
	}
	for _, t := range bs.Status.Tasks {
		if t.Replica == replica && t.Phase.Final() {
			return apierrors.NewGone(fmt.Sprintf(
				"the pod of replica %d of sandbox %q was released when its task ended (%s; taskResourcePolicyWhenCompleted is Release), and its log with it: status.tasks keeps the outcome",
				replica, name, t.Phase))
		}
	}
	return err
}

// logError turns execd's refusal of a log request into the error the caller gets. A replica
// without a task (yet), or without a previous attempt, is a 400, as pods/log answers for a
// container that has not started or has no previous instance; anything else keeps execd's
// code, and its Status if it sent one.
func logError(resp *http.Response, ep *sandboxconn.Endpoint, name string, opts *sandboxv1alpha1.SandboxLogOptions) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxLogErrorBytes))
	_ = resp.Body.Close()
	status := metav1.Status{}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" ||
		json.Unmarshal(data, &status) != nil || status.Kind != "Status" {
		status = metav1.Status{Message: strings.TrimSpace(string(bytes.ToValidUTF8(data, []byte("?"))))}
	}
	if status.Message == "" {
		status.Message = http.StatusText(resp.StatusCode)
	}
	if resp.StatusCode == http.StatusNotFound {
		if opts.Previous {
			return apierrors.NewBadRequest(fmt.Sprintf("replica %d of sandbox %q has no log of a previous attempt of its task in pod %s: %s", opts.Replica, name, ep.Pod, status.Message))
		}
		return apierrors.NewBadRequest(fmt.Sprintf("replica %d of sandbox %q has no task log in pod %s: %s", opts.Replica, name, ep.Pod, status.Message))
	}
	if status.Kind == "Status" && status.Code == int32(resp.StatusCode) {
		status.Status = metav1.StatusFailure
		return &apierrors.StatusError{ErrStatus: status}
	}
	// The reason that goes with the code, and a message that says who answered.
	out := apierrors.NewGenericServerResponse(resp.StatusCode, "get", sandboxv1alpha1.Resource("sandboxes/log"), name, "", 0, false)
	out.ErrStatus.Message = fmt.Sprintf("the execd of pod %s answered %d: %s", ep.Pod, resp.StatusCode, status.Message)
	return out
}
