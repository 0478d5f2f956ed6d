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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/usage"
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
	ListenAddress  string
	HealthAddress  string
	WaitAddress    string
	MetricsAddress string
	TLSCertFile    string
	TLSKeyFile     string
	ClientCAFile   string

	// CgroupRoot and KubeletRootDir are where the agent sees the node's cgroup filesystems
	// and the kubelet's root directory (usage figures).
	CgroupRoot     string
	KubeletRootDir string

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
		MetricsAddress:         ":" + strconv.Itoa(nodeapi.MetricsPort),
		CgroupRoot:             "/sys/fs/cgroup",
		KubeletRootDir:         "/var/lib/kubelet",
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
	if o.MetricsAddress != "" {
		if _, _, err := net.SplitHostPort(o.MetricsAddress); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-address %q: %w", o.MetricsAddress, err))
		}
	}
	// Absolute and clean: the figures of a pod are read at paths joined to them, and a
	// relative root would read whatever the working directory holds.
	for flag, p := range map[string]string{"--cgroup-root": o.CgroupRoot, "--kubelet-root-dir": o.KubeletRootDir} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			errs = append(errs, fmt.Errorf("%s %q: want an absolute, clean path", flag, p))
		}
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
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress, "Address (host:port) of the mutual-TLS port serving snapshots ("+nodeapi.SnapshotPath+") and pods' egress policies to sandbox-controller, and usage figures ("+nodeapi.StatsPath+") to sandbox-apiserver and sandbox-controller.")
	fs.StringVar(&o.WaitAddress, "wait-address", o.WaitAddress, "Address (host:port) of the TLS port where sandbox pods' init containers wait for their egress filter (no client certificate).")
	fs.StringVar(&o.HealthAddress, "health-address", o.HealthAddress, "Address (host:port) of the plain-HTTP "+nodeapi.HealthzPath+" and "+nodeapi.ReadyzPath+" for the kubelet's probes; empty serves none.")
	fs.StringVar(&o.MetricsAddress, "metrics-address", o.MetricsAddress, "Address (host:port) of the TLS port serving Prometheus metrics ("+nodeapi.MetricsPath+") to scrapers whose bearer token the kube-apiserver authenticates and allows get on "+nodeapi.MetricsPath+"; empty serves none.")
	fs.StringVar(&o.CgroupRoot, "cgroup-root", o.CgroupRoot, "Where the agent sees the node's cgroup filesystems (cgroup v2, or v1's hierarchies), read only: a sandbox pod's CPU, memory and processes are its cgroup's.")
	fs.StringVar(&o.KubeletRootDir, "kubelet-root-dir", o.KubeletRootDir, "Where the agent sees the kubelet's --root-dir (its pods directory), read only: a sandbox pod's disk is its writable layers and its emptyDir volumes there.")
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
		Short: "kube-sandbox's node agent: egress enforcement for every sandbox pod of the node, snapshots, and usage figures",
		Long: `sandbox-node runs on every node (a DaemonSet on the node's network). It does three things.

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

Usage: every ` + nodeapi.SampleInterval.String() + ` it reads what each pod that serves a sandbox uses of the node,
on the node and never from inside the sandbox: CPU, memory and processes from the pod's cgroup
(below --cgroup-root; under gVisor it holds the sentry and the gofers), the writable layers of
its containers from containerd, its emptyDir volumes (below --kubelet-root-dir), and the
traffic of its interface and its filter's verdicts. Idle pool pods are not read.

It serves sandbox-controller on --listen-address (mutual TLS, --client-ca-file): snapshots and
egress policies to it alone, usage figures (` + nodeapi.StatsPath + `) to it and sandbox-apiserver.
It serves the pods' wait on --wait-address (TLS), Prometheus metrics on --metrics-address
(TLS; a bearer token that the kube-apiserver authenticates and allows get on ` + nodeapi.MetricsPath + `),
and /healthz and /readyz on --health-address (plain HTTP). On SIGTERM it takes no new
snapshots, lets the running ones finish for --shutdown-grace-period, then cancels them; the
filter stays.`,
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
	// Before anything starts: a --cgroup-root that is no cgroup mount is a DaemonSet to fix.
	cgroups, err := usage.OpenCgroups(o.CgroupRoot)
	if err != nil {
		return fmt.Errorf("--cgroup-root: %w", err)
	}
	// Egress first: a node whose kernel cannot enforce a policy has no agent, and no sandbox
	// pod gets past its init container there.
	eg, err := o.Egress.start(ctx, client, o.ContainerdNamespace)
	if err != nil {
		return err
	}
	sampler, err := startUsage(eg, cgroups, &usage.Containerd{Client: client, Namespace: o.ContainerdNamespace}, o.KubeletRootDir)
	if err != nil {
		return err
	}
	var auth *metricsAuth
	if o.MetricsAddress != "" {
		cfg, err := o.Egress.restConfig()
		if err != nil {
			return err
		}
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		if auth, err = newMetricsAuth(kube); err != nil {
			return fmt.Errorf("metrics authentication: %w", err)
		}
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
		stats:        sampler,
		sampler:      sampler,
		node:         o.Egress.NodeName,
	}
	if auth != nil {
		s.metricsListen, s.metrics, s.metricsAuth = o.MetricsAddress, eg.Registry(), auth
	}
	return s.run(ctx)
}

