//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kube-sandbox/kube-sandbox/test/e2e/outside"
)

// probe is Python run in a sandbox: each line of its output is "WHAT RESULT", RESULT being
// "ok", "refused", "nxdomain", "timeout" or another error's name, so that a failure says how
// it failed (fast refusal versus a timeout).
const probe = `
import socket, sys, time
def tcp(what, host, port, timeout=3):
    t = time.time()
    try:
        s = socket.create_connection((host, port), timeout=timeout)
        s.close(); r = "ok"
    except ConnectionRefusedError: r = "refused"
    except socket.timeout: r = "timeout"
    except OSError as e: r = "oserror-%d" % e.errno
    print(what, r, "%.3f" % (time.time() - t))
def name(what, host):
    try:
        socket.getaddrinfo(host, 80, socket.AF_INET, socket.SOCK_STREAM); print(what, "ok")
    except socket.gaierror as e: print(what, "nxdomain" if e.errno in (socket.EAI_NONAME, -5) else "gaierror%d" % e.errno)
def udpdns(what, server, qname):
    # A raw DNS query (A, recursion desired) to a resolver of the sandbox's choosing.
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"".join(bytes([len(l)]) + l.encode() for l in qname.split(".")) + b"\x00\x00\x01\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
    try:
        s.sendto(q, (server, 53)); a = s.recv(512)
        rcode = a[3] & 15; n = (a[6] << 8) | a[7]
        print(what, "answers=%d rcode=%d" % (n, rcode))
    except socket.timeout: print(what, "timeout")
    except OSError as e: print(what, "oserror-%d" % e.errno)
def http(what, url):
    import urllib.request
    try:
        print(what, "ok" if urllib.request.urlopen(url, timeout=3).read() == b"outside" else "wrong-body")
    except Exception as e: print(what, type(e).__name__)
for line in sys.argv[1:]:
    f, *args = line.split(",")
    {"tcp": lambda w, h, p: tcp(w, h, int(p)), "name": name, "udpdns": udpdns, "http": http,
     "tcp6": lambda w, h, p: tcp(w, h, int(p))}[f](*args)
`

// probeSandbox runs probe checks (each "FUNC,WHAT,ARGS...") in a sandbox and returns WHAT ->
// RESULT.
func probeSandbox(t *testing.T, ns, name string, checks ...string) map[string]string {
	t.Helper()
	out := mustSandboxCmd(t, ns, append([]string{"exec", name, "--", "python3", "-c", probe}, checks...)...)
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) >= 2 {
			got[f[0]] = strings.Join(f[1:2], "")
			if f[1] == "answers=0" || strings.HasPrefix(f[1], "answers=") {
				got[f[0]] = strings.Join(f[1:], " ")
			}
		}
	}
	return got
}

func expectProbe(t *testing.T, sandbox string, got map[string]string, want map[string]string) {
	t.Helper()
	for what, w := range want {
		if got[what] != w {
			t.Errorf("%s: %s: %q, want %q", sandbox, what, got[what], w)
		}
	}
}

type egressState struct {
	Metadata struct {
		Generation int64 `json:"generation"`
	} `json:"metadata"`
	Status struct {
		Conditions []condition `json:"conditions"`
		Pods       []struct {
			Name string `json:"name"`
			IP   string `json:"ip"`
		} `json:"pods"`
	} `json:"status"`
}

// waitEgressReady waits until EgressReady is True for the sandbox's current generation, and
// returns how long that took.
func waitEgressReady(t *testing.T, ns, name string) (egressState, time.Duration) {
	t.Helper()
	start := time.Now()
	var s egressState
	waitFor(t, name+" EgressReady", 60*time.Second, func() (bool, string) {
		s = egressState{}
		getJSON(t, &s, "-n", ns, "get", "sandbox", name)
		c := findCondition(s.Status.Conditions, "EgressReady")
		return c.Status == "True" && c.ObservedGeneration >= s.Metadata.Generation, fmt.Sprintf("%+v", s.Status.Conditions)
	})
	return s, time.Since(start)
}

