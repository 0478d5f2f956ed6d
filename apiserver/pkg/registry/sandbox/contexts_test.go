package sandbox

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// contextExecd answers execd's contexts API in memory, as the contract (execdapi.ContextsPath)
// describes it: a make answers an Idle context, a run streams run, then the events given, a
// delete ends the context; an unknown ID is a 404 naming it.
func contextExecd(t *testing.T, events ...execdapi.RunEvent) (*processExecd, *[]execdapi.ContextState) {
	t.Helper()
	execd := newProcessExecd(t, "pod-uid-0")
	var contexts []execdapi.ContextState
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	one := func(w http.ResponseWriter, req *http.Request) int {
		for i := range contexts {
			if contexts[i].ID == req.PathValue("id") {
				return i
			}
		}
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Resource: "contexts"}, req.PathValue("id")))
		return -1
	}
	mux.HandleFunc("POST "+execdapi.ContextsPath, func(w http.ResponseWriter, req *http.Request) {
		cr := execdapi.ContextRequest{}
		if err := json.NewDecoder(req.Body).Decode(&cr); err != nil {
			writeStatus(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		if cr.ID == "" {
			cr.ID = fmt.Sprintf("c-%08d", len(contexts))
		}
		st := execdapi.ContextState{ID: cr.ID, Language: execdapi.LanguagePython, Phase: execdapi.ContextIdle, LanguageVersion: "3.11.2",
			PID: 70 + len(contexts), WorkingDir: cr.WorkingDir, StartTime: processStart}
		contexts = append(contexts, st)
		writeJSON(w, http.StatusCreated, st)
	})
	mux.HandleFunc("GET "+execdapi.ContextsPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, execdapi.ContextList{Kind: execdapi.ContextListKind, Items: contexts})
	})
	mux.HandleFunc("GET "+execdapi.ContextsPath+"/{id}", func(w http.ResponseWriter, req *http.Request) {
		if i := one(w, req); i >= 0 {
			writeJSON(w, http.StatusOK, contexts[i])
		}
	})
	mux.HandleFunc("DELETE "+execdapi.ContextsPath+"/{id}", func(w http.ResponseWriter, req *http.Request) {
		if i := one(w, req); i >= 0 {
			st := contexts[i]
			st.Phase, st.Message = execdapi.ContextDead, "deleted"
			contexts = append(contexts[:i], contexts[i+1:]...)
			writeJSON(w, http.StatusOK, st)
		}
	})
	mux.HandleFunc("POST "+execdapi.ContextsPath+"/{id}/interrupt", func(w http.ResponseWriter, req *http.Request) {
		if i := one(w, req); i >= 0 {
			writeJSON(w, http.StatusOK, contexts[i])
		}
	})
	mux.HandleFunc("POST "+execdapi.ContextsPath+"/{id}/run", func(w http.ResponseWriter, req *http.Request) {
		i := one(w, req)
		if i < 0 {
			return
		}
		contexts[i].ExecutionCount++
		contexts[i].LastRunTime = processStart.Add(time.Minute)
		w.Header().Set("Content-Type", execdapi.RunContentType)
		w.WriteHeader(http.StatusOK)
		for _, ev := range events {
			_ = json.NewEncoder(w).Encode(ev)
		}
	})
	execd.answer = mux.ServeHTTP
	return execd, &contexts
}

func newContextsREST(t *testing.T, execd *processExecd) *ContextsREST {
	t.Helper()
	bs := webSandbox(1)
	_, backend := newREST(t, bs)
	return &ContextsREST{
		Access: Access{
			Resolver:  replicaResolver{0: {ep: &sandboxconn.Endpoint{Target: execd.target, Pod: "web-0", Sandbox: bs}}},
			Transport: execdclient.NewTransport(execd.authority, execdclient.Options{ResponseHeaderTimeout: 5 * time.Second}),
		},
		Reader: backend,
		Clock:  testingclock.NewFakePassiveClock(processStart.Add(time.Hour)),
	}
}

