package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/httpjson"
)

// maxConfigBytes bounds a pushed Config: a few hundred rules of a few hundred bytes.
const maxConfigBytes = 1 << 20

// ControlHandler serves the controller's endpoints (egressapi.PodPolicyPath and
// PodDenialsPath); authorize admits the caller (sandbox-controller's certificate only).
func (n *Node) ControlHandler(authorize func(*http.Request) error) http.Handler {
	mux := http.NewServeMux()
	guard := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			if err := authorize(req); err != nil {
				http.Error(w, err.Error(), http.StatusForbidden)
				return
			}
			h(w, req)
		}
	}
	mux.HandleFunc("PUT "+egressapi.PodPolicyPattern, guard(n.servePut))
	mux.HandleFunc("GET "+egressapi.PodPolicyPattern, guard(n.serveGet))
	mux.HandleFunc("GET "+egressapi.PodDenialsPattern, guard(n.serveDenials))
	return mux
}

// WaitHandler serves egressapi.WaitPath: it tells only whether a pod's filter is in force.
func (n *Node) WaitHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+egressapi.WaitPattern, n.serveWait)
	return mux
}

func (n *Node) servePut(w http.ResponseWriter, req *http.Request) {
	cfg := &egressapi.Config{}
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxConfigBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		http.Error(w, "the body is not a Config: "+err.Error(), http.StatusBadRequest)
		return
	}
	if uid := req.PathValue("uid"); cfg.PodUID != uid {
		// A Config names its pod: one sent to another pod's path is a mistake, never applied.
		http.Error(w, fmt.Sprintf("the Config is for pod %q, not %q", cfg.PodUID, uid), http.StatusConflict)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), pushWait)
	defer cancel()
	st, err := n.Push(ctx, cfg)
	if err != nil {
		writeError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, st)
}

func (n *Node) serveGet(w http.ResponseWriter, req *http.Request) {
	st, err, ok := n.Status(req.PathValue("uid"))
	switch {
	case !ok:
		http.Error(w, egressapi.ReasonPodNotFound+": no such sandbox pod on this node", http.StatusNotFound)
	case err != nil:
		writeError(w, err)
	default:
		httpjson.Write(w, http.StatusOK, st)
	}
}

func (n *Node) serveDenials(w http.ResponseWriter, req *http.Request) {
	d, ok := n.Denials(req.Context(), req.PathValue("uid"))
	if !ok {
		http.Error(w, egressapi.ReasonPodNotFound+": no such sandbox pod on this node", http.StatusNotFound)
		return
	}
	httpjson.Write(w, http.StatusOK, d)
}

func (n *Node) serveWait(w http.ResponseWriter, req *http.Request) {
	ctx, cancel := context.WithTimeout(req.Context(), egressapi.MaxWait)
	defer cancel()
	st, err := n.Wait(ctx, req.PathValue("uid"), req.URL.Query().Get("revision"))
	if err != nil {
		// Not yet: the init container asks again, and says why in its log.
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	httpjson.Write(w, http.StatusOK, st)
}

// writeError answers err with the status that fits: 422 for a Config no agent would apply,
// 404 for a pod not on this node, 500 (with the reason first) for one the node cannot enforce.
func writeError(w http.ResponseWriter, err error) {
	var invalid *InvalidConfig
	var f *Failure
	switch {
	case errors.As(err, &invalid):
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
	case errors.As(err, &f) && f.Reason == egressapi.ReasonPodNotFound:
		http.Error(w, err.Error(), http.StatusNotFound)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// DNSHandler answers each query by the policy of the pod it comes from (its source address,
// which the filter's anti-spoofing vouches for), and refuses everyone else's.
func (n *Node) DNSHandler() dns.Handler {
	return dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		var src netip.Addr
		switch a := w.RemoteAddr().(type) {
		case *net.UDPAddr:
			src, _ = netip.AddrFromSlice(a.IP)
		case *net.TCPAddr:
			src, _ = netip.AddrFromSlice(a.IP)
		}
		if h := n.DNS(src); h != nil {
			h.ServeDNS(w, r)
			return
		}
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeRefused)
		_ = w.WriteMsg(m)
	})
}

// resyncPeriod: none. Every change of a sandbox pod of the node comes as an event.
const resyncPeriod = 0

// WatchPods feeds the enforcer the sandbox pods of nodeName (those with egressapi.PodLabel),
// and, once the first list is in, drops the rules of pods that went while the agent was down.
func (n *Node) WatchPods(ctx context.Context, client kubernetes.Interface, nodeName string) error {
	sel := labels.SelectorFromSet(labels.Set{egressapi.PodLabel: "true"}).String()
	fsel := fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector, o.FieldSelector = sel, fsel
			return client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector, o.FieldSelector = sel, fsel
			return client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
	// As client-go's generated informers do: a client that cannot stream the first list (a
	// fake clientset) gets a list and a watch.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Pod{}, resyncPeriod, cache.Indexers{})
	// Of a pod the enforcer reads its name, UID and addresses; the handlers of AddPodHandler
	// read its labels too (which sandbox it serves, if any).
	_ = inf.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
				ResourceVersion: p.ResourceVersion, Labels: p.Labels},
				Status: corev1.PodStatus{PodIPs: p.Status.PodIPs, Phase: p.Status.Phase,
					InitContainerStatuses: slimStatuses(p.Status.InitContainerStatuses),
					ContainerStatuses:     slimStatuses(p.Status.ContainerStatuses)}}, nil
		}
		return obj, nil
	})
	observe := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			n.ObservePod(p)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				n.ForgetPod(string(p.UID))
			}
		},
	}); err != nil {
		return err
	}
	n.mu.Lock()
	n.informer = inf
	n.mu.Unlock()
	go inf.RunWithContext(ctx)
	syncCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		return fmt.Errorf("list the sandbox pods of node %s: %w", nodeName, context.Cause(syncCtx))
	}
	known := map[string]bool{}
	for _, obj := range inf.GetStore().List() {
		if p, ok := obj.(*corev1.Pod); ok {
			known[string(p.UID)] = true
		}
	}
	n.Resync(known)
	klog.InfoS("Watching the sandbox pods of the node", "node", nodeName, "pods", len(known))
	return nil
}

// AddPodHandler lets h hear of the sandbox pods of the node that WatchPods watches (the pods
// it holds already first, as adds), so that another part of the agent needs no watch of its
// own. The pods are as the enforcer keeps them: name, namespace, UID, labels, addresses and
// phase, nothing else; h must not change them.
func (n *Node) AddPodHandler(h cache.ResourceEventHandler) error {
	n.mu.RLock()
	inf := n.informer
	n.mu.RUnlock()
	if inf == nil {
		return errors.New("the node's pods are not watched yet (WatchPods)")
	}
	_, err := inf.AddEventHandler(h)
	return err
}

// slimStatuses keeps of each container's status its name and its runtime's ID: the usage
// sampler measures each container's writable layer by that ID, with no listing of the
// runtime's containers.
func slimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, 0, len(in))
	for _, c := range in {
		out = append(out, corev1.ContainerStatus{Name: c.Name, ContainerID: c.ContainerID})
	}
	return out
}
