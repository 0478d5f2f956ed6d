package egress

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/firewall"
)

// deniedLogEvery: a denied name is logged at most this often, so that code that retries in a
// loop cannot fill the node's logs; the metrics count every query.
const deniedLogEvery = time.Minute

// maxLoggedNames bounds the memory of which names were logged when.
const maxLoggedNames = 1024

// metrics are per sandbox: every series carries the sandbox's namespace and name (empty for an
// idle pool pod), so that denials can be traced to a sandbox.
type metrics struct {
	registry *prometheus.Registry
	queries  *prometheus.CounterVec
	updates  *prometheus.CounterVec
	flowsCut prometheus.Counter

	mu        sync.Mutex
	namespace string
	name      string
	logged    map[string]time.Time
}

func newMetrics(fw *firewall.Firewall) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_egress_dns_queries_total",
			Help: "DNS queries of the sandbox, by result: allowed (resolved upstream), denied (NXDOMAIN by the policy) or failed.",
		}, []string{"namespace", "name", "result"}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_egress_policy_updates_total",
			Help: "Policies applied, by result: applied or failed.",
		}, []string{"result"}),
		flowsCut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_egress_flows_cut_total",
			Help: "Established flows cut because a new policy denies them.",
		}),
		logged: map[string]time.Time{},
	}
	m.registry.MustRegister(m.queries, m.updates, m.flowsCut, &connectionCollector{fw: fw, m: m})
	return m
}

func (m *metrics) setSandbox(s *egressapi.SandboxRef) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s == nil {
		m.namespace, m.name = "", ""
		return
	}
	m.namespace, m.name = s.Namespace, s.Name
}

func (m *metrics) sandbox() (string, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.namespace, m.name
}

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

// observeDNS counts a DNS decision and logs denials, rate-limited, with the sandbox's name.
func (s *server) observeDNS(qname string, allowed bool, rcode int) {
	ns, name := s.metrics.sandbox()
	result := "allowed"
	switch {
	case !allowed:
		result = "denied"
	case rcode != 0 && rcode != 3: // NOERROR and NXDOMAIN are answers
		result = "failed"
	}
	s.metrics.queries.WithLabelValues(ns, name, result).Inc()
	if !allowed && qname != "" {
		s.denials.add(qname)
	}
	if !allowed && s.metrics.shouldLog(qname, time.Now()) {
		klog.InfoS("Denied a DNS query", "sandbox", klog.KRef(ns, name), "query", qname)
	}
}

// connectionCollector reads the filter's counters when scraped.
type connectionCollector struct {
	fw *firewall.Firewall
	m  *metrics
}

var connectionsDesc = prometheus.NewDesc("sandbox_egress_connections_total",
	"New outbound connections (and other flows) of the sandbox, by verdict: allowed or denied by the packet filter.",
	[]string{"namespace", "name", "verdict"}, nil)

func (c *connectionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- connectionsDesc }

func (c *connectionCollector) Collect(ch chan<- prometheus.Metric) {
	allowed, denied, err := c.fw.Counters()
	if err != nil {
		klog.V(2).InfoS("Reading the filter's counters", "err", err)
		return
	}
	ns, name := c.m.sandbox()
	ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.CounterValue, float64(allowed), ns, name, "allowed")
	ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.CounterValue, float64(denied), ns, name, "denied")
}
