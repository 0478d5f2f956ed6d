package runcode

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
)

// contextsServer answers the contexts subresource as sandbox-apiserver does: a Table when one
// is asked for, the context made or deleted otherwise; it records each request as
// "METHOD PATH?QUERY BODY".
func contextsServer(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	nb := sandboxv1alpha1.SandboxCodeContext{
		TypeMeta:   metav1.TypeMeta{APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxCodeContext"},
		ObjectMeta: metav1.ObjectMeta{Name: "nb", Namespace: cmdtesting.Namespace},
		Spec:       sandboxv1alpha1.SandboxCodeContextSpec{Replica: 1, Language: "python"},
		Status:     sandboxv1alpha1.SandboxCodeContextStatus{Phase: sandboxv1alpha1.CodeContextIdle, Pod: "sb-1", PID: 70},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		mu.Lock()
		seen = append(seen, strings.TrimSpace(req.Method+" "+req.URL.Path+"?"+req.URL.RawQuery+" "+string(body)))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case req.Method == http.MethodGet && strings.Contains(req.Header.Get("Accept"), "as=Table"):
			row, _ := json.Marshal(&metav1.PartialObjectMetadata{ObjectMeta: nb.ObjectMeta})
			_ = json.NewEncoder(w).Encode(&metav1.Table{
				TypeMeta:          metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"},
				ColumnDefinitions: []metav1.TableColumnDefinition{{Name: "ID", Type: "string"}, {Name: "Phase", Type: "string"}, {Name: "Pod", Type: "string", Priority: 1}},
				Rows:              []metav1.TableRow{{Cells: []any{"nb", "Idle", "sb-1"}, Object: runtimeRaw(row)}},
			})
		case req.Method == http.MethodDelete:
			dead := nb
			dead.Status.Phase = sandboxv1alpha1.CodeContextDead
			_ = json.NewEncoder(w).Encode(&dead)
		case req.Method == http.MethodPost:
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(&nb)
		default:
			_ = json.NewEncoder(w).Encode(&sandboxv1alpha1.SandboxCodeContextList{Items: []sandboxv1alpha1.SandboxCodeContext{nb}})
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

func TestContexts(t *testing.T) {
	const path = "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/sb/contexts"
	tests := []struct {
		name     string
		args     []string
		wantOut  string
		wantErr  string
		wantSeen []string
	}{
		{name: "list", args: []string{"sb"}, wantOut: "ID    PHASE\nnb    Idle\n",
			wantSeen: []string{"GET " + path + "?includeObject=None"}},
		{name: "list wide of a replica", args: []string{"sb", "--replica", "1", "-o", "wide", "--no-headers"}, wantOut: "nb    Idle   sb-1\n",
			wantSeen: []string{"GET " + path + "?includeObject=None&replica=1"}},
		{name: "create", args: []string{"sb", "--create", "nb", "--replica", "1", "--workdir", "/work"},
			wantOut:  "code context nb of sandbox \"sb\" made (replica 1, Idle)\n",
			wantSeen: []string{"POST " + path + "? " + `{"kind":"SandboxCodeContext","apiVersion":"sandbox.kube-sandbox.io/v1alpha1","metadata":{"name":"nb"},"spec":{"replica":1,"workingDir":"/work"},"status":{}}`}},
		{name: "delete", args: []string{"sb", "--delete", "nb", "--replica", "1"},
			wantOut:  "code context nb of sandbox \"sb\" deleted (replica 1, Dead)\n",
			wantSeen: []string{"DELETE " + path + "/nb?replica=1"}},
		{name: "create and delete", args: []string{"sb", "--create", "a", "--delete", "b"}, wantErr: "--create and --delete exclude each other"},
		{name: "workdir without create", args: []string{"sb", "--workdir", "/w"}, wantErr: "--workdir is for --create"},
		{name: "no name", args: []string{}, wantErr: "contexts takes one sandbox NAME"},
		{name: "bad output", args: []string{"sb", "-o", "name"}, wantErr: "unknown output format"},
		{name: "negative replica", args: []string{"sb", "--replica", "-2"}, wantErr: "--replica must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, seen := contextsServer(t)
			out := &bytes.Buffer{}
			cmd := NewCmdContexts(cmdtesting.NewServerFactory(srv.URL), genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: io.Discard})
			cmd.SetArgs(tt.args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			err := cmd.Execute()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tt.wantErr)
				}
				if len(seen()) != 0 {
					t.Errorf("a refused command asked the server: %v", seen())
				}
				return
			}
			if out.String() != tt.wantOut {
				t.Errorf("stdout %q, want %q", out.String(), tt.wantOut)
			}
			if diff := cmp.Diff(tt.wantSeen, seen()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

func runtimeRaw(data []byte) runtime.RawExtension { return runtime.RawExtension{Raw: data} }
