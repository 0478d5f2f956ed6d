package egress

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// deniedLogEvery: a denied name is logged at most this often, so that code that retries in a
// loop cannot fill the node's logs; the metrics count every query.
const deniedLogEvery = time.Minute

// maxLoggedNames bounds the memory of which names were logged when.
const maxLoggedNames = 1024

// metrics of the enforcer, the node's alone. The per-sandbox series of the egress
// (sandbox_egress_connections_total, sandbox_egress_dns_queries_total) are the agent's usage
// collector's (package usage), from Node.Counters: with the labels of every per-sandbox
// series, and only for the pods that serve a sandbox.
type metrics struct {
	registry *prometheus.Registry
	updates  *prometheus.CounterVec
	flowsCut prometheus.Counter

	mu     sync.Mutex
	logged map[string]time.Time
}

// dnsCounts are a pod's DNS decisions.
type dnsCounts struct {
	allowed, denied, failed atomic.Uint64
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_egress_policy_updates_total",
			Help: "Policies applied to the node's pods, by result: applied or failed.",
		}, []string{"result"}),
		flowsCut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_egress_flows_cut_total",
			Help: "Established flows cut because a new policy denies them.",
		}),
		logged: map[string]time.Time{},
	}
	m.registry.MustRegister(m.updates, m.flowsCut)
	return m
}

// Registry is what the agent's /metrics serves; the agent registers its other collectors in
// it.
func (n *Node) Registry() *prometheus.Registry { return n.metrics.registry }

// shouldLog reports whether a denial of name is to be logged now.
func (m *metrics) shouldLog(name string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if last, ok := m.logged[name]; ok && now.Sub(last) < deniedLogEvery {
		return false
	}
	if len(m.logged) >= maxLoggedNames {
		for k, t := range m.logged {
			if now.Sub(t) >= deniedLogEvery {
				delete(m.logged, k)
			}
		}
		if len(m.logged) >= maxLoggedNames {
			return false
		}
	}
	m.logged[name] = now
	return true
}

// observeDNS counts a DNS decision of a pod and logs denials, rate-limited, with the sandbox's
// name.
func (n *Node) observeDNS(p *pod, qname string, allowed bool, rcode int) {
	switch {
	case !allowed:
		p.dnsStat.denied.Add(1)
	case rcode != 0 && rcode != 3: // NOERROR and NXDOMAIN are answers
		p.dnsStat.failed.Add(1)
	default:
		p.dnsStat.allowed.Add(1)
	}
	if allowed || qname == "" {
		return
	}
	p.denials.add(qname)
	if n.metrics.shouldLog(qname, time.Now()) {
		n.mu.RLock()
		ref := sandboxRef(p.cfg)
		n.mu.RUnlock()
		klog.InfoS("Denied a DNS query", "sandbox", ref, "query", qname)
	}
}
