package sandbox

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/warning"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// processExecd is the processes API of one pod's execd over mutual TLS, as the contract
// (execdapi.ProcessesPath) describes it, in memory: a start answers a Running process, a
// signal ends it, an unknown ID is a 404 and an ended process a 410 to a signal.
type processExecd struct {
	authority *pki.Authority
	target    execdclient.Target

	mu       sync.Mutex
	requests []*http.Request
	bodies   []string
	procs    []execdapi.ProcessState
	// answer, when set, answers every request instead.
	answer http.HandlerFunc
}

var processStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newProcessExecd(t *testing.T, podUID string) *processExecd {
	t.Helper()
	a, cert := podServerCertificate(t, podUID, "web-0")
	e := &processExecd{authority: a}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+execdapi.ProcessesPath, func(w http.ResponseWriter, req *http.Request) {
		pr := execdapi.ProcessRequest{}
		if err := json.NewDecoder(req.Body).Decode(&pr); err != nil {
			writeStatus(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		st := execdapi.ProcessState{ID: "p-" + strconv.Itoa(10000000+len(e.procs)), Command: pr.Command, WorkingDir: pr.WorkingDir,
			TTY: pr.TTY, Stdin: pr.Stdin, Phase: execdapi.ProcessRunning, PID: 40 + len(e.procs), StartTime: processStart}
		e.procs = append(e.procs, st)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("GET "+execdapi.ProcessesPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(execdapi.ProcessList{Kind: execdapi.ProcessListKind, Items: e.procs})
	})
	one := func(w http.ResponseWriter, req *http.Request) *execdapi.ProcessState {
		for i := range e.procs {
			if e.procs[i].ID == req.PathValue("id") {
				return &e.procs[i]
			}
		}
		// As execd answers: a NotFound naming the process.
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Resource: "processes"}, req.PathValue("id")))
		return nil
	}
	mux.HandleFunc("GET "+execdapi.ProcessesPath+"/{id}", func(w http.ResponseWriter, req *http.Request) {
		if st := one(w, req); st != nil {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(st)
		}
	})
	mux.HandleFunc("POST "+execdapi.ProcessesPath+"/{id}/signal", func(w http.ResponseWriter, req *http.Request) {
		st := one(w, req)
		if st == nil {
			return
		}
		if st.Ended() {
			writeStatus(w, apierrors.NewGone("process "+st.ID+" has ended: there is nothing to signal"))
			return
		}
		sr := execdapi.ProcessSignalRequest{}
		_ = json.NewDecoder(req.Body).Decode(&sr)
		end := processStart.Add(90 * time.Second)
		st.Phase, st.Signal, st.Reason, st.EndTime = execdapi.ProcessExited, strings.TrimPrefix(sr.Signal, "SIG"), execdapi.ProcessReasonError, &end
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(strings.NewReader(string(body)))
		e.mu.Lock()
		defer e.mu.Unlock()
		e.requests = append(e.requests, req.Clone(context.Background()))
		e.bodies = append(e.bodies, string(body))
		if e.answer != nil {
			e.answer(w, req)
			return
		}
		mux.ServeHTTP(w, req)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	e.target.PodIP, e.target.PodUID = host, podUID
	e.target.Port, _ = strconv.Atoi(port)
	return e
}

// writeStatus answers err as execd does: a metav1.Status, kind and all.
func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(&st)
}

func (e *processExecd) seen() ([]*http.Request, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.requests, e.bodies
}

func webSandbox(replicas int32) *controlv1alpha1.BatchSandbox {
	return &controlv1alpha1.BatchSandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "sandbox-uid"},
		Spec:       controlv1alpha1.BatchSandboxSpec{Replicas: ptr.To(replicas)},
	}
}

// replicaResolver resolves each replica to its own endpoint or error.
type replicaResolver map[int32]struct {
	ep  *sandboxconn.Endpoint
	err error
}

func (r replicaResolver) Resolve(_ context.Context, _, _ string, replica int32) (*sandboxconn.Endpoint, error) {
	res, ok := r[replica]
	if !ok {
		return nil, apierrors.NewBadRequest("replica " + strconv.Itoa(int(replica)) + " does not exist")
	}
	return res.ep, res.err
}

// objectResponder records what a connecter's handler answers.
type objectResponder struct {
	code int
	obj  runtime.Object
	err  error
}

func (r *objectResponder) Object(code int, obj runtime.Object) { r.code, r.obj = code, obj }
func (r *objectResponder) Error(err error)                     { r.err = err }

type warnings []string

func (w *warnings) AddWarning(_, text string) { *w = append(*w, text) }

// processCtx is the context of a request to the processes subresource with verb.
func processCtx(verb string) context.Context {
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	return genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: verb, APIGroup: sandboxv1alpha1.GroupName, Resource: "sandboxes", Subresource: "processes", Name: "web", Namespace: "ns",
	})
}

func newProcessesREST(t *testing.T, resolver sandboxconn.Resolver, execd *processExecd, objs ...*controlv1alpha1.BatchSandbox) *ProcessesREST {
	t.Helper()
	r := &ProcessesREST{
		Access: Access{Resolver: resolver, Transport: execdclient.NewTransport(execd.authority, execdclient.Options{ResponseHeaderTimeout: 5 * time.Second})},
		Clock:  testingclock.NewFakePassiveClock(processStart.Add(time.Hour)),
	}
	if len(objs) > 0 {
		_, backend := newREST(t, objs[0])
		r.Reader = backend
	}
	return r
}

