package execd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientremotecommand "k8s.io/client-go/tools/remotecommand"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// claimServer is an unclaimed execd, as in an idle pool pod, with a files root.
type claimServer struct {
	srv   *httptest.Server
	h     *Handler
	files string
}

func startClaimServer(t *testing.T) *claimServer {
	t.Helper()
	s := &claimServer{files: t.TempDir()}
	if err := os.WriteFile(filepath.Join(s.files, "f"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(HandlerConfig{
		Executor: NewExecutor(nil), StreamIdleTimeout: time.Minute,
		FilesRoot: s.files, EntrypointStopGrace: 500 * time.Millisecond,
	}, newTestIdentity(t))
	if err != nil {
		t.Fatal(err)
	}
	s.h = h
	s.srv = serveTLS(t, h, h.identity)
	t.Cleanup(func() {
		h.StopSessions()
		h.StopClaimedEntrypoint()
		_ = h.Close()
	})
	return s
}

func newClaim(uid string) execdapi.ClaimRequest {
	return execdapi.ClaimRequest{SandboxUID: uid, Namespace: "team-a", Name: "box"}
}

// post sends a claim as identity; body is a string sent as is, or marshalled to JSON. It
// returns 0 when the TLS handshake fails.
func (s *claimServer) post(t *testing.T, identity string, body any) (int, string) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(testContext(t), http.MethodPost, s.srv.URL+execdapi.ClaimPath, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient(t, identity).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func (s *claimServer) mustClaim(t *testing.T, cr execdapi.ClaimRequest) execdapi.ClaimResponse {
	t.Helper()
	code, body := s.post(t, asController, cr)
	if code != http.StatusOK {
		t.Fatalf("claim: status %d (%s), want 200", code, body)
	}
	var resp execdapi.ClaimResponse
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("claim response %q: %v", body, err)
	}
	return resp
}

// execStatus is the status of a plain (not upgraded) exec request of sandbox-apiserver: 409
// while execd belongs to no sandbox, 400 (the upgrade is missing) once it does.
func (s *claimServer) execStatus(t *testing.T) int {
	t.Helper()
	u, _ := execURL(s.srv.URL, []string{"true"}, remotecommand.Options{Stdout: true})
	req, _ := http.NewRequestWithContext(testContext(t), http.MethodPost, u.String(), nil)
	resp, err := httpClient(t, asAPIServer).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// execs runs cmd as sandbox-apiserver and reports whether it ran (its marker exists).
func (s *claimServer) execs(t *testing.T) bool {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "ran")
	res := execVia(testContext(t), s.srv.URL, execRequest{cmd: []string{"touch", marker}})
	_, err := os.Stat(marker)
	if ran := err == nil; ran != (res.err == nil) {
		t.Fatalf("exec err %v, but ran = %v", res.err, ran)
	}
	return err == nil
}

func (s *claimServer) filesStatus(t *testing.T) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(testContext(t), http.MethodGet, s.srv.URL+FilesPath+"f", nil)
	resp, err := httpClient(t, asAPIServer).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// serves reports what execd serves sandbox-apiserver: "exec files" once it belongs to a
// sandbox, "" before.
func (s *claimServer) serves(t *testing.T) string {
	t.Helper()
	var got []string
	ran := s.execs(t)
	if status := s.execStatus(t); ran != (status != http.StatusConflict) {
		t.Fatalf("exec ran %v but a plain exec request got %d", ran, status)
	}
	if ran {
		got = append(got, "exec")
	}
	switch status := s.filesStatus(t); status {
	case http.StatusOK:
		got = append(got, "files")
	case http.StatusConflict:
	default:
		t.Fatalf("files status %d", status)
	}
	return strings.Join(got, " ")
}

// TestClaimGivesExecdToItsSandbox: an idle pool pod serves no exec and no files; a claim gives
// it to its sandbox, and requests meant for another sandbox are still refused.
func TestClaimGivesExecdToItsSandbox(t *testing.T) {
	s := startClaimServer(t)
	if got := s.serves(t); got != "" {
		t.Errorf("unclaimed execd serves %q, want nothing", got)
	}
	if _, ok := s.h.Claimed(); ok {
		t.Error("Claimed() before the claim")
	}
	if resp := s.mustClaim(t, newClaim(testSandbox.UID)); resp.SandboxUID != testSandbox.UID || resp.EntrypointPID != 0 {
		t.Errorf("response %+v, want sandbox uid-1 and no entrypoint", resp)
	}
	if got := s.serves(t); got != "exec files" {
		t.Errorf("claimed execd serves %q, want exec and files", got)
	}
	if sb, ok := s.h.Claimed(); !ok || sb != (Sandbox{UID: testSandbox.UID, Namespace: "team-a", Name: "box"}) {
		t.Errorf("Claimed() = %+v, %v", sb, ok)
	}
	for uid, want := range map[string]int{testSandbox.UID: http.StatusOK, "uid-2": http.StatusConflict} {
		req, _ := http.NewRequestWithContext(testContext(t), http.MethodGet, s.srv.URL+FilesPath+"f", nil)
		req.Header.Set(execdapi.SandboxUIDHeader, uid)
		resp, err := httpClient(t, asAPIServer).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("files for sandbox %s: %d, want %d", uid, resp.StatusCode, want)
		}
	}
}

// TestClaimIdempotent: repeating a claim answers the same and starts nothing; another sandbox
// gets 409 and changes nothing.
func TestClaimIdempotent(t *testing.T) {
	s := startClaimServer(t)
	starts := filepath.Join(t.TempDir(), "starts")
	first := newClaim(testSandbox.UID)
	first.Entrypoint = []string{"sh", "-c", fmt.Sprintf(`echo started >> %s; exec sleep 1000`, starts)}
	want := s.mustClaim(t, first)
	if want.SandboxUID != testSandbox.UID || want.EntrypointPID <= 0 {
		t.Fatalf("first claim answered %+v", want)
	}

	other := func(mutate func(*execdapi.ClaimRequest)) execdapi.ClaimRequest {
		cr := first
		mutate(&cr)
		return cr
	}
	tests := []struct {
		name     string
		identity string
		claim    execdapi.ClaimRequest
		wantCode int
		wantBody string
	}{
		{name: "same claim again", identity: asController, claim: first, wantCode: http.StatusOK},
		{name: "same sandbox, different entrypoint and env", identity: asController, claim: other(func(cr *execdapi.ClaimRequest) {
			cr.Entrypoint = []string{"touch", starts + ".other"}
			cr.Env = []execdapi.EnvVar{{Name: "X", Value: "y"}}
		}), wantCode: http.StatusOK},
		{name: "another sandbox", identity: asController, claim: other(func(cr *execdapi.ClaimRequest) { cr.SandboxUID = "uid-2" }),
			wantCode: http.StatusConflict, wantBody: "belongs to sandbox team-a/box (uid sandbox-uid-1)"},
		{name: "sandbox-apiserver may not claim", identity: asAPIServer, claim: first, wantCode: http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := s.post(t, tt.identity, tt.claim)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Fatalf("status %d (%q), want %d containing %q", code, body, tt.wantCode, tt.wantBody)
			}
			if code == http.StatusOK {
				var got execdapi.ClaimResponse
				if err := json.Unmarshal([]byte(body), &got); err != nil || got != want {
					t.Errorf("answer %+v (%v), want the first one %+v", got, err, want)
				}
			}
			if sb, _ := s.h.Claimed(); sb.UID != testSandbox.UID {
				t.Errorf("execd belongs to %+v, want the first claim's sandbox", sb)
			}
		})
	}

	// The entrypoint started once, and is still the one running.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		data, _ := os.ReadFile(starts)
		if string(data) == "started\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entrypoint starts: %q, want exactly one", data)
		}
	}
	if _, err := os.Stat(starts + ".other"); err == nil {
		t.Error("a repeated claim started its entrypoint")
	}
	if processGone(want.EntrypointPID) {
		t.Errorf("entrypoint %d is not running", want.EntrypointPID)
	}
}

