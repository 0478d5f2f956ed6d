package podnet

import (
	"context"
	"errors"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
)

func TestPick(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	sb := func(id string, created int, status containerd.ProcessStatus) sandbox {
		return sandbox{id: id, created: at(created), status: status}
	}
	tests := []struct {
		name  string
		cands []sandbox
		want  string // "": none
	}{
		{name: "none"},
		{name: "one without a task", cands: []sandbox{sb("a", 0, "")}, want: "a"},
		{name: "running over a newer exited one", cands: []sandbox{sb("new", 2, containerd.Stopped), sb("old", 1, containerd.Running)}, want: "old"},
		{name: "running over a newer one without a task", cands: []sandbox{sb("old", 1, containerd.Running), sb("new", 2, "")}, want: "old"},
		{name: "none running: the newest", cands: []sandbox{sb("a", 1, containerd.Stopped), sb("c", 3, containerd.Stopped), sb("b", 2, "")}, want: "c"},
		{name: "none running, unknown status: the newest", cands: []sandbox{sb("a", 3, containerd.Unknown), sb("b", 2, containerd.Stopped)}, want: "a"},
		{name: "two running: the newer", cands: []sandbox{sb("a", 1, containerd.Running), sb("b", 2, containerd.Running), sb("c", 3, containerd.Stopped)}, want: "b"},
		{name: "created (not yet started) over exited", cands: []sandbox{sb("a", 1, containerd.Stopped), sb("b", 0, containerd.Created)}, want: "b"},
		{name: "paused over exited", cands: []sandbox{sb("a", 1, containerd.Stopped), sb("b", 0, containerd.Paused)}, want: "b"},
		{name: "running over created", cands: []sandbox{sb("a", 0, containerd.Running), sb("b", 1, containerd.Created)}, want: "a"},
		{name: "the same time: by ID, whatever the order", cands: []sandbox{sb("b", 1, ""), sb("a", 1, "")}, want: "b"},
		{name: "the same time, the other order", cands: []sandbox{sb("a", 1, ""), sb("b", 1, "")}, want: "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pick(tt.cands)
			switch {
			case got == nil && tt.want != "":
				t.Errorf("pick: none, want %s", tt.want)
			case got != nil && got.id != tt.want:
				t.Errorf("pick: %s, want %q", got.id, tt.want)
			}
		})
	}
}

func TestNetNSFromSpec(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		want    string
		wantErr error // nil: any error, if want is ""
	}{
		{
			name: "CRI sandbox",
			spec: `{"ociVersion":"1.2.0","linux":{"namespaces":[{"type":"pid"},{"type":"ipc","path":"/proc/1/ns/ipc"},{"type":"network","path":"/var/run/netns/cni-1c2e8a9f-0d4b-7e11-5a3c-6f2b9d0e4a17"},{"type":"mount"}]}}`,
			want: "/var/run/netns/cni-1c2e8a9f-0d4b-7e11-5a3c-6f2b9d0e4a17",
		},
		{name: "host network", spec: `{"linux":{"namespaces":[{"type":"pid"},{"type":"mount"}]}}`, wantErr: ErrNoNetNS},
		{name: "a namespace without a path", spec: `{"linux":{"namespaces":[{"type":"network"}]}}`, wantErr: ErrNoNetNS},
		{name: "no linux section", spec: `{"ociVersion":"1.2.0"}`, wantErr: ErrNoNetNS},
		{name: "not JSON", spec: "\x0a\x05hello"},
		{name: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := netNSFromSpec([]byte(tt.spec))
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Errorf("netNSFromSpec: %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("netNSFromSpec: %q, %v; want an error (%v)", got, err, tt.wantErr)
			}
		})
	}
}

func TestNetNSPathArguments(t *testing.T) {
	if _, err := (&Resolver{}).NetNSPath(context.Background(), "uid"); err == nil {
		t.Error("no client: no error")
	}
	if _, err := (&Resolver{Client: &containerd.Client{}}).NetNSPath(context.Background(), ""); err == nil {
		t.Error("no pod UID: no error")
	}
}
