package egress

import (
	"context"
	"sync"
	"time"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// Denied names are reported to sandbox-controller, which turns them into Events on the
// sandbox: GET DenialsPath waits until there is something to report and answers the names
// denied since the last answer. Reports are at least denialReportEvery apart, so that code
// retrying a denied name in a loop makes one Event a while, not one per query.
const (
	denialReportEvery = 30 * time.Second
	// maxDenialWait bounds one GET: the controller asks again at once, so a connection that
	// silently died is noticed within it.
	maxDenialWait = 5 * time.Minute
	// maxDeniedNames bounds what is kept between reports; the rest are counted as Others.
	maxDeniedNames = 64
)

type denials struct {
	mu       sync.Mutex
	names    map[string]int
	others   int
	notify   chan struct{} // closed when the first denial after a report arrives
	lastSent time.Time
}

func newDenials() *denials {
	return &denials{names: map[string]int{}, notify: make(chan struct{})}
}

func (d *denials) add(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	empty := len(d.names) == 0 && d.others == 0
	if _, ok := d.names[name]; ok || len(d.names) < maxDeniedNames {
		d.names[name]++
	} else {
		d.others++
	}
	if empty {
		close(d.notify)
	}
}

// wait blocks until there is a report to send (and denialReportEvery passed since the last
// one), ctx ends, or maxDenialWait passed; it returns the report, empty for the last two.
func (d *denials) wait(ctx context.Context) egressapi.Denials {
	timeout := time.NewTimer(maxDenialWait)
	defer timeout.Stop()
	d.mu.Lock()
	notify, next := d.notify, d.lastSent.Add(denialReportEvery)
	d.mu.Unlock()
	select {
	case <-notify:
	case <-ctx.Done():
		return egressapi.Denials{}
	case <-timeout.C:
		return egressapi.Denials{}
	}
	if wait := time.Until(next); wait > 0 {
		pace := time.NewTimer(wait)
		defer pace.Stop()
		select {
		case <-pace.C:
		case <-ctx.Done():
			return egressapi.Denials{}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := egressapi.Denials{Names: d.names, Others: d.others}
	d.names, d.others, d.notify, d.lastSent = map[string]int{}, 0, make(chan struct{}), time.Now()
	return out
}
