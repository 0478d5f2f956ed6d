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

// metrics of the enforcer. The per-sandbox series are made at each scrape from the pods the
// enforcer holds (a collector, not vectors), so that a sandbox's series go when its pod goes:
// N sandboxes make N sets of series, whatever has come and gone.
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

var (
	queriesDesc = prometheus.NewDesc("sandbox_egress_dns_queries_total",
		"DNS queries of the sandbox, by result: allowed (resolved upstream), denied (NXDOMAIN by the policy) or failed.",
		[]string{"namespace", "name", "pod", "result"}, nil)
	connectionsDesc = prometheus.NewDesc("sandbox_egress_connections_total",
		"New outbound connections (and other flows) of the sandbox, by verdict: allowed or denied by the packet filter, or spoofed (frames from the pod's interface with another source, dropped).",
		[]string{"namespace", "name", "pod", "verdict"}, nil)
)

func newMetrics(n *Node) *metrics {
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
	m.registry.MustRegister(m.updates, m.flowsCut, &podCollector{n: n})
	return m
}

// Registry is what the agent's /metrics serves.
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

// podCollector makes the per-sandbox series of the pods the enforcer holds, reading the
// filter's counters when scraped. The pod label tells the replicas of a sandbox apart; an idle
// pool pod's series have an empty name.
type podCollector struct{ n *Node }

func (c *podCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queriesDesc
	ch <- connectionsDesc
}

func (c *podCollector) Collect(ch chan<- prometheus.Metric) {
	type row struct {
		uid, ns, name, pod string
		dns                *dnsCounts
	}
	c.n.mu.RLock()
	rows := make([]row, 0, len(c.n.pods))
	for uid, p := range c.n.pods {
		if p.gone || p.cfg == nil {
			continue
		}
		r := row{uid: uid, ns: p.namespace, pod: p.name, dns: &p.dnsStat}
		if s := p.cfg.Sandbox; s != nil {
			r.name = s.Name
		}
		rows = append(rows, r)
	}
	c.n.mu.RUnlock()
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(queriesDesc, prometheus.CounterValue, float64(r.dns.allowed.Load()), r.ns, r.name, r.pod, "allowed")
		ch <- prometheus.MustNewConstMetric(queriesDesc, prometheus.CounterValue, float64(r.dns.denied.Load()), r.ns, r.name, r.pod, "denied")
		ch <- prometheus.MustNewConstMetric(queriesDesc, prometheus.CounterValue, float64(r.dns.failed.Load()), r.ns, r.name, r.pod, "failed")
		cnt, err := c.n.filter.Counters(r.uid)
		if err != nil {
			klog.V(2).InfoS("Reading a pod's filter counters", "podUID", r.uid, "err", err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.CounterValue, float64(cnt.Allowed), r.ns, r.name, r.pod, "allowed")
		ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.CounterValue, float64(cnt.Denied), r.ns, r.name, r.pod, "denied")
		ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.CounterValue, float64(cnt.Spoofed), r.ns, r.name, r.pod, "spoofed")
	}
}
