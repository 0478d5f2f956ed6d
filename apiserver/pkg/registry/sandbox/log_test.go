package sandbox

import (
	"bufio"
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
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

const logPodUID = "pod-uid-0"

// fakeExecd is the execd of one pod over mutual TLS with a certificate of the kube-sandbox CA,
// as sandbox-apiserver reaches it. It records the requests for the task log and answers them
// with answer.
type fakeExecd struct {
	authority *pki.Authority
	target    execdclient.Target

	mu       sync.Mutex
	requests []*http.Request
}

func newFakeExecd(t *testing.T, answer http.HandlerFunc) *fakeExecd {
	t.Helper()
	a, cert := podServerCertificate(t, logPodUID, "batch-0")
	e := &fakeExecd{authority: a}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		e.mu.Lock()
		e.requests = append(e.requests, req.Clone(context.Background()))
		e.mu.Unlock()
		if req.URL.Path != execdapi.TaskLogPath {
			http.Error(w, "unexpected path "+req.URL.Path, http.StatusTeapot)
			return
		}
		answer(w, req)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	e.target.PodIP, e.target.PodUID = host, logPodUID
	e.target.Port, _ = strconv.Atoi(port)
	return e
}

func (e *fakeExecd) seen() []*http.Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.requests
}

// fakeResolver resolves every replica to one endpoint, or fails with err.
type fakeResolver struct {
	ep  *sandboxconn.Endpoint
	err error
}

func (r *fakeResolver) Resolve(_ context.Context, _, _ string, _ int32) (*sandboxconn.Endpoint, error) {
	return r.ep, r.err
}

// writeResponder writes errors as the API server does: a Status with the error's code.
type writeResponder struct{ w http.ResponseWriter }

func (r writeResponder) Object(int, runtime.Object) {}

func (r writeResponder) Error(err error) { writeError(r.w, err) }

func writeError(w http.ResponseWriter, err error) {
	status := apierrors.NewInternalError(err).ErrStatus
	if se, ok := err.(apierrors.APIStatus); ok {
		status = se.Status()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status)
}

