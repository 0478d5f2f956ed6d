package egress

import (
	"context"
	"fmt"
	"net/netip"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/vishvananda/netns"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/dnsproxy"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/nodefilter"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/podnet"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// AgentOptions are what the node agent's egress needs of the node.
type AgentOptions struct {
	// NodeName is the node whose sandbox pods are filtered.
	NodeName string
	// NodeAddrs are the node's addresses (Options.NodeAddrs).
	NodeAddrs []netip.Addr
	// DNSAddresses are the DNS proxy's listen addresses; DNSPort is their port, which the
	// filter redirects every pod's DNS queries to.
	DNSAddresses []string
	DNSPort      int
	// StateDir and ResolvConf: see Options.
	StateDir, ResolvConf string
	// Containerd finds each pod's network namespace (its CRI sandbox, in ContainerdNamespace).
	Containerd          *containerd.Client
	ContainerdNamespace string
	// Kube lists and watches the node's sandbox pods.
	Kube kubernetes.Interface
}

// Agent is the node agent's egress: the enforcer, its filter in the node's network namespace,
// and its DNS proxy.
type Agent struct {
	*Node
	filter *nodefilter.Filter
	dns    []string
}

// StartAgent checks that the kernel can enforce a policy (and refuses to run if it cannot: a
// sandbox promised a policy must not run without one), takes back the rules the kernel holds,
// and starts syncing the node's sandbox pods. It returns once it has listed them.
func StartAgent(ctx context.Context, o AgentOptions) (*Agent, error) {
	if len(o.NodeAddrs) == 0 {
		return nil, fmt.Errorf("no node address")
	}
	f, err := nodefilter.New(nodefilter.Options{
		NetNS: netns.None(), DNSPort: o.DNSPort, WaitPort: nodeapi.WaitPort, NodeAddrs: o.NodeAddrs,
		ProbeAddr: o.NodeAddrs[0], ProbePort: nodeapi.ProbePort,
	})
	if err != nil {
		return nil, fmt.Errorf("open netfilter: %w", err)
	}
	if err := f.CheckKernel(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("this kernel cannot enforce egress policies, refusing to run: %w", err)
	}
	n := NewNode(Options{NodeAddrs: o.NodeAddrs, ResolvConf: o.ResolvConf, StateDir: o.StateDir}, f,
		&podNetwork{resolver: &podnet.Resolver{Client: o.Containerd, Namespace: o.ContainerdNamespace}})
	if err := n.Restore(); err != nil {
		_ = f.Close()
		return nil, err
	}
	go n.Run(ctx)
	if err := n.WatchPods(ctx, o.Kube, o.NodeName); err != nil {
		_ = f.Close()
		return nil, err
	}
	return &Agent{Node: n, filter: f, dns: o.DNSAddresses}, nil
}

// ServeDNS serves the proxy until ctx ends; ready is called once it listens.
func (a *Agent) ServeDNS(ctx context.Context, ready func()) error {
	return dnsproxy.Serve(ctx, a.DNSHandler(), a.dns, ready)
}

// Close closes the filter's netlink sockets. The rules stay in the kernel: the node's
// sandbox pods stay filtered while the agent is away.
func (a *Agent) Close() error { return a.filter.Close() }

// podNetwork is PodNetwork through containerd and netlink.
type podNetwork struct{ resolver *podnet.Resolver }

func (p *podNetwork) Link(ctx context.Context, uid string) (*podnet.Link, string, error) {
	path, err := p.resolver.NetNS(ctx, uid)
	if err != nil {
		return nil, "", err
	}
	l, err := podnet.HostLinkAt(path)
	if err != nil {
		return nil, "", err
	}
	return l, path, nil
}

func (p *podNetwork) Verify(l *podnet.Link) error { return l.Verify() }

func (p *podNetwork) Statistics(l *podnet.Link) (podnet.Statistics, error) { return l.Statistics() }

func (p *podNetwork) Probe(path string, l *podnet.Link, pr podnet.Probe) error {
	h, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open the pod's network namespace: %w", err)
	}
	defer func() { _ = h.Close() }()
	return podnet.SendProbe(h, l.PodIfName, pr)
}

var _ PodNetwork = &podNetwork{}
