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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
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
}

// where says where the process is, for messages.
func (p processRef) where() string {
	return fmt.Sprintf("replica %d of sandbox %q, pod %s", p.replica, p.sandbox, p.pod)
}

// processCall sends a request to the processes API of the execd of ep and decodes its JSON
// answer into out. execd's error answers become the errors of processAnswerError.
func (a *Access) processCall(ctx context.Context, ep *sandboxconn.Endpoint, ref processRef, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("encode the request: %w", err))
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(execdclient.WithTarget(ctx, ep.Target), method, execdclient.URL(ep.Target, path, "").String(), body)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("make the request: %w", err))
	}
	req.Header.Set(execdapi.SandboxUIDHeader, string(ep.Sandbox.UID))
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.Transport.RoundTrip(req)
	if err != nil {
		return upstreamError(ep, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDescriptionBytes+1))
	if err != nil {
		return upstreamError(ep, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return processAnswerError(resp.StatusCode, resp.Header.Get("Content-Type"), data, ref)
	}
	if len(data) > maxDescriptionBytes {
		return badGateway(ep, fmt.Sprintf("it sent an answer of more than %d bytes", maxDescriptionBytes))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return badGateway(ep, fmt.Sprintf("its answer is not what the processes API answers: %v", err))
	}
	return nil
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
	if reason == "" || in.Code != int32(code) {
		reason = apierrors.NewGenericServerResponse(code, "", sandboxv1alpha1.Resource("sandboxes/processes"), "", "", 0, false).ErrStatus.Reason
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
		out.Message = fmt.Sprintf("the sandbox-execd of %s serves no processes: it predates them (its pod was made before this version); a sandbox made now has them", ref.where())
	case code == http.StatusNotFound && ref.id != "" && in.Details != nil && in.Details.Name == ref.id:
		out.Reason = metav1.StatusReasonNotFound
		out.Details = &metav1.StatusDetails{Group: sandboxv1alpha1.GroupName, Kind: "processes", Name: ref.id}
		out.Message = fmt.Sprintf("process %q not found in %s: it never ran in that pod, or it ended and was dropped to make room for newer ones", ref.id, ref.where())
	case code == http.StatusUnprocessableEntity && ref.kind != "":
		out.Details = &metav1.StatusDetails{Group: sandboxv1alpha1.GroupName, Kind: ref.kind, Name: ref.id}
		if in.Details != nil {
			prefix := ""
			if ref.kind == processKind.Kind {
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