// post serves a POST of body to path below processes through the connecter r.
func post(t *testing.T, r *ProcessesREST, path, contentType, body string) *objectResponder {
	t.Helper()
	ctx := processCtx("create")
	opts := &sandboxv1alpha1.SandboxProcessOptions{Path: path}
	resp := &objectResponder{}
	h, err := r.Connect(ctx, "web", opts, resp)
	if err != nil {
		resp.err = err
		return resp
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/processes"+path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	h.ServeHTTP(httptest.NewRecorder(), req)
	return resp
}

func TestProcessesStartListGetSignal(t *testing.T) {
	execd := newProcessExecd(t, "pod-uid-0")
	bs := webSandbox(1)
	ep := &sandboxconn.Endpoint{Target: execd.target, Pod: "web-0", Sandbox: bs}
	r := newProcessesREST(t, replicaResolver{0: {ep: ep}}, execd, bs)

	resp := post(t, r, "", "application/json", `{"apiVersion":"sandbox.kube-sandbox.io/v1alpha1","kind":"SandboxProcess",
		"spec":{"command":["sh","-c"],"args":["sleep 60"],"env":[{"name":"TOKEN","value":"s3cret"}],"workingDir":"/tmp","tty":true}}`)
	if resp.err != nil {
		t.Fatalf("start: %v", resp.err)
	}
	want := &sandboxv1alpha1.SandboxProcess{
		ObjectMeta: metav1.ObjectMeta{Name: "p-10000000", Namespace: "ns", CreationTimestamp: metav1.NewTime(processStart)},
		Spec:       sandboxv1alpha1.SandboxProcessSpec{Command: []string{"sh", "-c", "sleep 60"}, WorkingDir: "/tmp", TTY: true},
		Status: sandboxv1alpha1.SandboxProcessStatus{Phase: sandboxv1alpha1.ProcessPhaseRunning, Pod: "web-0", PID: 40,
			StartTime: &metav1.Time{Time: processStart}},
	}
	if resp.code != http.StatusCreated {
		t.Errorf("start answered %d, want 201", resp.code)
	}
	if diff := cmp.Diff(want, resp.obj); diff != "" {
		t.Errorf("started process (-want +got):\n%s", diff)
	}
	reqs, bodies := execd.seen()
	if len(reqs) != 1 || reqs[0].Header.Get(execdapi.SandboxUIDHeader) != "sandbox-uid" {
		t.Fatalf("execd got %d requests; the first names sandbox %q", len(reqs), reqs[0].Header.Get(execdapi.SandboxUIDHeader))
	}
	got := execdapi.ProcessRequest{}
	if err := json.Unmarshal([]byte(bodies[0]), &got); err != nil {
		t.Fatal(err)
	}
	wantReq := execdapi.ProcessRequest{Command: []string{"sh", "-c", "sleep 60"}, Env: []execdapi.EnvVar{{Name: "TOKEN", Value: "s3cret"}}, WorkingDir: "/tmp", TTY: true}
	if diff := cmp.Diff(wantReq, got); diff != "" {
		t.Errorf("what execd was asked to start (-want +got):\n%s", diff)
	}

	ctx := processCtx("get")
	obj, err := r.Get(ctx, "web", &sandboxv1alpha1.SandboxProcessOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if diff := cmp.Diff(&sandboxv1alpha1.SandboxProcessList{Items: []sandboxv1alpha1.SandboxProcess{*want}}, obj); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	obj, err = r.Get(ctx, "web", &sandboxv1alpha1.SandboxProcessOptions{Path: "/p-10000000"})
	if err != nil || !cmp.Equal(want, obj) {
		t.Errorf("get: %v\n%s", err, cmp.Diff(want, obj))
	}

	resp = post(t, r, "/p-10000000/signal", "", `{"signal":"SIGKILL","gracePeriodSeconds":5}`)
	if resp.err != nil {
		t.Fatalf("signal: %v", resp.err)
	}
	if p := resp.obj.(*sandboxv1alpha1.SandboxProcess); p.Status.Phase != sandboxv1alpha1.ProcessPhaseExited || p.Status.Signal != "KILL" {
		t.Errorf("signalled process: %+v", p.Status)
	}
	reqs, bodies = execd.seen()
	if last := reqs[len(reqs)-1]; last.URL.Path != execdapi.ProcessSignalPath("p-10000000") || bodies[len(bodies)-1] != `{"signal":"SIGKILL","gracePeriodSeconds":5}` {
		t.Errorf("execd was asked %s %s", last.URL.Path, bodies[len(bodies)-1])
	}

	// An ended process: a 410; an unknown one: a 404 of the process.
	resp = post(t, r, "/p-10000000/signal", "", "")
	if !apierrors.IsGone(resp.err) || !strings.Contains(resp.err.Error(), `has ended: there is nothing to signal (replica 0 of sandbox "web", pod web-0)`) {
		t.Errorf("signal of an ended process: %v, want 410", resp.err)
	}
	_, err = r.Get(ctx, "web", &sandboxv1alpha1.SandboxProcessOptions{Path: "/p-nope"})
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `process "p-nope" not found in replica 0 of sandbox "web", pod web-0`) {
		t.Errorf("get of an unknown process: %v, want 404", err)
	}
}

func TestProcessesBody(t *testing.T) {
	execd := newProcessExecd(t, "pod-uid-0")
	bs := webSandbox(1)
	r := newProcessesREST(t, replicaResolver{0: {ep: &sandboxconn.Endpoint{Target: execd.target, Pod: "web-0", Sandbox: bs}}}, execd)
	tests := []struct {
		name, path, contentType, body string
		wantCode                      int32
		wantMessage                   string
	}{
		{name: "YAML", contentType: "application/yaml", body: "spec:\n  command: [\"true\"]\n", wantCode: http.StatusCreated},
		{name: "an unknown field", body: `{"spec":{"comand":["true"]}}`, wantCode: http.StatusBadRequest, wantMessage: `unknown field "spec.comand"`},
		{name: "another kind", body: `{"apiVersion":"sandbox.kube-sandbox.io/v1alpha1","kind":"SandboxProcessSignal"}`,
			wantCode: http.StatusBadRequest, wantMessage: "the body is a sandbox.kube-sandbox.io/v1alpha1 SandboxProcessSignal; this path takes a sandbox.kube-sandbox.io/v1alpha1 SandboxProcess"},
		{name: "a kind of another group", body: `{"apiVersion":"v1","kind":"Pod"}`, wantCode: http.StatusBadRequest, wantMessage: "the body is not a SandboxProcess"},
		{name: "no body", wantCode: http.StatusBadRequest, wantMessage: "the body is empty: want a SandboxProcess"},
		{name: "text", contentType: "text/plain", body: "true", wantCode: http.StatusUnsupportedMediaType},
		{name: "invalid", body: `{"spec":{"command":[""],"replica":-1}}`, wantCode: http.StatusUnprocessableEntity,
			wantMessage: `SandboxProcess.sandbox.kube-sandbox.io for sandbox "web" is invalid: [spec.replica: Invalid value: -1: must be greater than or equal to 0, spec.command[0]: Required value: the executable is required]`},
		{name: "a replica in the query and another in the spec", path: "", body: `{"spec":{"command":["true"],"replica":1}}`, wantCode: http.StatusBadRequest},
		{name: "POST to a process", path: "/p-10000000", body: `{}`, wantCode: http.StatusMethodNotAllowed},
		{name: "another action", path: "/p-10000000/kill", body: `{}`, wantCode: http.StatusNotFound},
		{name: "not an ID", path: "/P_1/signal", wantCode: http.StatusBadRequest, wantMessage: `"P_1" is not a process ID`},
		{name: "an invalid signal", path: "/p-10000000/signal", body: `{"signal":"TERM; rm -rf /","gracePeriodSeconds":-1}`, wantCode: http.StatusUnprocessableEntity,
			wantMessage: `SandboxProcessSignal.sandbox.kube-sandbox.io for process "p-10000000" is invalid: [signal: Invalid value: "TERM; rm -rf /": must be a signal's name, such as TERM, INT, HUP or KILL, gracePeriodSeconds: Invalid value: -1: must be greater than or equal to 0]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp *objectResponder
			if tt.name == "a replica in the query and another in the spec" {
				ctx := processCtx("create")
				resp = &objectResponder{}
				h, err := r.Connect(ctx, "web", &sandboxv1alpha1.SandboxProcessOptions{Replica: ptr.To[int32](0)}, resp)
				if err != nil {
					t.Fatal(err)
				}
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, http.MethodPost, "/processes", strings.NewReader(tt.body)))
			} else {
				resp = post(t, r, tt.path, tt.contentType, tt.body)
			}
			if tt.wantCode == http.StatusCreated {
				if resp.err != nil || resp.code != http.StatusCreated {
					t.Fatalf("answer %d %v, want 201", resp.code, resp.err)
				}
				return
			}
			status, ok := resp.err.(apierrors.APIStatus)
			if !ok {
				t.Fatalf("error %v (%T), want a Status %d", resp.err, resp.err, tt.wantCode)
			}
			if st := status.Status(); st.Code != tt.wantCode || !strings.Contains(st.Message, tt.wantMessage) {
				t.Errorf("Status %d %q, want %d containing %q", st.Code, st.Message, tt.wantCode, tt.wantMessage)
			}
		})
	}
}

// TestProcessesListEveryReplica: a list without replica asks every replica's pod; one that
// cannot be asked is left out with a warning, unless none can.
func TestProcessesListEveryReplica(t *testing.T) {
	e0, e1 := newProcessExecd(t, "pod-uid-0"), newProcessExecd(t, "pod-uid-1")
	bs := webSandbox(3)
	e0.procs = []execdapi.ProcessState{{ID: "p-aaaaaaaa", Command: []string{"a"}, Phase: execdapi.ProcessRunning, StartTime: processStart}}
	e1.procs = []execdapi.ProcessState{{ID: "p-bbbbbbbb", Command: []string{"b"}, Phase: execdapi.ProcessRunning, StartTime: processStart}}
	notReady := apierrors.NewServiceUnavailable(`sandbox "web" is not ready: replica 2 has no pod yet (phase Running)`)
	resolver := replicaResolver{
		0: {ep: &sandboxconn.Endpoint{Target: e0.target, Pod: "web-0", Sandbox: bs}},
		1: {ep: &sandboxconn.Endpoint{Target: e1.target, Pod: "web-1", Sandbox: bs}},
		2: {err: notReady},
	}
	// One transport trusts both: each fake has a CA of its own, so each replica is asked
	// through its own REST.
	r0 := newProcessesREST(t, resolver, e0, bs)
	r1 := newProcessesREST(t, resolver, e1, bs)

	var got warnings
	ctx := warning.WithWarningRecorder(processCtx("get"), &got)
	obj, err := r0.Get(ctx, "web", &sandboxv1alpha1.SandboxProcessOptions{Replica: ptr.To[int32](0)})
	if err != nil {
		t.Fatal(err)
	}
	if l := obj.(*sandboxv1alpha1.SandboxProcessList); len(l.Items) != 1 || l.Items[0].Name != "p-aaaaaaaa" || l.Items[0].Status.Pod != "web-0" {
		t.Errorf("replica 0's list: %+v", l.Items)
	}
	obj, err = r1.Get(ctx, "web", &sandboxv1alpha1.SandboxProcessOptions{Replica: ptr.To[int32](1)})
	if err != nil {
		t.Fatal(err)
	}
	if l := obj.(*sandboxv1alpha1.SandboxProcessList); len(l.Items) != 1 || l.Items[0].Spec.Replica != 1 {
		t.Errorf("replica 1's list: %+v", l.Items)
	}
	if _, err := r0.Get(ctx, "web", &sandboxv1alpha1.SandboxProcessOptions{Replica: ptr.To[int32](2)}); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("the list of a replica without a pod: %v, want the resolver's 503", err)
	}
	if len(got) != 0 {
		t.Errorf("warnings %q for lists of one replica", got)
	}

	// Every replica: 1 fails the TLS of r0's CA (another pod's certificate), 2 has no pod.
	obj, err = r0.Get(ctx, "web", &sandboxv1alpha1.SandboxProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l := obj.(*sandboxv1alpha1.SandboxProcessList); len(l.Items) != 1 || l.Items[0].Name != "p-aaaaaaaa" {
		t.Errorf("list of every replica: %+v", l.Items)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "the processes of replica 1 are not listed: ") ||
		got[1] != "the processes of replica 2 are not listed: "+notReady.Error() {
		t.Errorf("warnings %q, want one for replica 1 and one for replica 2", got)
	}

	// No replica answers: the first one's error.
	down := replicaResolver{0: {err: notReady}, 1: {err: apierrors.NewServiceUnavailable("replica 1 too")}}
	r := newProcessesREST(t, down, e0, webSandbox(2))
	if _, err := r.Get(processCtx("get"), "web", &sandboxv1alpha1.SandboxProcessOptions{}); err != notReady {
		t.Errorf("list with no replica answering: %v, want replica 0's error", err)
	}
	// No sandbox: a 404 of the sandbox, not of the CRD behind it.
	r = newProcessesREST(t, down, e0, webSandbox(2))
	if _, err := r.Get(processCtx("get"), "gone", &sandboxv1alpha1.SandboxProcessOptions{}); !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `sandboxes.sandbox.kube-sandbox.io "gone" not found`) {
		t.Errorf("list of a missing sandbox: %v", err)
	}
}

func TestProcessAnswerError(t *testing.T) {
	ref := processRef{sandbox: "web", replica: 1, pod: "web-1", id: "p-aaaaaaaa"}
	status := func(err *apierrors.StatusError) string {
		err.ErrStatus.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
		data, _ := json.Marshal(err.ErrStatus)
		return string(data)
	}
	invalidStart := apierrors.NewInvalid(schema.GroupKind{Kind: "Process"}, "", nil)
	invalidStart.ErrStatus.Message = "invalid process: command[0]: Required value"
	invalidStart.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueRequired, Field: "command[0]", Message: "Required value"}}
	tests := []struct {
		name        string
		code        int
		contentType string
		body        string
		ref         processRef
		want        metav1.Status
	}{
		{
			name: "an unknown process", code: http.StatusNotFound, contentType: "application/json",
			body: status(apierrors.NewNotFound(schema.GroupResource{Resource: "processes"}, "p-aaaaaaaa")), ref: ref,
			want: metav1.Status{Code: 404, Reason: metav1.StatusReasonNotFound,
				Message: `process "p-aaaaaaaa" not found in replica 1 of sandbox "web", pod web-1: it never ran in that pod, or it ended and was dropped to make room for newer ones`,
				Details: &metav1.StatusDetails{Group: sandboxv1alpha1.GroupName, Kind: "processes", Name: "p-aaaaaaaa"}},
		},
		{
			name: "an execd from before processes: its mux's 404", code: http.StatusNotFound, contentType: "text/plain; charset=utf-8",
			body: "404 page not found\n", ref: ref,
			want: metav1.Status{Code: 404, Reason: metav1.StatusReasonNotFound,
				Message: `the sandbox-execd of replica 1 of sandbox "web", pod web-1 serves no processes: it predates them (its pod was made before this version); a sandbox made now has them`,
				Details: &metav1.StatusDetails{Group: sandboxv1alpha1.GroupName, Kind: "sandboxes", Name: "web"}},
		},
		{
			name: "a pod without processes", code: http.StatusNotFound, contentType: "application/json",
			body: `{"kind":"Status","apiVersion":"v1","status":"Failure","code":404,"reason":"NotFound","message":"sandbox-execd runs no processes here"}`,
			ref:  processRef{sandbox: "web", replica: 1, pod: "web-1"},
			want: metav1.Status{Code: 404, Reason: metav1.StatusReasonNotFound,
				Message: `sandbox-execd runs no processes here (replica 1 of sandbox "web", pod web-1)`,
				Details: &metav1.StatusDetails{Group: sandboxv1alpha1.GroupName, Kind: "sandboxes", Name: "web"}},
		},
		{
			name: "ended", code: http.StatusGone, contentType: "application/json",
			body: status(apierrors.NewGone("process p-aaaaaaaa has ended: there is nothing to signal")), ref: ref,
			want: metav1.Status{Code: 410, Reason: metav1.StatusReasonGone,
				Message: `process p-aaaaaaaa has ended: there is nothing to signal (replica 1 of sandbox "web", pod web-1)`,
				Details: &metav1.StatusDetails{Group: sandboxv1alpha1.GroupName, Kind: "sandboxes", Name: "web"}},
		},
		{
			name: "too many", code: http.StatusTooManyRequests, contentType: "application/json",
			body: status(apierrors.NewTooManyRequests("64 processes run in the sandbox, the most it may run at once: wait for one to end, or signal one", 0)),
			ref:  processRef{sandbox: "web", replica: 1, pod: "web-1", kind: "SandboxProcess"},
			want: metav1.Status{Code: 429, Reason: metav1.StatusReasonTooManyRequests,
				Message: `64 processes run in the sandbox, the most it may run at once: wait for one to end, or signal one (replica 1 of sandbox "web", pod web-1)`,
				Details: &metav1.StatusDetails{Group: sandboxv1alpha1.GroupName, Kind: "sandboxes", Name: "web"}},
		},
		{
			name: "another sandbox's pod", code: http.StatusConflict, contentType: "application/json",
			body: `{"kind":"Status","apiVersion":"v1","status":"Failure","code":409,"reason":"Conflict","message":"sandbox-execd belongs to another sandbox than sandbox-uid"}`,
			ref:  ref,
			want: metav1.Status{Code: 409, Reason: metav1.StatusReasonConflict,
				Message: `sandbox-execd belongs to another sandbox than sandbox-uid (replica 1 of sandbox "web", pod web-1)`,
				Details: &metav1.StatusDetails{Group: sandboxv1alpha1.GroupName, Kind: "sandboxes", Name: "web"}},
		},
		{
			name: "invalid, with causes under spec", code: http.StatusUnprocessableEntity, contentType: "application/json",
			body: status(invalidStart), ref: processRef{sandbox: "web", replica: 1, pod: "web-1", kind: "SandboxProcess"},
			want: metav1.Status{Code: 422, Reason: metav1.StatusReasonInvalid,
				Message: `invalid process: command[0]: Required value (replica 1 of sandbox "web", pod web-1)`,
				Details: &metav1.StatusDetails{Group: sandboxv1alpha1.GroupName, Kind: "SandboxProcess",
					Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueRequired, Field: "spec.command[0]", Message: "Required value"}}}},
		},
		{
			name: "text from something in between", code: http.StatusServiceUnavailable, contentType: "text/plain", body: "shutting down\n", ref: ref,
			want: metav1.Status{Code: 503, Reason: metav1.StatusReasonServiceUnavailable,
				Message: `shutting down (replica 1 of sandbox "web", pod web-1)`,
				Details: &metav1.StatusDetails{Group: sandboxv1alpha1.GroupName, Kind: "sandboxes", Name: "web"}},
		},
		{
			name: "this server refused", code: http.StatusForbidden, contentType: "application/json",
			body: status(apierrors.NewForbidden(schema.GroupResource{}, "", nil)), ref: ref,
			want: metav1.Status{Code: 500, Reason: metav1.StatusReasonInternalError},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := processAnswerError(tt.code, tt.contentType, []byte(tt.body), tt.ref).ErrStatus
			if tt.want.Code == 500 {
				if got.Code != 500 || !strings.Contains(got.Message, "refused sandbox-apiserver") {
					t.Errorf("Status %+v, want a 500 that says execd refused this server", got)
				}
				return
			}
			tt.want.Status = metav1.StatusFailure
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateProcess(t *testing.T) {
	long := strings.Repeat("x", execdapi.MaxProcessCommandBytes/2+1)
	tests := []struct {
		name string
		p    sandboxv1alpha1.SandboxProcess
		// want are the fields at fault, in order.
		want []string
	}{
		{name: "a command", p: sandboxv1alpha1.SandboxProcess{Spec: sandboxv1alpha1.SandboxProcessSpec{Command: []string{"true"}}}},
		{name: "everything", p: sandboxv1alpha1.SandboxProcess{Spec: sandboxv1alpha1.SandboxProcessSpec{
			Replica: 2, Command: []string{"sh"}, Args: []string{"-c", "x"}, Env: []sandboxv1alpha1.SandboxProcessEnvVar{{Name: "A", Value: "b"}},
			WorkingDir: "/w", TTY: true, TerminalSize: &sandboxv1alpha1.SandboxTerminalSize{Width: 120, Height: 40}, Stdin: true, StdinOnce: true, TimeoutSeconds: 60,
		}}},
		{name: "no command", want: []string{"spec.command[0]"}},
		{name: "named", p: sandboxv1alpha1.SandboxProcess{ObjectMeta: metav1.ObjectMeta{Name: "p-x", GenerateName: "p-"}, Spec: sandboxv1alpha1.SandboxProcessSpec{Command: []string{"true"}}},
			want: []string{"metadata.name", "metadata.generateName"}},
		{name: "bad fields", p: sandboxv1alpha1.SandboxProcess{Spec: sandboxv1alpha1.SandboxProcessSpec{
			Replica: -1, Command: []string{"true", "a\x00"}, Args: []string{"ok", "b\x00"},
			Env:        []sandboxv1alpha1.SandboxProcessEnvVar{{Name: ""}, {Name: "A=B"}, {Name: execdapi.EnvSandboxUID, Value: "x"}},
			WorkingDir: "rel", StdinOnce: true, TimeoutSeconds: -1,
		}}, want: []string{"spec.replica", "spec.command[1]", "spec.env[0].name", "spec.env[1].name", "spec.env[2].name", "spec.workingDir", "spec.stdinOnce", "spec.timeoutSeconds", "spec.args[1]"}},
		{name: "a terminal without a TTY", p: sandboxv1alpha1.SandboxProcess{Spec: sandboxv1alpha1.SandboxProcessSpec{
			Command: []string{"true"}, TerminalSize: &sandboxv1alpha1.SandboxTerminalSize{Width: 80, Height: 24}}}, want: []string{"spec.terminalSize"}},
		{name: "a terminal too large", p: sandboxv1alpha1.SandboxProcess{Spec: sandboxv1alpha1.SandboxProcessSpec{
			Command: []string{"true"}, TTY: true, TerminalSize: &sandboxv1alpha1.SandboxTerminalSize{Width: 70000, Height: 24}}}, want: []string{"spec.terminalSize"}},
		{name: "an empty terminal", p: sandboxv1alpha1.SandboxProcess{Spec: sandboxv1alpha1.SandboxProcessSpec{
			Command: []string{"true"}, TTY: true, TerminalSize: &sandboxv1alpha1.SandboxTerminalSize{}}}, want: []string{"spec.terminalSize"}},
		{name: "args past the argv's bound", p: sandboxv1alpha1.SandboxProcess{Spec: sandboxv1alpha1.SandboxProcessSpec{
			Command: []string{long}, Args: []string{long}}}, want: []string{"spec.args"}},
		{name: "a command past the argv's bound", p: sandboxv1alpha1.SandboxProcess{Spec: sandboxv1alpha1.SandboxProcessSpec{
			Command: []string{long, long}, Args: []string{"x"}}}, want: []string{"spec.command"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, e := range validateProcess(&tt.p) {
				got = append(got, e.Field)
				if strings.Contains(e.Error(), "s3cret") || (tt.name == "bad fields" && strings.Contains(e.Error(), "\x00")) {
					t.Errorf("%s: the message shows a value: %s", e.Field, e.Error())
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("fields at fault (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateAttachAndLogOptions(t *testing.T) {
	attach := []struct {
		opts sandboxv1alpha1.SandboxAttachOptions
		want []string
	}{
		{opts: sandboxv1alpha1.SandboxAttachOptions{Process: "p-aaaaaaaa", Stdout: true}},
		{opts: sandboxv1alpha1.SandboxAttachOptions{Process: "p-aaaaaaaa", Stdin: true, TTY: true, Replica: 3}},
		{opts: sandboxv1alpha1.SandboxAttachOptions{}, want: []string{"process", "stdout"}},
		{opts: sandboxv1alpha1.SandboxAttachOptions{Process: "../exec", Replica: -1, Stderr: true}, want: []string{"process", "replica"}},
	}
	for _, tt := range attach {
		var got []string
		if err := ValidateAttachOptions("web", &tt.opts); err != nil {
			if err.ErrStatus.Code != http.StatusUnprocessableEntity {
				t.Errorf("%+v: %d, want 422", tt.opts, err.ErrStatus.Code)
			}
			for _, c := range err.ErrStatus.Details.Causes {
				got = append(got, c.Field)
			}
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("attach %+v: fields (-want +got):\n%s", tt.opts, diff)
		}
	}

	logs := []struct {
		opts sandboxv1alpha1.SandboxLogOptions
		want []string
	}{
		{opts: sandboxv1alpha1.SandboxLogOptions{Process: "p-aaaaaaaa", OffsetBytes: ptr.To[int64](10), LimitBytes: ptr.To[int64](5), Follow: true}},
		{opts: sandboxv1alpha1.SandboxLogOptions{Process: "p-aaaaaaaa", TailLines: ptr.To[int64](10)}},
		{opts: sandboxv1alpha1.SandboxLogOptions{OffsetBytes: ptr.To[int64](0)}, want: []string{"offsetBytes"}},
		{opts: sandboxv1alpha1.SandboxLogOptions{Process: "p-aaaaaaaa", OffsetBytes: ptr.To[int64](-1)}, want: []string{"offsetBytes"}},
		{opts: sandboxv1alpha1.SandboxLogOptions{Process: "P", Previous: true, OffsetBytes: ptr.To[int64](1), TailLines: ptr.To[int64](1)},
			want: []string{"process", "previous", "offsetBytes"}},
	}
	for _, tt := range logs {
		var got []string
		for _, e := range validateLogOptions(&tt.opts) {
			got = append(got, e.Field)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("log %+v: fields (-want +got):\n%s", tt.opts, diff)
		}
	}
}

func TestProcessesTable(t *testing.T) {
	now := processStart.Add(2 * time.Hour)
	end := metav1.NewTime(processStart.Add(90 * time.Second))
	start := &metav1.Time{Time: processStart}
	items := []sandboxv1alpha1.SandboxProcess{
		{ObjectMeta: metav1.ObjectMeta{Name: "p-aaaaaaaa"},
			Spec:   sandboxv1alpha1.SandboxProcessSpec{Command: []string{"python3", "-m", "http.server"}, TTY: true},
			Status: sandboxv1alpha1.SandboxProcessStatus{Phase: sandboxv1alpha1.ProcessPhaseRunning, PID: 42, StartTime: start, Pod: "web-0"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "p-bbbbbbbb"},
			Spec: sandboxv1alpha1.SandboxProcessSpec{Replica: 1, Command: []string{"sh", "-c", strings.Repeat("echo hello; ", 10)}},
			Status: sandboxv1alpha1.SandboxProcessStatus{Phase: sandboxv1alpha1.ProcessPhaseExited, PID: 43, ExitCode: ptr.To[int32](3),
				Reason: sandboxv1alpha1.ProcessReasonError, StartTime: start, EndTime: &end, Pod: "web-1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "p-cccccccc"},
			Spec: sandboxv1alpha1.SandboxProcessSpec{Command: []string{"sleep", "1000"}},
			Status: sandboxv1alpha1.SandboxProcessStatus{Phase: sandboxv1alpha1.ProcessPhaseExited, PID: 44, Signal: "TERM",
				Reason: sandboxv1alpha1.ProcessReasonError, StartTime: start, EndTime: &end, Pod: "web-0"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "p-dddddddd"},
			Spec: sandboxv1alpha1.SandboxProcessSpec{Command: []string{"..."}},
			Status: sandboxv1alpha1.SandboxProcessStatus{Phase: sandboxv1alpha1.ProcessPhaseLost, PID: 45,
				Reason: sandboxv1alpha1.ProcessReasonContainerRestarted, StartTime: start, EndTime: &end, Pod: "web-0"}},
	}
	table := ProcessesTable(items, now)
	var columns []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			columns = append(columns, c.Name)
		}
	}
	if diff := cmp.Diff([]string{"ID", "Replica", "Phase", "Exit", "PID", "Duration", "Command", "TTY"}, columns); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
	want := [][]any{
		{"p-aaaaaaaa", int64(0), "Running", "<none>", int64(42), "120m", "python3 -m http.server", true, "<none>", "web-0"},
		{"p-bbbbbbbb", int64(1), "Exited", "3", int64(43), "90s", "sh -c echo hello; echo hello; echo hello; echo hello; ech...", false, "Error", "web-1"},
		{"p-cccccccc", int64(0), "Exited", "SIGTERM", int64(44), "90s", "sleep 1000", false, "Error", "web-0"},
		{"p-dddddddd", int64(0), "Lost", "<none>", int64(45), "<none>", "...", false, "ContainerRestarted", "web-0"},
	}
	if len(table.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(table.Rows), len(want))
	}
	for i, row := range table.Rows {
		if diff := cmp.Diff(want[i], row.Cells); diff != "" {
			t.Errorf("row %d (-want +got):\n%s", i, diff)
		}
		if len(row.Cells) != len(table.ColumnDefinitions) {
			t.Errorf("row %d has %d cells for %d columns", i, len(row.Cells), len(table.ColumnDefinitions))
		}
		if row.Object.Object != &items[i] {
			t.Errorf("row %d's object is not the process %s", i, items[i].Name)
		}
	}

	// The storage's table: the same, for a list and for one process; no headers when asked.
	r := &ProcessesREST{Clock: testingclock.NewFakePassiveClock(now)}
	got, err := r.ConvertToTable(context.Background(), &sandboxv1alpha1.SandboxProcessList{Items: items}, nil)
	if err != nil || !cmp.Equal(table, got) {
		t.Errorf("ConvertToTable of the list: %v\n%s", err, cmp.Diff(table, got))
	}
	got, err = r.ConvertToTable(context.Background(), &items[1], &metav1.TableOptions{NoHeaders: true})
	if err != nil || len(got.Rows) != 1 || got.ColumnDefinitions != nil || got.Rows[0].Cells[0] != "p-bbbbbbbb" {
		t.Errorf("ConvertToTable of one process without headers: %v %+v", err, got)
	}
}

func TestProcessVocabulary(t *testing.T) {
	pairs := map[string][2]string{
		"ProcessRunning":                  {string(sandboxv1alpha1.ProcessPhaseRunning), string(execdapi.ProcessRunning)},
		"ProcessExited":                   {string(sandboxv1alpha1.ProcessPhaseExited), string(execdapi.ProcessExited)},
		"ProcessLost":                     {string(sandboxv1alpha1.ProcessPhaseLost), string(execdapi.ProcessLost)},
		"ProcessReasonCompleted":          {sandboxv1alpha1.ProcessReasonCompleted, execdapi.ProcessReasonCompleted},
		"ProcessReasonError":              {sandboxv1alpha1.ProcessReasonError, execdapi.ProcessReasonError},
		"ProcessReasonDeadlineExceeded":   {sandboxv1alpha1.ProcessReasonDeadlineExceeded, execdapi.ProcessReasonDeadlineExceeded},
		"ProcessReasonContainerRestarted": {sandboxv1alpha1.ProcessReasonContainerRestarted, execdapi.ProcessReasonContainerRestarted},
	}
	for name, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("%s: the Sandbox API says %q, execd %q", name, p[0], p[1])
		}
	}
}

func TestParseProcessPath(t *testing.T) {
	tests := []struct {
		path, id, action string
		code             int32
	}{
		{path: ""}, {path: "/"},
		{path: "/p-aaaaaaaa", id: "p-aaaaaaaa"}, {path: "/p-aaaaaaaa/", id: "p-aaaaaaaa"},
		{path: "/p-aaaaaaaa/signal", id: "p-aaaaaaaa", action: "signal"},
		{path: "/p-aaaaaaaa/log", code: http.StatusNotFound},
		{path: "/p-aaaaaaaa/signal/x", code: http.StatusNotFound},
		{path: "/..", code: http.StatusBadRequest},
		{path: "/P-A", code: http.StatusBadRequest},
	}
	for _, tt := range tests {
		id, action, err := parseProcessPath(tt.path)
		if tt.code != 0 {
			if se, ok := err.(apierrors.APIStatus); !ok || se.Status().Code != tt.code {
				t.Errorf("%q: %v, want a %d", tt.path, err, tt.code)
			}
			continue
		}
		if err != nil || id != tt.id || action != tt.action {
			t.Errorf("%q: %q %q %v, want %q %q", tt.path, id, action, err, tt.id, tt.action)
		}
	}
}

func TestConvertURLValuesToProcessOptions(t *testing.T) {
	in, _ := url.ParseQuery("path=/p-a&replica=2&other=x")
	got := sandboxv1alpha1.SandboxProcessOptions{}
	if err := sandboxv1alpha1.ConvertURLValuesToSandboxProcessOptions(&in, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sandboxv1alpha1.SandboxProcessOptions{Path: "/p-a", Replica: ptr.To[int32](2)}, got); diff != "" {
		t.Errorf("process options (-want +got):\n%s", diff)
	}
	in, _ = url.ParseQuery("")
	got = sandboxv1alpha1.SandboxProcessOptions{}
	if err := sandboxv1alpha1.ConvertURLValuesToSandboxProcessOptions(&in, &got); err != nil || got.Replica != nil {
		t.Errorf("no replica: %+v %v, want it unset", got, err)
	}
	in, _ = url.ParseQuery("replica=x")
	if err := sandboxv1alpha1.ConvertURLValuesToSandboxProcessOptions(&in, &got); err == nil || err.Error() != `query parameter "replica": "x" is not an integer` {
		t.Errorf("a bad replica: %v", err)
	}

	in, _ = url.ParseQuery("process=p-a&replica=1&stdin=true&stdout=1&stderr=false&tty=true")
	attach := sandboxv1alpha1.SandboxAttachOptions{}
	if err := sandboxv1alpha1.ConvertURLValuesToSandboxAttachOptions(&in, &attach); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sandboxv1alpha1.SandboxAttachOptions{Process: "p-a", Replica: 1, Stdin: true, Stdout: true, TTY: true}, attach); diff != "" {
		t.Errorf("attach options (-want +got):\n%s", diff)
	}
	in, _ = url.ParseQuery("tty=maybe")
	if err := sandboxv1alpha1.ConvertURLValuesToSandboxAttachOptions(&in, &attach); err == nil || err.Error() != `query parameter "tty": "maybe" is not a boolean` {
		t.Errorf("a bad tty: %v", err)
	}

	in, _ = url.ParseQuery("process=p-a&offsetBytes=123")
	logOpts := sandboxv1alpha1.SandboxLogOptions{}
	if err := sandboxv1alpha1.ConvertURLValuesToSandboxLogOptions(&in, &logOpts); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sandboxv1alpha1.SandboxLogOptions{Process: "p-a", OffsetBytes: ptr.To[int64](123)}, logOpts); diff != "" {
		t.Errorf("log options (-want +got):\n%s", diff)
	}
}

// TestProcessesElevated: starting or signalling a process in a sandbox whose pods are beyond
// a sandbox's needs the right to create pods, as exec does; reading them does not.
func TestProcessesElevated(t *testing.T) {
	execd := newProcessExecd(t, "pod-uid-0")
	execd.procs = []execdapi.ProcessState{{ID: "p-aaaaaaaa", Command: []string{"a"}, Phase: execdapi.ProcessRunning, StartTime: processStart}}
	bs := webSandbox(1)
	bs.Annotations = map[string]string{controlv1alpha1.AnnotationPodSecurity: "Namespace"}
	r := newProcessesREST(t, replicaResolver{0: {ep: &sandboxconn.Endpoint{Target: execd.target, Pod: "web-0", Sandbox: bs}}}, execd)
	r.Authorizer = authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionNoOpinion, "", nil
	})
	withUser := func(ctx context.Context) context.Context {
		return genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "bob"})
	}
	for path, body := range map[string]string{"": `{"spec":{"command":["true"]}}`, "/p-aaaaaaaa/signal": `{"signal":"KILL"}`} {
		ctx := withUser(processCtx("create"))
		resp := &objectResponder{}
		h, err := r.Connect(ctx, "web", &sandboxv1alpha1.SandboxProcessOptions{Path: path}, resp)
		if err != nil {
			t.Fatal(err)
		}
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, http.MethodPost, "/processes"+path, strings.NewReader(body)))
		if !apierrors.IsForbidden(resp.err) || !strings.Contains(resp.err.Error(), `needs the right to create pods in namespace "ns", which user "bob" does not have`) {
			t.Errorf("POST processes%s on an elevated sandbox without pods create: %v, want 403", path, resp.err)
		}
	}
	if reqs, _ := execd.seen(); len(reqs) != 0 {
		t.Errorf("execd was asked %s", reqs[0].URL.Path)
	}
	if _, err := r.Get(withUser(processCtx("get")), "web", &sandboxv1alpha1.SandboxProcessOptions{Path: "/p-aaaaaaaa"}); err != nil {
		t.Errorf("get of a process of an elevated sandbox: %v", err)
	}
}
