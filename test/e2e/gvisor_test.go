//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestGVisor: a sandbox in gVisor (RuntimeClass gvisor, handler runsc) has every feature a
// runc one has. Egress, files, proxy, port-forward and terminals run under both runtimes in
// TestEgress and TestFilesProxyAndPortForward, background processes, attach and their
// terminals in TestProcesses and TestProcessesAttachAndTerminal, file watches in
// TestFilesWatch and code contexts in TestCodeContexts; here: that the sandbox really is in gVisor, for a
// sandbox-only user too, direct and pooled; tasks and their logs; and pause and resume, whose
// snapshot keeps a gVisor sandbox's files. A runtime class whose handler is not one under which
// egress is known to be enforced (a VM runtime, say) is refused.
func TestGVisor(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	bindUsers(t, ns)

	r := sandboxCmd(t, ns, "--as="+sandboxOnlyUser, "create", "direct", "--image", pythonImage, "--runtime-class", "gvisor", "--timeout", "10m")
	if r.code != 0 {
		t.Fatalf("a sandbox-only user creating a gVisor sandbox: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	applyPoolIn(t, ns, "gv", "gvisor", 1, 1, 3)
	waitPoolFull(t, ns, "gv", 1, 0, 120*time.Second)
	mustSandboxCmd(t, ns, "create", "pooled", "--pool", "gv", "--timeout", "10m")
	waitSandboxRunning(t, ns, 120*time.Second, "direct", "pooled")
	for _, name := range []string{"direct", "pooled"} {
		// gVisor's own kernel answers: its release and its boot messages.
		out := mustSandboxCmd(t, ns, "exec", name, "--", "sh", "-c", "uname -r; dmesg 2>/dev/null | head -3")
		if !strings.Contains(out, "gVisor") && !gvisorRelease(out) {
			t.Errorf("%s does not run in gVisor: %q", name, out)
		}
	}

	t.Run("tasks and logs", func(t *testing.T) {
		mustSandboxCmd(t, ns, "create", "job", "--image", pythonImage, "--runtime-class", "gvisor", "--replicas", "2", "--task", "--",
			"python3", "-c", "import os; print('task in', os.uname().release, flush=True)")
		waitTasksComplete(t, ns, "job", 120*time.Second)
		logs := mustSandboxCmd(t, ns, "logs", "job", "--replica", "1")
		if !strings.Contains(logs, "task in ") || !gvisorRelease(logs) {
			t.Errorf("the task's log: %q", logs)
		}
	})

	t.Run("pause and resume keep its files", func(t *testing.T) {
		sum := strings.TrimSpace(mustSandboxCmd(t, ns, "exec", "direct", "--", "python3", "-c", writeState, "1048576", "gvisor"))
		paused := pauseResume(t, ns, "direct")
		if len(paused.Status.Snapshots) != 1 || paused.Status.Snapshots[0].LayerSize < 1<<20 {
			t.Fatalf("snapshots %+v: want one with the 1 MiB written", paused.Status.Snapshots)
		}
		got := mustSandboxCmd(t, ns, "exec", "direct", "--", "python3", "-c", readState)
		if want := "written before the pause by gvisor\nhello from gvisor\n" + sum + "\nissue-gone\n"; got != want {
			t.Errorf("after the resume the sandbox has:\n%s\nwant:\n%s", got, want)
		}
		if out := mustSandboxCmd(t, ns, "exec", "direct", "--", "uname", "-r"); !gvisorRelease(out) {
			t.Errorf("the resumed sandbox left gVisor: uname -r %q", out)
		}
	})

	t.Run("a runtime class the egress policy is not proven under is refused", func(t *testing.T) {
		if r := run(t, []byte("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: e2e-vm}\nhandler: kata\n"), "kubectl", "apply", "-f", "-"); r.code != 0 {
			t.Fatalf("apply the runtime class: %s", r.stderr)
		}
		t.Cleanup(func() { kubectl(t, "delete", "runtimeclass", "e2e-vm", "--ignore-not-found") })
		r := sandboxCmd(t, ns, "create", "vm", "--image", pythonImage, "--runtime-class", "e2e-vm")
		if r.code == 0 || !strings.Contains(r.stderr, "spec.template.spec.runtimeClassName") || !strings.Contains(r.stderr, "kata") {
			t.Fatalf("create with handler kata: exit %d: %s%s; want a refusal naming spec.template.spec.runtimeClassName", r.code, r.stdout, r.stderr)
		}
		if g := kubectl(t, "-n", ns, "get", "batchsandbox", "vm"); g.code == 0 {
			t.Errorf("a refused sandbox was stored: %s", g.stdout)
		}
	})
}

// TestMissingRuntimeClass: a sandbox whose RuntimeClass the cluster does not have says so in a
// condition and an Event, and no pod of it is made and made again: the kube-apiserver refuses
// the pod, which a retry would not change.
func TestMissingRuntimeClass(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	mustSandboxCmd(t, ns, "create", "nowhere", "--image", pythonImage, "--runtime-class", "e2e-missing")
	var got condition
	waitFor(t, "a condition naming the missing RuntimeClass", 60*time.Second, func() (bool, string) {
		s := getSandbox(t, ns, "nowhere")
		for _, c := range s.Status.Conditions {
			if c.Reason == "PodCreateFailed" && strings.Contains(c.Message, "e2e-missing") {
				got = c
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", s.Status.Conditions)
	})
	t.Logf("condition %s=%s %s: %s", got.Type, got.Status, got.Reason, got.Message)
	waitFor(t, "the PodCreateFailed Event", 30*time.Second, func() (bool, string) {
		out := kubectl(t, "-n", ns, "get", "events", "--field-selector", "reason=PodCreateFailed,involvedObject.name=nowhere", "-o", "name")
		return strings.TrimSpace(out.stdout) != "", out.stderr
	})
	if out := mustKubectl(t, "-n", ns, "get", "pods", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("pods of a sandbox whose RuntimeClass is missing: %s", out)
	}
	if s := getSandbox(t, ns, "nowhere"); s.Status.Phase == "Running" {
		t.Errorf("phase %s, want it not Running", s.Status.Phase)
	}
}

// gvisorRelease tells whether s holds the kernel release gVisor reports: "4.4.0" in older
// releases, "<version>-gvisor" in newer ones; never the node's own.
func gvisorRelease(s string) bool {
	return strings.Contains(strings.ToLower(s), "gvisor") || strings.Contains(s, "4.4.0")
}
