package get

import (
	"bytes"
	"context"
	"encoding/json"
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
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func testSandboxes() []*sandboxv1alpha1.Sandbox {
	return []*sandboxv1alpha1.Sandbox{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: cmdtesting.Namespace, Labels: map[string]string{"team": "ml"},
				CreationTimestamp: metav1.NewTime(now.Add(-5 * time.Minute))},
			Spec: sandboxv1alpha1.SandboxSpec{Replicas: ptr.To[int32](2), Template: template("python:3.13-slim"), TimeoutSeconds: ptr.To[int64](1800),
				NetworkPolicy: &sandboxv1alpha1.SandboxNetworkPolicy{Egress: []sandboxv1alpha1.SandboxEgressRule{
					{Action: "Allow", To: "pypi.org"}, {Action: "Allow", To: "*.pythonhosted.org"},
				}}},
			Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseRunning, Replicas: 2, Ready: 2,
				ExpiresAt: ptr.To(metav1.NewTime(now.Add(25 * time.Minute))),
				Pods: []sandboxv1alpha1.SandboxPodStatus{
					// Out of order: the table shows replica 0.
					{Replica: 1, Name: "alpha-b", IP: "10.0.0.8", NodeName: "node-2", Ready: true},
					{Replica: 0, Name: "alpha-a", IP: "10.0.0.7", NodeName: "node-1", Ready: true},
				}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "beta", Namespace: cmdtesting.Namespace,
				CreationTimestamp: metav1.NewTime(now.Add(-3 * time.Hour))},
			Spec: sandboxv1alpha1.SandboxSpec{Template: template("busybox"), TimeoutSeconds: ptr.To[int64](10800)},
			Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseExpired, Replicas: 1,
				ExpiresAt: ptr.To(metav1.NewTime(now.Add(-10 * time.Second))),
				Pods:      []sandboxv1alpha1.SandboxPodStatus{{Replica: 0, Name: "beta-a"}},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "gamma", Namespace: "other", CreationTimestamp: metav1.NewTime(now.Add(-49 * time.Hour))},
		},
	}
}

func template(image string) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: image}}}}
}

func TestGet(t *testing.T) {
	tests := []struct {
		name       string
		list       bool
		args       []string
		wantOut    string
		wantErrOut string
		wantErr    string
	}{
		{
			name: "table of the namespace",
			wantOut: "" +
				"NAME    PHASE     READY   POOL     EXPIRES   AGE\n" +
				"alpha   Running   2/2     <none>   25m       5m\n" +
				"beta    Expired   0/1     <none>   expired   3h\n",
		},
		{
			name: "list is get without names",
			list: true,
			wantOut: "" +
				"NAME    PHASE     READY   POOL     EXPIRES   AGE\n" +
				"alpha   Running   2/2     <none>   25m       5m\n" +
				"beta    Expired   0/1     <none>   expired   3h\n",
		},
		{
			name: "wide adds image, pod, node and egress",
			args: []string{"-o", "wide"},
			wantOut: "" +
				"NAME    PHASE     READY   POOL     EXPIRES   AGE   IMAGE              POD       NODE     EGRESS\n" +
				"alpha   Running   2/2     <none>   25m       5m    python:3.13-slim   alpha-a   node-1   deny, 2 rules\n" +
				"beta    Expired   0/1     <none>   expired   3h    busybox            beta-a    <none>   default\n",
		},
		{
			name: "all namespaces",
			list: true,
			args: []string{"-A", "--no-headers"},
			wantOut: "" +
				"other   gamma   Pending   0/1   <none>   <none>    2d1h\n" +
				"test    alpha   Running   2/2   <none>   25m       5m\n" +
				"test    beta    Expired   0/1   <none>   expired   3h\n",
		},
		{
			name: "selector and labels",
			args: []string{"-l", "team=ml", "--show-labels"},
			wantOut: "" +
				"NAME    PHASE     READY   POOL     EXPIRES   AGE   LABELS\n" +
				"alpha   Running   2/2     <none>   25m       5m    team=ml\n",
		},
		{
			name:    "one by name",
			args:    []string{"beta"},
			wantOut: "NAME   PHASE     READY   POOL     EXPIRES   AGE\nbeta   Expired   0/1     <none>   expired   3h\n",
		},
		{
			name:    "names",
			args:    []string{"-o", "name"},
			wantOut: "sandbox.sandbox.kube-sandbox.io/alpha\nsandbox.sandbox.kube-sandbox.io/beta\n",
		},
		{
			name:    "jsonpath",
			args:    []string{"alpha", "-o", "jsonpath={.status.pods[*].ip}"},
			wantOut: "10.0.0.8 10.0.0.7",
		},
		{
			name:    "jsonpath of the expiry",
			args:    []string{"alpha", "-o", "jsonpath={.spec.timeoutSeconds} {.status.expiresAt}"},
			wantOut: "1800 2026-05-01T12:25:00Z",
		},
		{
			name:    "yaml",
			args:    []string{"beta", "-o", "yaml"},
			wantOut: "apiVersion: sandbox.kube-sandbox.io/v1alpha1\nkind: Sandbox\n",
		},
		{
			name:       "nothing found",
			args:       []string{"-l", "team=none"},
			wantErrOut: "No resources found in test namespace.\n",
		},
		{
			name:    "found and missing names",
			args:    []string{"alpha", "nope", "-o", "name"},
			wantOut: "sandbox.sandbox.kube-sandbox.io/alpha\n",
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"nope\" not found\n",
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
			f := cmdtesting.NewTestFactory(testSandboxes()...)
			streams, _, out, errOut := genericiooptions.NewTestIOStreams()
			o := NewGetOptions(streams)
			o.Now = func() time.Time { return now }
			cmd := newCmdGet(f, o)
			if tt.list {
				cmd = newCmdList(f, o)
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
		})
	}
}

