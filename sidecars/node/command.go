package node

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

const (
	// defaultMaxSnapshotBytes: a sandbox that wrote more than this is not one to pause; its
	// pod keeps running and its sandbox says why.
	defaultMaxSnapshotBytes = "10Gi"
	// defaultGracePeriod leaves the running snapshots most of the kubelet's default 30 s
	// termination grace period, and time to cancel them before it is over.
	defaultGracePeriod = 25 * time.Second
	// defaultConcurrentSnapshots: see handler.slots.
	defaultConcurrentSnapshots = 2
	// containerdDialTimeout bounds each attempt to connect to containerd's socket.
	containerdDialTimeout = 10 * time.Second
)

// Options of sandbox-node.
type Options struct {
	ListenAddress string
	HealthAddress string
	WaitAddress   string
	TLSCertFile   string
	TLSKeyFile    string
	ClientCAFile  string

	// Egress: see egressOptions.
	Egress egressOptions

	ContainerdAddress   string
	ContainerdNamespace string

	Registry Registry

	MaxSnapshotBytes       resource.QuantityValue
	MaxConcurrentSnapshots int
	ShutdownGracePeriod    time.Duration
}

// NewOptions are the defaults.
func NewOptions() *Options {
	o := &Options{
		ListenAddress:          ":" + strconv.Itoa(nodeapi.Port),
		HealthAddress:          ":" + strconv.Itoa(nodeapi.HealthPort),
		WaitAddress:            ":" + strconv.Itoa(nodeapi.WaitPort),
		Egress:                 newEgressOptions(),
		ContainerdAddress:      "/run/containerd/containerd.sock",
		ContainerdNamespace:    "k8s.io",
		Registry:               Registry{RepositoryPrefix: "kube-sandbox/snapshots"},
		MaxConcurrentSnapshots: defaultConcurrentSnapshots,
		ShutdownGracePeriod:    defaultGracePeriod,
	}
	o.MaxSnapshotBytes.Quantity = resource.MustParse(defaultMaxSnapshotBytes)
	return o
}

// Validate refuses what would make the agent unsafe or useless.
func (o *Options) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(o.ListenAddress); err != nil {
		errs = append(errs, fmt.Errorf("--listen-address %q: %w", o.ListenAddress, err))
	}
	if o.HealthAddress != "" {
		if _, _, err := net.SplitHostPort(o.HealthAddress); err != nil {
			errs = append(errs, fmt.Errorf("--health-address %q: %w", o.HealthAddress, err))
		}
	}
	if _, _, err := net.SplitHostPort(o.WaitAddress); err != nil {
		errs = append(errs, fmt.Errorf("--wait-address %q: %w", o.WaitAddress, err))
	}
	if err := o.Egress.validate(); err != nil {
		errs = append(errs, err)
	}
	if o.TLSCertFile == "" || o.TLSKeyFile == "" || o.ClientCAFile == "" {
		// The agent pushes any container of the node to the registry: never without TLS and
		// client certificates.
		errs = append(errs, errors.New("--tls-cert-file, --tls-key-file and --client-ca-file are required"))
	}
	if !filepath.IsAbs(o.ContainerdAddress) {
		errs = append(errs, fmt.Errorf("--containerd-address %q: want the absolute path of containerd's socket", o.ContainerdAddress))
	}
	if o.ContainerdNamespace == "" {
		errs = append(errs, errors.New("--containerd-namespace must not be empty (the CRI plugin's is k8s.io)"))
	}
	if err := o.Registry.validate(); err != nil {
		errs = append(errs, err)
	}
	if o.MaxSnapshotBytes.Value() <= 0 {
		errs = append(errs, fmt.Errorf("--max-snapshot-bytes %s: must be positive", o.MaxSnapshotBytes.String()))
	}
	if o.MaxConcurrentSnapshots < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrent-snapshots %d: must be at least 1", o.MaxConcurrentSnapshots))
	}
	if o.ShutdownGracePeriod < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-grace-period %s: must not be negative", o.ShutdownGracePeriod))
	}
	return errors.Join(errs...)
}

