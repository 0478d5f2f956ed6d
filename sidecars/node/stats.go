package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/httpjson"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/mtls"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/usage"
)

// statsSource is what the usage endpoints answer from (usage.Sampler): the last samples, so
// that an answer costs no read of the node.
type statsSource interface {
	Stats(uid string) (nodeapi.PodStats, bool)
	List() []nodeapi.PodStats
	// SubscribeOOMs is the OOM kills as events (usage.Sampler.SubscribeOOMs).
	SubscribeOOMs() (initial []nodeapi.OOMReport, reports <-chan nodeapi.OOMReport, cancel func())
}

var _ statsSource = &usage.Sampler{}

// runner is what the server runs for as long as it serves (usage.Sampler).
type runner interface{ Run(ctx context.Context) }

// statsRoutes adds nodeapi's usage endpoints to mux, for sandbox-apiserver and
// sandbox-controller. The OOM streams end when done does (the agent shuts down), with a
// heartbeat every heartbeat meanwhile.
func statsRoutes(done context.Context, mux *http.ServeMux, src statsSource, node string, heartbeat time.Duration) {
	guard := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			if err := authorizeStats(req); err != nil {
				klog.V(2).InfoS("Refused a usage request", "client", mtls.ClientIdentity(req), "path", req.URL.Path, "remoteAddr", req.RemoteAddr)
				http.Error(w, err.Error(), http.StatusForbidden)
				return
			}
			h(w, req)
		}
	}
	mux.HandleFunc("GET "+nodeapi.StatsPath, guard(func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, &nodeapi.StatsList{Node: node, Items: src.List()})
	}))
	mux.HandleFunc(nodeapi.PodStatsPattern, guard(func(w http.ResponseWriter, req *http.Request) {
		st, ok := src.Stats(req.PathValue("uid"))
		if !ok {
			http.Error(w, "no figures of this pod on this node: it is not a sandbox pod of this node, it serves no sandbox (an idle pool pod), or it was not read yet", http.StatusNotFound)
			return
		}
		httpjson.Write(w, http.StatusOK, &st)
	}))
	mux.HandleFunc("GET "+nodeapi.OOMsPath, func(w http.ResponseWriter, req *http.Request) {
		// The controller alone tells of OOM kills; the apiserver has the figures.
		if err := authorize(req); err != nil {
			klog.V(2).InfoS("Refused an OOM stream", "client", mtls.ClientIdentity(req), "remoteAddr", req.RemoteAddr)
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		serveOOMs(done, w, req, src, heartbeat)
	})
}

// serveOOMs streams the node's OOM kills (nodeapi.OOMsPath) until the client goes, the agent
// shuts down, or the client falls behind (the sampler dropped it: it connects again and gets
// the whole state again, which is cheaper than a buffer without bound here).
func serveOOMs(done context.Context, w http.ResponseWriter, req *http.Request, src statsSource, heartbeat time.Duration) {
	initial, reports, cancel := src.SubscribeOOMs()
	defer cancel()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	write := func(line *nodeapi.OOMLine) error {
		b := []byte("\n")
		if line != nil {
			b, _ = json.Marshal(line)
			b = append(b, '\n')
		}
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	for i := range initial {
		if write(&nodeapi.OOMLine{Type: nodeapi.OOMReportLine, Report: &initial[i]}) != nil {
			return
		}
	}
	if write(&nodeapi.OOMLine{Type: nodeapi.OOMSyncedLine}) != nil {
		return
	}
	klog.V(4).InfoS("Streaming OOM kills", "client", mtls.ClientIdentity(req), "remoteAddr", req.RemoteAddr, "pods", len(initial))
	hb := time.NewTicker(heartbeat)
	defer hb.Stop()
	for {
		var err error
		select {
		case <-req.Context().Done():
			return
		case <-done.Done():
			return
		case r, ok := <-reports:
			if !ok {
				klog.V(2).InfoS("Ending an OOM stream that fell behind", "remoteAddr", req.RemoteAddr)
				return
			}
			err = write(&nodeapi.OOMLine{Type: nodeapi.OOMReportLine, Report: &r})
			hb.Reset(heartbeat)
		case <-hb.C:
			err = write(nil)
		}
		if err != nil {
			return
		}
	}
}

// authorizeStats lets sandbox-apiserver (the stats subresource) and sandbox-controller read
// the figures; no other identity of the kube-sandbox CA.
func authorizeStats(req *http.Request) error {
	switch who := mtls.ClientIdentity(req); who {
	case execdapi.APIServerIdentity, execdapi.ControllerIdentity:
		return nil
	default:
		return fmt.Errorf("%w: %q may not use %s", errForbidden, who, req.URL.Path)
	}
}

// startUsage makes the agent's usage sampler: a reader of the node's cgroups, containerd,
// the kubelet's emptyDirs (below kubeletRootDir) and the egress enforcer, fed by the
// enforcer's watch of the node's sandbox pods, and its collector in the enforcer's registry.
// The caller runs it.
func startUsage(eg *egress.Agent, cg *usage.Cgroups, rt usage.Runtime, kubeletRootDir string) (*usage.Sampler, error) {
	if eg == nil {
		return nil, errors.New("no egress enforcer: the usage figures need its pods and counters")
	}
	reader := &usage.NodeReader{Cgroups: cg, Runtime: rt, Network: eg, KubeletRootDir: kubeletRootDir}
	sampler := usage.NewSampler(reader, nodeapi.SampleInterval, usage.DefaultWorkers)
	sampler.FirstRead = usage.DefaultFirstRead
	if err := eg.Registry().Register(usage.NewCollector(sampler, eg)); err != nil {
		return nil, fmt.Errorf("register the usage collector: %w", err)
	}
	if err := eg.AddPodHandler(sampler.PodHandler()); err != nil {
		return nil, fmt.Errorf("watch the node's sandbox pods for their usage: %w", err)
	}
	klog.InfoS("Reading the usage of the node's sandbox pods", "cgroups", cg.Version(), "kubeletRootDir", kubeletRootDir,
		"interval", nodeapi.SampleInterval)
	return sampler, nil
}