// logServer serves GET .../sandboxes/NAME/log as the generic API server does: the query
// decoded into the options by the server's parameter codec, then r's handler.
func logServer(t *testing.T, r *LogREST) *httptest.Server {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := sandboxv1alpha1.AddToServerScheme(scheme); err != nil {
		t.Fatal(err)
	}
	codec := runtime.NewParameterCodec(scheme)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		opts := &sandboxv1alpha1.SandboxLogOptions{}
		if err := codec.DecodeParameters(req.URL.Query(), sandboxv1alpha1.SchemeGroupVersion, opts); err != nil {
			writeError(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		ctx := genericapirequest.WithNamespace(req.Context(), "ns")
		h, err := r.Connect(ctx, "batch", opts, writeResponder{w})
		if err != nil {
			writeError(w, err)
			return
		}
		h.ServeHTTP(w, req.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func taskSandbox(mutate func(bs *controlv1alpha1.BatchSandbox)) *controlv1alpha1.BatchSandbox {
	bs := &controlv1alpha1.BatchSandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: "ns", UID: "sandbox-uid"},
		Spec: controlv1alpha1.BatchSandboxSpec{
			Replicas:     ptr.To[int32](2),
			TaskTemplate: &controlv1alpha1.TaskTemplate{Command: []string{"python", "eval.py"}},
		},
	}
	if mutate != nil {
		mutate(bs)
	}
	return bs
}

func TestLog(t *testing.T) {
	notReady := apierrors.NewServiceUnavailable(`sandbox "batch" is not ready: replica 1 has no pod yet (phase Running)`)
	released := func(phase controlv1alpha1.TaskPhase) func(bs *controlv1alpha1.BatchSandbox) {
		return func(bs *controlv1alpha1.BatchSandbox) {
			bs.Spec.TaskResourcePolicyWhenCompleted = controlv1alpha1.TaskResourceRelease
			bs.Status.Tasks = []controlv1alpha1.TaskStatus{{Replica: 0, Phase: controlv1alpha1.TaskRunning}, {Replica: 1, Phase: phase}}
		}
	}
	textAnswer := func(code int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(code)
			_, _ = io.WriteString(w, body)
		}
	}
	tests := []struct {
		name  string
		query string
		// sandbox is what the resolver resolves to (with the execd's endpoint), and what the
		// reader reads when resolveErr fails the resolver.
		sandbox    *controlv1alpha1.BatchSandbox
		resolveErr error
		answer     http.HandlerFunc

		wantCode int
		// wantBody is the log passed on; wantMessage a part of the Status of an error.
		wantBody    string
		wantMessage string
		wantReason  metav1.StatusReason
		// wantQuery is the query execd got; nil: execd was not asked.
		wantQuery url.Values
	}{
		{
			name: "the log as execd sends it", sandbox: taskSandbox(nil),
			answer:   textAnswer(http.StatusOK, "epoch 1: loss 0.3\nepoch 2: loss 0.2\n"),
			wantCode: http.StatusOK, wantBody: "epoch 1: loss 0.3\nepoch 2: loss 0.2\n", wantQuery: url.Values{},
		},
		{
			name: "options become execd's parameters, and nothing else of the query does", sandbox: taskSandbox(nil),
			query:    "replica=1&follow=true&tailLines=5&limitBytes=1024&previous=1&path=/etc/passwd",
			answer:   textAnswer(http.StatusOK, "x\n"),
			wantCode: http.StatusOK, wantBody: "x\n",
			wantQuery: url.Values{
				execdapi.TaskLogFollowParam: {"true"}, execdapi.TaskLogPreviousParam: {"true"},
				execdapi.TaskLogTailLinesParam: {"5"}, execdapi.TaskLogLimitBytesParam: {"1024"},
			},
		},
		{
			name: "tailLines 0 is no lines, not no limit", sandbox: taskSandbox(nil), query: "tailLines=0",
			answer:   textAnswer(http.StatusOK, ""),
			wantCode: http.StatusOK, wantQuery: url.Values{execdapi.TaskLogTailLinesParam: {"0"}},
		},
		{
			name: "negative tailLines", sandbox: taskSandbox(nil), query: "tailLines=-1",
			wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid,
			wantMessage: `SandboxLogOptions.sandbox.kube-sandbox.io "batch" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0`,
		},
		{
			name: "zero limitBytes", sandbox: taskSandbox(nil), query: "limitBytes=0",
			wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid,
			wantMessage: "limitBytes: Invalid value: 0: must be greater than 0",
		},
		{
			name: "negative replica", sandbox: taskSandbox(nil), query: "replica=-1",
			wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid,
			wantMessage: "replica: Invalid value: -1: must be greater than or equal to 0",
		},
		{
			name: "malformed parameter", sandbox: taskSandbox(nil), query: "follow=maybe",
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: `query parameter "follow": "maybe" is not a boolean`,
		},
		{
			name: "replica out of range, as the resolver says", sandbox: taskSandbox(nil), query: "replica=5",
			resolveErr: apierrors.NewBadRequest(`sandbox "batch" has 2 replica(s); replica 5 does not exist`),
			wantCode:   http.StatusBadRequest, wantMessage: "replica 5 does not exist",
		},
		{
			name:     "a sandbox without a task",
			sandbox:  taskSandbox(func(bs *controlv1alpha1.BatchSandbox) { bs.Spec.TaskTemplate = nil }),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: `sandbox "batch" runs no task`,
		},
		{
			name:       "a sandbox without a task and without a pod",
			sandbox:    taskSandbox(func(bs *controlv1alpha1.BatchSandbox) { bs.Spec.TaskTemplate = nil }),
			resolveErr: notReady,
			wantCode:   http.StatusBadRequest, wantMessage: `sandbox "batch" runs no task`,
		},
		{
			name: "a pod released after its task", query: "replica=1",
			sandbox: taskSandbox(released(controlv1alpha1.TaskSucceeded)), resolveErr: notReady,
			wantCode: http.StatusGone, wantReason: metav1.StatusReasonGone,
			wantMessage: `the pod of replica 1 of sandbox "batch" was released when its task ended (Succeeded; taskResourcePolicyWhenCompleted is Release)`,
		},
		{
			name: "a replica waiting for its pod under Release", query: "replica=1",
			sandbox: taskSandbox(released(controlv1alpha1.TaskPending)), resolveErr: notReady,
			wantCode: http.StatusServiceUnavailable, wantMessage: "replica 1 has no pod yet",
		},
		{
			name: "a finished task whose pod is retained but not ready", query: "replica=1",
			sandbox: taskSandbox(func(bs *controlv1alpha1.BatchSandbox) {
				bs.Status.Tasks = []controlv1alpha1.TaskStatus{{Replica: 1, Phase: controlv1alpha1.TaskFailed}}
			}),
			resolveErr: notReady,
			wantCode:   http.StatusServiceUnavailable, wantMessage: "replica 1 has no pod yet",
		},
		{
			name: "a sandbox that does not exist", resolveErr: apierrors.NewNotFound(sandboxResource, "batch"),
			wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound,
		},
		{
			name: "no task in the pod yet", sandbox: taskSandbox(nil),
			answer:   textAnswer(http.StatusNotFound, "no task\n"),
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: `replica 0 of sandbox "batch" has no task log in pod batch-0: no task`, wantQuery: url.Values{},
		},
		{
			name: "no previous attempt", sandbox: taskSandbox(nil), query: "previous=true",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeError(w, apierrors.NewNotFound(schema.GroupResource{Resource: "task"}, "previous"))
			},
			wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: `replica 0 of sandbox "batch" has no log of a previous attempt of its task in pod batch-0`,
			wantQuery:   url.Values{execdapi.TaskLogPreviousParam: {"true"}},
		},
		{
			name: "execd's Status passes on", sandbox: taskSandbox(nil),
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeError(w, apierrors.NewConflict(schema.GroupResource{Resource: "task"}, "t", io.ErrUnexpectedEOF))
			},
			wantCode: http.StatusConflict, wantReason: metav1.StatusReasonConflict, wantMessage: "unexpected EOF", wantQuery: url.Values{},
		},
		{
			name: "execd's text error keeps its code", sandbox: taskSandbox(nil),
			answer:   textAnswer(http.StatusInternalServerError, "disk on fire\n"),
			wantCode: http.StatusInternalServerError, wantReason: metav1.StatusReasonInternalError,
			wantMessage: "the execd of pod batch-0 answered 500: disk on fire", wantQuery: url.Values{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			execd := newFakeExecd(t, tt.answer)
			var objs []client.Object
			if tt.sandbox != nil {
				objs = append(objs, tt.sandbox)
			}
			_, backend := newREST(t, objs...)
			r := &LogREST{
				Access: Access{
					Resolver:  &fakeResolver{ep: &sandboxconn.Endpoint{Target: execd.target, Pod: "batch-0", Sandbox: tt.sandbox}, err: tt.resolveErr},
					Transport: execdclient.NewTransport(execd.authority, execdclient.Options{ResponseHeaderTimeout: 5 * time.Second}),
				},
				Reader: backend,
			}
			srv := logServer(t, r)
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/log?"+tt.query, nil)
			req.Header.Set("Authorization", "Bearer the-callers")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantCode, body)
			}
			if tt.wantCode == http.StatusOK {
				if string(body) != tt.wantBody {
					t.Errorf("log %q, want %q", body, tt.wantBody)
				}
				if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
					t.Errorf("Content-Type %q, want text/plain", ct)
				}
			} else {
				status := metav1.Status{}
				if err := json.Unmarshal(body, &status); err != nil {
					t.Fatalf("not a Status: %s", body)
				}
				if !strings.Contains(status.Message, tt.wantMessage) {
					t.Errorf("message %q, want it to contain %q", status.Message, tt.wantMessage)
				}
				if tt.wantReason != "" && status.Reason != tt.wantReason {
					t.Errorf("reason %q, want %q", status.Reason, tt.wantReason)
				}
			}

			seen := execd.seen()
			if tt.wantQuery == nil {
				if len(seen) > 0 {
					t.Errorf("execd was asked %s", seen[0].URL)
				}
				return
			}
			if len(seen) != 1 {
				t.Fatalf("execd got %d requests, want 1", len(seen))
			}
			if diff := cmp.Diff(tt.wantQuery, seen[0].URL.Query()); diff != "" {
				t.Errorf("execd's query (-want +got):\n%s", diff)
			}
			if got := seen[0].Header.Get(execdapi.SandboxUIDHeader); got != "sandbox-uid" {
				t.Errorf("%s = %q, want the sandbox's UID", execdapi.SandboxUIDHeader, got)
			}
			if got := seen[0].Header.Get("Authorization"); got != "" {
				t.Errorf("the caller's Authorization reached execd: %q", got)
			}
		})
	}
}

