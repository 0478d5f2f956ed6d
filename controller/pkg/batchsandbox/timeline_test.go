package batchsandbox

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/klog/v2/textlogger"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/egress"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// allocatedKeys are the keys of the log line "sandbox allocated", in order: a benchmark parses
// them.
var allocatedKeys = []string{"sandbox", "replicas", "start", "listMs", "allocateMs", "policyMs", "claimMs", "statusMs", "conflicts"}

// allocatedLine is one "sandbox allocated" log line, by key.
type allocatedLine map[string]any

// reconcileLogged runs one reconcile with a logger at V(2) that records, and returns its
// "sandbox allocated" lines.
func (h *harness) reconcileLogged() []allocatedLine {
	h.t.Helper()
	logger := ktesting.NewLogger(h.t, ktesting.NewConfig(ktesting.Verbosity(2), ktesting.BufferLogs(true)))
	ctx := log.IntoContext(h.ctx(), logger)
	if _, err := h.r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: testNamespace, Name: testName}}); err != nil {
		h.t.Fatalf("Reconcile(): %v", err)
	}
	var out []allocatedLine
	for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		if e.Message != "sandbox allocated" {
			continue
		}
		if e.Verbosity != 2 {
			h.t.Errorf("sandbox allocated at V(%d), want V(2)", e.Verbosity)
		}
		line := allocatedLine{}
		var keys []string
		for i := 0; i+1 < len(e.ParameterKVList); i += 2 {
			k, _ := e.ParameterKVList[i].(string)
			keys = append(keys, k)
			line[k] = e.ParameterKVList[i+1]
		}
		if diff := cmp.Diff(allocatedKeys, keys); diff != "" {
			h.t.Errorf("keys of sandbox allocated (-want +got):\n%s", diff)
		}
		out = append(out, line)
	}
	return out
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := c.Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// stageCounts are the observations of kube_sandbox_claim_stage_seconds so far, per stage.
func stageCounts(t *testing.T) [numStages]uint64 {
	t.Helper()
	var out [numStages]uint64
	for s := range numStages {
		m := &dto.Metric{}
		if err := stageObservers[s].(prometheus.Metric).Write(m); err != nil {
			t.Fatal(err)
		}
		out[s] = m.GetHistogram().GetSampleCount()
	}
	return out
}

// TestClaimTimelineLogged: a reconcile that allocates tells its stages once, in a log line at
// V(2) with stable keys and in the stage histogram; one that allocates nothing tells nothing.
func TestClaimTimelineLogged(t *testing.T) {
	h, _ := newPooledHarness(t, nil, pooledBatchSandbox(2), testPool(),
		idlePod("a", true, true, 2*time.Hour), idlePod("b", true, true, time.Hour))
	before := stageCounts(t)
	started := time.Now()
	lines := h.reconcileLogged()
	if len(lines) != 1 {
		t.Fatalf("%d sandbox allocated lines, want 1", len(lines))
	}
	l := lines[0]
	if l["sandbox"] != testNamespace+"/"+testName || l["replicas"] != 2 || l["conflicts"] != 0 {
		t.Errorf("sandbox %v, replicas %v, conflicts %v; want %s/%s, 2, 0", l["sandbox"], l["replicas"], l["conflicts"], testNamespace, testName)
	}
	s, _ := l["start"].(string)
	start, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !regexp.MustCompile(`Z$`).MatchString(s) || start.Before(started.Add(-time.Second)) || start.After(time.Now()) {
		t.Errorf("start = %q (%v), want the reconcile's start in UTC, RFC 3339 with nanoseconds", s, err)
	}
	prev := 0.0
	for _, k := range allocatedKeys[3:8] {
		ms, ok := l[k].(float64)
		switch {
		case !ok:
			t.Errorf("%s = %#v, want a float64", k, l[k])
		case ms < prev:
			t.Errorf("%s = %v before the stage before it (%v): stages end in order", k, ms, prev)
		case math.Abs(ms*100-math.Round(ms*100)) > 1e-6:
			t.Errorf("%s = %v, want milliseconds rounded to 0.01", k, ms)
		}
		prev = ms
	}
	after := stageCounts(t)
	for s := range numStages {
		if after[s]-before[s] != 1 {
			t.Errorf("stage %s observed %d times, want once", stageNames[s], after[s]-before[s])
		}
	}

	if lines := h.reconcileLogged(); len(lines) != 0 {
		t.Errorf("a reconcile that allocated nothing logged %v", lines)
	}
	if again := stageCounts(t); again != after {
		t.Errorf("a reconcile that allocated nothing observed stages: %v, then %v", after, again)
	}
}

