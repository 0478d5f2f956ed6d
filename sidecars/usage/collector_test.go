package usage

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// series gathers reg and returns its sandbox_ series, each as name{label=value,...}.
func series(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var out []string
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "sandbox_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out = append(out, mf.GetName()+"{"+strings.Join(ls, ",")+"}")
		}
	}
	return out
}

func labelNames(m *dto.Metric) []string {
	var out []string
	for _, l := range m.GetLabel() {
		out = append(out, l.GetName())
	}
	return out
}

// TestCollector200: 200 sandbox pods make exactly 200 × SeriesPerSandbox series, each with
// the labels namespace, sandbox and replica alone (and the result or verdict of the egress
// series), and none once they are gone.
func TestCollector200(t *testing.T) {
	const pods = 200
	nw := &fakeNetwork{traffic: map[string]egress.Traffic{}}
	s := NewSampler(newFakeReader(), time.Hour, DefaultWorkers)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(s, nw))
	runSampler(t, s)
	for i := range pods {
		uid := fmt.Sprintf("uid-%03d", i)
		nw.set(uid, egress.Traffic{PodCounters: egress.PodCounters{ConnectionsAllowed: uint64(i)}})
		s.Observe(Pod{UID: uid, Namespace: fmt.Sprintf("team-%d", i%7), Name: "pod-" + uid, Sandbox: fmt.Sprintf("sbx-%d", i/2), Replica: int32(i % 2)})
	}
	poll(t, "every pod sampled", func() bool { return len(s.List()) == pods })

	got := series(t, reg)
	if len(got) != pods*SeriesPerSandbox {
		t.Fatalf("%d series of %d sandbox pods, want %d × %d", len(got), pods, pods, SeriesPerSandbox)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			names := labelNames(m)
			want := []string{"namespace", "replica", "sandbox"}
			switch mf.GetName() {
			case "sandbox_egress_dns_queries_total":
				want = []string{"namespace", "replica", "result", "sandbox"}
			case "sandbox_egress_connections_total":
				want = []string{"namespace", "replica", "sandbox", "verdict"}
			}
			if !slices.Equal(names, want) {
				t.Fatalf("%s has labels %v, want %v", mf.GetName(), names, want)
			}
		}
	}
	const one = `
# HELP sandbox_egress_connections_total New outbound connections (and other flows) of the sandbox, by verdict: allowed or denied by the packet filter, or spoofed (frames from the pod's interface with another source, dropped).
# TYPE sandbox_egress_connections_total counter
sandbox_egress_connections_total{namespace="team-4",replica="1",sandbox="sbx-5",verdict="allowed"} 11
sandbox_egress_connections_total{namespace="team-4",replica="1",sandbox="sbx-5",verdict="denied"} 0
sandbox_egress_connections_total{namespace="team-4",replica="1",sandbox="sbx-5",verdict="spoofed"} 0
`
	if err := testutil.CollectAndCompare(filtered{NewCollector(s, nw), "sbx-5", "1"}, strings.NewReader(one), "sandbox_egress_connections_total"); err != nil {
		t.Error(err)
	}

	for i := range pods {
		s.Forget(fmt.Sprintf("uid-%03d", i))
	}
	if got := series(t, reg); len(got) != 0 {
		t.Errorf("%d series after every pod went, want 0: %v", len(got), got[:min(5, len(got))])
	}
}

// filtered is a collector's series of one sandbox's replica.
type filtered struct {
	c                *Collector
	sandbox, replica string
}

func (f filtered) Describe(ch chan<- *prometheus.Desc) { f.c.Describe(ch) }

func (f filtered) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() { f.c.Collect(all); close(all) }()
	for m := range all {
		var d dto.Metric
		_ = m.Write(&d)
		var sb, rep string
		for _, l := range d.GetLabel() {
			switch l.GetName() {
			case "sandbox":
				sb = l.GetValue()
			case "replica":
				rep = l.GetValue()
			}
		}
		if sb == f.sandbox && rep == f.replica {
			ch <- m
		}
	}
}

