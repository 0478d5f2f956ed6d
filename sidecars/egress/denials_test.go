package egress

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

func TestDenials(t *testing.T) {
	d := newDenials()
	got := make(chan egressapi.Denials, 1)
	go func() { got <- d.wait(context.Background()) }()
	select {
	case r := <-got:
		t.Fatalf("a report before any denial: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	d.add("a.example")
	d.add("a.example")
	d.add("b.example")
	var r egressapi.Denials
	select {
	case r = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no report after a denial")
	}
	// The first denial wakes the report; the others that came meanwhile may or may not be in it.
	if r.Names["a.example"] == 0 {
		t.Errorf("report %+v lacks a.example", r)
	}

	t.Run("bounded", func(t *testing.T) {
		d := newDenials()
		for i := range maxDeniedNames + 10 {
			d.add(fmt.Sprintf("n%d.example", i))
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // no pacing wait: the first report is due at once
		d.lastSent = time.Time{}
		r := d.wait(context.Background())
		if len(r.Names) != maxDeniedNames || r.Others != 10 {
			t.Errorf("%d names, %d others; want %d, 10", len(r.Names), r.Others, maxDeniedNames)
		}
		if r := d.wait(ctx); len(r.Names) != 0 {
			t.Errorf("a second report without new denials: %+v", r)
		}
	})

	t.Run("paced", func(t *testing.T) {
		d := newDenials()
		d.lastSent = time.Now() // a report was just sent
		d.add("c.example")
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if r := d.wait(ctx); len(r.Names) != 0 {
			t.Errorf("a report within %s of the last: %+v", denialReportEvery, r)
		}
		d.lastSent = time.Time{}
		if diff := cmp.Diff(egressapi.Denials{Names: map[string]int{"c.example": 1}}, d.wait(context.Background())); diff != "" {
			t.Errorf("the held-back denial (-want +got):\n%s", diff)
		}
	})
}