// serveContexts serves a request with method and body to path below contexts through the
// connecter r; it answers the responder and what was written.
func serveContexts(t *testing.T, r *ContextsREST, method, path, body string) (*objectResponder, *httptest.ResponseRecorder) {
	t.Helper()
	ctx := processCtx(map[string]string{http.MethodPost: "create", http.MethodDelete: "delete"}[method])
	resp := &objectResponder{}
	rec := httptest.NewRecorder()
	h, err := r.Connect(ctx, "web", &sandboxv1alpha1.SandboxCodeContextOptions{Path: path}, resp)
	if err != nil {
		resp.err = err
		return resp, rec
	}
	req := httptest.NewRequestWithContext(ctx, method, "/contexts"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	return resp, rec
}

// TestContextsMakeListGetDelete: a make is asked of execd with the API's fields (env never
// answered), and the context it answers is listed, got, interrupted and deleted; an unknown
// one is a 404 that names a code context.
func TestContextsMakeListGetDelete(t *testing.T) {
	execd, _ := contextExecd(t)
	r := newContextsREST(t, execd)

	resp, _ := serveContexts(t, r, http.MethodPost, "", `{"apiVersion":"sandbox.kube-sandbox.io/v1alpha1","kind":"SandboxCodeContext",
		"metadata":{"name":"nb"},"spec":{"env":[{"name":"TOKEN","value":"s3cret"}],"workingDir":"/work"}}`)
	if resp.err != nil {
		t.Fatalf("make: %v", resp.err)
	}
	want := &sandboxv1alpha1.SandboxCodeContext{
		ObjectMeta: metav1.ObjectMeta{Name: "nb", Namespace: "ns", CreationTimestamp: metav1.NewTime(processStart)},
		Spec:       sandboxv1alpha1.SandboxCodeContextSpec{Language: "python", WorkingDir: "/work"},
		Status: sandboxv1alpha1.SandboxCodeContextStatus{Phase: sandboxv1alpha1.CodeContextIdle, Pod: "web-0", PID: 70,
			LanguageVersion: "3.11.2"},
	}
	if resp.code != http.StatusCreated {
		t.Errorf("make answered %d, want 201", resp.code)
	}
	if diff := cmp.Diff(want, resp.obj); diff != "" {
		t.Errorf("made context (-want +got):\n%s", diff)
	}
	reqs, bodies := execd.seen()
	got := execdapi.ContextRequest{}
	if err := json.Unmarshal([]byte(bodies[0]), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(execdapi.ContextRequest{ID: "nb", Env: []execdapi.EnvVar{{Name: "TOKEN", Value: "s3cret"}}, WorkingDir: "/work"}, got); diff != "" {
		t.Errorf("what execd was asked to make (-want +got):\n%s", diff)
	}
	if reqs[0].Header.Get(execdapi.SandboxUIDHeader) != "sandbox-uid" {
		t.Errorf("the make names sandbox %q", reqs[0].Header.Get(execdapi.SandboxUIDHeader))
	}

	ctx := processCtx("get")
	obj, err := r.Get(ctx, "web", &sandboxv1alpha1.SandboxCodeContextOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if diff := cmp.Diff(&sandboxv1alpha1.SandboxCodeContextList{Items: []sandboxv1alpha1.SandboxCodeContext{*want}}, obj); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	if obj, err := r.Get(ctx, "web", &sandboxv1alpha1.SandboxCodeContextOptions{Path: "/nb"}); err != nil || !cmp.Equal(want, obj) {
		t.Errorf("get: %v\n%s", err, cmp.Diff(want, obj))
	}
	if _, err := r.Get(ctx, "web", &sandboxv1alpha1.SandboxCodeContextOptions{Path: "/nb/run"}); !apierrors.IsMethodNotSupported(err) {
		t.Errorf("get of contexts/nb/run: %v, want 405", err)
	}

	if resp, _ := serveContexts(t, r, http.MethodPost, "/nb/interrupt", ""); resp.err != nil || resp.code != http.StatusCreated {
		t.Errorf("interrupt: %d %v", resp.code, resp.err)
	}
	resp, _ = serveContexts(t, r, http.MethodDelete, "/nb", "")
	if resp.err != nil || resp.code != http.StatusOK || resp.obj.(*sandboxv1alpha1.SandboxCodeContext).Status.Phase != sandboxv1alpha1.CodeContextDead {
		t.Errorf("delete: %d %+v %v", resp.code, resp.obj, resp.err)
	}
	reqs, _ = execd.seen()
	if last := reqs[len(reqs)-1]; last.Method != http.MethodDelete || last.URL.Path != execdapi.ContextPath("nb") {
		t.Errorf("execd was asked %s %s", last.Method, last.URL.Path)
	}

	_, err = r.Get(ctx, "web", &sandboxv1alpha1.SandboxCodeContextOptions{Path: "/nb"})
	if !apierrors.IsNotFound(err) || err.(apierrors.APIStatus).Status().Details.Kind != "contexts" ||
		!strings.Contains(err.Error(), `code context "nb" not found in replica 0 of sandbox "web", pod web-0`) {
		t.Errorf("get of a deleted context: %v, want a 404 of a code context", err)
	}
	if resp, _ := serveContexts(t, r, http.MethodDelete, "", ""); !apierrors.IsMethodNotSupported(resp.err) {
		t.Errorf("delete of the collection: %v, want 405", resp.err)
	}
	if resp, _ := serveContexts(t, r, http.MethodPost, "/nb", "{}"); !apierrors.IsMethodNotSupported(resp.err) {
		t.Errorf("post to contexts/ID: %v, want 405", resp.err)
	}
}

// TestContextsRun: a run streams execd's events as the API's, one JSON object a line, and
// stops at the end event; a run without code is a 422 with its field, before execd is asked.
func TestContextsRun(t *testing.T) {
	events := []execdapi.RunEvent{
		{Type: execdapi.RunStdout, Text: "hi\n"},
		{Type: execdapi.RunDisplay, Data: map[string]string{"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}, Text: "<Figure>"},
		{Type: execdapi.RunError, Error: &execdapi.RunErrorInfo{Name: "ZeroDivisionError", Value: "division by zero", Traceback: []string{"line 1"}}},
		{Type: execdapi.RunEnd, Status: execdapi.RunStatusError, ExecutionCount: 3},
		{Type: execdapi.RunStdout, Text: "after the end"},
	}
	execd, _ := contextExecd(t, events...)
	r := newContextsREST(t, execd)
	if resp, _ := serveContexts(t, r, http.MethodPost, "", `{"metadata":{"name":"nb"}}`); resp.err != nil {
		t.Fatalf("make: %v", resp.err)
	}

	resp, rec := serveContexts(t, r, http.MethodPost, "/nb/run", `{"code":"print('hi')","timeoutSeconds":30}`)
	if resp.err != nil {
		t.Fatalf("run: %v", resp.err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != execdapi.RunContentType {
		t.Errorf("run answered Content-Type %q", ct)
	}
	var got []sandboxv1alpha1.SandboxCodeRunEvent
	for _, line := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n") {
		ev := sandboxv1alpha1.SandboxCodeRunEvent{}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, ev)
	}
	want := []sandboxv1alpha1.SandboxCodeRunEvent{
		{Type: sandboxv1alpha1.CodeRunStdout, Text: "hi\n"},
		{Type: sandboxv1alpha1.CodeRunDisplay, Data: map[string]string{"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}, Text: "<Figure>"},
		{Type: sandboxv1alpha1.CodeRunError, Error: &sandboxv1alpha1.SandboxCodeError{Name: "ZeroDivisionError", Value: "division by zero", Traceback: []string{"line 1"}}},
		{Type: sandboxv1alpha1.CodeRunEnd, Status: sandboxv1alpha1.CodeRunStatusError, ExecutionCount: 3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("run events (-want +got):\n%s", diff)
	}
	reqs, bodies := execd.seen()
	if last := reqs[len(reqs)-1]; last.URL.Path != execdapi.ContextRunPath("nb") || bodies[len(bodies)-1] != `{"code":"print('hi')","timeoutSeconds":30}` {
		t.Errorf("execd was asked %s %s", last.URL.Path, bodies[len(bodies)-1])
	}

	n := len(reqs)
	resp, _ = serveContexts(t, r, http.MethodPost, "/nb/run", `{"code":"  ","timeoutSeconds":-1}`)
	if !apierrors.IsInvalid(resp.err) {
		t.Fatalf("a run without code: %v, want 422", resp.err)
	}
	var fields []string
	for _, c := range resp.err.(apierrors.APIStatus).Status().Details.Causes {
		fields = append(fields, c.Field)
	}
	if diff := cmp.Diff([]string{"code", "timeoutSeconds"}, fields); diff != "" {
		t.Errorf("fields of an invalid run (-want +got):\n%s", diff)
	}
	if reqs, _ := execd.seen(); len(reqs) != n {
		t.Errorf("an invalid run reached execd")
	}
	if resp, _ := serveContexts(t, r, http.MethodPost, "/nope/run", `{"code":"1"}`); !apierrors.IsNotFound(resp.err) {
		t.Errorf("a run in an unknown context: %v, want 404", resp.err)
	}
}

func TestContextRequestValidation(t *testing.T) {
	tests := []struct {
		name   string
		cc     sandboxv1alpha1.SandboxCodeContext
		fields []string
	}{
		{name: "valid", cc: sandboxv1alpha1.SandboxCodeContext{ObjectMeta: metav1.ObjectMeta{Name: "nb"}}},
		{name: "random ID", cc: sandboxv1alpha1.SandboxCodeContext{}},
		{name: "generateName", cc: sandboxv1alpha1.SandboxCodeContext{ObjectMeta: metav1.ObjectMeta{GenerateName: "nb-"}},
			fields: []string{"metadata.generateName"}},
		{name: "bad ID", cc: sandboxv1alpha1.SandboxCodeContext{ObjectMeta: metav1.ObjectMeta{Name: "NB"}}, fields: []string{"metadata.name"}},
		{name: "every field", cc: sandboxv1alpha1.SandboxCodeContext{Spec: sandboxv1alpha1.SandboxCodeContextSpec{
			Replica: -1, Language: "ruby", WorkingDir: "rel", Env: []sandboxv1alpha1.SandboxProcessEnvVar{{Name: "A=B"}}}},
			fields: []string{"spec.replica", "spec.language", "spec.env[0].name", "spec.workingDir"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := contextRequest(&tt.cc)
			var fields []string
			for _, e := range errs {
				fields = append(fields, e.Field)
			}
			if diff := cmp.Diff(tt.fields, fields); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
	if err := validateContextOptions("web", &sandboxv1alpha1.SandboxCodeContextOptions{Replica: ptr.To[int32](-1)}); err == nil || !apierrors.IsInvalid(err) {
		t.Errorf("replica -1: %v, want 422", err)
	}
}

func TestParseContextPath(t *testing.T) {
	tests := []struct {
		path, id, action string
		code             int32
	}{
		{path: ""}, {path: "/"},
		{path: "/nb", id: "nb"}, {path: "/nb/", id: "nb"},
		{path: "/nb/run", id: "nb", action: "run"},
		{path: "/nb/interrupt", id: "nb", action: "interrupt"},
		{path: "/nb/signal", code: http.StatusNotFound},
		{path: "/nb/run/x", code: http.StatusNotFound},
		{path: "/..", code: http.StatusBadRequest},
		{path: "/NB", code: http.StatusBadRequest},
	}
	for _, tt := range tests {
		id, action, err := parseContextPath(tt.path)
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

// TestCodeContextVocabulary: the API's words are execd's, which codeRunEvent and
// sandboxCodeContext pass through as they are.
func TestCodeContextVocabulary(t *testing.T) {
	pairs := map[string][2]string{
		"Idle":                    {string(sandboxv1alpha1.CodeContextIdle), string(execdapi.ContextIdle)},
		"Busy":                    {string(sandboxv1alpha1.CodeContextBusy), string(execdapi.ContextBusy)},
		"Dead":                    {string(sandboxv1alpha1.CodeContextDead), string(execdapi.ContextDead)},
		"default":                 {sandboxv1alpha1.DefaultCodeContext, execdapi.DefaultContext},
		"stdout":                  {string(sandboxv1alpha1.CodeRunStdout), string(execdapi.RunStdout)},
		"stderr":                  {string(sandboxv1alpha1.CodeRunStderr), string(execdapi.RunStderr)},
		"result":                  {string(sandboxv1alpha1.CodeRunResult), string(execdapi.RunResult)},
		"display":                 {string(sandboxv1alpha1.CodeRunDisplay), string(execdapi.RunDisplay)},
		"error":                   {string(sandboxv1alpha1.CodeRunError), string(execdapi.RunError)},
		"end":                     {string(sandboxv1alpha1.CodeRunEnd), string(execdapi.RunEnd)},
		"status ok":               {sandboxv1alpha1.CodeRunStatusOK, execdapi.RunStatusOK},
		"status error":            {sandboxv1alpha1.CodeRunStatusError, execdapi.RunStatusError},
		"status aborted":          {sandboxv1alpha1.CodeRunStatusAborted, execdapi.RunStatusAborted},
		"reason Interrupted":      {sandboxv1alpha1.CodeRunReasonInterrupted, execdapi.RunReasonInterrupted},
		"reason DeadlineExceeded": {sandboxv1alpha1.CodeRunReasonDeadlineExceeded, execdapi.RunReasonDeadlineExceeded},
		"reason KernelDied":       {sandboxv1alpha1.CodeRunReasonKernelDied, execdapi.RunReasonKernelDied},
	}
	for name, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("%s: the Sandbox API says %q, execd %q", name, p[0], p[1])
		}
	}
}

// TestContextsRunBounded: an event of execd's larger than MaxRunEventBytes ends the stream
// there, without an end event: what came before it is passed on, nothing after it.
func TestContextsRunBounded(t *testing.T) {
	execd, _ := contextExecd(t,
		execdapi.RunEvent{Type: execdapi.RunStdout, Text: "before\n"},
		execdapi.RunEvent{Type: execdapi.RunStdout, Text: strings.Repeat("x", execdapi.MaxRunEventBytes)},
		execdapi.RunEvent{Type: execdapi.RunEnd, Status: execdapi.RunStatusOK})
	r := newContextsREST(t, execd)
	if resp, _ := serveContexts(t, r, http.MethodPost, "", `{"metadata":{"name":"nb"}}`); resp.err != nil {
		t.Fatalf("make: %v", resp.err)
	}
	resp, rec := serveContexts(t, r, http.MethodPost, "/nb/run", `{"code":"1"}`)
	if resp.err != nil {
		t.Fatalf("run: %v", resp.err)
	}
	if got := strings.TrimSpace(rec.Body.String()); got != `{"type":"stdout","text":"before\n"}` {
		t.Errorf("run answered %.200q, want only the event before the oversized one", got)
	}
}
