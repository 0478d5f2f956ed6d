package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// What the processes, attach and log subresources ask of the processes API of execd
// (execdapi.ProcessesPath), and how its answers become this API's objects and errors.

// processRef names what a request to execd's processes API is about, for the errors its
// caller gets.
type processRef struct {
	sandbox string
	replica int32
	pod     string
	// id is the process's; "" for a list or a start.
	id string
	// kind is the kind of the request's body (SandboxProcess, SandboxProcessSignal), the
	// one execd's validation errors are about; "" for a request without one.
	kind string
	// contexts: the request is to execd's code contexts API, not its processes API, and id
	// is a context's.
	contexts bool
}

// resource is the subresource the request is to, and noun what its id names.
func (p processRef) resource() (resource, noun string) {
	if p.contexts {
		return "contexts", "code context"
	}
	return "processes", "process"
}

// plural is what the request's API serves: "processes" or "code contexts".
func (p processRef) plural() string {
	if p.contexts {
		return "code contexts"
	}
	return "processes"
}

// where says where the process is, for messages.
func (p processRef) where() string {
	return fmt.Sprintf("replica %d of sandbox %q, pod %s", p.replica, p.sandbox, p.pod)
}

// processCall sends a request to the processes API of the execd of ep and decodes its JSON
// answer into out. execd's error answers become the errors of processAnswerError.
func (a *Access) processCall(ctx context.Context, ep *sandboxconn.Endpoint, ref processRef, method, path string, in, out any) error {
	resp, err := a.processDo(ctx, ep, ref, method, path, in)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDescriptionBytes+1))
	if err != nil {
		return upstreamError(ep, err)
	}
	if len(data) > maxDescriptionBytes {
		return badGateway(ep, fmt.Sprintf("it sent an answer of more than %d bytes", maxDescriptionBytes))
	}
	if err := json.Unmarshal(data, out); err != nil {
		resource, _ := ref.resource()
		return badGateway(ep, fmt.Sprintf("its answer is not what the %s API answers: %v", resource, err))
	}
	return nil
}

// processDo sends a request with the JSON body in (none when nil) to the processes or
// contexts API of the execd of ep, and answers its response when it is a success, for the
// caller to read and close; execd's error answers become the errors of processAnswerError.
func (a *Access) processDo(ctx context.Context, ep *sandboxconn.Endpoint, ref processRef, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("encode the request: %w", err))
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(execdclient.WithTarget(ctx, ep.Target), method, execdclient.URL(ep.Target, path, "").String(), body)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("make the request: %w", err))
	}
	req.Header.Set(execdapi.SandboxUIDHeader, string(ep.Sandbox.UID))
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.Transport.RoundTrip(req)
	if err != nil {
		return nil, upstreamError(ep, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer func() { _ = resp.Body.Close() }()
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxDescriptionBytes+1))
		if err != nil {
			return nil, upstreamError(ep, err)
		}
		return nil, processAnswerError(resp.StatusCode, resp.Header.Get("Content-Type"), data, ref)
	}
	return resp, nil
}

// badGateway is the error for an answer of the execd of ep that makes no sense.
func badGateway(ep *sandboxconn.Endpoint, why string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusBadGateway, Reason: metav1.StatusReasonInternalError,
		Message: fmt.Sprintf("the execd of pod %s answered wrongly: %s", ep.Pod, why),
	}}
}

