package batchsandbox

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// claimStage is a stage of a pooled reconcile that allocates pods, in the order they end.
type claimStage int

const (
	// stageList: the pool's idle pods listed (the candidates).
	stageList claimStage = iota
	// stageAllocate: the pods written as the sandbox's (allocateOne, every replica's).
	stageAllocate
	// stagePolicy: the pods certified and the sandbox's egress policy in force on them (the
	// two run at once, claimAll).
	stagePolicy
	// stageClaim: the pods' execd claimed for the sandbox.
	stageClaim
	// stageStatus: the status written.
	stageStatus
	numStages
)

// stageNames are the values of the label stage of kube_sandbox_claim_stage_seconds.
var stageNames = [numStages]string{"list", "allocate", "policy", "claim", "status"}

var (
	// allocationConflicts counts the allocations (allocateOne) that lost their pod: the
	// resourceVersion precondition failed (another sandbox, or this controller's stale cache,
	// got there first) or the pod was gone. Each costs a write and a retry with the next pod.
	allocationConflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kube_sandbox_allocation_conflicts_total",
		Help: "Allocations of pool pods that lost their pod to a precondition conflict or found it gone.",
	})
	// claimStageSeconds: when each stage of a pooled reconcile that allocated pods ended,
	// from the reconcile's start, so that one histogram per stage shows where a claim's
	// latency goes.
	claimStageSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kube_sandbox_claim_stage_seconds",
		Help: "Time from the start of a reconcile that allocated pool pods to the end of each of its stages (list, allocate, policy, claim, status).",
		// 0.5 ms to 16 s: a claim takes milliseconds when all is well, seconds when the
		// kube-apiserver or the nodes are slow.
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"stage"})
	// stageObservers are claimStageSeconds's children, looked up once rather than per
	// observation.
	stageObservers [numStages]prometheus.Observer
)

func init() {
	// Once per process: a test that starts the manager again registers nothing twice.
	metrics.Registry.MustRegister(allocationConflicts, claimStageSeconds)
	for s, name := range stageNames {
		stageObservers[s] = claimStageSeconds.WithLabelValues(name)
	}
}

// claimTimeline times a pooled reconcile: when each stage ended, the pods it allocated and the
// conflicts it met. It costs a time.Now per stage and pod, no more; a nil *claimTimeline (direct
// mode) records nothing.
type claimTimeline struct {
	start time.Time

	mu sync.Mutex
	// ends holds when each stage ended; zero: not reached. A stage done per pod ends with its
	// last pod.
	ends      [numStages]time.Time
	pods      int
	conflicts int
}

// mark records that the stage ended now (for one pod, or for all).
func (t *claimTimeline) mark(s claimStage) {
	if t == nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.After(t.ends[s]) {
		t.ends[s] = now
	}
}

// allocated records how many pods the reconcile allocated, with how many conflicts, and that the
// stage allocate ended.
func (t *claimTimeline) allocated(pods, conflicts int) {
	if t == nil {
		return
	}
	t.mark(stageAllocate)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pods += pods
	t.conflicts += conflicts
}

// stageEnds returns, per stage, how long after the start it ended. A stage not reached (no
// pod to claim, or an error before it) ends when the one before it did, so that the ends are
// monotone and a stage that did not happen takes no time.
func (t *claimTimeline) stageEnds() [numStages]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out [numStages]time.Duration
	prev := time.Duration(0)
	for s := range numStages {
		d := prev
		if !t.ends[s].IsZero() {
			d = max(t.ends[s].Sub(t.start), prev)
		}
		out[s], prev = d, d
	}
	return out
}

// finish tells the timeline of a reconcile that allocated at least one pod: one observation of
// kube_sandbox_claim_stage_seconds per stage, and one log line at V(2), whose message and keys
// a benchmark parses from the controller's klog text output; keep them stable:
//
//	"sandbox allocated"
//	sandbox     namespace/name (string)
//	replicas    pods allocated in this reconcile (int)
//	start       the reconcile's start, time.RFC3339Nano in UTC (string)
//	listMs      end of stage list, in milliseconds since start, rounded to 0.01 (float64)
//	allocateMs  end of stage allocate, as listMs
//	policyMs    end of stage policy, as listMs
//	claimMs     end of stage claim, as listMs
//	statusMs    end of stage status, as listMs
//	conflicts   allocations that lost their pod in this reconcile (int)
func (t *claimTimeline) finish(ctx context.Context, bs *controlv1alpha1.BatchSandbox) {
	if t == nil {
		return
	}
	t.mu.Lock()
	pods, conflicts := t.pods, t.conflicts
	t.mu.Unlock()
	if pods == 0 {
		return
	}
	ends := t.stageEnds()
	for s, d := range ends {
		stageObservers[s].Observe(d.Seconds())
	}
	log.FromContext(ctx).V(2).Info("sandbox allocated",
		"sandbox", bs.Namespace+"/"+bs.Name,
		"replicas", pods,
		"start", t.start.UTC().Format(time.RFC3339Nano),
		"listMs", milliseconds(ends[stageList]),
		"allocateMs", milliseconds(ends[stageAllocate]),
		"policyMs", milliseconds(ends[stagePolicy]),
		"claimMs", milliseconds(ends[stageClaim]),
		"statusMs", milliseconds(ends[stageStatus]),
		"conflicts", conflicts)
}

// milliseconds is d in milliseconds, rounded to 0.01: finer than that is noise here.
func milliseconds(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Millisecond)*100) / 100
}
