package usage

import (
	"context"
	"fmt"
	"sync"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress"
)

// fakeRuntime stands for containerd.
type fakeRuntime struct {
	mu        sync.Mutex
	cgroups   map[string]string
	layers    map[string]uint64
	layersErr error
	lookups   int // PodCgroup calls
}

func (f *fakeRuntime) PodCgroup(_ context.Context, uid string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	p, ok := f.cgroups[uid]
	if !ok {
		return "", fmt.Errorf("the sandbox of pod %s: %w", uid, ErrNotFound)
	}
	return p, nil
}

func (f *fakeRuntime) WritableLayers(_ context.Context, uid, _ string) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.layers[uid], f.layersErr
}

func (f *fakeRuntime) lookupCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lookups
}

// fakeNetwork stands for the egress enforcer.
type fakeNetwork struct {
	mu      sync.Mutex
	traffic map[string]egress.Traffic
	err     error
}

func (f *fakeNetwork) Traffic(uid string) (egress.Traffic, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return egress.Traffic{}, f.err
	}
	t, ok := f.traffic[uid]
	if !ok {
		return egress.Traffic{}, fmt.Errorf("pod %s: %w", uid, egress.ErrUnknownPod)
	}
	return t, nil
}

func (f *fakeNetwork) Counters(uid string) (egress.PodCounters, error) {
	t, err := f.Traffic(uid)
	return t.PodCounters, err
}

func (f *fakeNetwork) set(uid string, t egress.Traffic) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.traffic[uid] = t
}
