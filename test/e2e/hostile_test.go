//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kube-sandbox/kube-sandbox/test/e2e/outside"
)

// hostile is Python run as root in a sandbox, trying what hostile code would to get past its
// egress policy. Each argument is "FUNC,WHAT,ARGS..."; each line of output is "WHAT RESULT",
// RESULT being "ok" (or "sent") when the kernel let it through, else "errno-N".
const hostile = `
import socket, struct, sys, errno
def res(what, fn):
    try: r = fn()
    except OSError as e: r = "errno-%d" % e.errno
    print(what, r)
def opened(family, kind, proto):
    s = socket.socket(family, kind, proto); s.close(); return "ok"
def query(qname):
    return b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"".join(bytes([len(l)]) + l.encode() for l in qname.split(".")) + b"\x00\x00\x01\x00\x01"
def self_ip(dst):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect((dst, 53)); ip = s.getsockname()[0]; s.close(); return ip
def rawdns(src, dst, qname):
    # An IPv4 packet of our own making: a DNS query from src, whatever our address is.
    if src == "self": src = self_ip(dst)
    payload = query(qname)
    udp = struct.pack("!HHHH", 40000, 53, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, socket.IPPROTO_UDP, 0, socket.inet_aton(src), socket.inet_aton(dst))
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    for _ in range(3): s.sendto(ip + udp, (dst, 0))
    s.close(); return "sent"
def netlink(msgtype, body, attrs):
    # One rtnetlink request with NLM_F_ACK: "ok", or the errno of the kernel's answer.
    payload = body + b"".join(struct.pack("=HH", 4 + len(v), t) + v + b"\0" * (-len(v) % 4) for t, v in attrs)
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)   # NETLINK_ROUTE
    s.bind((0, 0))
    s.send(struct.pack("=LHHLL", 16 + len(payload), msgtype, 0x1 | 0x4 | 0x400, 1, 0) + payload)
    ans = s.recv(65536); s.close()
    code = struct.unpack("=i", ans[16:20])[0]
    return "ok" if code == 0 else "errno-%d" % -code
def addaddr(ip, ifname):
    idx = socket.if_nametoindex(ifname)
    return netlink(20, struct.pack("=BBBBi", socket.AF_INET, 32, 0, 0, idx), [(2, socket.inet_aton(ip)), (1, socket.inet_aton(ip))])
def addroute(dst, ifname):
    # dst/32 on the link: straight to the host, past the pod's gateway.
    idx = socket.if_nametoindex(ifname)
    return netlink(24, struct.pack("=BBBBBBBBI", socket.AF_INET, 32, 0, 0, 254, 3, 253, 1, 0), [(1, socket.inet_aton(dst)), (4, struct.pack("=i", idx))])
def udpfrom(src, dst, qname):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((src, 0))
    for _ in range(3): s.sendto(query(qname), (dst, 53))
    s.close(); return "sent"
def tcp(host, port):
    s = socket.create_connection((host, int(port)), timeout=3); s.close(); return "ok"
fns = {
    "raw": lambda: opened(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP),
    "packet": lambda: opened(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)),
    "rawdns": rawdns, "addaddr": addaddr, "addroute": addroute, "udpfrom": udpfrom, "tcp": tcp,
}
for line in sys.argv[1:]:
    f, what, *args = line.split(",")
    if f == "tcp":
        try: print(what, tcp(*args))
        except ConnectionRefusedError: print(what, "refused")
        except socket.timeout: print(what, "timeout")
        except OSError as e: print(what, "errno-%d" % e.errno)
    else:
        res(what, lambda: fns[f](*args))
`

// runHostile runs hostile checks in a sandbox and returns WHAT -> RESULT.
func runHostile(t *testing.T, ns, name string, checks ...string) map[string]string {
	t.Helper()
	out := mustSandboxCmd(t, ns, append([]string{"exec", name, "--", "python3", "-c", hostile}, checks...)...)
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			got[f[0]] = f[1]
		}
	}
	t.Logf("%s: %v", name, got)
	return got
}