// AddFlags binds the options to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress, "Address (host:port) of the mutual-TLS port serving snapshots ("+nodeapi.SnapshotPath+") and pods' egress policies to sandbox-controller.")
	fs.StringVar(&o.WaitAddress, "wait-address", o.WaitAddress, "Address (host:port) of the TLS port where sandbox pods' init containers wait for their egress filter (no client certificate).")
	fs.StringVar(&o.HealthAddress, "health-address", o.HealthAddress, "Address (host:port) of the plain-HTTP "+nodeapi.HealthzPath+" for the kubelet's probes; empty serves none.")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "PEM serving certificate (for "+nodeapi.ServerName+"), reloaded when it changes.")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", o.TLSKeyFile, "PEM key of --tls-cert-file, reloaded when it changes.")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "PEM CAs whose client certificates are accepted (the kube-sandbox CA), reloaded when it changes.")
	fs.StringVar(&o.ContainerdAddress, "containerd-address", o.ContainerdAddress, "containerd's socket.")
	fs.StringVar(&o.ContainerdNamespace, "containerd-namespace", o.ContainerdNamespace, "containerd namespace of the CRI plugin's containers.")
	fs.StringVar(&o.Registry.Host, "registry", o.Registry.Host, "The snapshot registry, host[:port]: snapshots are pushed there, over HTTPS, and nowhere else. Empty: no snapshots (pause and resume are off).")
	fs.StringVar(&o.Registry.RepositoryPrefix, "repository-prefix", o.Registry.RepositoryPrefix, "Repositories of the registry the agent may push to: those under this path.")
	fs.StringVar(&o.Registry.CAFile, "registry-ca-file", o.Registry.CAFile, "PEM CAs of the registry's serving certificate (default: the system's), read at every push.")
	fs.StringVar(&o.Registry.UsernameFile, "registry-username-file", o.Registry.UsernameFile, "File holding the registry's basic auth username, read at every push (default: anonymous).")
	fs.StringVar(&o.Registry.PasswordFile, "registry-password-file", o.Registry.PasswordFile, "File holding the registry's basic auth password, read at every push.")
	fs.Var(&o.MaxSnapshotBytes, "max-snapshot-bytes", "Largest writable layer committed, compressed (a quantity: 10Gi); a request may ask for less.")
	fs.IntVar(&o.MaxConcurrentSnapshots, "max-concurrent-snapshots", o.MaxConcurrentSnapshots, "Snapshots that run at once; more wait.")
	fs.DurationVar(&o.ShutdownGracePeriod, "shutdown-grace-period", o.ShutdownGracePeriod, "On SIGTERM, how long running snapshots may go on before they are cancelled.")
}

