package usage

import (
	"fmt"
	"path"
	"strings"
)

// podCgroup is the pod's cgroup, a path in each hierarchy, from the cgroupsPath of its CRI
// sandbox container's OCI spec, in either of the forms the CRI plugin writes:
//
//   - the kubelet's cgroupfs driver: the sandbox's own cgroup below the pod's,
//     "/kubepods/burstable/pod<uid>/<id>" (below the kubelet's --cgroup-root, if it has one):
//     the pod's is its parent;
//   - the systemd driver: "<slice>:cri-containerd:<id>", where the slice is the pod's,
//     "kubepods-burstable-pod<uid with _ for ->.slice", which systemd puts at
//     /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice.
//
// The pod's cgroup must name the pod's UID, as the kubelet names it: a sandbox container of
// another pod, or a spec of another form, is never taken for the pod's.
func podCgroup(cgroupsPath, uid string) (string, error) {
	if uid == "" {
		return "", fmt.Errorf("no pod UID")
	}
	if strings.HasPrefix(cgroupsPath, "/") {
		dir := path.Dir(path.Clean(cgroupsPath))
		if path.Base(dir) != "pod"+uid {
			return "", fmt.Errorf("cgroupsPath %q: its parent is not the cgroup of pod %s (pod%s)", cgroupsPath, uid, uid)
		}
		return dir, nil
	}
	parts := strings.Split(cgroupsPath, ":")
	if len(parts) != 3 {
		return "", fmt.Errorf("cgroupsPath %q: neither a path (cgroupfs) nor slice:prefix:name (systemd)", cgroupsPath)
	}
	slice := parts[0]
	if want := "pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"; !strings.HasSuffix(slice, "-"+want) && slice != want {
		return "", fmt.Errorf("cgroupsPath %q: the slice is not pod %s's (…%s)", cgroupsPath, uid, want)
	}
	return expandSlice(slice)
}

// expandSlice is where systemd puts a slice: each dash of its name is a level, "a-b-c.slice"
// at /a.slice/a-b.slice/a-b-c.slice (as runc's and the kubelet's ExpandSlice).
func expandSlice(slice string) (string, error) {
	name, ok := strings.CutSuffix(slice, ".slice")
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("%q is not a slice name", slice)
	}
	if name == "-" {
		return "/", nil
	}
	if strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") || strings.Contains(name, "--") {
		return "", fmt.Errorf("%q is not a slice name", slice)
	}
	var b strings.Builder
	prefix := ""
	for part := range strings.SplitSeq(name, "-") {
		prefix += part
		b.WriteString("/" + prefix + ".slice")
		prefix += "-"
	}
	return b.String(), nil
}