// TestLogFollowStreams checks that what execd writes reaches the caller at once, not when a
// buffer fills or the task ends.
func TestLogFollowStreams(t *testing.T) {
	release := make(chan struct{})
	execd := newFakeExecd(t, func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-req.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "second\n")
	})
	bs := taskSandbox(nil)
	r := &LogREST{Access: Access{
		Resolver:  &fakeResolver{ep: &sandboxconn.Endpoint{Target: execd.target, Pod: "batch-0", Sandbox: bs}},
		Transport: execdclient.NewTransport(execd.authority, execdclient.Options{ResponseHeaderTimeout: 5 * time.Second}),
	}}
	srv := logServer(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/log?follow=true", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	lines := bufio.NewReader(resp.Body)
	first, err := lines.ReadString('\n')
	if err != nil || first != "first\n" {
		t.Fatalf("first line %q (%v), want it before the task writes more", first, err)
	}
	close(release)
	rest, err := io.ReadAll(lines)
	if err != nil || string(rest) != "second\n" {
		t.Errorf("the rest %q (%v), want %q", rest, err, "second\n")
	}
	if q := execd.seen()[0].URL.Query(); q.Get(execdapi.TaskLogFollowParam) != "true" {
		t.Errorf("execd's query %v, want follow", q)
	}
}

