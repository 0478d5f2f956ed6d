package usage

import (
	"strings"
	"testing"
)

func TestPodCgroup(t *testing.T) {
	const uid = "29a97c97-8aea-4a3e-a2eb-bde40ab1fafd"
	const id = "bfbb78598f06dfba10775ca76d1bac50c97dfbb88b3073a36f66b9b895e066fd"
	tests := []struct {
		name, cgroupsPath, uid string
		want                   string
		wantErr                string
	}{
		{
			name:        "cgroupfs, below the kubelet's --cgroup-root (the local cluster's)",
			cgroupsPath: "/kube-sandbox/kubepods/burstable/pod" + uid + "/" + id, uid: uid,
			want: "/kube-sandbox/kubepods/burstable/pod" + uid,
		},
		{
			name:        "cgroupfs, a Guaranteed pod",
			cgroupsPath: "/kubepods/pod" + uid + "/" + id, uid: uid,
			want: "/kubepods/pod" + uid,
		},
		{
			name:        "systemd, a Burstable pod",
			cgroupsPath: "kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice:cri-containerd:" + id, uid: uid,
			want: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice",
		},
		{
			name:        "systemd, a Guaranteed pod",
			cgroupsPath: "kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice:cri-containerd:" + id, uid: uid,
			want: "/kubepods.slice/kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice",
		},
		{
			name:        "cgroupfs, another pod's",
			cgroupsPath: "/kubepods/burstable/podother/" + id, uid: uid, wantErr: "not the cgroup of pod",
		},
		{
			name:        "cgroupfs, climbing out",
			cgroupsPath: "/kubepods/burstable/pod" + uid + "/../../x/" + id, uid: uid, wantErr: "not the cgroup of pod",
		},
		{
			name:        "systemd, another pod's",
			cgroupsPath: "kubepods-burstable-podother.slice:cri-containerd:" + id, uid: uid, wantErr: "not pod",
		},
		{
			name:        "systemd, the uid with dashes (a slice of more levels)",
			cgroupsPath: "kubepods-burstable-pod" + uid + ".slice:cri-containerd:" + id, uid: uid, wantErr: "not pod",
		},
		{name: "neither form", cgroupsPath: "kubepods/pod" + uid, uid: uid, wantErr: "neither a path"},
		{name: "empty", cgroupsPath: "", uid: uid, wantErr: "neither a path"},
		{name: "no uid", cgroupsPath: "/kubepods/pod/" + id, uid: "", wantErr: "no pod UID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := podCgroup(tt.cgroupsPath, tt.uid)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("podCgroup = %q, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("podCgroup = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestExpandSlice(t *testing.T) {
	tests := []struct {
		slice, want string
		wantErr     bool
	}{
		{slice: "-.slice", want: "/"},
		{slice: "a.slice", want: "/a.slice"},
		{slice: "a-b-c.slice", want: "/a.slice/a-b.slice/a-b-c.slice"},
		{slice: "a", wantErr: true},
		{slice: ".slice", wantErr: true},
		{slice: "a--b.slice", wantErr: true},
		{slice: "-a.slice", wantErr: true},
		{slice: "a-.slice", wantErr: true},
		{slice: "a/b.slice", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.slice, func(t *testing.T) {
			got, err := expandSlice(tt.slice)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("expandSlice = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
