// Package portforward implements `kubectl sandbox port-forward`.
package portforward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	typedsandbox "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/typed/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// shutdownTimeout is how long requests in flight get to finish after Ctrl-C before their
// connections are closed: enough for a page load, short enough not to keep the user waiting.
const shutdownTimeout = 5 * time.Second

var (
	portForwardLong = cmdutil.LongDesc(`
		Forward local ports to HTTP servers in a sandbox.

		Each PORT mapping is [LOCAL:]REMOTE: requests to LOCAL on the --address interfaces are
		sent through the sandbox's proxy subresource to port REMOTE in the sandbox. With LOCAL
		omitted or 0, a free port is chosen and printed. Only HTTP and WebSocket (and other
		HTTP Upgrade) traffic is forwarded, not arbitrary TCP. Authorization and Cookie headers
		of local clients are dropped: requests carry your kubeconfig's credentials to the
		Kubernetes API server, and the sandbox receives none. Runs until interrupted.`)

	portForwardExample = cmdutil.Examples(`
		# Forward local port 8080 to port 8080 in sandbox my-sandbox
		kubectl sandbox port-forward my-sandbox 8080

		# Forward local port 3000 to port 80, and a free local port to port 8888
		kubectl sandbox port-forward my-sandbox 3000:80 :8888

		# Listen on all interfaces rather than the loopback one
		kubectl sandbox port-forward my-sandbox 8080:80 --address 0.0.0.0

		# Forward to port 8080 of the third replica of sandbox workers
		kubectl sandbox port-forward workers 8080 --replica 2`)
)

// PortMapping forwards the Local port to the Remote one; Local 0 picks a free port.
type PortMapping struct {
	Local, Remote uint16
}

// ParsePortMapping parses [LOCAL:]REMOTE.
func ParsePortMapping(s string) (PortMapping, error) {
	local, remote, ok := strings.Cut(s, ":")
	if !ok {
		// REMOTE alone listens on the same port locally, as kubectl does.
		local, remote = s, s
	}
	r, err := strconv.ParseUint(remote, 10, 16)
	if err != nil || r == 0 {
		return PortMapping{}, fmt.Errorf("invalid port mapping %q: the remote port must be a number from 1 to 65535", s)
	}
	var l uint64
	if local != "" {
		if l, err = strconv.ParseUint(local, 10, 16); err != nil {
			return PortMapping{}, fmt.Errorf("invalid port mapping %q: the local port must be empty or a number from 0 to 65535", s)
		}
	}
	return PortMapping{Local: uint16(l), Remote: uint16(r)}, nil
}

// PortForwardOptions are the inputs of `kubectl sandbox port-forward`.
type PortForwardOptions struct {
	Name      string
	Ports     []PortMapping
	Addresses []string
	// Replica is the index of the replica whose ports are reached.
	Replica int32

	// Base is the URL of the sandbox's proxy subresource.
	Base *url.URL
	// Transport carries requests to the API server with the user's credentials, over HTTP/1.1
	// so that upgrades pass.
	Transport http.RoundTripper

	// Ready, if set, is closed once every port listens and has been reported.
	Ready chan struct{}

	genericiooptions.IOStreams
}

// NewPortForwardOptions returns PortForwardOptions listening on the loopback interface.
func NewPortForwardOptions(streams genericiooptions.IOStreams) *PortForwardOptions {
	return &PortForwardOptions{Addresses: []string{"127.0.0.1"}, IOStreams: streams}
}