// TestTableCells checks the cells computed from a sandbox, for the states the listing above
// does not show.
func TestTableCells(t *testing.T) {
	deleted := metav1.NewTime(now.Add(-time.Second))
	tests := []struct {
		name string
		sb   sandboxv1alpha1.Sandbox
		// want are the cells after NAME: PHASE, READY, POOL, EXPIRES, AGE, IMAGE, POD, NODE,
		// EGRESS.
		want []any
	}{
		{
			name: "new: no status yet",
			sb:   sandboxv1alpha1.Sandbox{},
			want: []any{"Pending", "0/1", "<none>", "<none>", "<unknown>", "<none>", "<none>", "<none>", "default"},
		},
		{
			name: "expires in days",
			sb: sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-90 * time.Second))},
				Status:     sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhasePending, ExpiresAt: ptr.To(metav1.NewTime(now.Add(50 * time.Hour)))},
			},
			want: []any{"Pending", "0/1", "<none>", "2d2h", "90s", "<none>", "<none>", "<none>", "default"},
		},
		{
			name: "expires in seconds",
			sb: sandboxv1alpha1.Sandbox{
				Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseRunning, ExpiresAt: ptr.To(metav1.NewTime(now.Add(42 * time.Second)))},
			},
			want: []any{"Running", "0/1", "<none>", "42s", "<unknown>", "<none>", "<none>", "<none>", "default"},
		},
		{
			name: "expiring now is expired",
			sb: sandboxv1alpha1.Sandbox{
				Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseRunning, ExpiresAt: ptr.To(metav1.NewTime(now))},
			},
			want: []any{"Running", "0/1", "<none>", "expired", "<unknown>", "<none>", "<none>", "<none>", "default"},
		},
		{
			name: "deleted by a user is terminating",
			sb: sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleted},
				Status:     sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseRunning},
			},
			want: []any{"Terminating", "0/1", "<none>", "<none>", "<unknown>", "<none>", "<none>", "<none>", "default"},
		},
		{
			name: "deleted because expired stays expired",
			sb: sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleted},
				Status:     sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseExpired, ExpiresAt: ptr.To(metav1.NewTime(now.Add(-time.Minute)))},
			},
			want: []any{"Expired", "0/1", "<none>", "expired", "<unknown>", "<none>", "<none>", "<none>", "default"},
		},
		{
			name: "pod not scheduled yet",
			sb: sandboxv1alpha1.Sandbox{
				Spec: sandboxv1alpha1.SandboxSpec{Replicas: ptr.To[int32](3), Template: template("busybox")},
				Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhasePending, Ready: 1, Pods: []sandboxv1alpha1.SandboxPodStatus{
					{Replica: 2, Name: "p-2", NodeName: "n2"}, {Replica: 0, Name: "p-0"},
				}},
			},
			want: []any{"Pending", "1/3", "<none>", "<none>", "<unknown>", "busybox", "p-0", "<none>", "default"},
		},
		{
			name: "from a pool: its name, and no image of its own",
			sb: sandboxv1alpha1.Sandbox{
				Spec: sandboxv1alpha1.SandboxSpec{PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: "python"}},
				Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseRunning, Ready: 1, Pods: []sandboxv1alpha1.SandboxPodStatus{
					{Replica: 0, Name: "python-x7k2q", NodeName: "node1", Ready: true},
				}},
			},
			want: []any{"Running", "1/1", "python", "<none>", "<unknown>", "<none>", "python-x7k2q", "node1", "default"},
		},
		{
			name: "deny-all",
			sb:   sandboxv1alpha1.Sandbox{Spec: sandboxv1alpha1.SandboxSpec{NetworkPolicy: &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: "Deny"}}},
			want: []any{"Pending", "0/1", "<none>", "<none>", "<unknown>", "<none>", "<none>", "<none>", "deny-all"},
		},
		{
			name: "allow with one rule",
			sb: sandboxv1alpha1.Sandbox{Spec: sandboxv1alpha1.SandboxSpec{NetworkPolicy: &sandboxv1alpha1.SandboxNetworkPolicy{
				DefaultAction: "Allow", Egress: []sandboxv1alpha1.SandboxEgressRule{{Action: "Deny", To: "10.0.0.0/8"}},
			}}},
			want: []any{"Pending", "0/1", "<none>", "<none>", "<unknown>", "<none>", "<none>", "<none>", "allow, 1 rule"},
		},
		{
			name: "waiting for a pool",
			sb: sandboxv1alpha1.Sandbox{
				Spec:   sandboxv1alpha1.SandboxSpec{Replicas: ptr.To[int32](2), PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: "small"}},
				Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhasePending},
			},
			want: []any{"Pending", "0/2", "small", "<none>", "<unknown>", "<none>", "<none>", "<none>", "default"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table := Table([]sandboxv1alpha1.Sandbox{tt.sb}, now)
			if len(table.ColumnDefinitions) != 10 {
				t.Fatalf("%d columns, want 10", len(table.ColumnDefinitions))
			}
			if diff := cmp.Diff(tt.want, table.Rows[0].Cells[1:]); diff != "" {
				t.Errorf("cells (-want +got):\n%s", diff)
			}
		})
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
		{name: "a list", args: []string{"-o", "json"}, wantKind: "SandboxList", wantName: []string{"alpha", "beta"}},
		{name: "two names are a list", args: []string{"beta", "alpha", "-o", "json"}, wantKind: "SandboxList", wantName: []string{"beta", "alpha"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := cmdtesting.NewTestFactory(testSandboxes()...)
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