// nodeAgentConnections reads sandbox_egress_connections_total of a sandbox from the node
// agent's metrics (its authenticated metrics port on the node's address), by verdict.
func nodeAgentConnections(t *testing.T, m *metricsScraper, ns, sandbox string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, l := range m.series(t, ns, sandbox) {
		if !strings.HasPrefix(l, "sandbox_egress_connections_total{") {
			continue
		}
		labels, value, _ := strings.Cut(l, "} ")
		_, verdict, _ := strings.Cut(labels, `verdict="`)
		verdict, _, _ = strings.Cut(verdict, `"`)
		v, _ := strconv.ParseFloat(value, 64)
		out[verdict] += v
	}
	return out
}

// TestHostileCode: code in a sandbox, under runc and under gVisor, tries what would get it past
// its egress policy: raw and packet sockets, changes to its addresses and routes, packets with
// another source (another pod's, the node's, an outside host's), and a host its policy denies by
// a route of its own. A sandbox as a sandbox-only user gets it (NET_RAW dropped, no NET_ADMIN)
// is refused by its kernel; one whose creator gave it NET_RAW and NET_ADMIN (a user who may
// create pods) gets its packets out of the pod, and the node agent drops them at the pod's
// interface, where nothing in the pod reaches, and counts them. The outside resolver, which
// every query the policy allows reaches, shows what got through.
func TestHostileCode(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt.name, func(t *testing.T) { testHostileCode(t, rt.class) })
	}
}

