package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"

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
}

var _ statsSource = &usage.Sampler{}

// runner is what the server runs for as long as it serves (usage.Sampler).
type runner interface{ Run(ctx context.Context) }

// statsRoutes adds nodeapi's usage endpoints to mux, for sandbox-apiserver and
// sandbox-controller.
func statsRoutes(mux *http.ServeMux, src statsSource, node string) {
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
}

// authorizeStats lets sandbox-apiserver (the stats subresource) and sandbox-controller (the
// peak of an OOM-killed replica) read the figures; no other identity of the kube-sandbox CA.
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
