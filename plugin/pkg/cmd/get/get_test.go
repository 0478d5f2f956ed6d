package get

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func testSandboxes() []*sandboxv1alpha1.Sandbox {
	return []*sandboxv1alpha1.Sandbox{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "alpha", Labels: map[string]string{"team": "ml"},
				CreationTimestamp: metav1.NewTime(now.Add(-5 * time.Minute))},
			Spec: sandboxv1alpha1.SandboxSpec{Replicas: ptr.To[int32](2), Template: template("python:3.13-slim"), TimeoutSeconds: ptr.To[int64](1800),
				NetworkPolicy: &sandboxv1alpha1.SandboxNetworkPolicy{Egress: []sandboxv1alpha1.SandboxEgressRule{
					{Action: "Allow", To: "pypi.org"}, {Action: "Allow", To: "*.pythonhosted.org"},
				}}},
			Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseRunning, Replicas: 2, Ready: 2,
				ExpiresAt: ptr.To(metav1.NewTime(now.Add(25 * time.Minute))),
				Pods: []sandboxv1alpha1.SandboxPodStatus{
					{Replica: 0, Name: "alpha-a", IP: "10.0.0.7", NodeName: "node-1", Ready: true},
					{Replica: 1, Name: "alpha-b", IP: "10.0.0.8", NodeName: "node-2", Ready: true},
				}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "beta", CreationTimestamp: metav1.NewTime(now.Add(-3 * time.Hour))},
			Spec:       sandboxv1alpha1.SandboxSpec{Template: template("busybox"), TimeoutSeconds: ptr.To[int64](10800)},
			Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseExpired, Replicas: 1,
				ExpiresAt: ptr.To(metav1.NewTime(now.Add(-10 * time.Second))),
				Pods:      []sandboxv1alpha1.SandboxPodStatus{{Replica: 0, Name: "beta-a"}},
			},
		},
		{
			// A batch from a pool that the controller has not reported on yet: Pending, as the
			// server shows an empty phase.
			ObjectMeta: metav1.ObjectMeta{Name: "gamma", CreationTimestamp: metav1.NewTime(now.Add(-49 * time.Hour))},
			Spec: sandboxv1alpha1.SandboxSpec{Replicas: ptr.To[int32](3), PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: "python"},
				TaskTemplate: &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"true"}}},
			Status: sandboxv1alpha1.SandboxStatus{TaskSucceeded: 1, TaskFailed: 1},
		},
	}
}

func template(image string) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: image}}}}
}

// newServer serves testSandboxes, its tables measured at now.
func newServer(t *testing.T) *sandboxserver.Server {
	t.Helper()
	srv := sandboxserver.New(t, cmdtesting.Namespace)
	srv.Now = func() time.Time { return now }
	for _, sb := range testSandboxes() {
		srv.Add(sb)
	}
	return srv
}

