package node

import (
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
)

func TestPick(t *testing.T) {
	t0 := time.Now()
	ctr := func(id string, age time.Duration, status containerd.ProcessStatus) candidate {
		return candidate{info: containers.Container{ID: id, CreatedAt: t0.Add(-age), Snapshotter: "overlayfs", SnapshotKey: id}, status: status}
	}
	tests := []struct {
		name           string
		cands          []candidate
		requireRunning bool
		want           string
		wantErr        string
	}{
		{name: "none", requireRunning: true, wantErr: "no such container"},
		{name: "the running one after a restart", requireRunning: true,
			cands: []candidate{ctr("old", time.Hour, containerd.Stopped), ctr("new", time.Minute, containerd.Running)}, want: "new"},
		{name: "the running one even when a newer one has not started", requireRunning: true,
			cands: []candidate{ctr("running", time.Hour, containerd.Running), ctr("created", time.Minute, containerd.Created)}, want: "running"},
		{name: "the newest of two running", requireRunning: true,
			cands: []candidate{ctr("a", time.Hour, containerd.Running), ctr("b", time.Minute, containerd.Running)}, want: "b"},
		{name: "none running", requireRunning: true,
			cands: []candidate{ctr("a", time.Hour, containerd.Stopped), ctr("b", time.Minute, "")}, wantErr: "none of its 2 containers"},
		{name: "without a task when none is required",
			cands: []candidate{ctr("a", time.Hour, ""), ctr("b", time.Minute, "")}, want: "b"},
		{name: "no snapshot", requireRunning: true,
			cands: []candidate{{info: containers.Container{ID: "a"}, status: containerd.Running}}, wantErr: "no snapshot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pick(tt.cands, tt.requireRunning)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tt.want {
				t.Errorf("picked %s, want %s", got.ID, tt.want)
			}
		})
	}
}
