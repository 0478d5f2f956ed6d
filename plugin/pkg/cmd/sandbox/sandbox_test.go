package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/utils/exec"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

type exitingExecutor struct{ code int }

func (e exitingExecutor) ExecuteWithContext(context.Context, *url.URL, *rest.Config, io.Reader, io.Writer, io.Writer, bool, remotecommand.TerminalSizeQueue) error {
	return utilexec.CodeExitError{Err: errors.New("command terminated with exit code 3"), Code: e.code}
}

// TestExitCode runs exec through the root command and prints its error with the function main
// uses: the remote command's exit code is the process's.
func TestExitCode(t *testing.T) {
	running := &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "sb", Namespace: cmdtesting.Namespace},
		Status:     sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseRunning},
	}
	tests := []struct {
		name     string
		args     []string
		wantMsg  string
		wantCode int
	}{
		{name: "remote exit code", args: []string{"exec", "sb", "--", "false"}, wantMsg: "command terminated with exit code 3\n", wantCode: 3},
		{name: "missing sandbox", args: []string{"exec", "nope", "--", "false"},
			wantMsg: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"nope\" not found\n", wantCode: 1},
		{name: "unknown flag", args: []string{"exec", "sb", "--bogus", "--", "false"},
			wantMsg: "error: unknown flag: --bogus\nSee 'kubectl sandbox exec -h' for help and examples\n", wantCode: 1},
		{name: "unknown command", args: []string{"frobnicate"},
			wantMsg: "error: unknown command \"frobnicate\" for \"kubectl sandbox\"\n", wantCode: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			streams, _, _, _ := genericiooptions.NewTestIOStreams()
			cmd := NewCmdSandboxWithFactory(cmdtesting.NewTestFactory(running), streams, exitingExecutor{code: 3})
			cmd.SetArgs(tt.args)
			err := cmd.ExecuteContext(context.Background())
			if err == nil {
				t.Fatal("no error")
			}
			var msg bytes.Buffer
			code := cmdutil.PrintError(&msg, err)
			if msg.String() != tt.wantMsg || code != tt.wantCode {
				t.Errorf("printed %q, exit code %d; want %q, %d", msg.String(), code, tt.wantMsg, tt.wantCode)
			}
		})
	}
}

// TestHelp checks that every command documents itself kubectl-style.
func TestHelp(t *testing.T) {
	streams, _, _, _ := genericiooptions.NewTestIOStreams()
	root := NewCmdSandbox(streams)
	for _, name := range []string{"create", "exec", "ps", "attach", "kill", "cp", "ls", "port-forward", "tasks", "logs", "get", "list", "wait", "renew", "network", "delete"} {
		t.Run(name, func(t *testing.T) {
			var sub *cobra.Command
			for _, c := range root.Commands() {
				if c.Name() == name {
					sub = c
				}
			}
			if sub == nil {
				t.Fatalf("no %s command", name)
			}
			if sub.Long == "" || sub.Example == "" || sub.Short == "" {
				t.Errorf("%s lacks Short, Long or Example", name)
			}
			if !strings.Contains(sub.Example, "kubectl sandbox "+name) {
				t.Errorf("examples of %s do not show 'kubectl sandbox %s':\n%s", name, name, sub.Example)
			}

			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			root := NewCmdSandbox(streams)
			root.SetArgs([]string{name, "--help"})
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			help := out.String()
			for _, want := range []string{sub.Long, "Examples:\n", "Options:\n", "Usage:\n  kubectl sandbox " + name, `Use "kubectl sandbox options"`} {
				if !strings.Contains(help, want) {
					t.Errorf("help of %s lacks %q:\n%s", name, want, help)
				}
			}
			if strings.Contains(help, "--kubeconfig") {
				t.Errorf("help of %s lists the global flags; they belong to 'options'", name)
			}
		})
	}
}

func TestGlobalFlags(t *testing.T) {
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	root := NewCmdSandbox(streams)
	root.SetArgs([]string{"options"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"-n, --namespace", "--context", "--kubeconfig", "--as ", "--as-group", "-s, --server", "--token", "-v, --v"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("global flags lack %q:\n%s", flag, out)
		}
	}
}