// TestAllocationConflictsCounted: an allocation that loses its pod (a precondition conflict)
// is counted, in the metric and in the reconcile's line, and the replica gets the next pod.
func TestAllocationConflictsCounted(t *testing.T) {
	var patches atomic.Int32
	funcs := &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if _, ok := obj.(*corev1.Pod); ok && patches.Add(1) == 1 {
			return apierrors.NewConflict(corev1.Resource("pods"), obj.GetName(), errors.New("the object has been modified"))
		}
		return c.Patch(ctx, obj, patch, opts...)
	}}
	h, _ := newPooledHarness(t, funcs, pooledBatchSandbox(1), testPool(),
		idlePod("first", true, true, 2*time.Hour), idlePod("second", true, true, time.Hour))
	before := counterValue(t, allocationConflicts)
	lines := h.reconcileLogged()
	if got := counterValue(t, allocationConflicts) - before; got != 1 {
		t.Errorf("kube_sandbox_allocation_conflicts_total grew by %v, want 1", got)
	}
	if len(lines) != 1 || lines[0]["conflicts"] != 1 || lines[0]["replicas"] != 1 {
		t.Errorf("sandbox allocated lines = %v, want one with 1 replica and 1 conflict", lines)
	}
	if diff := cmp.Diff(map[string]string{"0": "second"}, h.allocatedPods()); diff != "" {
		t.Errorf("allocation (-want +got):\n%s", diff)
	}
}

// TestClaimTimelineStageEnds: a stage not reached ends with the one before it, and none ends
// before the one before it.
func TestClaimTimelineStageEnds(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	ms := func(d ...int) [numStages]time.Duration {
		var out [numStages]time.Duration
		for i, v := range d {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name string
		ends [numStages]time.Time
		want [numStages]time.Duration
	}{
		{name: "every stage", ends: [numStages]time.Time{at(1), at(3), at(4), at(6), at(9)}, want: ms(1, 3, 4, 6, 9)},
		{name: "no claim (an error before it)", ends: [numStages]time.Time{at(1), at(3), {}, {}, at(9)}, want: ms(1, 3, 3, 3, 9)},
		{name: "status not written", ends: [numStages]time.Time{at(1), at(3), at(4), at(6), {}}, want: ms(1, 3, 4, 6, 6)},
		{name: "last claim before another pod's policy", ends: [numStages]time.Time{at(1), at(3), at(7), at(6), at(9)}, want: ms(1, 3, 7, 7, 9)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tl := &claimTimeline{start: start, ends: tc.ends}
			if diff := cmp.Diff(tc.want, tl.stageEnds()); diff != "" {
				t.Errorf("stage ends (-want +got):\n%s", diff)
			}
		})
	}
}

// TestClaimTimelineText: the line as klog's text output writes it, which a benchmark parses.
func TestClaimTimelineText(t *testing.T) {
	var buf bytes.Buffer
	ctx := log.IntoContext(t.Context(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(2), textlogger.Output(&buf))))
	start := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	tl := &claimTimeline{start: start, pods: 3, conflicts: 1, ends: [numStages]time.Time{
		start.Add(1234567 * time.Nanosecond), start.Add(3 * time.Millisecond), start.Add(4 * time.Millisecond),
		start.Add(6 * time.Millisecond), start.Add(9*time.Millisecond + 5*time.Microsecond)}}
	tl.finish(ctx, pooledBatchSandbox(3))
	want := `"sandbox allocated" sandbox="team-a/demo" replicas=3 start="2026-01-02T03:04:05.123456789Z" ` +
		`listMs=1.23 allocateMs=3 policyMs=4 claimMs=6 statusMs=9.01 conflicts=1` + "\n"
	if got := buf.String(); !regexp.MustCompile(`\] ` + regexp.QuoteMeta(want) + `$`).MatchString(got) {
		t.Errorf("log line = %q, want it to end with %q", got, want)
	}
}

// waitingCertifier certifies a pod only once its policy reached the node agent: were the two
// done one after the other, it would wait in vain.
type waitingCertifier struct {
	pushed chan struct{}
}

func (c *waitingCertifier) Ensure(ctx context.Context, pod *corev1.Pod) error {
	select {
	case <-c.pushed:
		return nil
	case <-time.After(5 * time.Second):
		return errors.New("no push while the pod was being certified: the two did not run at once")
	}
}

