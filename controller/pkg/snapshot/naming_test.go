package snapshot

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestNaming(t *testing.T) {
	reg := Registry{Host: "10.250.0.1:5000", Prefix: "/kube-sandbox/snapshots/"}
	if got, want := reg.Repository("team-a", "demo"), "10.250.0.1:5000/kube-sandbox/snapshots/team-a/demo"; got != want {
		t.Errorf("Repository = %q, want %q", got, want)
	}
	if got, want := reg.RepositoryPath("team-a", "demo"), "kube-sandbox/snapshots/team-a/demo"; got != want {
		t.Errorf("RepositoryPath = %q, want %q", got, want)
	}
	if got, want := (Registry{Host: "r:1"}).Repository("n", "s"), "r:1/"+DefaultRepositoryPrefix+"/n/s"; got != want {
		t.Errorf("Repository without a prefix = %q, want %q", got, want)
	}
	sbx, pod := types.UID("0b5e3c5e-1b7c-4a34-8a8e-52c6c3b0e6a1"), types.UID("9f3e2d1c-0000-4000-8000-000000000001")
	tag := Tag(sbx, 12, pod)
	if !strings.HasPrefix(tag, TagPrefix(sbx)) || strings.HasPrefix(tag, TagPrefix("0b5e3c5e")) == false {
		t.Errorf("Tag %q does not begin with the sandbox's prefix", tag)
	}
	if other := Tag("1b5e3c5e-1b7c-4a34-8a8e-52c6c3b0e6a1", 12, pod); strings.HasPrefix(other, TagPrefix(sbx)) {
		t.Errorf("another sandbox's tag %q has this sandbox's prefix", other)
	}
	if Tag(sbx, 1, pod) == Tag(sbx, 1, "another-pod") || Tag(sbx, 1, pod) == Tag(sbx, 2, pod) {
		t.Error("tags of different pods or replicas are equal")
	}
	// A tag is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}.
	if len(tag) > 128 || strings.ContainsFunc(tag, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-')
	}) {
		t.Errorf("Tag %q is no valid tag", tag)
	}
	for image, want := range map[string]string{
		"10.250.0.1:5000/a/b:tag": "10.250.0.1:5000/a/b@sha256:1",
		"10.250.0.1:5000/a/b":     "10.250.0.1:5000/a/b@sha256:1",
		"host/a/b:t":              "host/a/b@sha256:1",
	} {
		if got := ByDigest(image, "sha256:1"); got != want {
			t.Errorf("ByDigest(%q) = %q, want %q", image, got, want)
		}
	}
}