// server is the running agent: the TLS port, the wait port, the metrics port and the health
// port.
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
	// stats, if set, answers the usage endpoints on the TLS port, for node; sampler, if set,
	// runs as long as the server. In the agent, both are the usage sampler.
	stats   statsSource
	sampler runner
	node    string
	// metricsListen, if set, serves metrics' series to the scrapers metricsAuth admits.
	metricsListen string
	metrics       prometheus.Gatherer
	metricsAuth   *metricsAuth
	// ready, if set, is told the addresses listened on (tests listen on port 0);
	// metricsReady the metrics port's.
	ready        func(addr, healthAddr net.Addr)
	metricsReady func(net.Addr)
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
		health = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	}
	if s.stats != nil {
		statsRoutes(ctx, srv.Handler.(*http.ServeMux), s.stats, s.node, h.heartbeat)
	}
	var metricsSrv *http.Server
	var metricsLn net.Listener
	if s.metricsListen != "" && s.metricsAuth != nil {
		if metricsLn, err = net.Listen("tcp", s.metricsListen); err != nil {
			_ = ln.Close()
			if healthLn != nil {
				_ = healthLn.Close()
			}
			return err
		}
		metricsSrv = &http.Server{
			Handler: s.metricsAuth.handler(s.metrics),
			// The agent's serving certificate, and no client certificate: scrapers present a
			// bearer token, which the handler has the kube-apiserver review.
			TLSConfig:         s.tls.serverOnlyConfig(),
			ReadHeaderTimeout: 10 * time.Second,
			TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
			ErrorLog:          klog.NewStandardLogger("INFO"),
		}
	}

	errc := make(chan error, 5)
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
	if metricsSrv != nil {
		wg.Go(func() {
			if err := metricsSrv.ServeTLS(metricsLn, "", ""); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve %s: %w", s.metricsListen, err)
			}
		})
	}
	samplerCtx, stopSampler := context.WithCancel(ctx)
	defer stopSampler()
	if s.sampler != nil {
		wg.Go(func() { s.sampler.Run(samplerCtx) })
	}
	klog.InfoS("sandbox-node serving", "address", ln.Addr().String(), "health", s.healthListen, "metrics", s.metricsListen,
		"registry", s.registry.Host, "repositoryPrefix", s.registry.RepositoryPrefix, "maxSnapshotBytes", s.maxBytes)
	if s.ready != nil {
		var ha net.Addr
		if healthLn != nil {
			ha = healthLn.Addr()
		}
		s.ready(ln.Addr(), ha)
	}
	if s.metricsReady != nil && metricsLn != nil {
		s.metricsReady(metricsLn.Addr())
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
	if metricsSrv != nil {
		_ = metricsSrv.Close()
	}
	stopSampler()
	cancelDNS()
	wg.Wait()
	if s.egress != nil {
		// The rules stay in the kernel: the node's sandbox pods stay filtered while the agent
		// is away.
		_ = s.egress.Close()
	}
	return runErr
}