// TestClaimOfADirectPod: a pod made for a sandbox belongs to it from the start; a claim for it
// answers 200 and one for another sandbox 409.
func TestClaimOfADirectPod(t *testing.T) {
	srv, _ := startServer(t)
	s := &claimServer{srv: srv}
	if resp := s.mustClaim(t, execdapi.ClaimRequest{SandboxUID: testSandbox.UID, Namespace: testSandbox.Namespace, Name: testSandbox.Name}); resp.SandboxUID != testSandbox.UID {
		t.Errorf("claim of its own sandbox answered %+v", resp)
	}
	if code, body := s.post(t, asController, newClaim("uid-2")); code != http.StatusConflict {
		t.Errorf("claim for another sandbox: %d %q, want 409", code, body)
	}
}

// TestClaimRefused: bad bodies and bad credentials are refused with a message, and leave
// execd unclaimed.
func TestClaimRefused(t *testing.T) {
	s := startClaimServer(t)
	marker := filepath.Join(t.TempDir(), "started")
	valid := newClaim(testSandbox.UID)
	valid.Entrypoint = []string{"touch", marker}
	with := func(mutate func(*execdapi.ClaimRequest)) execdapi.ClaimRequest {
		cr := valid
		cr.Env = []execdapi.EnvVar{{Name: "OK", Value: "v"}}
		mutate(&cr)
		return cr
	}
	env := func(name, value string) func(*execdapi.ClaimRequest) {
		return func(cr *execdapi.ClaimRequest) { cr.Env = append(cr.Env, execdapi.EnvVar{Name: name, Value: value}) }
	}
	validJSON, _ := json.Marshal(valid)
	c := asController

	tests := []struct {
		name     string
		identity string
		body     any
		wantCode int
		wantBody string
	}{
		{name: "no certificate", identity: asNobody, body: valid, wantCode: 0},
		{name: "certificate of another CA", identity: asStranger, body: valid, wantCode: 0},
		{name: "sandbox-apiserver", identity: asAPIServer, body: valid, wantCode: http.StatusForbidden},
		{name: "someone else of our CA", identity: asSomeone, body: valid, wantCode: http.StatusForbidden},
		{name: "empty body", identity: c, body: "", wantCode: http.StatusBadRequest, wantBody: "body is empty"},
		{name: "not JSON", identity: c, body: "sandboxUID=x", wantCode: http.StatusBadRequest, wantBody: "not a JSON claim"},
		{name: "wrong JSON type", identity: c, body: `{"sandboxUID": 5}`, wantCode: http.StatusBadRequest, wantBody: "not a JSON claim"},
		{name: "two objects", identity: c, body: string(validJSON) + string(validJSON), wantCode: http.StatusBadRequest, wantBody: "unexpected data"},
		{name: "null", identity: c, body: "null", wantCode: http.StatusBadRequest, wantBody: "sandboxUID is required"},
		{name: "too large", identity: c, body: `{"name": "` + strings.Repeat("x", MaxClaimBytes) + `"}`, wantCode: http.StatusRequestEntityTooLarge, wantBody: "exceeds"},
		{name: "no sandbox UID", identity: c, body: with(func(cr *execdapi.ClaimRequest) { cr.SandboxUID = "" }), wantCode: http.StatusBadRequest, wantBody: "sandboxUID is required"},
		{name: "no namespace", identity: c, body: with(func(cr *execdapi.ClaimRequest) { cr.Namespace = "" }), wantCode: http.StatusBadRequest, wantBody: "namespace is required"},
		{name: "no name", identity: c, body: with(func(cr *execdapi.ClaimRequest) { cr.Name = "" }), wantCode: http.StatusBadRequest, wantBody: "name is required"},
		{name: "name with a newline", identity: c, body: with(func(cr *execdapi.ClaimRequest) { cr.Name = "a\nb" }), wantCode: http.StatusBadRequest, wantBody: "name contains whitespace"},
		{name: "empty entrypoint command", identity: c, body: with(func(cr *execdapi.ClaimRequest) { cr.Entrypoint = []string{"", "x"} }), wantCode: http.StatusBadRequest, wantBody: "entrypoint[0]"},
		{name: "NUL in an entrypoint argument", identity: c, body: with(func(cr *execdapi.ClaimRequest) { cr.Entrypoint = []string{"touch", "a\x00b"} }), wantCode: http.StatusBadRequest, wantBody: "entrypoint[1] contains a NUL"},
		{name: "empty env name", identity: c, body: with(env("", "v")), wantCode: http.StatusBadRequest, wantBody: "env[1]: the name is empty"},
		{name: "env name with =", identity: c, body: with(env("A=B", "v")), wantCode: http.StatusBadRequest, wantBody: "contains '='"},
		{name: "env sets SANDBOX_NAME", identity: c, body: with(env(execdapi.EnvSandboxName, "v")), wantCode: http.StatusBadRequest, wantBody: "SANDBOX_NAME may not be set: kube-sandbox sets it"},
		{name: "env sets SANDBOX_NAMESPACE", identity: c, body: with(env(execdapi.EnvSandboxNamespace, "v")), wantCode: http.StatusBadRequest, wantBody: "SANDBOX_NAMESPACE may not be set"},
		{name: "env sets SANDBOX_UID", identity: c, body: with(env(execdapi.EnvSandboxUID, "v")), wantCode: http.StatusBadRequest, wantBody: "SANDBOX_UID may not be set"},
		{name: "env sets the client CA", identity: c, body: with(env(execdapi.EnvClientCA, "v")), wantCode: http.StatusBadRequest, wantBody: execdapi.EnvClientCA + " may not be set"},
		{name: "NUL in an env value", identity: c, body: with(env("SECRET", "hidden\x00value")), wantCode: http.StatusBadRequest, wantBody: `value of "SECRET" contains a NUL`},
		{name: "every problem at once", identity: c, body: execdapi.ClaimRequest{Env: []execdapi.EnvVar{{}}}, wantCode: http.StatusBadRequest,
			wantBody: "sandboxUID is required\nnamespace is required\nname is required\nenv[0]: the name is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := s.post(t, tt.identity, tt.body)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Errorf("status %d (%q), want %d containing %q", code, body, tt.wantCode, tt.wantBody)
			}
			if strings.Contains(body, "hidden") {
				t.Errorf("answer leaks an env value: %q", body)
			}
			if got := s.serves(t); got != "" {
				t.Errorf("serves %q, want execd still unclaimed", got)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("a refused claim started its entrypoint")
			}
		})
	}
	t.Run("wrong method", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(testContext(t), http.MethodGet, s.srv.URL+execdapi.ClaimPath, nil)
		resp, err := httpClient(t, asController).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("GET status %d, want 405", resp.StatusCode)
		}
	})
	t.Run("a valid claim still succeeds", func(t *testing.T) {
		s.mustClaim(t, valid)
		if got := s.serves(t); got != "exec files" {
			t.Errorf("serves %q, want exec and files", got)
		}
	})
}