// processAnswerError turns an error answer of execd's processes API (a metav1.Status, or a
// line of text from something in between) into the error the caller gets: the same code and
// reason, and a message that says where the process is. Details name this API's group: an
// unknown process is a NotFound of a process, a failed validation an Invalid of the body's
// kind, with execd's causes under the fields of that kind. Only a refusal of this server's
// identity does not keep its code: it is the deployment's fault, not the caller's.
func processAnswerError(code int, contentType string, body []byte, ref processRef) *apierrors.StatusError {
	in := answerStatus(contentType, body)
	if in.Message == "" {
		in.Message = http.StatusText(code)
	}
	reason := in.Reason
	resource, noun := ref.resource()
	if reason == "" || in.Code != int32(code) {
		reason = apierrors.NewGenericServerResponse(code, "", sandboxv1alpha1.Resource("sandboxes/"+resource), "", "", 0, false).ErrStatus.Reason
	}
	out := metav1.Status{
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason,
		Message: fmt.Sprintf("%s (%s)", in.Message, ref.where()),
		Details: &metav1.StatusDetails{Group: sandboxv1alpha1.GroupName, Kind: "sandboxes", Name: ref.sandbox},
	}
	switch {
	case code == http.StatusForbidden:
		return apierrors.NewInternalError(fmt.Errorf("the execd of pod %s refused sandbox-apiserver (check the client certificate it presents): %s", ref.pod, in.Message))
	case code == http.StatusNotFound && in.Kind != "Status":
		// Not execd's processes API answering but its mux, which has no such route: an execd
		// from before processes existed, copied into a pod made then.
		out.Message = fmt.Sprintf("the sandbox-execd of %s serves no %s: it predates them (its pod was made before this version); a sandbox made now has them", ref.where(), ref.plural())
	case code == http.StatusNotFound && ref.id != "" && in.Details != nil && in.Details.Name == ref.id:
		out.Reason = metav1.StatusReasonNotFound
		out.Details = &metav1.StatusDetails{Group: sandboxv1alpha1.GroupName, Kind: resource, Name: ref.id}
		why := "it never ran in that pod, or it ended and was dropped to make room for newer ones"
		if ref.contexts {
			why = "it was never made in that pod, it was deleted, or the pod's container restarted (or was paused) since"
		}
		out.Message = fmt.Sprintf("%s %q not found in %s: %s", noun, ref.id, ref.where(), why)
	case code == http.StatusUnprocessableEntity && ref.kind != "":
		out.Details = &metav1.StatusDetails{Group: sandboxv1alpha1.GroupName, Kind: ref.kind, Name: ref.id}
		if in.Details != nil {
			prefix := ""
			if ref.kind == processKind.Kind || ref.kind == codeContextKind.Kind {
				prefix = "spec."
			}
			for _, c := range in.Details.Causes {
				if c.Field != "" {
					c.Field = prefix + c.Field
				}
				out.Details.Causes = append(out.Details.Causes, c)
			}
		}
	}
	return &apierrors.StatusError{ErrStatus: out}
}

// answerStatus is the Status of an error answer, or one whose message is the answer's text.
func answerStatus(contentType string, body []byte) metav1.Status {
	st := metav1.Status{}
	if mt, _, _ := mime.ParseMediaType(contentType); mt == "application/json" && json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		return st
	}
	return metav1.Status{Message: strings.TrimSpace(string(bytes.ToValidUTF8(body, []byte("?"))))}
}

// processRequest is the start execd is asked for: the argv is command and args.
func processRequest(spec *sandboxv1alpha1.SandboxProcessSpec) *execdapi.ProcessRequest {
	req := &execdapi.ProcessRequest{
		Command:    append(append([]string(nil), spec.Command...), spec.Args...),
		WorkingDir: spec.WorkingDir, TTY: spec.TTY, Stdin: spec.Stdin, StdinOnce: spec.StdinOnce,
		TimeoutSeconds: spec.TimeoutSeconds,
	}
	for _, e := range spec.Env {
		req.Env = append(req.Env, execdapi.EnvVar{Name: e.Name, Value: e.Value})
	}
	if s := spec.TerminalSize; s != nil {
		req.TerminalSize = &execdapi.TerminalSize{Width: uint16(s.Width), Height: uint16(s.Height)}
	}
	return req
}

