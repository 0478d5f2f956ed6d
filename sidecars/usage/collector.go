package usage

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// SeriesPerSandbox is how many series the collector makes of each sampled pod whose figures
// all read: 11 of its usage, 3 of its DNS queries and 3 of its connections.
const SeriesPerSandbox = 17

// labels of every per-sandbox series: a sandbox's replica is one pod at a time, and the pod's
// name (which changes when a lost replica is replaced) is no label, so that a sandbox's
// series stay one series across a replacement.
var labels = []string{"namespace", "sandbox", "replica"}

func desc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, slices.Concat(labels, extra), nil)
}

var (
	cpuDesc = desc("sandbox_cpu_usage_seconds_total",
		"CPU time the sandbox used, in core-seconds, since its pod started (its cgroup's; under gVisor, its sentry's and gofers').")
	workingSetDesc = desc("sandbox_memory_working_set_bytes",
		"Memory of the sandbox that the kernel cannot reclaim at once (its cgroup's usage less inactive file pages): what it is evicted and OOM-killed by.")
	rssDesc = desc("sandbox_memory_rss_bytes",
		"Anonymous and shared memory of the sandbox (under gVisor, the sentry's memory file is shared memory).")
	oomKillsDesc = desc("sandbox_memory_oom_kills_total",
		"Processes of the sandbox the kernel's OOM killer ended, since its pod started.")
	writableLayerDesc = desc("sandbox_disk_writable_layer_bytes",
		"Disk the sandbox's containers wrote to their root filesystems (their writable layers).")
	emptyDirDesc = desc("sandbox_disk_empty_dir_bytes",
		"Disk used by the sandbox's disk-backed emptyDir volumes.")
	rxBytesDesc = desc("sandbox_network_receive_bytes_total",
		"Bytes the sandbox received, counted on the node at its pod's interface.")
	txBytesDesc = desc("sandbox_network_transmit_bytes_total",
		"Bytes the sandbox sent, counted on the node at its pod's interface.")
	rxPacketsDesc = desc("sandbox_network_receive_packets_total",
		"Packets the sandbox received, counted on the node at its pod's interface.")
	txPacketsDesc = desc("sandbox_network_transmit_packets_total",
		"Packets the sandbox sent, counted on the node at its pod's interface.")
	processesDesc = desc("sandbox_processes",
		"Tasks (processes and threads) in the sandbox's cgroup: under gVisor, the sentry's and gofers' threads.")
	queriesDesc = desc("sandbox_egress_dns_queries_total",
		"DNS queries of the sandbox, by result: allowed (resolved upstream), denied (NXDOMAIN by the policy) or failed.", "result")
	connectionsDesc = desc("sandbox_egress_connections_total",
		"New outbound connections (and other flows) of the sandbox, by verdict: allowed or denied by the packet filter, or spoofed (frames from the pod's interface with another source, dropped).", "verdict")
)

// Collector makes the per-sandbox series at each scrape, from the sampler's last samples
// (a collector, not vectors, as the egress enforcer's was: a sandbox's series go when its pod
// goes or stops serving it, and N sandboxes make N sets of series, whatever has come and
// gone). The egress series are read at the scrape (Network.Counters: memory and one read of
// the filter's counters), so that a connection shows at once, as it always has.
//
// Every series has the labels namespace, sandbox and replica, and nothing else (but the
// result or verdict of the egress series). An idle pool pod has none. A figure that the last
// sample could not read has no series until a sample reads it again (its Errors say why): a
// gauge at 0 would be a lie, and a counter at 0 a reset. Two pods of one sandbox and replica
// on the node at once (a lost replica replaced while the old pod ends) make the series of the
// newer alone.
type Collector struct {
	sampler *Sampler
	// network reads the egress counters; nil: no egress series.
	network Network
}

var _ prometheus.Collector = &Collector{}

// NewCollector collects the series of s's pods, and their egress counters from network.
func NewCollector(s *Sampler, network Network) *Collector {
	return &Collector{sampler: s, network: network}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{cpuDesc, workingSetDesc, rssDesc, oomKillsDesc, writableLayerDesc, emptyDirDesc,
		rxBytesDesc, txBytesDesc, rxPacketsDesc, txPacketsDesc, processesDesc, queriesDesc, connectionsDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	type key struct {
		ns, sandbox string
		replica     int32
	}
	done := map[key]bool{}
	for _, s := range c.sampler.samples() {
		st := s.stats
		k := key{st.Namespace, st.Sandbox, st.Replica}
		if done[k] {
			continue // an older pod of the same replica (samples come newest first)
		}
		done[k] = true
		lv := []string{st.Namespace, st.Sandbox, strconv.Itoa(int(st.Replica))}
		counter := func(d *prometheus.Desc, v uint64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), slices.Concat(lv, extra)...)
		}
		gauge := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), lv...)
		}
		if st.CPU != nil {
			ch <- prometheus.MustNewConstMetric(cpuDesc, prometheus.CounterValue, float64(st.CPU.UsageCoreNanoSeconds)/1e9, lv...)
		}
		if m := st.Memory; m != nil {
			gauge(workingSetDesc, m.WorkingSetBytes)
			gauge(rssDesc, m.RSSBytes)
			counter(oomKillsDesc, m.OOMKills)
		}
		if d := st.Disk; d != nil {
			gauge(writableLayerDesc, d.WritableLayerBytes)
			gauge(emptyDirDesc, d.EmptyDirBytes)
		}
		if n := st.Network; n != nil {
			counter(rxBytesDesc, n.RxBytes)
			counter(txBytesDesc, n.TxBytes)
			counter(rxPacketsDesc, n.RxPackets)
			counter(txPacketsDesc, n.TxPackets)
		}
		if st.Processes != nil {
			gauge(processesDesc, *st.Processes)
		}
		if c.network == nil {
			continue
		}
		eg, err := c.network.Counters(st.PodUID)
		if err != nil {
			klog.V(4).InfoS("Reading a pod's egress counters", "pod", klog.KRef(st.Namespace, st.Pod), "err", err)
			continue
		}
		counter(queriesDesc, eg.DNSAllowed, "allowed")
		counter(queriesDesc, eg.DNSDenied, "denied")
		counter(queriesDesc, eg.DNSFailed, "failed")
		counter(connectionsDesc, eg.ConnectionsAllowed, "allowed")
		counter(connectionsDesc, eg.ConnectionsDenied, "denied")
		counter(connectionsDesc, eg.ConnectionsSpoofed, "spoofed")
	}
}
