package sandbox

import (
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// TestStatsTable: a row per replica, the figures as kubectl top prints a pod's, <unknown>
// where the agent gave none, and the reason with its message in the wide columns.
func TestStatsTable(t *testing.T) {
	tests := []struct {
		name string
		rs   sandboxv1alpha1.SandboxReplicaStats
		want []any
	}{
		{
			name: "every figure",
			rs:   replicaWith(0, "web-0", "n1"),
			want: []any{"web", int64(0), "998m", "203Mi", "101Mi", "10Mi", "3Ki", "12", "768Mi", "1", "2", "n1", "10s", "<none>"},
		},
		{
			name: "no pod",
			rs:   sandboxv1alpha1.SandboxReplicaStats{Replica: 1, Reason: "NoPod", Message: "the sandbox is paused (phase Paused)"},
			want: []any{"web", int64(1), unknown, unknown, unknown, unknown, unknown, unknown, unknown, unknown, unknown, "<none>", "<none>",
				"NoPod: the sandbox is paused (phase Paused)"},
		},
		{
			name: "read once: no CPU rate yet; no memory limit; little written or sent",
			rs: func() sandboxv1alpha1.SandboxReplicaStats {
				rs := replicaWith(2, "web-2", "n1")
				rs.Window = metav1.Duration{}
				rs.Memory.LimitBytes = 0
				rs.Disk = &sandboxv1alpha1.SandboxDiskStats{WritableLayerBytes: 512}
				rs.Network.RxBytes, rs.Network.TxBytes = 1023, 1024
				return rs
			}(),
			want: []any{"web", int64(2), unknown, "203Mi", "512", "1023", "1Ki", "12", "<none>", "1", "2", "n1", "0s", "<none>"},
		},
		{
			name: "in part",
			rs: func() sandboxv1alpha1.SandboxReplicaStats {
				rs := replicaWith(3, "web-3", "n1")
				rs.Network, rs.Processes = nil, nil
				rs.Reason, rs.Message = "Partial", "not read: network: no host-side interface"
				return rs
			}(),
			want: []any{"web", int64(3), "998m", "203Mi", "101Mi", unknown, unknown, unknown, "768Mi", "1", unknown, "n1", "10s",
				"Partial: not read: network: no host-side interface"},
		},
		{
			name: "saturated figures stay saturated",
			rs: func() sandboxv1alpha1.SandboxReplicaStats {
				rs := replicaWith(4, "web-4", "n1")
				rs.Disk = &sandboxv1alpha1.SandboxDiskStats{WritableLayerBytes: math.MaxInt64, EmptyDirBytes: math.MaxInt64}
				return rs
			}(),
			want: []any{"web", int64(4), "998m", "203Mi", "8796093022207Mi", "10Mi", "3Ki", "12", "768Mi", "1", "2", "n1", "10s", "<none>"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table := StatsTable([]sandboxv1alpha1.SandboxStats{{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
				Replicas: []sandboxv1alpha1.SandboxReplicaStats{tt.rs}}})
			if len(table.Rows) != 1 {
				t.Fatalf("%d rows", len(table.Rows))
			}
			if diff := cmp.Diff(tt.want, table.Rows[0].Cells); diff != "" {
				t.Errorf("cells (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStatsTableColumns: the columns of `kubectl sandbox top`, the details only with -o wide,
// and a row per replica of each sandbox whose object is its sandbox's SandboxStats.
func TestStatsTableColumns(t *testing.T) {
	items := []sandboxv1alpha1.SandboxStats{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}, Replicas: []sandboxv1alpha1.SandboxReplicaStats{replicaWith(0, "a-0", "n1"), replicaWith(1, "a-1", "n2")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}, Replicas: []sandboxv1alpha1.SandboxReplicaStats{replicaWith(0, "b-0", "n1")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "none", Namespace: "ns"}},
	}
	table, err := statsTableConvertor{}.ConvertToTable(t.Context(), &sandboxv1alpha1.SandboxStatsList{Items: items}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var narrow, wide []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			narrow = append(narrow, c.Name)
		} else {
			wide = append(wide, c.Name)
		}
	}
	if diff := cmp.Diff([]string{"Name", "Replica", "CPU(cores)", "Memory(bytes)", "Disk(bytes)", "Net-In", "Net-Out", "Processes"}, narrow); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Mem-Limit", "OOM-Kills", "Denied", "Node", "Window", "Message"}, wide); diff != "" {
		t.Errorf("wide columns (-want +got):\n%s", diff)
	}
	var rows []string
	for _, row := range table.Rows {
		s, ok := row.Object.Object.(*sandboxv1alpha1.SandboxStats)
		if !ok || len(row.Cells) != len(table.ColumnDefinitions) {
			t.Fatalf("row %v: object %T", row.Cells, row.Object.Object)
		}
		rows = append(rows, fmt.Sprintf("%s/%d", s.Name, row.Cells[1]))
	}
	if diff := cmp.Diff([]string{"a/0", "a/1", "b/0"}, rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}

	one, err := statsTableConvertor{}.ConvertToTable(t.Context(), &items[0], &metav1.TableOptions{NoHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	if one.ColumnDefinitions != nil || len(one.Rows) != 2 {
		t.Errorf("one sandbox without headers: %d columns, %d rows", len(one.ColumnDefinitions), len(one.Rows))
	}
	if _, err := (statsTableConvertor{}).ConvertToTable(t.Context(), &sandboxv1alpha1.Sandbox{}, nil); err == nil {
		t.Error("a Sandbox printed as a table of stats")
	}
}