// usePlatformResolver points the platform's DNS proxy (dnsUpstreams of kube-sandbox-egress) at
// addr for the test, the rest of the platform policy as shipped, and restores it afterwards.
func usePlatformResolver(t *testing.T, addr string) {
	t.Helper()
	prev := mustKubectl(t, "-n", "kube-sandbox-system", "get", "configmap", "kube-sandbox-egress", "-o", "jsonpath={.data.dnsUpstreams}")
	patch := func(upstreams string) {
		data, _ := json.Marshal(map[string]any{"data": map[string]string{"dnsUpstreams": upstreams}})
		mustKubectl(t, "-n", "kube-sandbox-system", "patch", "configmap", "kube-sandbox-egress", "--type=merge", "-p", string(data))
	}
	patch(fmt.Sprintf("- %s\n", addr))
	t.Cleanup(func() { patch(prev) })
}

// runtimes are the RuntimeClasses every egress case runs under: the node's default (runc) and
// gVisor, whose user-space network stack bypasses the pod's own netfilter: the node agent's
// filter, on the pod's host-side interface, must hold for both.
var runtimes = []struct{ name, class string }{{"runc", ""}, {"gvisor", "gvisor"}}

// TestEgress: outbound policies enforced by the node agent (sandbox-node) on the real cluster,
// for direct and pooled sandboxes under each runtime, against "outside" hosts (network
// namespaces behind the node) whose servers count what reaches them.
func TestEgress(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt.name, func(t *testing.T) { testEgress(t, rt.class) })
	}
}

