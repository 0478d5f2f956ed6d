package sandbox

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// TestAttachChecksFirst: an attach is refused before any upgrade when the process does not
// exist, has ended, or cannot take the options, with the codes execd would answer.
func TestAttachChecksFirst(t *testing.T) {
	execd := newProcessExecd(t, "pod-uid-0")
	end := processStart.Add(time.Minute)
	execd.procs = []execdapi.ProcessState{
		{ID: "p-running", Command: []string{"cat"}, Phase: execdapi.ProcessRunning, StartTime: processStart},
		{ID: "p-ended", Command: []string{"true"}, Phase: execdapi.ProcessExited, ExitCode: new(int32), StartTime: processStart, EndTime: &end},
	}
	bs := webSandbox(1)
	r := &AttachREST{Access: Access{
		Resolver:  replicaResolver{0: {ep: &sandboxconn.Endpoint{Target: execd.target, Pod: "web-0", Sandbox: bs}}},
		Transport: execdclient.NewTransport(execd.authority, execdclient.Options{ResponseHeaderTimeout: 5 * time.Second}),
	}}
	tests := []struct {
		name        string
		opts        sandboxv1alpha1.SandboxAttachOptions
		wantCode    int32
		wantMessage string
	}{
		{name: "a running process", opts: sandboxv1alpha1.SandboxAttachOptions{Process: "p-running", Stdout: true, Stderr: true}},
		{name: "an unknown process", opts: sandboxv1alpha1.SandboxAttachOptions{Process: "p-nope", Stdout: true},
			wantCode: http.StatusNotFound, wantMessage: `process "p-nope" not found in replica 0 of sandbox "web", pod web-0`},
		{name: "an ended process", opts: sandboxv1alpha1.SandboxAttachOptions{Process: "p-ended", Stdout: true},
			wantCode: http.StatusGone, wantMessage: `process p-ended has ended (Exited): there is nothing to attach to; its log keeps its output`},
		{name: "a TTY", opts: sandboxv1alpha1.SandboxAttachOptions{Process: "p-running", Stdout: true, TTY: true},
			wantCode: http.StatusBadRequest, wantMessage: "process p-running has no TTY"},
		{name: "stdin", opts: sandboxv1alpha1.SandboxAttachOptions{Process: "p-running", Stdin: true},
			wantCode: http.StatusBadRequest, wantMessage: "process p-running was started without stdin"},
		{name: "no process", opts: sandboxv1alpha1.SandboxAttachOptions{Stdout: true},
			wantCode: http.StatusUnprocessableEntity, wantMessage: `SandboxAttachOptions.sandbox.kube-sandbox.io for sandbox "web" is invalid: process: Required value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := r.Connect(processCtx("create"), "web", &tt.opts, &objectResponder{})
			if tt.wantCode == 0 {
				if err != nil || h == nil {
					t.Fatalf("attach: %v", err)
				}
				return
			}
			se, ok := err.(apierrors.APIStatus)
			if !ok || se.Status().Code != tt.wantCode || !strings.Contains(se.Status().Message, tt.wantMessage) {
				t.Errorf("attach: %v, want a %d containing %q", err, tt.wantCode, tt.wantMessage)
			}
		})
	}
	reqs, _ := execd.seen()
	for _, req := range reqs {
		if req.URL.Path != execdapi.ProcessPath("p-running") && req.URL.Path != execdapi.ProcessPath("p-nope") && req.URL.Path != execdapi.ProcessPath("p-ended") {
			t.Errorf("execd was asked %s %s before an attach was allowed", req.Method, req.URL.Path)
		}
	}
}

// TestAttachAuthorizedAsCreate: a WebSocket attach arrives as GET, but joining a process needs
// create on sandboxes/attach, as exec needs it on sandboxes/exec.
func TestAttachAuthorizedAsCreate(t *testing.T) {
	var asked []string
	deny := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		asked = append(asked, a.GetVerb()+" "+a.GetResource()+"/"+a.GetSubresource())
		return authorizer.DecisionNoOpinion, "", nil
	})
	r := &AttachREST{Access: Access{Authorizer: deny, Resolver: replicaResolver{}}}
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "bob"})
	ctx = genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: "get", APIGroup: sandboxv1alpha1.GroupName, APIVersion: "v1alpha1",
		Resource: "sandboxes", Subresource: "attach", Name: "web", Namespace: "ns",
	})
	_, err := r.Connect(ctx, "web", &sandboxv1alpha1.SandboxAttachOptions{Process: "p-a", Stdout: true}, &objectResponder{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "bob" cannot create resource "sandboxes/attach"`) {
		t.Errorf("attach as GET without create: %v, want 403", err)
	}
	if diff := cmp.Diff([]string{"create sandboxes/attach"}, asked); diff != "" {
		t.Errorf("what was asked of the authorizer (-want +got):\n%s", diff)
	}
}

// TestProcessLog: the log subresource with process=ID reads the process's log at execd, with
// the offset, and passes execd's offset headers back; its errors are the process's.
func TestProcessLog(t *testing.T) {
	execd := newProcessExecd(t, "pod-uid-0")
	execd.answer = func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case execdapi.ProcessLogPath("p-aaaaaaaa"):
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set(execdapi.ProcessLogOffsetHeader, "6")
			w.Header().Set(execdapi.ProcessLogNextOffsetHeader, "12")
			_, _ = io.WriteString(w, "world\n")
		case execdapi.ProcessLogPath("p-lost"):
			writeStatus(w, apierrors.NewGone("the output of process p-lost died with the container"))
		default:
			writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Resource: "processes"}, strings.TrimSuffix(strings.TrimPrefix(req.URL.Path, execdapi.ProcessesPath+"/"), "/log")))
		}
	}
	// A sandbox without a task has processes all the same.
	bs := webSandbox(1)
	bs.Name = "batch"
	r := &LogREST{Access: Access{
		Resolver:  replicaResolver{0: {ep: &sandboxconn.Endpoint{Target: execd.target, Pod: "batch-0", Sandbox: bs}}},
		Transport: execdclient.NewTransport(execd.authority, execdclient.Options{ResponseHeaderTimeout: 5 * time.Second}),
	}}
	srv := logServer(t, r)
	get := func(query string) (*http.Response, string) {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + "/log?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}

	resp, body := get("process=p-aaaaaaaa&offsetBytes=6&limitBytes=100&follow=true&previous=false")
	if resp.StatusCode != http.StatusOK || body != "world\n" {
		t.Fatalf("log: %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get(execdapi.ProcessLogOffsetHeader) != "6" || resp.Header.Get(execdapi.ProcessLogNextOffsetHeader) != "12" {
		t.Errorf("offset headers %q %q, want execd's", resp.Header.Get(execdapi.ProcessLogOffsetHeader), resp.Header.Get(execdapi.ProcessLogNextOffsetHeader))
	}
	reqs, _ := execd.seen()
	want := url.Values{execdapi.ProcessLogOffsetParam: {"6"}, execdapi.ProcessLogLimitBytesParam: {"100"}, execdapi.ProcessLogFollowParam: {"true"}}
	if diff := cmp.Diff(want, reqs[0].URL.Query()); diff != "" {
		t.Errorf("execd's query (-want +got):\n%s", diff)
	}
	if got := reqs[0].Header.Get(execdapi.SandboxUIDHeader); got != "sandbox-uid" {
		t.Errorf("%s = %q, want the sandbox's UID", execdapi.SandboxUIDHeader, got)
	}

	for _, tt := range []struct {
		query       string
		wantCode    int
		wantMessage string
	}{
		{query: "process=p-nope", wantCode: http.StatusNotFound, wantMessage: `process "p-nope" not found in replica 0 of sandbox "batch", pod batch-0`},
		{query: "process=p-lost", wantCode: http.StatusGone, wantMessage: `the output of process p-lost died with the container (replica 0 of sandbox "batch", pod batch-0)`},
		{query: "process=p-aaaaaaaa&offsetBytes=1&tailLines=1", wantCode: http.StatusUnprocessableEntity, wantMessage: "offsetBytes: Forbidden: excludes tailLines"},
		// Without a process, it is the task's log, which this sandbox has none of.
		{query: "offsetBytes=0", wantCode: http.StatusUnprocessableEntity, wantMessage: "offsetBytes: Forbidden: only a process's log"},
		{query: "", wantCode: http.StatusBadRequest, wantMessage: `sandbox "batch" runs no task`},
	} {
		resp, body := get(tt.query)
		status := metav1.Status{}
		_ = json.Unmarshal([]byte(body), &status)
		if resp.StatusCode != tt.wantCode || !strings.Contains(status.Message, tt.wantMessage) {
			t.Errorf("%s: %d %s, want %d containing %q", tt.query, resp.StatusCode, body, tt.wantCode, tt.wantMessage)
		}
	}
}
