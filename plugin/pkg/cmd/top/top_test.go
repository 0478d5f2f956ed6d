package top

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxregistry "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/registry/sandbox"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

const api = "/apis/sandbox.kube-sandbox.io/v1alpha1"

var read = metav1.NewTime(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC))

// replica is the figures of a replica read over a 10 s window.
func replica(index int32, node string, milliCores, memMi, limitMi int64) sandboxv1alpha1.SandboxReplicaStats {
	return sandboxv1alpha1.SandboxReplicaStats{
		Replica: index, Pod: "pod-" + node, Node: node, Timestamp: read, Window: metav1.Duration{Duration: 10 * time.Second},
		CPU:       &sandboxv1alpha1.SandboxCPUStats{UsageNanoCores: milliCores * 1e6},
		Memory:    &sandboxv1alpha1.SandboxMemoryStats{WorkingSetBytes: memMi << 20, LimitBytes: limitMi << 20},
		Disk:      &sandboxv1alpha1.SandboxDiskStats{WritableLayerBytes: 10 << 20, EmptyDirBytes: 2 << 20},
		Network:   &sandboxv1alpha1.SandboxNetworkStats{RxBytes: 3 << 19, TxBytes: 300 << 10, ConnectionsDenied: 3},
		Processes: ptr.To[int64](14),
	}
}

func stats(namespace, name string, lbls map[string]string, replicas ...sandboxv1alpha1.SandboxReplicaStats) sandboxv1alpha1.SandboxStats {
	return sandboxv1alpha1.SandboxStats{
		TypeMeta:   metav1.TypeMeta{APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxStats"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: lbls},
		Replicas:   replicas,
	}
}

// sandboxes are the figures the server has, ordered by namespace and name as it lists them:
// eval, busy on one replica and read once on the other (no CPU rate yet); web, with a replica
// that has no pod; and agent, in another namespace.
func sandboxes() []sandboxv1alpha1.SandboxStats {
	evalNotSampled := replica(1, "node-2", 0, 50, 0)
	evalNotSampled.Window = metav1.Duration{}
	return []sandboxv1alpha1.SandboxStats{
		stats("other", "agent", nil, replica(0, "node-1", 5, 20, 256)),
		stats(cmdtesting.Namespace, "eval", map[string]string{"team": "ml"}, replica(0, "node-2", 2500, 1024, 2048), evalNotSampled),
		stats(cmdtesting.Namespace, "web", nil, replica(0, "node-1", 998, 203, 512),
			sandboxv1alpha1.SandboxReplicaStats{Replica: 1, Reason: sandboxv1alpha1.StatsReasonNoPod, Message: "the replica has no pod now"}),
	}
}

// statsServer answers as sandbox-apiserver does, tables from its own table code: the stats
// subresource and sandboxstats of namespace test, sandboxstats of all namespaces, a 403 for
// the stats of sandbox secret and a 404 for those of any other it does not have. It records
// each request as "PATH?QUERY".
func statsServer(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		seen = append(seen, req.URL.Path+"?"+req.URL.RawQuery)
		mu.Unlock()
		selector, err := labels.Parse(req.URL.Query().Get("labelSelector"))
		if err != nil {
			writeStatus(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		var items []sandboxv1alpha1.SandboxStats
		for _, s := range sandboxes() {
			if selector.Matches(labels.Set(s.Labels)) {
				items = append(items, s)
			}
		}
		inNamespace := func() []sandboxv1alpha1.SandboxStats {
			var out []sandboxv1alpha1.SandboxStats
			for _, s := range items {
				if s.Namespace == cmdtesting.Namespace {
					out = append(out, s)
				}
			}
			return out
		}
		var one *sandboxv1alpha1.SandboxStats
		switch path := req.URL.Path; {
		case path == api+"/sandboxstats":
		case path == api+"/namespaces/test/sandboxstats":
			items = inNamespace()
		case path == api+"/namespaces/test/sandboxes/secret/stats":
			writeStatus(w, apierrors.NewForbidden(sandboxv1alpha1.Resource("sandboxes"), "secret",
				errors.New(`User "eve" cannot get resource "sandboxes/stats" in API group "sandbox.kube-sandbox.io" in the namespace "test"`)))
			return
		case strings.HasPrefix(path, api+"/namespaces/test/sandboxes/") && strings.HasSuffix(path, "/stats"):
			name := strings.TrimSuffix(strings.TrimPrefix(path, api+"/namespaces/test/sandboxes/"), "/stats")
			for _, s := range inNamespace() {
				if s.Name == name {
					one = &s
				}
			}
			if one == nil {
				writeStatus(w, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), name))
				return
			}
			items = []sandboxv1alpha1.SandboxStats{*one}
		default:
			writeStatus(w, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), ""))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.Contains(req.Header.Get("Accept"), "as=Table"):
			_ = json.NewEncoder(w).Encode(table(t, items, req.URL.Query().Get("includeObject")))
		case one != nil:
			_ = json.NewEncoder(w).Encode(one)
		default:
			_ = json.NewEncoder(w).Encode(&sandboxv1alpha1.SandboxStatsList{
				TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxStatsList"},
				Items:    items,
			})
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

// table is the server's table of items with each row's object as includeObject asks, as the
// generic API server sends it: the metadata by default, nothing for None.
func table(t *testing.T, items []sandboxv1alpha1.SandboxStats, include string) *metav1.Table {
	tbl := sandboxregistry.StatsTable(items)
	tbl.TypeMeta = metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"}
	for i := range tbl.Rows {
		row := &tbl.Rows[i]
		s := row.Object.Object.(*sandboxv1alpha1.SandboxStats)
		row.Object = runtime.RawExtension{}
		if include == string(metav1.IncludeNone) {
			continue
		}
		raw, err := json.Marshal(&metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
			ObjectMeta: s.ObjectMeta,
		})
		if err != nil {
			t.Error(err)
		}
		row.Object.Raw = raw
	}
	return tbl
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	s := err.Status()
	s.Kind, s.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(s.Code))
	_ = json.NewEncoder(w).Encode(&s)
}

