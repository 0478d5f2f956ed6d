package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// egressOptions configure the egress enforcer of the node agent.
type egressOptions struct {
	NodeName     string
	NodeAddrs    []string
	DNSAddresses []string
	StateDir     string
	ResolvConf   string
	Kubeconfig   string
}

func newEgressOptions() egressOptions {
	return egressOptions{
		NodeName: os.Getenv("NODE_NAME"),
		// The DNS proxy listens on every address of the node's, IPv4 and IPv6 on one socket:
		// the filter redirects each pod's queries to the address of the interface they came
		// in on.
		DNSAddresses: []string{":" + strconv.Itoa(egressapi.DNSPort)},
		StateDir:     "/var/lib/kube-sandbox/egress",
		ResolvConf:   "/etc/resolv.conf",
	}
}

func (o *egressOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "This node's name (default $NODE_NAME): the agent filters the sandbox pods scheduled to it.")
	fs.StringSliceVar(&o.NodeAddrs, "node-ip", o.NodeAddrs, "This node's addresses (default $HOST_IP), where pods reach --wait-address and where the proof probe goes.")
	fs.StringSliceVar(&o.DNSAddresses, "dns-address", o.DNSAddresses, "Addresses of the DNS proxy; the filter redirects every DNS query of a sandbox pod to their port.")
	fs.StringVar(&o.StateDir, "egress-state-dir", o.StateDir, "Directory (a hostPath) that keeps each pod's last policy across restarts of the agent.")
	fs.StringVar(&o.ResolvConf, "resolv-conf", o.ResolvConf, "resolv.conf whose nameservers the DNS proxy asks for pods whose policy names no upstreams.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the Kubernetes API (default: in-cluster); the agent lists and watches its node's sandbox pods.")
}

func (o *egressOptions) validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name (or $NODE_NAME) is required"))
	}
	if len(o.DNSAddresses) == 0 {
		errs = append(errs, errors.New("--dns-address: at least one is required"))
	}
	port := ""
	for _, a := range o.DNSAddresses {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			errs = append(errs, fmt.Errorf("--dns-address %q: %w", a, err))
			continue
		}
		if port != "" && p != port {
			errs = append(errs, errors.New("--dns-address: every address must have the same port, the redirect's"))
		}
		port = p
	}
	if _, err := o.nodeAddrs(); err != nil {
		errs = append(errs, err)
	}
	if !filepath.IsAbs(o.StateDir) {
		errs = append(errs, fmt.Errorf("--egress-state-dir %q: want an absolute path", o.StateDir))
	}
	return errors.Join(errs...)
}

func (o *egressOptions) nodeAddrs() ([]netip.Addr, error) {
	raw := o.NodeAddrs
	if len(raw) == 0 && os.Getenv("HOST_IP") != "" {
		raw = []string{os.Getenv("HOST_IP")}
	}
	if len(raw) == 0 {
		return nil, errors.New("--node-ip (or $HOST_IP) is required")
	}
	var out []netip.Addr
	for _, s := range raw {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("--node-ip %q: %w", s, err)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

func (o *egressOptions) dnsPort() int {
	_, p, _ := net.SplitHostPort(o.DNSAddresses[0])
	port, _ := strconv.Atoi(p)
	return port
}

// start starts the node agent's egress (egress.StartAgent).
func (o *egressOptions) start(ctx context.Context, client *containerd.Client, containerdNS string) (*egress.Agent, error) {
	addrs, err := o.nodeAddrs()
	if err != nil {
		return nil, err
	}
	cfg, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return egress.StartAgent(ctx, egress.AgentOptions{
		NodeName: o.NodeName, NodeAddrs: addrs, DNSAddresses: o.DNSAddresses, DNSPort: o.dnsPort(),
		StateDir: o.StateDir, ResolvConf: o.ResolvConf, Containerd: client, ContainerdNamespace: containerdNS, Kube: kube,
	})
}

func (o *egressOptions) restConfig() (*rest.Config, error) {
	if o.Kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster config (or --kubeconfig): %w", err)
	}
	return cfg, nil
}
