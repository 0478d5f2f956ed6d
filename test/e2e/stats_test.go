//go:build e2e

package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
	"github.com/kube-sandbox/kube-sandbox/test/e2e/outside"
)

const (
	// nodeAddress is the local cluster's one node (hack/lib/common.sh HOST_IP).
	nodeAddress = "10.250.0.1"
	// downloadBytes is what the sandbox downloads from the outside host.
	downloadBytes = 10 << 20
	// statsMemoryLimit is the sandboxes' limit: room for the 200 MiB they hold.
	statsMemoryLimit = 768 << 20
)

// sandboxStats reads the stats subresource of a sandbox as the test's own user.
func sandboxStats(t *testing.T, ns, name string) sandboxv1alpha1.SandboxStats {
	t.Helper()
	out := mustKubectl(t, "get", "--raw", fmt.Sprintf("/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/%s/sandboxes/%s/stats", ns, name))
	var s sandboxv1alpha1.SandboxStats
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("decode SandboxStats: %v: %s", err, out)
	}
	return s
}

// TestStats: what a sandbox uses, under runc and gVisor, read on the node: a process burning a
// core shows about one core, 200 MiB held shows in the working set, 100 MiB written to the
// root filesystem shows in the writable layer, and a download from an outside host shows in
// the bytes received. The figures come through the stats subresource, `kubectl sandbox top`
// (for a sandbox-only user in its namespace, and a 403 elsewhere) and the node agent's
// authenticated Prometheus endpoint, whose series go when the sandbox goes.
func TestStats(t *testing.T) {
	net := outside.New(t)
	web := net.AddHost(t, "stats")
	payload := bytes.Repeat([]byte("0123456789abcdef"), downloadBytes/16)
	web.ServeHTTP(t, 80, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(payload) }))
	scraper := newMetricsScraper(t)
	for _, rt := range runtimes {
		t.Run(rt.name, func(t *testing.T) { testStats(t, rt.class, web.IP.String(), scraper) })
	}
}