// run runs the command and returns its stdout, its stderr and the error as kubectl prints it.
func run(t *testing.T, host string, args ...string) (string, string, string) {
	t.Helper()
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	cmd := NewCmdTop(cmdtesting.NewServerFactory(host), streams)
	cmd.SetArgs(args)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	var msg bytes.Buffer
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		cmdutil.PrintError(&msg, err)
	}
	return out.String(), errOut.String(), msg.String()
}

func TestTop(t *testing.T) {
	const (
		list = api + "/namespaces/test/sandboxstats?"
		web  = api + "/namespaces/test/sandboxes/web/stats?"
	)
	tests := []struct {
		name       string
		args       []string
		wantOut    string
		wantErrOut string
		wantSeen   []string
	}{
		{
			name: "the namespace's sandboxes",
			wantOut: `NAME   REPLICA   CPU(cores)   MEMORY(bytes)   DISK(bytes)   NET-IN      NET-OUT     PROCESSES
eval   0         2500m        1024Mi          12Mi          1Mi         300Ki       14
eval   1         <unknown>    50Mi            12Mi          1Mi         300Ki       14
web    0         998m         203Mi           12Mi          1Mi         300Ki       14
web    1         <unknown>    <unknown>       <unknown>     <unknown>   <unknown>   <unknown>
`,
			wantSeen: []string{list + "includeObject=None"},
		},
		{
			name: "sorted by CPU, unknown last",
			args: []string{"--sort-by=cpu", "--no-headers"},
			wantOut: `eval   0     2500m       1024Mi      12Mi        1Mi         300Ki       14
web    0     998m        203Mi       12Mi        1Mi         300Ki       14
eval   1     <unknown>   50Mi        12Mi        1Mi         300Ki       14
web    1     <unknown>   <unknown>   <unknown>   <unknown>   <unknown>   <unknown>
`,
			wantSeen: []string{list + "includeObject=None"},
		},
		{
			name: "sorted by memory",
			args: []string{"--sort-by", "memory", "--no-headers"},
			wantOut: `eval   0     2500m       1024Mi      12Mi        1Mi         300Ki       14
web    0     998m        203Mi       12Mi        1Mi         300Ki       14
eval   1     <unknown>   50Mi        12Mi        1Mi         300Ki       14
web    1     <unknown>   <unknown>   <unknown>   <unknown>   <unknown>   <unknown>
`,
			wantSeen: []string{list + "includeObject=None"},
		},
		{
			name: "one sandbox, wide",
			args: []string{"web", "-o", "wide"},
			wantOut: `NAME   REPLICA   CPU(cores)   MEMORY(bytes)   DISK(bytes)   NET-IN      NET-OUT     PROCESSES   MEM-LIMIT   OOM-KILLS   DENIED      NODE     WINDOW   MESSAGE
web    0         998m         203Mi           12Mi          1Mi         300Ki       14          512Mi       0           3           node-1   10s      <none>
web    1         <unknown>    <unknown>       <unknown>     <unknown>   <unknown>   <unknown>   <unknown>   <unknown>   <unknown>   <none>   <none>   NoPod: the replica has no pod now
`,
			wantSeen: []string{web + "includeObject=None"},
		},
		{
			name: "all namespaces, namespace first",
			args: []string{"-A", "--sort-by=memory"},
			wantOut: `NAMESPACE   NAME    REPLICA   CPU(cores)   MEMORY(bytes)   DISK(bytes)   NET-IN      NET-OUT     PROCESSES
test        eval    0         2500m        1024Mi          12Mi          1Mi         300Ki       14
test        web     0         998m         203Mi           12Mi          1Mi         300Ki       14
test        eval    1         <unknown>    50Mi            12Mi          1Mi         300Ki       14
other       agent   0         5m           20Mi            12Mi          1Mi         300Ki       14
test        web     1         <unknown>    <unknown>       <unknown>     <unknown>   <unknown>   <unknown>
`,
			wantSeen: []string{api + "/sandboxstats?includeObject=Metadata"},
		},
		{
			name: "by label",
			args: []string{"-l", "team=ml", "--no-headers"},
			wantOut: `eval   0     2500m       1024Mi   12Mi   1Mi   300Ki   14
eval   1     <unknown>   50Mi     12Mi   1Mi   300Ki   14
`,
			wantSeen: []string{list + "includeObject=None&labelSelector=team%3Dml"},
		},
		{
			name:       "none selected",
			args:       []string{"-l", "team=none"},
			wantErrOut: "No resources found in test namespace.\n",
			wantSeen:   []string{list + "includeObject=None&labelSelector=team%3Dnone"},
		},
		{
			name:       "none in any namespace",
			args:       []string{"-A", "-l", "team=none"},
			wantErrOut: "No resources found\n",
			wantSeen:   []string{api + "/sandboxstats?includeObject=Metadata&labelSelector=team%3Dnone"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, seen := statsServer(t)
			out, errOut, msg := run(t, srv.URL, tt.args...)
			if msg != "" {
				t.Fatalf("error: %s", msg)
			}
			if diff := cmp.Diff(tt.wantOut, out); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if errOut != tt.wantErrOut {
				t.Errorf("stderr %q, want %q", errOut, tt.wantErrOut)
			}
			if diff := cmp.Diff(tt.wantSeen, seen()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTopObjects(t *testing.T) {
	srv, seen := statsServer(t)
	out, _, msg := run(t, srv.URL, "web", "-o", "json")
	if msg != "" {
		t.Fatalf("error: %s", msg)
	}
	var one sandboxv1alpha1.SandboxStats
	if err := json.Unmarshal([]byte(out), &one); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if one.Kind != "SandboxStats" || one.APIVersion != "sandbox.kube-sandbox.io/v1alpha1" || one.Name != "web" ||
		len(one.Replicas) != 2 || one.Replicas[0].CPU.UsageNanoCores != 998e6 || one.Replicas[1].Reason != "NoPod" {
		t.Errorf("-o json printed %+v", one)
	}

	out, _, msg = run(t, srv.URL, "-A", "-o", "yaml")
	if msg != "" {
		t.Fatalf("error: %s", msg)
	}
	for _, want := range []string{"kind: SandboxStatsList", "kind: SandboxStats\n", "name: agent", "workingSetBytes: 212860928"} {
		if !strings.Contains(out, want) {
			t.Errorf("-o yaml lacks %q:\n%s", want, out)
		}
	}
	// The objects, not the tables.
	want := []string{api + "/namespaces/test/sandboxes/web/stats?", api + "/sandboxstats?"}
	if diff := cmp.Diff(want, seen()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestTopErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
		// asks: the command reaches the server (and is refused there).
		asks bool
	}{
		{name: "forbidden", args: []string{"secret"}, asks: true,
			wantErr: `Error from server (Forbidden): sandboxes.sandbox.kube-sandbox.io "secret" is forbidden: User "eve" cannot get resource "sandboxes/stats" in API group "sandbox.kube-sandbox.io" in the namespace "test"` + "\n"},
		{name: "not found", args: []string{"ghost"}, asks: true,
			wantErr: `Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io "ghost" not found` + "\n"},
		{name: "not found as json", args: []string{"ghost", "-o", "json"}, asks: true,
			wantErr: `Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io "ghost" not found` + "\n"},
		{name: "two names", args: []string{"a", "b"}, wantErr: `top takes at most one NAME, got ["a" "b"]`},
		{name: "name across namespaces", args: []string{"web", "-A"}, wantErr: "a sandbox cannot be retrieved by name across all namespaces"},
		{name: "name and selector", args: []string{"web", "-l", "a=b"}, wantErr: "a selector cannot be used with a name"},
		{name: "unknown sort", args: []string{"--sort-by=disk"}, wantErr: `--sort-by must be cpu or memory, got "disk"`},
		{name: "unknown output", args: []string{"-o", "name"}, wantErr: `unknown output format "name"`},
		{name: "sorted objects", args: []string{"-o", "json", "--sort-by=cpu"}, wantErr: "--sort-by orders the table's rows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, seen := statsServer(t)
			out, _, msg := run(t, srv.URL, tt.args...)
			if !strings.Contains(msg, tt.wantErr) {
				t.Errorf("error %q, want one containing %q", msg, tt.wantErr)
			}
			if out != "" {
				t.Errorf("stdout %q, want none", out)
			}
			if asked := len(seen()) > 0; asked != tt.asks {
				t.Errorf("asked the server: %v, want %v", asked, tt.asks)
			}
		})
	}
}

func TestSortRows(t *testing.T) {
	rows := func(cells ...any) []metav1.TableRow {
		var out []metav1.TableRow
		for i, c := range cells {
			out = append(out, metav1.TableRow{Cells: []any{string(rune('a' + i)), c}})
		}
		return out
	}
	names := func(tbl *metav1.Table) string {
		var b strings.Builder
		for _, r := range tbl.Rows {
			b.WriteString(r.Cells[0].(string))
		}
		return b.String()
	}
	tests := []struct {
		name    string
		cells   []any
		want    string
		wantErr string
	}{
		{name: "quantities of every suffix", cells: []any{"1500m", "2", "999m", "1k", "0"}, want: "dbace"},
		{name: "bytes", cells: []any{"203Mi", "1Gi", "512Ki", "1023Mi"}, want: "bdac"},
		{name: "numbers as JSON decodes them", cells: []any{int64(3), float64(3.5), int64(1)}, want: "bac"},
		{name: "unknown last, in the server's order", cells: []any{"<unknown>", "5m", nil, "<none>", "6m"}, want: "ebacd"},
		{name: "ties keep the server's order", cells: []any{"1", "1000m", "1"}, want: "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tbl := &metav1.Table{
				ColumnDefinitions: []metav1.TableColumnDefinition{{Name: "Name"}, {Name: "CPU(cores)"}},
				Rows:              rows(tt.cells...),
			}
			if err := sortRows(tbl, cpuColumn); err != nil {
				t.Fatal(err)
			}
			if got := names(tbl); got != tt.want {
				t.Errorf("order %s, want %s", got, tt.want)
			}
		})
	}
	if err := sortRows(&metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{{Name: "Name"}}}, memoryColumn); err == nil ||
		!strings.Contains(err.Error(), "no column MEMORY(bytes)") {
		t.Errorf("a table without the column: %v", err)
	}
}

func TestHeader(t *testing.T) {
	for name, want := range map[string]string{"CPU(cores)": "CPU(cores)", "Memory(bytes)": "MEMORY(bytes)", "Net-In": "NET-IN", "Name": "NAME", "(x)": "(x)"} {
		if got := header(name); got != want {
			t.Errorf("header(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestTopHelp: the help says where the figures come from and what RBAC the command needs.
func TestTopHelp(t *testing.T) {
	cmd := NewCmdTop(cmdtesting.NewServerFactory("https://unused.test"), genericiooptions.NewTestIOStreamsDiscard())
	for _, want := range []string{"node agent", "every 10 seconds", "gVisor", "sentry", "get on sandboxes/stats", "list on sandboxstats", "OOM-KILLS", "DENIED"} {
		if !strings.Contains(cmd.Long, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