func TestGet(t *testing.T) {
	const (
		collection = sandboxserver.Prefix + cmdtesting.Namespace + "/sandboxes"
		tableQuery = "includeObject=Metadata"
	)
	tests := []struct {
		name       string
		list       bool
		args       []string
		wantOut    string
		wantErrOut string
		wantErr    string
		// wantRequests are the path and query of each request; a table's ask for it in Accept.
		wantRequests []string
		wantTable    bool
	}{
		{
			name: "the server's table of the namespace",
			wantOut: "" +
				"NAME    PHASE     READY   POOL     EXPIRES   AGE\n" +
				"alpha   Running   2/2     <none>   25m       5m\n" +
				"beta    Expired   0/1     <none>   expired   3h\n" +
				"gamma   Pending   0/3     python   <none>    2d1h\n",
			wantRequests: []string{collection + "?" + tableQuery},
			wantTable:    true,
		},
		{
			name: "list is get without names",
			list: true,
			wantOut: "" +
				"NAME    PHASE     READY   POOL     EXPIRES   AGE\n" +
				"alpha   Running   2/2     <none>   25m       5m\n" +
				"beta    Expired   0/1     <none>   expired   3h\n" +
				"gamma   Pending   0/3     python   <none>    2d1h\n",
			wantRequests: []string{collection + "?" + tableQuery},
			wantTable:    true,
		},
		{
			name: "wide shows the server's wide columns, TASKS too",
			args: []string{"-o", "wide"},
			wantOut: "" +
				"NAME    PHASE     READY   POOL     EXPIRES   AGE    IMAGE              POD       NODE     EGRESS          TASKS\n" +
				"alpha   Running   2/2     <none>   25m       5m     python:3.13-slim   alpha-a   node-1   deny, 2 rules   <none>\n" +
				"beta    Expired   0/1     <none>   expired   3h     busybox            beta-a    <none>   default         <none>\n" +
				"gamma   Pending   0/3     python   <none>    2d1h   <none>             <none>    <none>   default         1/3 (1 failed)\n",
			wantRequests: []string{collection + "?" + tableQuery},
			wantTable:    true,
		},
		{
			name: "all namespaces: the namespace from the rows' metadata",
			list: true,
			args: []string{"-A", "--no-headers"},
			wantOut: "" +
				"test   alpha   Running   2/2   <none>   25m       5m\n" +
				"test   beta    Expired   0/1   <none>   expired   3h\n" +
				"test   gamma   Pending   0/3   python   <none>    2d1h\n",
			wantRequests: []string{sandboxserver.AllNamespacesPath + "?" + tableQuery},
			wantTable:    true,
		},
		{
			name: "selector, and labels from the rows' metadata",
			args: []string{"-l", "team=ml", "--show-labels"},
			wantOut: "" +
				"NAME    PHASE     READY   POOL     EXPIRES   AGE   LABELS\n" +
				"alpha   Running   2/2     <none>   25m       5m    team=ml\n",
			wantRequests: []string{collection + "?" + tableQuery + "&labelSelector=team%3Dml"},
			wantTable:    true,
		},
		{
			name:         "one by name",
			args:         []string{"beta"},
			wantOut:      "NAME   PHASE     READY   POOL     EXPIRES   AGE\nbeta   Expired   0/1     <none>   expired   3h\n",
			wantRequests: []string{collection + "/beta?" + tableQuery},
			wantTable:    true,
		},
		{
			name: "names in one table, in their order",
			args: []string{"gamma", "alpha"},
			wantOut: "" +
				"NAME    PHASE     READY   POOL     EXPIRES   AGE\n" +
				"gamma   Pending   0/3     python   <none>    2d1h\n" +
				"alpha   Running   2/2     <none>   25m       5m\n",
			wantRequests: []string{collection + "/gamma?" + tableQuery, collection + "/alpha?" + tableQuery},
			wantTable:    true,
		},
		{
			name:         "names",
			args:         []string{"-o", "name"},
			wantOut:      "sandbox.sandbox.kube-sandbox.io/alpha\nsandbox.sandbox.kube-sandbox.io/beta\nsandbox.sandbox.kube-sandbox.io/gamma\n",
			wantRequests: []string{collection + "?"},
		},
		{
			name:         "jsonpath",
			args:         []string{"alpha", "-o", "jsonpath={.status.pods[*].ip}"},
			wantOut:      "10.0.0.7 10.0.0.8",
			wantRequests: []string{collection + "/alpha?"},
		},
		{
			name:         "jsonpath of the expiry",
			args:         []string{"alpha", "-o", "jsonpath={.spec.timeoutSeconds} {.status.expiresAt}"},
			wantOut:      "1800 2026-05-01T12:25:00Z",
			wantRequests: []string{collection + "/alpha?"},
		},
		{
			name:         "yaml",
			args:         []string{"beta", "-o", "yaml"},
			wantOut:      "apiVersion: sandbox.kube-sandbox.io/v1alpha1\nkind: Sandbox\n",
			wantRequests: []string{collection + "/beta?"},
		},
		{
			name:         "nothing found",
			args:         []string{"-l", "team=none"},
			wantErrOut:   "No resources found in test namespace.\n",
			wantRequests: []string{collection + "?" + tableQuery + "&labelSelector=team%3Dnone"},
			wantTable:    true,
		},
		{
			name:         "nothing found in any namespace",
			args:         []string{"-A", "-l", "team=none"},
			wantErrOut:   "No resources found\n",
			wantRequests: []string{sandboxserver.AllNamespacesPath + "?" + tableQuery + "&labelSelector=team%3Dnone"},
			wantTable:    true,
		},
		{
			name:         "found and missing names",
			args:         []string{"alpha", "nope", "-o", "name"},
			wantOut:      "sandbox.sandbox.kube-sandbox.io/alpha\n",
			wantErr:      "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"nope\" not found\n",
			wantRequests: []string{collection + "/alpha?", collection + "/nope?"},
		},
		{
			name:         "found and missing names in a table",
			args:         []string{"nope", "beta"},
			wantOut:      "NAME   PHASE     READY   POOL     EXPIRES   AGE\nbeta   Expired   0/1     <none>   expired   3h\n",
			wantErr:      "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"nope\" not found\n",
			wantRequests: []string{collection + "/nope?" + tableQuery, collection + "/beta?" + tableQuery},
			wantTable:    true,
		},
		{
			name:    "unknown format",
			args:    []string{"-o", "xml"},
			wantErr: "error: unknown output format \"xml\"; use one of: wide, json, yaml, kyaml, name, go-template, go-template-file, template, templatefile, jsonpath, jsonpath-as-json, jsonpath-file\nSee 'get -h' for help and examples\n",
		},
		{
			name:    "name across namespaces",
			args:    []string{"alpha", "-A"},
			wantErr: "error: a sandbox cannot be retrieved by name across all namespaces\nSee 'get -h' for help and examples\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t)
			f := cmdtesting.NewServerFactory(srv.URL)
			f.RESTConfig.BearerToken = sandboxserver.UserToken
			streams, _, out, errOut := genericiooptions.NewTestIOStreams()
			cmd := NewCmdGet(f, streams)
			if tt.list {
				cmd = NewCmdList(f, streams)
			}
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			cmd.SetArgs(tt.args)
			err := cmd.ExecuteContext(context.Background())

			var msg bytes.Buffer
			if err != nil {
				cmdutil.PrintError(&msg, err)
			}
			if msg.String() != tt.wantErr {
				t.Errorf("error %q, want %q", msg.String(), tt.wantErr)
			}
			got := out.String()
			if strings.Contains(strings.Join(tt.args, " "), "yaml") {
				// Only the start: the rest is the object, checked by TestGetJSON.
				got = got[:min(len(got), len(tt.wantOut))]
			}
			if diff := cmp.Diff(tt.wantOut, got); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if got := errOut.String(); got != tt.wantErrOut {
				t.Errorf("stderr %q, want %q", got, tt.wantErrOut)
			}
			var requests []string
			for _, r := range srv.Requests() {
				requests = append(requests, r.Path+"?"+r.RawQuery)
				if asked := strings.Contains(r.Header.Get("Accept"), "as=Table"); asked != tt.wantTable {
					t.Errorf("%s %s asked for a table: %v, want %v (Accept %q)", r.Method, r.Path, asked, tt.wantTable, r.Header.Get("Accept"))
				}
			}
			if diff := cmp.Diff(tt.wantRequests, requests); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGetWithoutServerTable: a server that answers the plain list where a table was asked for
// is an error, not an empty listing.
func TestGetWithoutServerTable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"sandbox.kube-sandbox.io/v1alpha1","kind":"SandboxList","items":[{"metadata":{"name":"a"}}]}`))
	}))
	defer srv.Close()
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	cmd := NewCmdGet(cmdtesting.NewServerFactory(srv.URL), streams)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	err := cmd.ExecuteContext(context.Background())
	want := `the server sent no table of sandboxes but "sandbox.kube-sandbox.io/v1alpha1 SandboxList"`
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	if out.Len() > 0 {
		t.Errorf("printed %q", out)
	}
}

func TestGetJSON(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantKind string
		wantName []string
	}{
		{name: "one sandbox is the object", args: []string{"alpha", "-o", "json"}, wantKind: "Sandbox", wantName: []string{"alpha"}},
		{name: "a list", args: []string{"-o", "json"}, wantKind: "SandboxList", wantName: []string{"alpha", "beta", "gamma"}},
		{name: "two names are a list", args: []string{"beta", "alpha", "-o", "json"}, wantKind: "SandboxList", wantName: []string{"beta", "alpha"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := cmdtesting.NewServerFactory(newServer(t).URL)
			f.RESTConfig.BearerToken = sandboxserver.UserToken
			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			cmd := NewCmdGet(f, streams)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			cmd.SetArgs(tt.args)
			if err := cmd.ExecuteContext(context.Background()); err != nil {
				t.Fatal(err)
			}

			var got struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
				Items []sandboxv1alpha1.Sandbox `json:"items"`
			}
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out)
			}
			if got.APIVersion != "sandbox.kube-sandbox.io/v1alpha1" || got.Kind != tt.wantKind {
				t.Errorf("apiVersion %q kind %q, want sandbox.kube-sandbox.io/v1alpha1 %s", got.APIVersion, got.Kind, tt.wantKind)
			}
			var names []string
			if got.Kind == "Sandbox" {
				names = []string{got.Metadata.Name}
			}
			for _, item := range got.Items {
				if item.APIVersion != "sandbox.kube-sandbox.io/v1alpha1" || item.Kind != "Sandbox" {
					t.Errorf("item %s has apiVersion %q kind %q", item.Name, item.APIVersion, item.Kind)
				}
				names = append(names, item.Name)
			}
			if diff := cmp.Diff(tt.wantName, names); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
		})
	}
}