// TestLogRenews checks that reading the log counts as use for auto-renew, as a download does.
func TestLogRenews(t *testing.T) {
	now := time.Unix(1700000000, 0)
	bs := taskSandbox(func(bs *controlv1alpha1.BatchSandbox) {
		bs.Spec.ExpireTime = &metav1.Time{Time: now.Add(time.Minute)}
		bs.Spec.AutoRenew = &controlv1alpha1.AutoRenew{ExtendSeconds: 600}
	})
	_, backend := newREST(t, bs)
	execd := newFakeExecd(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	r := &LogREST{Access: Access{
		Resolver:  &fakeResolver{ep: &sandboxconn.Endpoint{Target: execd.target, Pod: "batch-0", Sandbox: bs}},
		Transport: execdclient.NewTransport(execd.authority, execdclient.Options{ResponseHeaderTimeout: 5 * time.Second}),
		Renewer:   NewRenewer(backend, testingclock.NewFakePassiveClock(now)),
	}}
	srv := logServer(t, r)
	resp, err := srv.Client().Get(srv.URL + "/log")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	got := &controlv1alpha1.BatchSandbox{}
	if err := backend.Get(context.Background(), client.ObjectKeyFromObject(bs), got); err != nil {
		t.Fatal(err)
	}
	if want := now.Add(10 * time.Minute); got.Spec.ExpireTime == nil || !got.Spec.ExpireTime.Time.Equal(want) {
		t.Errorf("expiry %v after reading the log, want %v", got.Spec.ExpireTime, want)
	}
}

func TestConvertURLValuesToSandboxLogOptions(t *testing.T) {
	tests := []struct {
		query   string
		want    sandboxv1alpha1.SandboxLogOptions
		wantErr string
	}{
		{query: "", want: sandboxv1alpha1.SandboxLogOptions{}},
		{query: "replica=3&follow=true&previous=false&tailLines=10&limitBytes=4096&other=x",
			want: sandboxv1alpha1.SandboxLogOptions{Replica: 3, Follow: true, TailLines: ptr.To[int64](10), LimitBytes: ptr.To[int64](4096)}},
		{query: "follow=1&previous=1&tailLines=0", want: sandboxv1alpha1.SandboxLogOptions{Follow: true, Previous: true, TailLines: ptr.To[int64](0)}},
		{query: "replica=a", wantErr: `query parameter "replica": "a" is not an integer`},
		{query: "previous=yes", wantErr: `query parameter "previous": "yes" is not a boolean`},
		{query: "tailLines=1.5", wantErr: `query parameter "tailLines": "1.5" is not an integer`},
		{query: "limitBytes=1Mi", wantErr: `query parameter "limitBytes": "1Mi" is not an integer`},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			in, _ := url.ParseQuery(tt.query)
			got := sandboxv1alpha1.SandboxLogOptions{}
			err := sandboxv1alpha1.ConvertURLValuesToSandboxLogOptions(&in, &got)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Errorf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLogQuietFollow checks that the response-header timeout of the transport bounds only the
// wait for execd's headers: a followed task that writes nothing for longer is not cut.
func TestLogQuietFollow(t *testing.T) {
	const headerTimeout = 100 * time.Millisecond
	execd := newFakeExecd(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		time.Sleep(3 * headerTimeout)
		_, _ = io.WriteString(w, "late\n")
	})
	r := &LogREST{Access: Access{
		Resolver:  &fakeResolver{ep: &sandboxconn.Endpoint{Target: execd.target, Pod: "batch-0", Sandbox: taskSandbox(nil)}},
		Transport: execdclient.NewTransport(execd.authority, execdclient.Options{ResponseHeaderTimeout: headerTimeout}),
	}}
	srv := logServer(t, r)
	resp, err := srv.Client().Get(srv.URL + "/log?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || err != nil || string(body) != "late\n" {
		t.Errorf("status %d, log %q (%v); want the late line", resp.StatusCode, body, err)
	}
}

// podServerCertificate is a fresh kube-sandbox CA and the serving certificate it issues to the
// execd of pod podName (UID podUID) of namespace ns, for the fake execd servers of these tests.
func podServerCertificate(t *testing.T, podUID, podName string) (*pki.Authority, tls.Certificate) {
	t.Helper()
	ca, err := pki.NewCA("kube-sandbox-ca@1", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a := pki.NewAuthority(nil)
	a.Set(ca, nil)
	key, err := pki.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	chain, _, err := a.IssuePodCertificate(key.Public(), podUID, "ns", podName)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(chain, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return a, cert
}