func testStats(t *testing.T, runtimeClass, webIP string, scraper *metricsScraper) {
	ns := newNamespace(t)
	policy := fmt.Sprintf("  networkPolicy:\n    defaultAction: Deny\n    egress:\n    - {action: Allow, to: %q}\n", webIP)
	manifest := limitedSandbox("usage", runtimeClass, fmt.Sprint(statsMemoryLimit), policy)
	if r := run(t, []byte(manifest), "kubectl", "-n", ns, "create", "-f", "-"); r.code != 0 {
		t.Fatalf("create sandbox: exit %d: %s", r.code, r.stderr)
	}
	waitSandboxRunning(t, ns, 120*time.Second, "usage")
	waitEgressReady(t, ns, "usage")

	// Disk and network first, so that their CPU is over before the window that is measured.
	mustSandboxCmd(t, ns, "exec", "usage", "--", "python3", "-c",
		"import os\nwith open('/var/tmp/big', 'wb') as f:\n    for _ in range(100): f.write(os.urandom(1<<20))\n    os.fsync(f.fileno())")
	got := strings.TrimSpace(mustSandboxCmd(t, ns, "exec", "usage", "--", "python3", "-c",
		fmt.Sprintf("import urllib.request; print(len(urllib.request.urlopen('http://%s/', timeout=60).read()))", webIP)))
	if got != fmt.Sprint(downloadBytes) {
		t.Fatalf("the download got %s bytes, want %d", got, downloadBytes)
	}
	mustSandboxCmd(t, ns, "exec", "usage", "--detach", "--", "python3", "-c",
		"import time\nb = b'x' * (200 << 20)\ntime.sleep(3600)")
	mustSandboxCmd(t, ns, "exec", "usage", "--detach", "--", "python3", "-c", "while True: pass")
	burning := time.Now()

	// The figures of a window that starts at least 30 s after the burn started.
	var rs sandboxv1alpha1.SandboxReplicaStats
	waitFor(t, "figures of a window 30 s into the burn", 90*time.Second, func() (bool, string) {
		s := sandboxStats(t, ns, "usage")
		if len(s.Replicas) != 1 {
			return false, fmt.Sprintf("%d replicas", len(s.Replicas))
		}
		rs = s.Replicas[0]
		start := rs.Timestamp.Add(-rs.Window.Duration)
		return rs.CPU != nil && rs.Window.Duration > 0 && start.After(burning.Add(30*time.Second)),
			fmt.Sprintf("%+v", rs)
	})
	if age := time.Since(rs.Timestamp.Time); age > 15*time.Second {
		t.Errorf("figures are %s old, want at most 15 s", age)
	}
	if rs.Reason != "" {
		t.Errorf("reason %q (%s), want every figure", rs.Reason, rs.Message)
	}
	cores := float64(rs.CPU.UsageNanoCores) / 1e9
	t.Logf("%s: cpu %.3f cores over %s; memory %+v; disk %+v; network %+v; processes %v",
		runtimeName(runtimeClass), cores, rs.Window.Duration, rs.Memory, rs.Disk, rs.Network, deref(rs.Processes))
	if cores < 0.8 || cores > 1.2 {
		t.Errorf("cpu %.3f cores, want 1 within 20%%", cores)
	}
	if rs.CPU.UsageCoreNanoSeconds < int64(30*time.Second) {
		t.Errorf("cpu time %s, want at least the 30 s burnt", time.Duration(rs.CPU.UsageCoreNanoSeconds))
	}
	if rs.Memory == nil || rs.Memory.WorkingSetBytes < 200<<20 || rs.Memory.LimitBytes != statsMemoryLimit {
		t.Errorf("memory %+v, want a working set of at least 200 MiB against the limit %d", rs.Memory, statsMemoryLimit)
	}
	if rs.Disk == nil || rs.Disk.WritableLayerBytes < 100<<20 {
		t.Errorf("disk %+v, want at least 100 MiB in the writable layer", rs.Disk)
	}
	if rs.Network == nil || rs.Network.RxBytes < downloadBytes || rs.Network.ConnectionsAllowed < 1 {
		t.Errorf("network %+v, want at least %d bytes in and an allowed connection", rs.Network, downloadBytes)
	}
	if rs.Processes == nil || *rs.Processes < 1 {
		t.Errorf("processes %v, want some", rs.Processes)
	}

	t.Run("top for a sandbox-only user in its namespace, and 403 elsewhere", func(t *testing.T) {
		mustKubectl(t, "-n", ns, "create", "rolebinding", "sandbox-user", "--clusterrole=kube-sandbox-view", "--user=sam")
		out := mustSandboxCmd(t, ns, "top", "--as", "sam")
		if !strings.Contains(out, "usage") || !strings.Contains(out, "CPU(cores)") {
			t.Errorf("top as sam:\n%s", out)
		}
		one := mustSandboxCmd(t, ns, "top", "usage", "--as", "sam")
		if !strings.Contains(one, "usage") {
			t.Errorf("top usage as sam:\n%s", one)
		}
		if r := kubectl(t, "-n", ns, "get", "pods", "--as", "sam"); r.code == 0 {
			t.Errorf("sam may list pods: the test's user is not sandbox-only")
		}
		r := sandboxCmd(t, "default", "top", "--as", "sam")
		if r.code == 0 || !strings.Contains(r.stderr, "Forbidden") {
			t.Errorf("top in another namespace as sam: exit %d, stderr %q, want Forbidden", r.code, r.stderr)
		}
	})

	t.Run("Prometheus series, with authentication, that go with the sandbox", func(t *testing.T) {
		if code := scraper.unauthenticated(t); code != http.StatusUnauthorized {
			t.Errorf("metrics without a token: %d, want 401", code)
		}
		series := scraper.series(t, ns, "usage")
		if len(series) == 0 {
			t.Fatalf("no series of sandbox %s/usage", ns)
		}
		for _, s := range series {
			if !strings.Contains(s, `replica="0"`) {
				t.Errorf("series %s has no replica label", s)
			}
		}
		t.Logf("%d series per sandbox", len(series))
		mustSandboxCmd(t, ns, "delete", "usage")
		waitFor(t, "the sandbox's series to go", 60*time.Second, func() (bool, string) {
			left := scraper.series(t, ns, "usage")
			return len(left) == 0, strings.Join(left, "\n")
		})
	})
}

// limitedSandbox is a Sandbox of the Python image in runtimeClass ("": the node's default) with
// the memory limit limit, and spec lines extra (indented as spec's fields).
func limitedSandbox(name, runtimeClass, limit, extra string) string {
	rc := ""
	if runtimeClass != "" {
		rc = "      runtimeClassName: " + runtimeClass + "\n"
	}
	return fmt.Sprintf(`apiVersion: sandbox.kube-sandbox.io/v1alpha1
kind: Sandbox
metadata: {name: %s}
spec:
  timeoutSeconds: 1800
%s  template:
    spec:
%s      containers:
      - name: sandbox
        image: %s
        imagePullPolicy: Never
        resources:
          requests: {cpu: 10m, memory: 32Mi}
          limits: {memory: %s}
`, name, extra, rc, pythonImage, limit)
}

func runtimeName(class string) string {
	if class == "" {
		return "runc"
	}
	return class
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// metricsScraper reads the node agent's metrics as Prometheus would: over HTTPS, verifying the
// agent's certificate (the kube-sandbox CA's, for nodeapi.ServerName), with the token of a
// ServiceAccount bound to kube-sandbox:metrics-reader.
type metricsScraper struct {
	client *http.Client
	token  string
}

func newMetricsScraper(t *testing.T) *metricsScraper {
	t.Helper()
	ns := newNamespace(t)
	mustKubectl(t, "-n", ns, "create", "serviceaccount", "scraper")
	binding := "e2e-scraper-" + ns
	mustKubectl(t, "create", "clusterrolebinding", binding, "--clusterrole=kube-sandbox:metrics-reader", "--serviceaccount="+ns+":scraper")
	t.Cleanup(func() { kubectl(t, "delete", "clusterrolebinding", binding) })
	token := strings.TrimSpace(mustKubectl(t, "-n", ns, "create", "token", "scraper"))
	caB64 := mustKubectl(t, "-n", "kube-sandbox-system", "get", "secret", "sandbox-node-tls", "-o", `jsonpath={.data.ca\.crt}`)
	ca, err := base64.StdEncoding.DecodeString(caB64)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("the node agent's CA is not PEM")
	}
	return &metricsScraper{token: token, client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: nodeapi.ServerName, MinVersion: tls.VersionTLS12},
	}}}
}