func (c *waitingCertifier) Forget(types.UID) {}

// nodeAgent serves the egress API of sandbox-node over mutual TLS, with a certificate of
// authority for nodeapi.ServerName, on a loopback address; it confirms every policy, closes
// pushed at the first one and counts them.
func nodeAgent(t *testing.T, authority *pki.Authority) (ip string, port int, pushed chan struct{}, pushes *atomic.Int32) {
	t.Helper()
	key, err := pki.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	chain, _, err := authority.IssueServerCertificate(key.Public(), nodeapi.ServerName, "kube-sandbox-system", "sandbox-node")
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(chain, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pushed, pushes = make(chan struct{}), &atomic.Int32{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cfg := &egressapi.Config{}
		if r.Method != http.MethodPut || json.NewDecoder(r.Body).Decode(cfg) != nil {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		if pushes.Add(1) == 1 {
			close(pushed)
		}
		_ = json.NewEncoder(w).Encode(egressapi.Status{PodUID: cfg.PodUID, Revision: cfg.Revision})
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	host, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ = strconv.Atoi(p)
	return host, port, pushed, pushes
}

// orderedClaimer claims only a pod whose policy is in force already.
type orderedClaimer struct {
	fakeClaimer
	pushes *atomic.Int32
}

func (c *orderedClaimer) Claim(ctx context.Context, pod *corev1.Pod, req *execdapi.ClaimRequest) (*execdapi.ClaimResponse, error) {
	if c.pushes.Load() == 0 {
		return nil, errors.New("claimed before the policy was pushed: the entrypoint would run without it")
	}
	return c.fakeClaimer.Claim(ctx, pod, req)
}

// TestClaimCertifiesAndPushesAtOnce: a pool pod's certification and its policy's push run at
// once, and the claim, which starts the entrypoint, only after both.
func TestClaimCertifiesAndPushesAtOnce(t *testing.T) {
	ip, port, pushed, pushes := nodeAgent(t, testAuthority())
	pod := idlePod("a", true, true, time.Hour)
	pod.Status.HostIP = ip
	h := newHarness(t, nil, pooledBatchSandbox(1), testPool(), pod)
	pusher := egress.NewPusher(testAuthority())
	pusher.Port = port
	h.r.Egress = &egress.Enforcer{Source: &egress.Source{Reader: h.client, Namespace: testNamespace}, Pusher: pusher}
	h.r.Certifier = &waitingCertifier{pushed: pushed}
	claimer := &orderedClaimer{pushes: pushes}
	h.r.Claimer = claimer
	lines := h.reconcileLogged()
	if diff := cmp.Diff([]string{"a"}, claimer.claimedPods()); diff != "" {
		t.Errorf("claimed pods (-want +got):\n%s", diff)
	}
	if n := pushes.Load(); n != 1 {
		t.Errorf("%d pushes, want 1: the policy once, before the claim", n)
	}
	if bs := h.batchSandbox(); bs.Status.Ready != 1 {
		t.Errorf("ready = %d, want 1; conditions %+v", bs.Status.Ready, bs.Status.Conditions)
	}
	if len(lines) != 1 || lines[0]["policyMs"].(float64) > lines[0]["claimMs"].(float64) {
		t.Errorf("sandbox allocated lines = %v, want one whose policy ends before its claim", lines)
	}
}

// TestClaimKeepsErrorsOfCertification: when certification fails, its error is the one that
// counts, whatever the push did meanwhile, and nothing is claimed.
func TestClaimKeepsErrorsOfCertification(t *testing.T) {
	ip, port, _, _ := nodeAgent(t, testAuthority())
	pod := idlePod("a", true, true, time.Hour)
	pod.Status.HostIP = ip
	h, claimer := newPooledHarness(t, nil, pooledBatchSandbox(1), testPool(), pod)
	pusher := egress.NewPusher(testAuthority())
	pusher.Port = port
	h.r.Egress = &egress.Enforcer{Source: &egress.Source{Reader: h.client, Namespace: testNamespace}, Pusher: pusher}
	h.certifier.fail = map[string]error{"a": errors.New("execd not up yet")}
	if err := h.reconcile(); err == nil || err.Error() != "execd not up yet" {
		t.Errorf("Reconcile() = %v, want the certification's error", err)
	}
	if got := claimer.claimedPods(); len(got) != 0 {
		t.Errorf("claimed %v, want nothing before certification", got)
	}
}