// sandboxProcess is the SandboxProcess of what the execd of ep says of a process of replica.
func sandboxProcess(ep *sandboxconn.Endpoint, replica int32, st *execdapi.ProcessState) *sandboxv1alpha1.SandboxProcess {
	p := &sandboxv1alpha1.SandboxProcess{
		ObjectMeta: metav1.ObjectMeta{Name: st.ID, CreationTimestamp: metav1.NewTime(st.StartTime)},
		Spec: sandboxv1alpha1.SandboxProcessSpec{
			Replica: replica, Command: st.Command, WorkingDir: st.WorkingDir, TTY: st.TTY, Stdin: st.Stdin,
			StdinOnce: st.StdinOnce, TimeoutSeconds: st.TimeoutSeconds,
		},
		Status: sandboxv1alpha1.SandboxProcessStatus{
			Phase: sandboxv1alpha1.SandboxProcessPhase(st.Phase), Pod: ep.Pod, PID: int32(st.PID), ExitCode: st.ExitCode,
			Signal: st.Signal, Reason: st.Reason, Message: st.Message,
		},
	}
	if ep.Sandbox != nil {
		p.Namespace = ep.Sandbox.Namespace
	}
	if !st.StartTime.IsZero() {
		p.Status.StartTime = &metav1.Time{Time: st.StartTime}
	}
	if st.EndTime != nil {
		p.Status.EndTime = &metav1.Time{Time: *st.EndTime}
	}
	return p
}

// processLogQuery is what execd is asked for of a process's log: the options it knows, and
// nothing else of the caller's query.
func processLogQuery(opts *sandboxv1alpha1.SandboxLogOptions) url.Values {
	q := url.Values{}
	if opts.Follow {
		q.Set(execdapi.ProcessLogFollowParam, "true")
	}
	if opts.TailLines != nil {
		q.Set(execdapi.ProcessLogTailLinesParam, strconv.FormatInt(*opts.TailLines, 10))
	}
	if opts.LimitBytes != nil {
		q.Set(execdapi.ProcessLogLimitBytesParam, strconv.FormatInt(*opts.LimitBytes, 10))
	}
	if opts.OffsetBytes != nil {
		q.Set(execdapi.ProcessLogOffsetParam, strconv.FormatInt(*opts.OffsetBytes, 10))
	}
	return q
}

// processLogError turns execd's refusal of a process's log into the error the caller gets.
func processLogError(resp *http.Response, ep *sandboxconn.Endpoint, name string, opts *sandboxv1alpha1.SandboxLogOptions) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxLogErrorBytes))
	_ = resp.Body.Close()
	return processAnswerError(resp.StatusCode, resp.Header.Get("Content-Type"), data,
		processRef{sandbox: name, replica: opts.Replica, pod: ep.Pod, id: opts.Process})
}

// replicaList is what the execd of one replica answered a list with.
type replicaList[T any] struct {
	replica int32
	ep      *sandboxconn.Endpoint
	items   []T
	err     error
}

// listReplicas asks the execd of one replica (replica set), or of every replica the sandbox
// has, for a list (one), at most listConcurrency pods at once, and answers the replicas that
// answered, in order. A replica whose pod cannot be asked (not ready yet, being replaced) is
// left out with a warning that names what it lists, as long as another replica answered;
// when none did, the first one's error is the answer.
func listReplicas[T any](ctx context.Context, reader client.Reader, resolver sandboxconn.Resolver, name string, replica *int32, what string,
	one func(ep *sandboxconn.Endpoint, replica int32) ([]T, error)) ([]replicaList[T], error) {
	namespace := genericapirequest.NamespaceValue(ctx)
	var replicas []int32
	if replica != nil {
		replicas = []int32{*replica}
	} else {
		bs := &controlv1alpha1.BatchSandbox{}
		if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, bs); err != nil {
			return nil, translateError(err, name)
		}
		for i := range ptr.Deref(bs.Spec.Replicas, 1) {
			replicas = append(replicas, i)
		}
	}
	results := make([]replicaList[T], len(replicas))
	slots := make(chan struct{}, listConcurrency)
	var wg sync.WaitGroup
	for i, rep := range replicas {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			res := &results[i]
			res.replica = rep
			if res.ep, res.err = resolver.Resolve(ctx, namespace, name, rep); res.err == nil {
				res.items, res.err = one(res.ep, rep)
			}
		})
	}
	wg.Wait()
	answered := make([]replicaList[T], 0, len(results))
	for _, res := range results {
		if res.err == nil {
			answered = append(answered, res)
		}
	}
	if len(answered) == 0 && len(results) > 0 {
		return nil, results[0].err
	}
	for _, res := range results {
		if res.err != nil {
			warning.AddWarning(ctx, "", fmt.Sprintf("the %s of replica %d are not listed: %v", what, res.replica, res.err))
		}
	}
	return answered, nil
}