func (m *metricsScraper) url() string {
	return fmt.Sprintf("https://%s:%d%s", nodeAddress, nodeapi.MetricsPort, nodeapi.MetricsPath)
}

func (m *metricsScraper) unauthenticated(t *testing.T) int {
	t.Helper()
	resp, err := m.client.Get(m.url())
	if err != nil {
		t.Fatalf("node agent metrics: %v", err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// text is the whole exposition.
func (m *metricsScraper) text(t *testing.T) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, m.url(), nil)
	req.Header.Set("Authorization", "Bearer "+m.token)
	resp, err := m.client.Do(req)
	if err != nil {
		t.Fatalf("node agent metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("node agent metrics: %s: %s", resp.Status, body)
	}
	return string(body)
}

// series are the lines of the sandbox's series.
func (m *metricsScraper) series(t *testing.T, ns, sandbox string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(m.text(t), "\n") {
		if strings.HasPrefix(l, "sandbox_") && strings.Contains(l, fmt.Sprintf(`namespace=%q`, ns)) &&
			strings.Contains(l, fmt.Sprintf(`sandbox=%q`, sandbox)) {
			out = append(out, l)
		}
	}
	return out
}

// TestOOMKilled: a sandbox whose code runs out of memory, under runc and gVisor, gets a Warning
// Event OOMKilled that names its limit and its peak, and the condition OOMKilled; its figures
// count the kill, and the sandbox goes on serving. Under runc on cgroup v1 only the process
// dies and the pod's status says nothing: the node agent's count is what tells.
func TestOOMKilled(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt.name, func(t *testing.T) { testOOMKilled(t, rt.class) })
	}
}

func testOOMKilled(t *testing.T, runtimeClass string) {
	ns := newNamespace(t)
	manifest := limitedSandbox("hog", runtimeClass, "256Mi", "")
	if r := run(t, []byte(manifest), "kubectl", "-n", ns, "create", "-f", "-"); r.code != 0 {
		t.Fatalf("create sandbox: exit %d: %s", r.code, r.stderr)
	}
	waitSandboxRunning(t, ns, 120*time.Second, "hog")
	// Detached: under gVisor the kernel kills the sentry, and with it the pod's network, which an
	// exec stream would wait on.
	mustSandboxCmd(t, ns, "exec", "hog", "--detach", "--", "python3", "-c", "b = b'x' * (400 << 20)")

	type event struct {
		Type, Reason, Message string
		InvolvedObject        struct{ Kind, Name string } `json:"involvedObject"`
	}
	var got event
	waitFor(t, "a Warning Event OOMKilled on the sandbox", 90*time.Second, func() (bool, string) {
		var list struct{ Items []event }
		getJSON(t, &list, "-n", ns, "get", "events", "--field-selector", "reason=OOMKilled")
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "Sandbox" && e.InvolvedObject.Name == "hog" {
				got = e
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", list.Items)
	})
	t.Logf("%s: %s %s: %s", runtimeName(runtimeClass), got.Type, got.Reason, got.Message)
	if got.Type != "Warning" || !strings.Contains(got.Message, "256Mi") || !strings.Contains(got.Message, "peak") ||
		strings.Contains(got.Message, "peak unknown") {
		t.Errorf("event %+v: want a Warning naming the limit 256Mi and the peak", got)
	}
	cond := mustKubectl(t, "-n", ns, "get", "sandbox", "hog", "-o", `jsonpath={.status.conditions[?(@.type=="OOMKilled")].status} {.status.conditions[?(@.type=="OOMKilled")].reason}`)
	if cond != "True OOMKilled" {
		t.Errorf("condition OOMKilled: %q, want True OOMKilled", cond)
	}

	// The figures count the kill, and the sandbox serves again.
	waitSandboxRunning(t, ns, 120*time.Second, "hog")
	waitFor(t, "the kill in the figures", 60*time.Second, func() (bool, string) {
		s := sandboxStats(t, ns, "hog")
		if len(s.Replicas) != 1 || s.Replicas[0].Memory == nil {
			return false, fmt.Sprintf("%+v", s.Replicas)
		}
		m := s.Replicas[0].Memory
		return m.OOMKills >= 1 && m.LimitBytes == 256<<20, fmt.Sprintf("%+v", m)
	})
	waitFor(t, "an exec after the kill", 60*time.Second, func() (bool, string) {
		r := sandboxCmd(t, ns, "exec", "hog", "--", "true")
		return r.code == 0, r.stderr
	})
}