// apiServer is a minimal sandbox API: it lists sandboxes of any namespace and knows none by
// name, nor their subresources.
type apiServer struct {
	mu    sync.Mutex
	paths []string
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	s.paths = append(s.paths, req.Method+" "+req.URL.Path)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/"), "/")
	if len(parts) == 2 && parts[1] == "sandboxes" {
		list := sandboxv1alpha1.SandboxList{
			TypeMeta: metav1.TypeMeta{APIVersion: "sandbox.kube-sandbox.io/v1alpha1", Kind: "SandboxList"},
			Items:    []sandboxv1alpha1.Sandbox{{ObjectMeta: metav1.ObjectMeta{Name: "in-" + parts[0], Namespace: parts[0]}}},
		}
		_ = json.NewEncoder(w).Encode(list)
		return
	}
	name := parts[len(parts)-1]
	if len(parts) > 2 {
		name = parts[2]
	}
	status := apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), name).Status()
	status.APIVersion, status.Kind = "v1", "Status"
	w.WriteHeader(http.StatusNotFound)
	_ = json.NewEncoder(w).Encode(status)
}

// TestKubeconfig runs the real root command against an HTTP server through a kubeconfig file:
// the namespace comes from the context unless -n overrides it, and API errors read as kubectl's.
func TestKubeconfig(t *testing.T) {
	server := &apiServer{}
	srv := httptest.NewServer(server)
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "config")
	config := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: ` + srv.URL + `
users:
- name: u
  user:
    token: t
contexts:
- name: ctx
  context: {cluster: c, user: u, namespace: from-context}
current-context: ctx
`
	if err := os.WriteFile(kubeconfig, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		args     []string
		wantOut  string
		wantErr  string
		wantPath string
	}{
		{name: "context namespace", args: []string{"list", "-o", "name"},
			wantOut: "sandbox.sandbox.kube-sandbox.io/in-from-context\n", wantPath: "GET /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/from-context/sandboxes"},
		{name: "namespace flag", args: []string{"get", "-n", "other", "-o", "name"},
			wantOut: "sandbox.sandbox.kube-sandbox.io/in-other\n", wantPath: "GET /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/other/sandboxes"},
		{name: "not found", args: []string{"delete", "ghost"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n", wantPath: "GET /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/from-context/sandboxes/ghost"},
		{name: "renew posts to the subresource", args: []string{"renew", "ghost", "--for", "1h"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n", wantPath: "POST /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/from-context/sandboxes/ghost/renew"},
		{name: "wait for a missing sandbox", args: []string{"wait", "ghost", "-n", "other"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n", wantPath: "GET /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/other/sandboxes/ghost"},
		{name: "logs reads the subresource", args: []string{"logs", "ghost", "--replica", "1", "-f"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n", wantPath: "GET /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/from-context/sandboxes/ghost/log"},
		{name: "tasks reads the tasks subresource", args: []string{"tasks", "ghost"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n", wantPath: "GET /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/from-context/sandboxes/ghost/tasks"},
		{name: "ps reads the processes subresource", args: []string{"ps", "ghost"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n", wantPath: "GET /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/from-context/sandboxes/ghost/processes"},
		{name: "kill posts a signal", args: []string{"kill", "ghost", "p-abc"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n", wantPath: "POST /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/from-context/sandboxes/ghost/processes/p-abc/signal"},
		{name: "logs of a process", args: []string{"logs", "ghost", "--process", "p-abc"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n", wantPath: "GET /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/from-context/sandboxes/ghost/log"},
		{name: "ls lists files, not sandboxes", args: []string{"ls", "ghost", "dir"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n", wantPath: "GET /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/from-context/sandboxes/ghost/files/dir"},
		{name: "wait for the deletion of a missing sandbox", args: []string{"wait", "ghost", "--for=delete"},
			wantOut: "sandbox.sandbox.kube-sandbox.io/ghost condition met\n", wantPath: "GET /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/from-context/sandboxes/ghost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server.mu.Lock()
			server.paths = nil
			server.mu.Unlock()
			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			root := NewCmdSandbox(streams)
			root.SetArgs(append([]string{"--kubeconfig", kubeconfig}, tt.args...))
			err := root.ExecuteContext(context.Background())
			var msg bytes.Buffer
			if err != nil {
				cmdutil.PrintError(&msg, err)
			}
			if msg.String() != tt.wantErr {
				t.Errorf("error %q, want %q", msg.String(), tt.wantErr)
			}
			if out.String() != tt.wantOut {
				t.Errorf("output %q, want %q", out.String(), tt.wantOut)
			}
			server.mu.Lock()
			defer server.mu.Unlock()
			if len(server.paths) != 1 || server.paths[0] != tt.wantPath {
				t.Errorf("requests %v, want one to %s", server.paths, tt.wantPath)
			}
		})
	}
}
