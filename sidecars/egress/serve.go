// Package egress is sandbox-egress, the sidecar that enforces a sandbox's outbound policy in
// its pod: a DNS proxy (internal/dnsproxy) that answers only the names the policy allows and
// teaches the packet filter (internal/firewall) the addresses they resolve to, and that
// filter, a stateful default-deny in the pod's network namespace. sandbox-controller pushes
// the policy over mTLS (egressapi); the pod starts with the Config in its environment.
//
// It fails closed: it refuses to start on a kernel without what the filter needs; a Config it
// cannot apply leaves the previous filter in force and makes the pod not Ready; and the filter
// outlives the process, so traffic stays denied while the sidecar restarts.
package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/dnsproxy"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/firewall"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// maxConfigBytes bounds a pushed Config: a few hundred rules of a few hundred bytes.
const maxConfigBytes = 1 << 20

// stateFile, in StateDir, holds the last Config applied.
const stateFile = "config.json"

// Options of sandbox-egress serve.
type Options struct {
	ControlAddr   string
	HealthAddr    string
	DNSAddrs      []string
	StateDir      string
	ResolvConf    string
	IdentityToken string
}

// NewCommand is sandbox-egress.
func NewCommand() *cobra.Command {
	o := &Options{
		ControlAddr: ":" + strconv.Itoa(egressapi.ControlPort),
		HealthAddr:  ":" + strconv.Itoa(egressapi.HealthPort),
		DNSAddrs: []string{
			net.JoinHostPort("127.0.0.1", strconv.Itoa(egressapi.DNSPort)),
			net.JoinHostPort("::1", strconv.Itoa(egressapi.DNSPort)),
		},
		StateDir:      egressapi.StateDir,
		ResolvConf:    "/etc/resolv.conf",
		IdentityToken: egressapi.IdentityTokenPath,
	}
	root := &cobra.Command{
		Use:           "sandbox-egress",
		Short:         "Enforce a sandbox's outbound policy in its pod",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Install the packet filter and serve the DNS proxy and the policy endpoint",
		Long: `serve checks that the kernel has what the packet filter needs (nf_tables with
conntrack, marks, sets with timeouts, NAT redirect), installs the pod's starting policy from
$` + egressapi.EnvConfig + ` (or the last one applied, kept in --state-dir), and serves:
  - the DNS proxy on --dns-addr, where the filter sends every DNS query of the pod;
  - the policy endpoint on --control-addr (mTLS, sandbox-controller only);
  - probes and metrics on --health-addr (plain HTTP).
It needs NET_ADMIN, and only it: the sandbox container never has it.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.Run(cmd.Context()) },
	}
	fs := serve.Flags()
	fs.StringVar(&o.ControlAddr, "control-addr", o.ControlAddr, "Address of the mTLS policy endpoint.")
	fs.StringVar(&o.HealthAddr, "health-addr", o.HealthAddr, "Address of /healthz, /readyz and /metrics (plain HTTP).")
	fs.StringSliceVar(&o.DNSAddrs, "dns-addr", o.DNSAddrs, "Loopback addresses of the DNS proxy; the filter redirects port 53 to their port.")
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, "Directory (private to this container) that keeps the last Config applied across restarts.")
	fs.StringVar(&o.ResolvConf, "resolv-conf", o.ResolvConf, "resolv.conf whose nameservers are the upstreams when the Config names none.")
	fs.StringVar(&o.IdentityToken, "identity-token", o.IdentityToken, "The pod's projected token (audience "+egressapi.IdentityAudience+"), which proves to sandbox-controller which pod this is, so that it certifies the serving key.")
	root.AddCommand(serve, newWaitReadyCommand())
	return root
}

// Execute runs cmd and returns the exit code.
func Execute(ctx context.Context, cmd *cobra.Command) int {
	if err := cmd.ExecuteContext(ctx); err != nil {
		klog.ErrorS(err, "sandbox-egress failed")
		fmt.Fprintln(os.Stderr, "sandbox-egress:", err)
		return 1
	}
	return 0
}

// server is the running sidecar.
type server struct {
	podUID  string
	fw      *firewall.Firewall
	metrics *metrics
	o       *Options

	mu        sync.RWMutex
	cfg       *egressapi.Config
	matcher   *egressapi.Matcher
	status    egressapi.Status
	lastErr   error
	upstreams []string

	dnsReady chan struct{}
	denials  *denials
	identity *execd.ServerIdentity
}

// Run serves until ctx ends. It never removes the filter: a stopped sidecar leaves the pod
// denied what its policy denies.
func (o *Options) Run(ctx context.Context) error {
	podUID := os.Getenv(egressapi.EnvPodUID)
	if podUID == "" {
		return fmt.Errorf("$%s is not set: the pod's UID comes from the downward API", egressapi.EnvPodUID)
	}
	if ip := os.Getenv(egressapi.EnvPodIP); ip != "" && ip == os.Getenv(egressapi.EnvHostIP) {
		// The pod is on the node's network: a default-deny here would be the node's.
		return fmt.Errorf("the pod is on the node's network (pod IP %s is the node's): refusing to filter the node", ip)
	}
	cas, err := execd.ParseClientCAs([]byte(os.Getenv(egressapi.EnvClientCA)))
	if err != nil {
		return fmt.Errorf("$%s: %w", egressapi.EnvClientCA, err)
	}
	fw, err := firewall.New(firewall.Options{DNSPort: egressapi.DNSPort, Mark: egressapi.SocketMark})
	if err != nil {
		return fmt.Errorf("open netfilter: %w", err)
	}
	defer func() { _ = fw.Close() }()
	if err := fw.CheckKernel(); err != nil {
		return fmt.Errorf("this kernel cannot enforce an egress policy, refusing to run: %w", err)
	}
	id, err := execd.NewServerIdentityFor(filepath.Join(o.StateDir, "identity"), cas, func(name string) bool {
		uid, ok := egressapi.PodUIDFromServerName(name)
		return ok && uid == podUID
	})
	if err != nil {
		return fmt.Errorf("serving identity: %w", err)
	}
	s := &server{podUID: podUID, fw: fw, o: o, metrics: newMetrics(fw), dnsReady: make(chan struct{}), denials: newDenials(), identity: id}

	cfg, err := o.startConfig(podUID)
	if err != nil {
		return err
	}
	if _, err := s.apply(cfg); err != nil {
		// Not even the starting policy: deny everything rather than run open.
		deny := egressapi.Config{PodUID: podUID, DefaultAction: egressapi.ActionDeny}
		deny.Revision = deny.Hash()
		if _, derr := s.apply(&deny); derr != nil {
			return fmt.Errorf("install the starting policy: %w; and deny-all: %w", err, derr)
		}
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	var wg sync.WaitGroup
	wg.Go(func() {
		h := &dnsproxy.Handler{
			Matcher:   s.currentMatcher,
			Learner:   fw,
			Upstreams: s.currentUpstreams,
			Mark:      egressapi.SocketMark,
			Observe:   s.observeDNS,
		}
		if err := dnsproxy.Serve(ctx, h, o.DNSAddrs, func() { close(s.dnsReady) }); err != nil {
			errc <- fmt.Errorf("dns proxy: %w", err)
		}
	})
	health := &http.Server{Addr: o.HealthAddr, Handler: s.healthMux(), ReadHeaderTimeout: 5 * time.Second}
	control := &http.Server{Addr: o.ControlAddr, Handler: s.controlMux(), ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: id.TLSConfig()}
	wg.Go(func() {
		if err := health.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("health server: %w", err)
		}
	})
	wg.Go(func() {
		if err := control.ListenAndServeTLS("", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("control server: %w", err)
		}
	})
	klog.InfoS("sandbox-egress serving", "control", o.ControlAddr, "health", o.HealthAddr, "dns", o.DNSAddrs, "sandbox", s.sandboxRef())
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	cancel()
	shutdown, done := context.WithTimeout(context.Background(), 3*time.Second)
	defer done()
	_ = control.Shutdown(shutdown)
	_ = health.Shutdown(shutdown)
	wg.Wait()
	return runErr
}

// startConfig is the Config the pod enforces at start: the last one applied, if this
// container ran before in this pod (a restart must not bring back an older policy), else the
// one in the environment.
func (o *Options) startConfig(podUID string) (*egressapi.Config, error) {
	if data, err := os.ReadFile(filepath.Join(o.StateDir, stateFile)); err == nil {
		cfg := &egressapi.Config{}
		if err := json.Unmarshal(data, cfg); err == nil && cfg.PodUID == podUID && egressapi.ValidateConfig(cfg) == nil {
			klog.InfoS("Restoring the last policy applied", "revision", cfg.Revision)
			return cfg, nil
		}
		klog.InfoS("Ignoring the saved policy: unreadable, or of another pod", "file", filepath.Join(o.StateDir, stateFile))
	}
	cfg := &egressapi.Config{DefaultAction: egressapi.ActionDeny}
	if env := os.Getenv(egressapi.EnvConfig); env != "" {
		if err := json.Unmarshal([]byte(env), cfg); err != nil {
			return nil, fmt.Errorf("$%s: %w", egressapi.EnvConfig, err)
		}
	}
	cfg.PodUID = podUID
	if cfg.Revision == "" {
		cfg.Revision = cfg.Hash()
	}
	return cfg, nil
}

// apply makes cfg the policy in force: the filter first (atomically), then the flows it now
// denies are cut, then the DNS proxy answers by it. Returns the flows cut.
func (s *server) apply(cfg *egressapi.Config) (int, error) {
	if err := egressapi.ValidateConfig(cfg); err != nil {
		return 0, &invalidConfig{err}
	}
	m, err := egressapi.Compile(cfg.Rules, cfg.DefaultAction)
	if err != nil {
		return 0, &invalidConfig{err}
	}
	upstreams := cfg.Upstreams
	if len(upstreams) == 0 {
		if upstreams, err = dnsproxy.UpstreamsFromResolvConf(s.o.ResolvConf); err != nil {
			klog.ErrorS(err, "Reading the pod's nameservers; names will not resolve")
		}
	}
	if _, err := s.fw.Sync(m); err != nil {
		s.metrics.updates.WithLabelValues("failed").Inc()
		return 0, fmt.Errorf("install the packet filter: %w", err)
	}
	s.mu.Lock()
	s.cfg, s.matcher, s.upstreams, s.lastErr = cfg, m, upstreams, nil
	s.mu.Unlock()
	cut, err := s.fw.CutFlows(m)
	if err != nil {
		// The filter is in force for new flows; an established one may outlive the change.
		klog.ErrorS(err, "Cutting the flows the new policy denies", "revision", cfg.Revision)
	}
	s.mu.Lock()
	s.status = egressapi.Status{PodUID: s.podUID, Revision: cfg.Revision, Generation: cfg.Generation, AppliedAt: time.Now().UTC(), FlowsCut: cut}
	s.mu.Unlock()
	s.metrics.setSandbox(cfg.Sandbox)
	s.metrics.updates.WithLabelValues("applied").Inc()
	s.metrics.flowsCut.Add(float64(cut))
	if data, err := json.Marshal(cfg); err == nil {
		if err := writeFileAtomic(filepath.Join(s.o.StateDir, stateFile), data); err != nil {
			klog.ErrorS(err, "Saving the policy; a restarted sidecar would start from the pod's first")
		}
	}
	klog.InfoS("Applied egress policy", "sandbox", s.sandboxRef(), "revision", cfg.Revision, "generation", cfg.Generation,
		"rules", len(cfg.Rules), "defaultAction", cfg.DefaultAction, "flowsCut", cut)
	return cut, nil
}

type invalidConfig struct{ err error }

func (e *invalidConfig) Error() string { return "invalid config: " + e.err.Error() }

func (s *server) currentMatcher() *egressapi.Matcher {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.matcher
}

func (s *server) currentUpstreams() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.upstreams
}

func (s *server) sandboxRef() klog.ObjectRef {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.cfg == nil || s.cfg.Sandbox == nil {
		return klog.ObjectRef{}
	}
	return klog.KRef(s.cfg.Sandbox.Namespace, s.cfg.Sandbox.Name)
}

func (s *server) controlMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(egressapi.IdentityPath, func(w http.ResponseWriter, req *http.Request) {
		if allowController(w, req) {
			s.serveIdentity(w, req)
		}
	})
	mux.HandleFunc(egressapi.DenialsPath, func(w http.ResponseWriter, req *http.Request) {
		if allowController(w, req) {
			s.serveDenials(w, req)
		}
	})
	mux.HandleFunc(egressapi.PolicyPath, func(w http.ResponseWriter, req *http.Request) {
		if !allowController(w, req) {
			return
		}
		switch req.Method {
		case http.MethodGet:
			s.mu.RLock()
			st := s.status
			s.mu.RUnlock()
			writeJSON(w, http.StatusOK, st)
		case http.MethodPut:
			s.servePut(w, req)
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	})
	return mux
}

func (s *server) servePut(w http.ResponseWriter, req *http.Request) {
	cfg := &egressapi.Config{}
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxConfigBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		http.Error(w, "the body is not a Config: "+err.Error(), http.StatusBadRequest)
		return
	}
	if cfg.PodUID != s.podUID {
		// A pod IP given to a new pod must never get the old pod's policy.
		http.Error(w, fmt.Sprintf("this is pod %s, not %s", s.podUID, cfg.PodUID), http.StatusConflict)
		return
	}
	if cfg.Revision != cfg.Hash() {
		http.Error(w, "the revision does not match the Config", http.StatusBadRequest)
		return
	}
	s.mu.RLock()
	same := s.cfg != nil && s.cfg.Revision == cfg.Revision && s.lastErr == nil
	st := s.status
	s.mu.RUnlock()
	if same {
		writeJSON(w, http.StatusOK, st)
		return
	}
	if _, err := s.apply(cfg); err != nil {
		var invalid *invalidConfig
		code := http.StatusInternalServerError
		if errors.As(err, &invalid) {
			code = http.StatusUnprocessableEntity
		} else {
			s.mu.Lock()
			s.lastErr = err
			s.mu.Unlock()
		}
		klog.ErrorS(err, "Refused or failed an egress policy", "revision", cfg.Revision)
		http.Error(w, err.Error(), code)
		return
	}
	s.mu.RLock()
	st = s.status
	s.mu.RUnlock()
	writeJSON(w, http.StatusOK, st)
}

func (s *server) healthMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(egressapi.HealthzPath, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc(egressapi.ReadyzPath, func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-s.dnsReady:
		default:
			http.Error(w, "the DNS proxy is not serving yet", http.StatusServiceUnavailable)
			return
		}
		s.mu.RLock()
		err := s.lastErr
		s.mu.RUnlock()
		if err != nil {
			http.Error(w, "the last policy could not be applied: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle(egressapi.MetricsPath, promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	return mux
}

// allowController lets only sandbox-controller's certificate through.
func allowController(w http.ResponseWriter, req *http.Request) bool {
	if who := clientIdentity(req); who != execdapi.ControllerIdentity {
		klog.V(2).InfoS("Refused a request", "client", who, "remoteAddr", req.RemoteAddr)
		http.Error(w, fmt.Sprintf("forbidden: %q may not use %s", who, req.URL.Path), http.StatusForbidden)
		return false
	}
	return true
}

func clientIdentity(req *http.Request) string {
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 {
		return ""
	}
	return req.TLS.VerifiedChains[0][0].Subject.CommonName
}

// serveIdentity answers GET with the pod's egress token, over the connection whose key the
// controller is about to certify, and takes PUT: the certificate it issued for that key. See
// sandbox-execd's, which works the same way.
func (s *server) serveIdentity(w http.ResponseWriter, req *http.Request) {
	switch req.Method {
	case http.MethodGet:
		data, err := os.ReadFile(s.o.IdentityToken)
		if err != nil || len(data) == 0 || len(data) > maxTokenBytes {
			klog.ErrorS(err, "Reading the pod's egress identity token", "file", s.o.IdentityToken)
			http.Error(w, "the pod's egress identity token is not readable", http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, http.StatusOK, &execdapi.IdentityResponse{PodToken: strings.TrimSpace(string(data))})
	case http.MethodPut:
		cr := &execdapi.CertificateRequest{}
		if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxConfigBytes)).Decode(cr); err != nil {
			http.Error(w, "the body is not a certificate request: "+err.Error(), http.StatusBadRequest)
			return
		}
		leaf, err := s.identity.Install([]byte(cr.CertificateChain))
		if err != nil {
			klog.InfoS("Refused a certificate", "err", err)
			http.Error(w, "certificate refused: "+err.Error(), http.StatusBadRequest)
			return
		}
		klog.InfoS("Serving the certificate sandbox-controller issued", "serverName", leaf.DNSNames, "notAfter", leaf.NotAfter)
		writeJSON(w, http.StatusOK, map[string]any{"serverName": leaf.DNSNames[0], "notAfter": leaf.NotAfter})
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// maxTokenBytes bounds the projected token read: a JWT of a few kilobytes.
const maxTokenBytes = 64 << 10

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