// NewCmdPortForward returns the `port-forward` command.
func NewCmdPortForward(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewPortForwardOptions(streams)
	cmd := &cobra.Command{
		Use:                   "port-forward NAME [LOCAL:]REMOTE [...[LOCAL:]REMOTE] [--address=ADDRESS]",
		DisableFlagsInUseLine: true,
		Short:                 "Forward local ports to HTTP and WebSocket servers in a sandbox",
		Long:                  portForwardLong,
		Example:               portForwardExample,
		ValidArgsFunction:     cmdutil.SandboxNameCompletion(f, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, cmd, args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringSliceVar(&o.Addresses, "address", o.Addresses, "Addresses to listen on (comma-separated); IP addresses or localhost.")
	cmd.Flags().Int32Var(&o.Replica, "replica", o.Replica, "Index of the replica whose ports to forward to.")
	return cmd
}

// Complete parses the name and port mappings and builds the transport.
func (o *PortForwardOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	if len(args) < 2 {
		return cmdutil.UsageErrorf(cmd, "sandbox NAME and at least one port mapping are required")
	}
	o.Name = args[0]
	for _, a := range args[1:] {
		m, err := ParsePortMapping(a)
		if err != nil {
			return cmdutil.UsageErrorf(cmd, "%s", err)
		}
		o.Ports = append(o.Ports, m)
	}
	ns, _, err := f.Namespace()
	if err != nil {
		return err
	}
	config, err := f.ToRESTConfig()
	if err != nil {
		return err
	}
	// The proxy subresource's URL, as the REST client of the group builds it; the forwarded
	// requests' paths go after it.
	typed, err := typedsandbox.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("create sandbox REST client: %w", err)
	}
	o.Base = typed.RESTClient().Get().Namespace(ns).Resource("sandboxes").Name(o.Name).SubResource("proxy").URL()
	o.Transport, err = sandboxclient.NewTransport(config)
	return err
}

// Validate checks the options.
func (o *PortForwardOptions) Validate() error {
	if o.Name == "" || len(o.Ports) == 0 {
		return errors.New("sandbox NAME and at least one port mapping are required")
	}
	if len(o.Addresses) == 0 {
		return errors.New("--address must name at least one address")
	}
	if o.Replica < 0 {
		return fmt.Errorf("--replica must not be negative, got %d", o.Replica)
	}
	if o.Base == nil || o.Transport == nil {
		return errors.New("no API server to forward to")
	}
	return nil
}

// Handler proxies requests to port remote of the sandbox's replica: the proxy path starts with
// PORT for the first replica, REPLICA:PORT for another.
func (o *PortForwardOptions) Handler(remote uint16) http.Handler {
	target := strconv.Itoa(int(remote))
	if o.Replica != 0 {
		target = strconv.Itoa(int(o.Replica)) + ":" + target
	}
	base := appendPath(o.Base, target)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			in := pr.In.URL
			out := *base
			out.Path = base.Path + "/" + strings.TrimPrefix(in.Path, "/")
			out.RawPath = base.EscapedPath() + "/" + strings.TrimPrefix(in.EscapedPath(), "/")
			out.RawQuery = in.RawQuery
			pr.Out.URL = &out
			pr.Out.Host = ""
			// The local client's credentials are not the user's, and the transport adds the
			// user's only where no Authorization header is set.
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Cookie")
		},
		Transport: o.Transport,
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if req.Context().Err() == nil {
				fmt.Fprintf(o.ErrOut, "error forwarding %s %s to port %d: %v\n", req.Method, req.URL.RequestURI(), remote, err)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
}

// Run listens on every address and port, serves until ctx ends, then shuts down.
func (o *PortForwardOptions) Run(ctx context.Context) error {
	var listeners []net.Listener
	var servers []*http.Server
	closeAll := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	for _, m := range o.Ports {
		port := m.Local
		for _, addr := range o.Addresses {
			l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(int(port))))
			if err != nil {
				closeAll()
				return fmt.Errorf("listen on %s port %d: %w", addr, port, err)
			}
			listeners = append(listeners, l)
			// The other addresses share the port chosen for the first one.
			tcp := l.Addr().(*net.TCPAddr)
			port = uint16(tcp.Port)
			fmt.Fprintf(o.Out, "Forwarding from %s -> %d\n", l.Addr(), m.Remote)
			servers = append(servers, &http.Server{
				Handler:           o.Handler(m.Remote),
				ReadHeaderTimeout: 30 * time.Second,
				// Upgraded connections outlive Shutdown; their requests' context ends with ctx,
				// which makes the proxy close them.
				BaseContext: func(net.Listener) context.Context { return ctx },
			})
		}
	}
	if o.Ready != nil {
		close(o.Ready)
	}

	var wg sync.WaitGroup
	errs := make(chan error, len(servers))
	for i, srv := range servers {
		wg.Go(func() {
			if err := srv.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("serve %s: %w", listeners[i].Addr(), err)
			}
		})
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	for _, srv := range servers {
		if serr := srv.Shutdown(shutdownCtx); serr != nil {
			_ = srv.Close()
		}
	}
	wg.Wait()
	return err
}

// appendPath returns a copy of u with the segments appended, each escaped on its own so that a
// "/", "?" or "%" in one stays part of it.
func appendPath(u *url.URL, segments ...string) *url.URL {
	out := *u
	p := strings.TrimSuffix(u.Path, "/")
	raw := strings.TrimSuffix(u.EscapedPath(), "/")
	for _, s := range segments {
		p += "/" + s
		raw += "/" + url.PathEscape(s)
	}
	out.Path, out.RawPath = p, raw
	out.RawQuery = ""
	return &out
}