func testEgress(t *testing.T, runtimeClass string) {
	net := outside.New(t)
	dnsHost := net.AddHost(t, "dns")
	web := net.AddHost(t, "web")
	other := net.AddHost(t, "other")
	rogue := net.AddHost(t, "rogue")
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("outside")) })
	web.ServeHTTP(t, 80, handler)
	other.ServeHTTP(t, 80, handler)
	other.ServeTCP(t, 853)
	dnsHost.ServeDNS(t, map[string][]netip.Addr{
		"allowed.test.":     {web.IP},
		"www.wild.test.":    {web.IP},
		"wild.test.":        {web.IP},
		"denied.test.":      {other.IP},
		"other.test.":       {other.IP},
		"metadata.test.":    {netip.MustParseAddr("169.254.169.254")},
		"kubernetes.test.":  {netip.MustParseAddr("10.250.0.1")},
		"rogue-only.test.":  {web.IP},
		"later.test.":       {other.IP},
		"cut.test.":         {web.IP},
		"www.allowed.test.": {web.IP},
	})
	rogue.ServeDNS(t, map[string][]netip.Addr{"rogue-only.test.": {web.IP}})

	// The platform's resolver is the test's.
	usePlatformResolver(t, dnsHost.Addr(53))

	ns := newNamespace(t)
	applyPoolIn(t, ns, "egress", runtimeClass, 3, 3, 6)
	waitPoolFull(t, ns, "egress", 3, 0, 120*time.Second)

	direct := []string{"create", "direct", "--image", pythonImage, "--allow", "allowed.test", "--allow", "*.wild.test", "--timeout", "30m"}
	if runtimeClass != "" {
		direct = append(direct, "--runtime-class", runtimeClass)
	}
	mustSandboxCmd(t, ns, direct...)
	mustSandboxCmd(t, ns, "create", "pooled", "--pool", "egress", "--allow", "allowed.test", "--allow", "*.wild.test", "--timeout", "30m")
	mustSandboxCmd(t, ns, "create", "closed", "--pool", "egress", "--deny-all", "--timeout", "30m", "--", "python3", "-m", "http.server", "8000", "--directory", "/tmp")
	mustSandboxCmd(t, ns, "create", "default", "--pool", "egress", "--timeout", "30m")
	waitSandboxRunning(t, ns, 120*time.Second, "direct", "pooled", "closed", "default")
	for _, n := range []string{"direct", "pooled", "closed", "default"} {
		waitEgressReady(t, ns, n)
	}

	for _, name := range []string{"direct", "pooled"} {
		t.Run(name+" enforces its policy", func(t *testing.T) {
			deniedBefore, otherBefore := dnsHost.DNSQueries("denied.test"), other.HTTPRequests(80)
			got := probeSandbox(t, ns, name,
				"name,allowed-name,allowed.test", "http,allowed-http,http://allowed.test/",
				"name,wildcard-subdomain,www.wild.test", "name,wildcard-bare,wild.test",
				"name,denied-name,denied.test",
				"tcp,denied-address,"+other.IP.String()+",80",
				"udpdns,other-resolver,"+rogue.IP.String()+",rogue-only.test",
				"tcp,dot,"+other.IP.String()+",853",
				"tcp,ipv6,"+web.IP6.String()+",80",
			)
			expectProbe(t, name, got, map[string]string{
				"allowed-name": "ok", "allowed-http": "ok",
				"wildcard-subdomain": "ok", "wildcard-bare": "nxdomain",
				"denied-name":    "nxdomain",
				"denied-address": "refused", // fast: a reset, not a timeout
				"other-resolver": "answers=0 rcode=3",
				"dot":            "refused",
			})
			if r := got["ipv6"]; r == "ok" || r == "timeout" {
				t.Errorf("%s: IPv6 to an outside host: %q, want a fast failure", name, r)
			}
			if n := dnsHost.DNSQueries("denied.test") - deniedBefore; n != 0 {
				t.Errorf("%s: the upstream saw %d queries for a denied name", name, n)
			}
			if n := rogue.DNSQueriesTotal(); n != 0 {
				t.Errorf("the sandbox's own resolver got %d queries: DNS bypassed the proxy", n)
			}
			if n := other.Connections(853); n != 0 {
				t.Errorf("DoT reached the outside host %d times", n)
			}
			if n := other.HTTPRequests(80) - otherBefore; n != 0 {
				t.Errorf("a denied address got %d requests", n)
			}
		})
	}

	t.Run("denied names are Events on the sandbox", func(t *testing.T) {
		for _, name := range []string{"direct", "pooled"} {
			waitFor(t, "an EgressDenied Event on "+name, 90*time.Second, func() (bool, string) {
				out := kubectl(t, "-n", ns, "get", "events", "--field-selector", "reason=EgressDenied,involvedObject.name="+name,
					"-o", "jsonpath={.items[*].message}").stdout
				return strings.Contains(out, "denied.test"), out
			})
		}
	})

	t.Run("two pooled sandboxes of one pool have their own policies", func(t *testing.T) {
		got := probeSandbox(t, ns, "closed", "name,allowed-name,allowed.test", "tcp,web,"+web.IP.String()+",80")
		expectProbe(t, "closed", got, map[string]string{"allowed-name": "nxdomain", "web": "refused"})
	})

	t.Run("the default policy reaches neither the cluster nor the metadata address", func(t *testing.T) {
		d := egressState{}
		getJSON(t, &d, "-n", ns, "get", "sandbox", "direct")
		got := probeSandbox(t, ns, "default",
			"tcp,other-pod,"+d.Status.Pods[0].IP+",44772", "tcp,kube-apiserver,10.250.0.1,6443",
			"tcp,metadata,169.254.169.254,80", "tcp,outside,"+web.IP.String()+",80", "name,a-name,allowed.test")
		expectProbe(t, "default", got, map[string]string{
			"other-pod": "refused", "kube-apiserver": "refused", "metadata": "refused", "outside": "refused", "a-name": "nxdomain"})
		// Even a sandbox that allows the addresses by name gets no further: always-deny wins.
		got = probeSandbox(t, ns, "direct", "tcp,kube-apiserver,10.250.0.1,6443", "tcp,metadata,169.254.169.254,80")
		expectProbe(t, "direct", got, map[string]string{"kube-apiserver": "refused", "metadata": "refused"})
	})

	t.Run("a change of the platform policy reaches running sandboxes", func(t *testing.T) {
		cm := func(key, value string) {
			data, _ := json.Marshal(map[string]any{"data": map[string]string{key: value}})
			mustKubectl(t, "-n", "kube-sandbox-system", "patch", "configmap", "kube-sandbox-egress", "--type=merge", "-p", string(data))
		}
		prevAllow := mustKubectl(t, "-n", "kube-sandbox-system", "get", "configmap", "kube-sandbox-egress", "-o", "jsonpath={.data.alwaysAllow}")
		t.Cleanup(func() { cm("alwaysAllow", prevAllow) })
		start := time.Now()
		cm("alwaysAllow", "- "+other.IP.String()+"\n")
		waitFor(t, "the closed sandbox to reach what the platform now allows", 30*time.Second, func() (bool, string) {
			got := probeSandbox(t, ns, "closed", "tcp,other,"+other.IP.String()+",80")
			return got["other"] == "ok", fmt.Sprint(got)
		})
		t.Logf("alwaysAllow: in force in a running sandbox %.0f ms after the ConfigMap patch", float64(time.Since(start).Milliseconds()))
		cm("alwaysAllow", prevAllow)
		waitFor(t, "the closed sandbox to be denied again", 30*time.Second, func() (bool, string) {
			got := probeSandbox(t, ns, "closed", "tcp,other,"+other.IP.String()+",80")
			return got["other"] == "refused", fmt.Sprint(got)
		})
	})

	t.Run("exec, files and proxy work under deny-all", func(t *testing.T) {
		dir := t.TempDir()
		src := filepath.Join(dir, "in.txt")
		if err := os.WriteFile(src, []byte("through files\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		mustSandboxCmd(t, ns, "cp", src, "closed:/tmp/in.txt")
		if out := mustSandboxCmd(t, ns, "exec", "closed", "--", "cat", "/tmp/in.txt"); out != "through files\n" {
			t.Errorf("files then exec: %q", out)
		}
		path := fmt.Sprintf("/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/%s/sandboxes/closed/proxy/8000/in.txt", ns)
		waitFor(t, "the proxy to the sandbox's server", 30*time.Second, func() (bool, string) {
			g := kubectl(t, "get", "--raw", path)
			return g.stdout == "through files\n", g.stdout + g.stderr
		})
	})

	t.Run("a policy change takes effect at once, both ways", func(t *testing.T) {
		allow := `{"spec":{"networkPolicy":{"defaultAction":"Deny","egress":[{"action":"Allow","to":"later.test"},{"action":"Allow","to":"` + other.IP.String() + `","ports":[{"port":80}]}]}}}`
		start := time.Now()
		mustKubectl(t, "-n", ns, "patch", "sandbox", "closed", "--type=merge", "-p", allow)
		_, took := waitEgressReady(t, ns, "closed")
		t.Logf("allow: EgressReady %.0f ms after the patch was sent", float64(took.Milliseconds()))
		got := probeSandbox(t, ns, "closed", "name,later,later.test", "tcp,other,"+other.IP.String()+",80", "tcp,other-443,"+other.IP.String()+",443")
		expectProbe(t, "closed", got, map[string]string{"later": "ok", "other": "ok", "other-443": "refused"})
		t.Logf("allow: in force %.0f ms after the patch (incl. one exec)", float64(time.Since(start).Milliseconds()))

		start = time.Now()
		mustKubectl(t, "-n", ns, "patch", "sandbox", "closed", "--type=merge", "-p", `{"spec":{"networkPolicy":{"defaultAction":"Deny","egress":null}}}`)
		_, took = waitEgressReady(t, ns, "closed")
		t.Logf("deny: EgressReady %.0f ms after the patch was sent", float64(took.Milliseconds()))
		got = probeSandbox(t, ns, "closed", "name,later,later.test", "tcp,other,"+other.IP.String()+",80")
		expectProbe(t, "closed", got, map[string]string{"later": "nxdomain", "other": "refused"})
	})

	t.Run("killing the node agent leaves traffic denied", func(t *testing.T) {
		pid := nodeAgentPID(t)
		// One exec watches for 4 s, every 50 ms, a denied address and an allowed name, while
		// the node agent is killed under it: the rules are the kernel's, not the agent's.
		watch := `
import socket, time
end = time.time() + 4
while time.time() < end:
    try:
        socket.create_connection((ADDR, 80), timeout=1).close(); d = "ok"
    except ConnectionRefusedError: d = "refused"
    except OSError as e: d = "error"
    try:
        socket.getaddrinfo("allowed.test", 80, socket.AF_INET, socket.SOCK_STREAM); n = "ok"
    except OSError: n = "failed"
    print(d, n, flush=True)
    time.sleep(0.05)
`
		done := make(chan result, 1)
		go func() {
			done <- runDetached("kubectl", "sandbox", "-n", ns, "exec", "pooled", "--", "python3", "-c",
				strings.Replace(watch, "ADDR", strconv.Quote(other.IP.String()), 1))
		}()
		time.Sleep(time.Second)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill sandbox-node (pid %d): %v", pid, err)
		}
		r := <-done
		if r.code != 0 {
			t.Fatalf("the watching exec: exit %d: %s", r.code, r.stderr)
		}
		counts := map[string]int{}
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			f := strings.Fields(l)
			if len(f) == 2 {
				counts["denied-address "+f[0]]++
				counts["allowed-name "+f[1]]++
			}
		}
		t.Logf("while sandbox-node was killed and restarted: %v", counts)
		if counts["denied-address ok"] > 0 {
			t.Errorf("a denied address was reached %d times around the agent's death", counts["denied-address ok"])
		}
		// The kubelet restarts it; it takes back its rules and policies, and allowed names
		// resolve again.
		waitFor(t, "sandbox-node back", 60*time.Second, func() (bool, string) {
			if p := nodeAgentPIDs(t); len(p) == 0 || p[0] == pid {
				return false, "not restarted yet"
			}
			r := sandboxCmd(t, ns, "exec", "pooled", "--", "python3", "-c", probe, "name,allowed-name,allowed.test", "tcp,denied-address,"+other.IP.String()+",80")
			return r.code == 0 && strings.Contains(r.stdout, "allowed-name ok") && strings.Contains(r.stdout, "denied-address refused"), r.stdout + r.stderr
		})
	})

	t.Run("a sandbox created while the node agent is away waits, then runs under its policy", func(t *testing.T) {
		away := `{"spec":{"template":{"spec":{"nodeSelector":{"kube-sandbox.io/e2e-no-such-node":"true"}}}}}`
		mustKubectl(t, "-n", "kube-sandbox-system", "patch", "daemonset", "sandbox-node", "--type=strategic", "-p", away)
		back := func() {
			mustKubectl(t, "-n", "kube-sandbox-system", "patch", "daemonset", "sandbox-node", "--type=json",
				"-p", `[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]`)
		}
		restored := false
		t.Cleanup(func() {
			if !restored {
				back()
			}
		})
		waitFor(t, "sandbox-node gone", 60*time.Second, func() (bool, string) {
			p := nodeAgentPIDs(t)
			return len(p) == 0, fmt.Sprint(p)
		})
		late := []string{"create", "late", "--image", pythonImage, "--allow", "allowed.test", "--timeout", "30m"}
		if runtimeClass != "" {
			late = append(late, "--runtime-class", runtimeClass)
		}
		mustSandboxCmd(t, ns, late...)
		// Its pod gets an address and waits in its first init container: nothing of the sandbox runs.
		waitFor(t, "the late sandbox's pod to wait for the node agent", 60*time.Second, func() (bool, string) {
			out := kubectl(t, "-n", ns, "get", "pod", "late-0", "-o",
				`jsonpath={.status.podIP}|{.status.initContainerStatuses[0].state.running.startedAt}|{.status.containerStatuses[0].state.running.startedAt}`).stdout
			f := strings.Split(out, "|")
			return len(f) == 3 && f[0] != "" && f[1] != "" && f[2] == "", out
		})
		// And goes on waiting: the sandbox container never starts without the agent.
		time.Sleep(3 * time.Second)
		if out := mustKubectl(t, "-n", ns, "get", "pod", "late-0", "-o", `jsonpath={.status.containerStatuses[0].state.running.startedAt}`); out != "" {
			t.Fatalf("the sandbox container started at %s with no node agent", out)
		}
		s := egressState{}
		getJSON(t, &s, "-n", ns, "get", "sandbox", "late")
		if c := findCondition(s.Status.Conditions, "EgressReady"); c.Status == "True" {
			t.Errorf("EgressReady %+v while no node agent runs", c)
		}
		t.Logf("while the agent is away: %+v", findCondition(s.Status.Conditions, "EgressReady"))
		back()
		restored = true
		waitSandboxRunning(t, ns, 120*time.Second, "late")
		waitEgressReady(t, ns, "late")
		got := probeSandbox(t, ns, "late", "name,allowed-name,allowed.test", "tcp,denied-address,"+other.IP.String()+",80")
		expectProbe(t, "late", got, map[string]string{"allowed-name": "ok", "denied-address": "refused"})
	})

	t.Run("get -o wide shows the policy", func(t *testing.T) {
		out := mustKubectl(t, "-n", ns, "get", "sandboxes", "-o", "wide")
		if !strings.Contains(strings.ToLower(out), "egress") {
			t.Errorf("no egress column:\n%s", out)
		}
	})
}

// nodeAgentPID is the node's sandbox-node.
func nodeAgentPID(t *testing.T) int {
	t.Helper()
	return processPID(t, nodeAgentCmdline)
}

// nodeAgentPIDs are the node's sandbox-node processes (none while it is away).
func nodeAgentPIDs(t *testing.T) []int {
	t.Helper()
	return processPIDs(t, nodeAgentCmdline)
}

const nodeAgentCmdline = "/usr/local/bin/sandbox-node\x00"
