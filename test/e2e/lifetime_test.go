//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestExpiry: a sandbox created with the shortest lifetime is gone shortly after its deadline.
// It runs in parallel with the other parallel tests, so the minute it takes overlaps theirs.
func TestExpiry(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	r := run(t, nil, "kubectl", "sandbox", "-n", ns, "create", "brief", "--image", pythonImage, "--timeout", "60s")
	if r.code != 0 {
		t.Fatalf("create: %s", r.stderr)
	}
	expires := strings.TrimSpace(mustKubectl(t, "-n", ns, "get", "sandbox", "brief", "-o", "jsonpath={.status.expiresAt}"))
	deadline, err := time.Parse(time.RFC3339, expires)
	if err != nil {
		t.Fatalf("status.expiresAt %q: %v", expires, err)
	}
	if d := time.Until(deadline); d < 50*time.Second || d > 61*time.Second {
		t.Errorf("expires in %s, want ~60s", d)
	}
	waitFor(t, "the expired sandbox to go", 100*time.Second, func() (bool, string) {
		r := kubectl(t, "-n", ns, "get", "batchsandbox", "brief", "-o", "jsonpath={.status.phase}")
		return r.code != 0, r.stdout
	})
	late := time.Since(deadline)
	t.Logf("gone %.2fs after its deadline (pod deletion included)", late.Seconds())
	if late < 0 {
		t.Errorf("deleted %s before its deadline", -late)
	}
	if out := mustKubectl(t, "-n", ns, "get", "events", "--field-selector", "reason=Expired", "-o", "name"); out == "" {
		t.Error("no Expired event")
	}
}