// TestCollectorSeries: what each pod's sample makes.
func TestCollectorSeries(t *testing.T) {
	p := func(uid, sandbox string, replica int32) Pod {
		return Pod{UID: uid, Namespace: "ns", Name: "pod-" + uid, Sandbox: sandbox, Replica: replica}
	}
	tests := []struct {
		name    string
		samples []*nodeapi.PodStats // recorded in this order
		network *fakeNetwork
		want    int
		check   string // a series that must be there (labels in order)
	}{
		{
			name:    "one pod",
			samples: []*nodeapi.PodStats{fullStats(p("a", "sbx", 0), time.Now(), 2500e6)},
			want:    SeriesPerSandbox,
			check:   "sandbox_cpu_usage_seconds_total{namespace=ns,replica=0,sandbox=sbx}",
		},
		{
			name: "a figure that failed has no series",
			samples: func() []*nodeapi.PodStats {
				st := fullStats(p("a", "sbx", 0), time.Now(), 1)
				st.Memory, st.Disk = nil, nil
				st.Errors = map[string]string{"memory": "x", "disk": "y"}
				return []*nodeapi.PodStats{st}
			}(),
			want: SeriesPerSandbox - 5,
		},
		{
			name: "the egress counters unknown: no egress series",
			samples: []*nodeapi.PodStats{
				fullStats(p("a", "sbx", 0), time.Now(), 1),
			},
			network: &fakeNetwork{traffic: map[string]egress.Traffic{}},
			want:    SeriesPerSandbox - 6,
		},
		{
			name: "two pods of one replica (a lost one replaced): the newer's series alone",
			samples: []*nodeapi.PodStats{
				fullStats(p("old", "sbx", 0), time.Now(), 1e9),
				fullStats(p("new", "sbx", 0), time.Now(), 3e9),
			},
			want:  SeriesPerSandbox,
			check: "sandbox_cpu_usage_seconds_total{namespace=ns,replica=0,sandbox=sbx}",
		},
		{
			name: "two replicas",
			samples: []*nodeapi.PodStats{
				fullStats(p("a", "sbx", 0), time.Now(), 1e9),
				fullStats(p("b", "sbx", 1), time.Now(), 1e9),
			},
			want: 2 * SeriesPerSandbox,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nw := tt.network
			if nw == nil {
				nw = &fakeNetwork{traffic: map[string]egress.Traffic{}}
				for _, st := range tt.samples {
					nw.set(st.PodUID, egress.Traffic{})
				}
			}
			s := NewSampler(newFakeReader(), time.Hour, 1)
			for _, st := range tt.samples {
				s.Observe(Pod{UID: st.PodUID, Namespace: st.Namespace, Name: st.Pod, Sandbox: st.Sandbox, Replica: st.Replica})
				s.mu.RLock()
				state := s.pods[st.PodUID]
				s.mu.RUnlock()
				s.record(state, st)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(NewCollector(s, nw))
			got := series(t, reg)
			if len(got) != tt.want {
				t.Errorf("%d series, want %d:\n%s", len(got), tt.want, strings.Join(got, "\n"))
			}
			if tt.check != "" {
				if !slices.Contains(got, tt.check) {
					t.Errorf("no series %s in:\n%s", tt.check, strings.Join(got, "\n"))
				}
			}
		})
	}
}

// TestCollectorNewerWins: of two pods of one sandbox's replica, the series are the newer's.
func TestCollectorNewerWins(t *testing.T) {
	s := NewSampler(newFakeReader(), time.Hour, 1)
	for _, c := range []struct {
		uid string
		cpu uint64
	}{{"old", 1e9}, {"new", 3e9}} {
		pod := Pod{UID: c.uid, Namespace: "ns", Name: c.uid, Sandbox: "sbx"}
		s.Observe(pod)
		s.mu.RLock()
		state := s.pods[c.uid]
		s.mu.RUnlock()
		s.record(state, fullStats(pod, time.Now(), c.cpu))
	}
	want := `
# HELP sandbox_cpu_usage_seconds_total CPU time the sandbox used, in core-seconds, since its pod started (its cgroup's; under gVisor, its sentry's and gofers').
# TYPE sandbox_cpu_usage_seconds_total counter
sandbox_cpu_usage_seconds_total{namespace="ns",replica="0",sandbox="sbx"} 3
`
	if err := testutil.CollectAndCompare(NewCollector(s, nil), strings.NewReader(want), "sandbox_cpu_usage_seconds_total"); err != nil {
		t.Error(err)
	}
}