// execEnv runs cmd as sandbox-apiserver with extra exec query parameters.
func execEnv(t *testing.T, baseURL string, cmd []string, params url.Values) string {
	t.Helper()
	u, err := execURL(baseURL, cmd, remotecommand.Options{Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for k, v := range params {
		q[k] = v
	}
	u.RawQuery = q.Encode()
	exec, err := clientremotecommand.NewSPDYExecutor(restConfigFor(baseURL, asAPIServer), http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := exec.StreamWithContext(testContext(t), clientremotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
		t.Fatalf("exec: %v (stderr %q)", err, errOut.String())
	}
	return out.String()
}

// TestClaimEnv: the claim's env and the sandbox's identity reach every later exec, below the
// exec's own env.
func TestClaimEnv(t *testing.T) {
	s := startClaimServer(t)
	cr := newClaim(testSandbox.UID)
	cr.Env = []execdapi.EnvVar{{Name: "FOO", Value: "bar baz"}, {Name: "EMPTY", Value: ""}, {Name: "DUP", Value: "1"}, {Name: "DUP", Value: "2"}}
	s.mustClaim(t, cr)
	script := []string{"sh", "-c", `echo "$FOO|$SANDBOX_NAME|$SANDBOX_NAMESPACE|${EMPTY-unset}|$DUP"`}
	tests := []struct {
		name   string
		params url.Values
		want   string
	}{
		{name: "claim env", want: "bar baz|box|team-a||2\n"},
		{name: "exec env wins", params: url.Values{EnvParam: {"FOO=mine", "SANDBOX_NAME=other"}}, want: "mine|other|team-a||2\n"},
		{name: "tty-less exec with a working dir", params: url.Values{WorkingDirParam: {s.files}}, want: "bar baz|box|team-a||2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := execEnv(t, s.srv.URL, script, tt.params); got != tt.want {
				t.Errorf("output %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("tty exec", func(t *testing.T) {
		res := execVia(testContext(t), s.srv.URL, execRequest{cmd: []string{"sh", "-c", "echo $FOO-$SANDBOX_NAME"}, tty: true})
		if res.err != nil || strings.TrimSpace(res.stdout) != "bar baz-box" {
			t.Errorf("output %q (err %v), want %q", res.stdout, res.err, "bar baz-box")
		}
	})
}

func waitFile(t *testing.T, path string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if data, err := os.ReadFile(path); err == nil && bytes.HasSuffix(data, []byte("\n")) {
			return string(data)
		}
	}
	t.Fatalf("%s was not written", path)
	return ""
}

// TestClaimEntrypoint: the entrypoint runs with the claim's env in execd's working directory
// with no stdin, and execd keeps serving after it exits.
func TestClaimEntrypoint(t *testing.T) {
	s := startClaimServer(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	cr := newClaim(testSandbox.UID)
	cr.Env = []execdapi.EnvVar{{Name: "FOO", Value: "bar"}}
	// cat returns at once only if stdin is /dev/null.
	cr.Entrypoint = []string{"sh", "-c", `cat; echo "$FOO $SANDBOX_NAME $SANDBOX_NAMESPACE $(pwd)" > "$0.tmp" && mv "$0.tmp" "$0"; exit 3`, marker}
	resp := s.mustClaim(t, cr)
	if got, want := waitFile(t, marker), "bar box team-a "+mustGetwd(t)+"\n"; got != want {
		t.Errorf("entrypoint wrote %q, want %q", got, want)
	}
	waitGone(t, resp.EntrypointPID)
	time.Sleep(100 * time.Millisecond)
	if got := s.serves(t); got != "exec files" {
		t.Errorf("after the entrypoint exited, serves %q", got)
	}
}

// TestClaimEntrypointStartFailure: a claim whose entrypoint cannot start is refused and
// leaves execd unclaimed.
func TestClaimEntrypointStartFailure(t *testing.T) {
	notExecutable := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		entrypoint []string
		wantBody   string
	}{
		{name: "not found", entrypoint: []string{"no-such-entrypoint-for-execd"}, wantBody: "no-such-entrypoint-for-execd"},
		{name: "missing path", entrypoint: []string{"/no/such/entrypoint"}, wantBody: "no such file"},
		{name: "not executable", entrypoint: []string{notExecutable}, wantBody: "permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startClaimServer(t)
			cr := newClaim(testSandbox.UID)
			cr.Entrypoint = tt.entrypoint
			code, body := s.post(t, asController, cr)
			if code != http.StatusUnprocessableEntity || !strings.Contains(body, "starting the entrypoint") || !strings.Contains(body, tt.wantBody) {
				t.Errorf("status %d (%q), want 422 explaining %q", code, body, tt.wantBody)
			}
			if got := s.serves(t); got != "" {
				t.Errorf("serves %q, want execd unclaimed", got)
			}
			// Fixed, the claim goes through.
			cr.Entrypoint = []string{"true"}
			if resp := s.mustClaim(t, cr); resp.EntrypointPID <= 0 {
				t.Errorf("response %+v, want an entrypoint pid", resp)
			}
		})
	}
}

// processGroup returns pid's process group.
func processGroup(t *testing.T, pid int) int {
	t.Helper()
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		t.Fatalf("getpgid(%d): %v", pid, err)
	}
	return pgid
}

// TestClaimedEntrypointStop: on shutdown the entrypoint's process group gets SIGTERM, and
// SIGKILL after the grace period.
func TestClaimedEntrypointStop(t *testing.T) {
	tests := []struct {
		name   string
		script string // $0 is a file it may write
		// wantFile is what the script wrote to $0 once stopped ("" for nothing).
		wantFile    string
		minDuration time.Duration
	}{
		{name: "exits on SIGTERM", script: `trap 'echo term > "$0"; exit 0' TERM; echo $$ > "$0.child"; while :; do sleep 0.05; done`, wantFile: "term\n"},
		{name: "ignores SIGTERM and is killed", script: `trap '' TERM; echo $$ > "$0.child"; while :; do sleep 0.05; done`, minDuration: 500 * time.Millisecond},
		// The entrypoint exits on SIGTERM at once; what it left behind ignores SIGTERM.
		{name: "what it started is killed too", script: `sh -c "trap '' TERM; exec sleep 1000" & echo $! > "$0.child"; wait`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startClaimServer(t)
			file := filepath.Join(t.TempDir(), "file")
			cr := newClaim(testSandbox.UID)
			cr.Entrypoint = []string{"sh", "-c", tt.script, file}
			resp := s.mustClaim(t, cr)
			child, err := strconv.Atoi(strings.TrimSpace(waitFile(t, file+".child")))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
			if pgid := processGroup(t, resp.EntrypointPID); pgid != resp.EntrypointPID {
				t.Errorf("entrypoint %d is in process group %d, want its own", resp.EntrypointPID, pgid)
			}
			time.Sleep(100 * time.Millisecond) // let sh install its trap

			start := time.Now()
			s.h.StopClaimedEntrypoint()
			took := time.Since(start)
			if !processGone(resp.EntrypointPID) {
				t.Errorf("entrypoint %d still running", resp.EntrypointPID)
			}
			waitGone(t, child)
			if took < tt.minDuration || took > tt.minDuration+5*time.Second {
				t.Errorf("stopping took %s, want at least %s and not much more", took, tt.minDuration)
			}
			if tt.wantFile != "" {
				if data, _ := os.ReadFile(file); string(data) != tt.wantFile {
					t.Errorf("entrypoint wrote %q, want %q", data, tt.wantFile)
				}
			}
			if code, body := s.post(t, asController, cr); code != http.StatusServiceUnavailable {
				t.Errorf("claim after the stop: status %d (%q), want 503", code, body)
			}
		})
	}
}