func testHostileCode(t *testing.T, runtimeClass string) {
	rtName := "runc"
	if runtimeClass != "" {
		rtName = runtimeClass
	}
	scraper := newMetricsScraper(t)
	net := outside.New(t)
	dnsHost := net.AddHost(t, "dns")
	other := net.AddHost(t, "other")
	other.ServeHTTP(t, 80, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("outside")) }))
	dnsHost.ServeDNS(t, map[string][]netip.Addr{"other.allowed.test.": {other.IP}})
	usePlatformResolver(t, dnsHost.Addr(53))

	ns := newNamespace(t)
	rc := ""
	if runtimeClass != "" {
		rc = "      runtimeClassName: " + runtimeClass + "\n"
	}
	// Names under allowed.test resolve through the node's proxy, which asks the outside
	// resolver: a query of such a name that reaches it got out. Everything else is denied.
	sandbox := func(name, securityContext string) []byte {
		return []byte(fmt.Sprintf(`apiVersion: sandbox.kube-sandbox.io/v1alpha1
kind: Sandbox
metadata: {name: %s}
spec:
  timeoutSeconds: 1800
  networkPolicy:
    defaultAction: Deny
    egress:
    - {action: Allow, to: "*.allowed.test"}
  template:
    spec:
%s      containers:
      - name: sandbox
        image: %s
        imagePullPolicy: Never
%s`, name, rc, pythonImage, securityContext))
	}
	for name, sc := range map[string]string{
		"plain":   "",
		"capable": "        securityContext: {capabilities: {add: [NET_RAW, NET_ADMIN]}}\n",
	} {
		if r := run(t, sandbox(name, sc), "kubectl", "-n", ns, "create", "-f", "-"); r.code != 0 {
			t.Fatalf("create sandbox %s: exit %d: %s", name, r.code, r.stderr)
		}
	}
	waitSandboxRunning(t, ns, 120*time.Second, "plain", "capable")
	waitEgressReady(t, ns, "plain")
	waitEgressReady(t, ns, "capable")

	var refused int
	t.Run("a sandbox's kernel refuses raw and packet sockets, address and route changes", func(t *testing.T) {
		got := runHostile(t, ns, "plain",
			"raw,raw", "packet,packet", "addaddr,addaddr,10.244.3.77,eth0", "addroute,addroute,"+other.IP.String()+",eth0",
			"tcp,denied,"+other.IP.String()+",80")
		for _, what := range []string{"raw", "packet", "addaddr", "addroute"} {
			if r := got[what]; r == "" || r == "ok" {
				t.Errorf("%s: %q, want it refused", what, r)
			} else {
				refused++
			}
		}
		if got["denied"] != "refused" {
			t.Errorf("a denied host: %q, want refused (a reset from the node)", got["denied"])
		}
	})

	t.Run("what a capable sandbox sends with another source or past its routes stays on the node", func(t *testing.T) {
		before := nodeAgentConnections(t, scraper, ns, "capable")
		selfIP := strings.TrimSpace(mustSandboxCmd(t, ns, "exec", "capable", "--", "python3", "-c",
			fmt.Sprintf("import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect((%q, 53)); print(s.getsockname()[0])", dnsHost.IP)))
		d := dnsHost.IP.String()
		spoofs := map[string]string{ // WHAT -> source
			"spoof-pod":  "10.244.3.250",
			"spoof-node": "10.250.0.1",
			"spoof-host": other.IP.String(),
		}
		checks := []string{"rawdns,self," + "self," + d + ",self.allowed.test"}
		for what, src := range spoofs {
			checks = append(checks, "rawdns,"+what+","+src+","+d+","+what+".allowed.test")
		}
		checks = append(checks,
			"addaddr,addaddr,10.244.3.77,eth0", "udpfrom,from-added,10.244.3.77,"+d+",from-added.allowed.test",
			"addroute,addroute,"+other.IP.String()+",eth0", "tcp,routed,"+other.IP.String()+",80")
		got := runHostile(t, ns, "capable", checks...)

		// The kernel lets a capable sandbox do all this (gVisor has no raw sockets at all):
		// what matters is that nothing of it reaches a host.
		rawWorks := got["self"] == "sent"
		if runtimeClass == "" && !rawWorks {
			t.Errorf("raw socket of a sandbox with NET_RAW under runc: %q, want sent (else this test tries nothing)", got["self"])
		}
		if got["addaddr"] != "ok" {
			t.Errorf("adding an address with NET_ADMIN: %q, want ok (else this test tries nothing)", got["addaddr"])
		}
		if rawWorks {
			// The same packet from the pod's own address: the node's proxy takes it (port 53
			// to any address) and asks the outside resolver, so it is counted there.
			waitFor(t, "the raw query from the pod's own address at the resolver", 10*time.Second, func() (bool, string) {
				return dnsHost.DNSQueries("self.allowed.test") > 0, fmt.Sprintf("pod address %s, queries %d", selfIP, dnsHost.DNSQueriesTotal())
			})
		}
		for what := range spoofs {
			if n := dnsHost.DNSQueries(what + ".allowed.test"); n != 0 {
				t.Errorf("%s: %d queries with a forged source reached the resolver", what, n)
			}
		}
		if n := dnsHost.DNSQueries("from-added.allowed.test"); n != 0 {
			t.Errorf("%d queries from an address the sandbox gave itself reached the resolver", n)
		}
		if got["routed"] == "ok" || other.HTTPRequests(80) != 0 {
			t.Errorf("a denied host by a route of the sandbox's own: %q, %d requests there", got["routed"], other.HTTPRequests(80))
		}
		// Each forged frame is dropped and counted at the pod's interface.
		want := 3.0 // the three queries from the added address
		if rawWorks {
			want += 3 * float64(len(spoofs))
		}
		waitFor(t, "spoofed frames counted by the node agent", 10*time.Second, func() (bool, string) {
			after := nodeAgentConnections(t, scraper, ns, "capable")
			return after["spoofed"]-before["spoofed"] >= want, fmt.Sprintf("before %v, after %v, want %v more spoofed", before, after, want)
		})
		after := nodeAgentConnections(t, scraper, ns, "capable")
		t.Logf("%s: node agent counted %v spoofed, %v denied (before %v)", rtName, after["spoofed"]-before["spoofed"], after["denied"]-before["denied"], before)
	})

	t.Run("the policy still holds after the sandbox changed its routes", func(t *testing.T) {
		got := probeSandbox(t, ns, "capable", "name,allowed,other.allowed.test", "tcp,denied,"+other.IP.String()+",80", "udpdns,resolver,"+dnsHost.IP.String()+",denied.example")
		expectProbe(t, "capable", got, map[string]string{"allowed": "ok", "resolver": "answers=0 rcode=3"})
		if got["denied"] == "ok" || other.HTTPRequests(80) != 0 {
			t.Errorf("a denied host: %q, %d requests there", got["denied"], other.HTTPRequests(80))
		}
	})
	t.Logf("%s: %d attempts refused by the sandbox's kernel", rtName, refused)
}