// NewCommand is sandbox-node.
func NewCommand() *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "sandbox-node",
		Short: "kube-sandbox's node agent: egress enforcement for every sandbox pod of the node, and snapshots",
		Long: `sandbox-node runs on every node (a DaemonSet on the node's network). It does two things.

Egress: it enforces each sandbox pod's outbound policy from the node's network namespace,
where nothing in the pod can reach it: a stateful default-deny nf_tables filter keyed by the
pod's host-side interface and addresses, and a DNS proxy (--dns-address) that answers each
pod's queries by its policy. It watches the sandbox pods of --node-name (label
` + egressapi.PodLabel + `), finds each one's interface through containerd, proves with a probe
that the node's netfilter sees the pod's traffic, and then tells the pod's first init container
(on --wait-address) that it may go on. sandbox-controller pushes each pod's policy. The rules
outlive the agent: traffic stays filtered while it restarts.

Snapshots: when sandbox-controller pauses a sandbox, it commits the writable layer of the
sandbox's container as a layer on top of the container's image and pushes that image to
--registry, under --repository-prefix (pause and resume; off without --registry).

It serves sandbox-controller alone on --listen-address (mutual TLS, --client-ca-file), the
pods' wait on --wait-address (TLS), and /healthz, /readyz and /metrics on --health-address
(plain HTTP). On SIGTERM it takes no new snapshots, lets the running ones finish for
--shutdown-grace-period, then cancels them; the filter stays.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		// A daemon needs no shell completion.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.AddFlags(cmd.Flags())
	o.Egress.addFlags(cmd.Flags())
	// Only klog's verbosity flags: a container logs to stderr.
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	for _, name := range []string{"v", "vmodule"} {
		cmd.PersistentFlags().AddGoFlag(klogFlags.Lookup(name))
	}
	return cmd
}

// Execute runs cmd and returns the exit code.
func Execute(ctx context.Context, cmd *cobra.Command) int {
	if err := cmd.ExecuteContext(ctx); err != nil {
		klog.ErrorS(err, "sandbox-node failed")
		klog.Flush()
		return 1
	}
	return 0
}

// Run serves until ctx ends, then shuts down: see NewCommand.
func (o *Options) Run(ctx context.Context) error {
	files, err := newFileTLS(o.TLSCertFile, o.TLSKeyFile, o.ClientCAFile)
	if err != nil {
		return err
	}
	client, err := containerd.New(o.ContainerdAddress, containerd.WithDefaultNamespace(o.ContainerdNamespace),
		containerd.WithTimeout(containerdDialTimeout))
	if err != nil {
		return fmt.Errorf("containerd: %w", err)
	}
	defer func() { _ = client.Close() }()
	if v, err := client.Version(ctx); err != nil {
		// Not fatal: containerd may be restarting; the health check says so until it is back.
		klog.ErrorS(err, "containerd does not answer yet", "address", o.ContainerdAddress)
	} else {
		klog.InfoS("Connected to containerd", "address", o.ContainerdAddress, "version", v.Version)
	}
	// Egress first: a node whose kernel cannot enforce a policy has no agent, and no sandbox
	// pod gets past its init container there.
	eg, err := o.Egress.start(ctx, client, o.ContainerdNamespace)
	if err != nil {
		return err
	}
	registry := o.Registry
	committer := NewCommitter(client, o.ContainerdNamespace, &registry)
	// A snapshot interrupted by the death of the last agent may have left a sandbox frozen:
	// thawed before any snapshot, retried while containerd does not answer.
	committer.ThawLeftoversInBackground(ctx)
	s := &server{
		egress:       eg,
		waitListen:   o.WaitAddress,
		committer:    committer,
		registry:     &registry,
		tls:          files,
		listen:       o.ListenAddress,
		healthListen: o.HealthAddress,
		maxBytes:     o.MaxSnapshotBytes.Value(),
		concurrent:   o.MaxConcurrentSnapshots,
		grace:        o.ShutdownGracePeriod,
	}
	return s.run(ctx)
}

// server is the running agent: the TLS port, the wait port and the health port.
type server struct {
	// egress is the enforcer; nil in tests of the snapshots alone.
	egress       *egress.Agent
	waitListen   string
	committer    engine
	registry     *Registry
	tls          *fileTLS
	listen       string
	healthListen string
	maxBytes     int64
	concurrent   int
	grace        time.Duration
	// ready, if set, is told the addresses listened on (tests listen on port 0).
	ready func(addr, healthAddr net.Addr)
	// heartbeat overrides nodeapi.Heartbeat in tests.
	heartbeat time.Duration
}

func (s *server) run(ctx context.Context) error {
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	h := newHandler(s.committer, s.registry, s.maxBytes, s.concurrent, work)
	if s.heartbeat > 0 {
		h.heartbeat = s.heartbeat
	}
	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           h.mux(),
		TLSConfig:         s.tls.serverConfig(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// HTTP/1.1 only, as the TLS configuration says: a stream is its connection, so a
		// client that hangs up is seen at once.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ErrorLog:     klog.NewStandardLogger("INFO"),
	}
	var health *http.Server
	var healthLn net.Listener
	dnsReady := make(chan struct{})
	if s.healthListen != "" {
		if healthLn, err = net.Listen("tcp", s.healthListen); err != nil {
			_ = ln.Close()
			return err
		}
		mux := http.NewServeMux()
		mux.HandleFunc(nodeapi.HealthzPath, h.serveHealthz)
		mux.HandleFunc(nodeapi.ReadyzPath, func(w http.ResponseWriter, req *http.Request) {
			if s.egress != nil {
				select {
				case <-dnsReady:
				default:
					http.Error(w, "the DNS proxy is not serving yet", http.StatusServiceUnavailable)
					return
				}
			}
			h.serveHealthz(w, req)
		})
		if s.egress != nil {
			mux.Handle(nodeapi.MetricsPath, promhttp.HandlerFor(s.egress.Registry(), promhttp.HandlerOpts{}))
		}
		health = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	}

	errc := make(chan error, 4)
	var wg sync.WaitGroup
	var waitSrv *http.Server
	dnsCtx, cancelDNS := context.WithCancel(ctx)
	defer cancelDNS()
	if s.egress != nil {
		srv.Handler.(*http.ServeMux).Handle("/v1/pods/", s.egress.ControlHandler(authorize))
		waitLn, err := net.Listen("tcp", s.waitListen)
		if err != nil {
			_ = ln.Close()
			return err
		}
		waitSrv = &http.Server{
			Handler:           s.egress.WaitHandler(),
			TLSConfig:         s.tls.serverOnlyConfig(),
			ReadHeaderTimeout: 10 * time.Second,
			TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
			ErrorLog:          klog.NewStandardLogger("INFO"),
		}
		wg.Go(func() {
			if err := waitSrv.ServeTLS(waitLn, "", ""); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve %s: %w", s.waitListen, err)
			}
		})
		wg.Go(func() {
			if err := s.egress.ServeDNS(dnsCtx, func() { close(dnsReady) }); err != nil {
				errc <- fmt.Errorf("dns proxy: %w", err)
			}
		})
	}
	wg.Go(func() {
		if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serve %s: %w", s.listen, err)
		}
	})
	if health != nil {
		wg.Go(func() {
			if err := health.Serve(healthLn); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve %s: %w", s.healthListen, err)
			}
		})
	}
	klog.InfoS("sandbox-node serving", "address", ln.Addr().String(), "health", s.healthListen,
		"registry", s.registry.Host, "repositoryPrefix", s.registry.RepositoryPrefix, "maxSnapshotBytes", s.maxBytes)
	if s.ready != nil {
		var ha net.Addr
		if healthLn != nil {
			ha = healthLn.Addr()
		}
		s.ready(ln.Addr(), ha)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	// New snapshots are refused from now on; running ones have the grace period to end.
	h.draining.Store(true)
	klog.InfoS("Shutting down: waiting for running snapshots", "gracePeriod", s.grace)
	graceCtx, cancel := context.WithTimeout(context.Background(), s.grace)
	defer cancel()
	if err := srv.Shutdown(graceCtx); err != nil {
		klog.InfoS("Grace period over: cancelling the running snapshots")
		cancelWork()
		// Cancelled snapshots send their Failed event and delete their lease.
		endCtx, cancel := context.WithTimeout(context.Background(), cleanupTimeout+5*time.Second)
		defer cancel()
		if err := srv.Shutdown(endCtx); err != nil {
			_ = srv.Close()
		}
	}
	if health != nil {
		_ = health.Close()
	}
	if waitSrv != nil {
		_ = waitSrv.Close()
	}
	cancelDNS()
	wg.Wait()
	if s.egress != nil {
		// The rules stay in the kernel: the node's sandbox pods stay filtered while the agent
		// is away.
		_ = s.egress.Close()
	}
	return runErr
}