func TestClaimMetrics(t *testing.T) {
	s := startClaimServer(t)
	s.post(t, asAPIServer, newClaim(testSandbox.UID))
	s.post(t, asController, "{")
	s.mustClaim(t, newClaim(testSandbox.UID))
	s.mustClaim(t, newClaim(testSandbox.UID))
	s.post(t, asController, newClaim("uid-2"))
	req, _ := http.NewRequestWithContext(testContext(t), http.MethodGet, s.srv.URL+MetricsPath, nil)
	resp, err := httpClient(t, asController).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	body := string(data)
	for _, want := range []string{
		`sandbox_execd_claims_total{result="claimed"} 1`,
		`sandbox_execd_claims_total{result="repeated"} 1`,
		`sandbox_execd_claims_total{result="conflict"} 1`,
		`sandbox_execd_claims_total{result="invalid"} 1`,
		`sandbox_execd_requests_total{code="403",endpoint="claim"} 1`,
		`sandbox_execd_claims_total{result="failed"} 0`,
		`sandbox_execd_requests_total{code="200",endpoint="claim"} 2`,
		`sandbox_execd_requests_total{code="409",endpoint="claim"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

// TestServeClaim claims a Serve without an entrypoint, as in a pool pod: the claimed
// entrypoint gets SIGTERM when Serve shuts down, and Serve still exits 0.
func TestServeClaim(t *testing.T) {
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	addr, health := freeAddr(t), freeAddr(t)
	done := make(chan int, 1)
	go func() {
		code, err := Serve(ctx, ServeConfig{ListenAddr: addr, HealthListenAddr: health, ClientCAs: testCA().pem}, nil)
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
		done <- code
	}()
	waitHealthy(t, health)
	s := &claimServer{srv: &httptest.Server{URL: "https://" + addr}}
	file := filepath.Join(t.TempDir(), "file")
	cr := newClaim(testSandbox.UID)
	cr.Entrypoint = []string{"sh", "-c", `trap 'echo term > "$0"; exit 0' TERM; echo ready > "$0.ready"; while :; do sleep 0.05; done`, file}
	resp := s.mustClaim(t, cr)
	waitFile(t, file+".ready")
	if res := execVia(testContext(t), s.srv.URL, execRequest{cmd: []string{"sh", "-c", "echo $SANDBOX_NAME"}}); res.err != nil || res.stdout != "box\n" {
		t.Errorf("exec: %q (%v), want the sandbox's name", res.stdout, res.err)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("Serve returned %d, want 0", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return")
	}
	if data, _ := os.ReadFile(file); string(data) != "term\n" {
		t.Errorf("entrypoint wrote %q, want it stopped by SIGTERM", data)
	}
	if !processGone(resp.EntrypointPID) {
		t.Errorf("entrypoint %d still running", resp.EntrypointPID)
	}
}

// TestServeClaimAsPID1 claims an execd that is PID 1 of a PID namespace, as in a pool pod: the
// reaper must leave the claimed entrypoint's exit status to execd, and reap its orphans.
func TestServeClaimAsPID1(t *testing.T) {
	cmd, addr, output, exited := startServeInPIDNamespace(t)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	s := &claimServer{srv: &httptest.Server{URL: "https://" + addr}}
	cr := newClaim(testSandbox.UID)
	cr.Entrypoint = []string{"sh", "-c", "sleep 0.1 & echo entrypoint of $SANDBOX_NAME; exit 6"}
	resp := s.mustClaim(t, cr)

	want := fmt.Sprintf(`"Claimed entrypoint exited" pid=%d exitCode=6`, resp.EntrypointPID)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(output.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("execd's output lacks %q:\n%s", want, output.String())
		}
	}
	if !strings.Contains(output.String(), "entrypoint of box\n") {
		t.Errorf("the entrypoint's output is not execd's:\n%s", output.String())
	}
	// No zombies: the entrypoint's orphan was reaped.
	list := []string{"sh", "-c", `for f in /proc/[0-9]*/stat; do cat "$f" 2>/dev/null; echo; done`}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		res := execVia(testContext(t), s.srv.URL, execRequest{cmd: list})
		if res.err != nil {
			t.Fatalf("listing processes: %v", res.err)
		}
		zombie := false
		for line := range strings.Lines(res.stdout) {
			fields := strings.Fields(line[strings.LastIndexByte(line, ')')+1:])
			zombie = zombie || len(fields) > 0 && fields[0] == "Z"
		}
		if !zombie {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("zombies remain:\n%s", res.stdout)
		}
	}
	// From inside: unshare ignores SIGTERM.
	_ = execVia(testContext(t), s.srv.URL, execRequest{cmd: []string{"kill", "-TERM", "1"}})
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Errorf("execd exited with %v, want 0; output:\n%s", err, output.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("execd did not exit; output:\n%s", output.String())
	}
}

// startServeInPIDNamespace starts `sandbox-execd serve` (this test binary) as PID 1 of a new PID
// namespace under `unshare --kill-child`, with the test CA as its client CA, and waits until it
// answers on the returned address. It skips when PID namespaces are not available. exited
// receives the result of cmd.Wait (a test may put it back for its cleanup).
func startServeInPIDNamespace(t *testing.T) (cmd *exec.Cmd, addr string, output *lockedBuffer, exited chan error) {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare not available")
	}
	if out, err := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot create a PID namespace: %v %s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr, health := freeAddr(t), freeAddr(t)
	cmd = exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--kill-child", self, "serve", "--listen", addr,
		"--health-listen", health, "--state-dir", "")
	cmd.Env = append(os.Environ(), runMainEnv+"=1", execdapi.EnvClientCA+"="+string(testCA().pem))
	output = &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = output, output
	cmd.WaitDelay = 5 * time.Second // in case something in the namespace keeps the output open
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitHealthy(t, health)
	return cmd, addr, output, done
}