// TestRenewAndAutoRenew: renew moves the expiry forward; an exec renews a sandbox that asks
// for it.
func TestRenewAndAutoRenew(t *testing.T) {
	ns := newNamespace(t)
	r := run(t, nil, "kubectl", "sandbox", "-n", ns, "create", "kept", "--image", pythonImage, "--timeout", "2m", "--auto-renew", "10m")
	if r.code != 0 {
		t.Fatalf("create: %s", r.stderr)
	}
	r = run(t, nil, "kubectl", "sandbox", "-n", ns, "wait", "kept", "--for=Running", "--timeout=90s")
	if r.code != 0 {
		t.Fatalf("wait: %s%s", r.stdout, r.stderr)
	}
	expiry := func() time.Time {
		t.Helper()
		out := strings.TrimSpace(mustKubectl(t, "-n", ns, "get", "sandbox", "kept", "-o", "jsonpath={.status.expiresAt}"))
		at, err := time.Parse(time.RFC3339, out)
		if err != nil {
			t.Fatalf("expiresAt %q: %v", out, err)
		}
		return at
	}
	before := expiry()
	if r := run(t, nil, "kubectl", "sandbox", "-n", ns, "exec", "kept", "--", "true"); r.code != 0 {
		t.Fatalf("exec: %s", r.stderr)
	}
	if after := expiry(); after.Sub(before) < 7*time.Minute {
		t.Errorf("exec did not auto-renew: %v -> %v", before, after)
	}
	r = run(t, nil, "kubectl", "sandbox", "-n", ns, "renew", "kept", "--for", "30m")
	if r.code != 0 || !strings.Contains(r.stdout, "renewed") {
		t.Fatalf("renew: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	if d := time.Until(expiry()); d < 29*time.Minute {
		t.Errorf("after renew --for 30m it expires in %s", d)
	}
	r = run(t, nil, "kubectl", "sandbox", "-n", ns, "renew", "kept", "--until", "2000-01-01T00:00:00Z")
	if r.code == 0 || !strings.Contains(r.stderr, "Invalid") {
		t.Errorf("renew into the past: exit %d stderr %q, want 422", r.code, r.stderr)
	}
}

// TestRBACMatrix checks every allow and deny of the shipped roles: the built-in edit and view
// roles (which kube-sandbox's roles aggregate into), bound in one namespace, for each verb and
// subresource, in that namespace and another, through impersonation.
func TestRBACMatrix(t *testing.T) {
	t.Parallel()
	home, away := newNamespace(t), newNamespace(t)
	for _, ns := range []string{home, away} {
		r := run(t, nil, "kubectl", "sandbox", "-n", ns, "create", "target", "--image", pythonImage, "--timeout", "10m")
		if r.code != 0 {
			t.Fatalf("create: %s", r.stderr)
		}
	}
	mustKubectl(t, "-n", home, "create", "rolebinding", "editor", "--clusterrole=edit", "--user=ed")
	mustKubectl(t, "-n", home, "create", "rolebinding", "viewer", "--clusterrole=view", "--user=vic")
	for _, ns := range []string{home, away} {
		if r := run(t, nil, "kubectl", "sandbox", "-n", ns, "wait", "target", "--for=Running", "--timeout=90s"); r.code != 0 {
			t.Fatalf("wait: %s%s", r.stdout, r.stderr)
		}
	}
	// The aggregation controller fills edit and view with our rules shortly after install.
	waitFor(t, "edit to include sandboxes/exec", 30*time.Second, func() (bool, string) {
		r := kubectl(t, "auth", "can-i", "-n", home, "--as=ed", "create", "sandboxes.sandbox.kube-sandbox.io", "--subresource=exec")
		return strings.TrimSpace(r.stdout) == "yes", r.stdout
	})

	type action struct {
		name string
		args func(ns, as string) []string
	}
	// --as goes after the plugin name: kubectl finds plugins only before any flag.
	kc := func(args ...string) func(ns, as string) []string {
		return func(ns, as string) []string { return append([]string{"kubectl", "-n", ns, as}, args...) }
	}
	ks := func(args ...string) func(ns, as string) []string {
		return func(ns, as string) []string { return append([]string{"kubectl", "sandbox", "-n", ns, as}, args...) }
	}
	actions := []action{
		{"get", kc("get", "sandbox", "target")},
		{"list", kc("get", "sandboxes")},
		{"status", kc("get", "sandbox", "target", "--subresource=status")},
		{"exec", ks("exec", "target", "--", "true")},
		{"ls", ks("ls", "target", "/tmp")},
		{"cp-up", ks("cp", "-", "target:/tmp/from-cp")},
		{"cp-down", ks("cp", "target:/etc/hostname", "-")},
		{"renew", ks("renew", "target", "--for", "5m")},
		{"label", kc("label", "sandbox", "target", "touched=yes", "--overwrite")},
		{"create", ks("create", "other", "--image", pythonImage)},
		{"delete", kc("delete", "sandbox", "other", "--wait=false")},
	}
	allowed := map[string]map[string]bool{ // user -> action -> allowed in home (never in away)
		"ed": {"get": true, "list": true, "status": true, "exec": true, "ls": true, "cp-up": true, "cp-down": true,
			"renew": true, "label": true, "create": true, "delete": true},
		"vic": {"get": true, "list": true, "status": true},
		"nob": {},
	}
	for _, user := range []string{"ed", "vic", "nob"} {
		for _, ns := range []string{home, away} {
			for _, a := range actions {
				want := ns == home && allowed[user][a.name]
				name := user + "/" + map[bool]string{true: "home", false: "away"}[ns == home] + "/" + a.name
				t.Run(name, func(t *testing.T) {
					argv := a.args(ns, "--as="+user)
					r := run(t, []byte("from stdin"), argv[0], argv[1:]...)
					if want && r.code != 0 {
						t.Errorf("%v: want allowed, got exit %d: %s", argv, r.code, r.stderr)
					}
					if !want && (r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "forbidden")) {
						t.Errorf("%v: want forbidden, got exit %d: %s", argv, r.code, r.stderr)
					}
				})
			}
		}
	}
}
