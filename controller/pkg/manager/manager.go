// Package manager wires sandbox-controller: a controller-runtime manager with the
// BatchSandbox and Pool reconcilers, the CA's rotation (certrotation), the certification of
// sandbox pods (identity), the egress enforcer and its denial watch, the task streams and
// the snapshots of pause and resume.
package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/admission"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/batchsandbox"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/certrotation"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/egress"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/identity"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/index"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/oomwatch"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/pool"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/snapshot"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/tasks"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeclient"
)

// Options are the flags of sandbox-controller.
type Options struct {
	MetricsAddr string
	ProbeAddr   string
	// PprofAddr serves net/http/pprof (CPU and heap profiles); "" or "0": off.
	PprofAddr        string
	LeaderElect      bool
	LeaderElectionNS string
	ExecdImage       string
	Kubeconfig       string
	// KubeAPIQPS and KubeAPIBurst bound the controller's requests to the kube-apiserver.
	KubeAPIQPS   float32
	KubeAPIBurst int
	// MaxConcurrentReconciles of BatchSandboxes.
	MaxConcurrentReconciles int
	// PoolRefillDelay and PoolMaxStarting pace the pools' refills.
	PoolRefillDelay time.Duration
	PoolMaxStarting int32
	// PodSecurityLevel is the platform's pod security level, for pool templates.
	PodSecurityLevel string
	// DefaultRuntimeClass is the runtime class of sandbox pods whose template names none.
	DefaultRuntimeClass string
	// PKI: where the kube-sandbox CA and sandbox-apiserver's certificate live, and whether the
	// controller makes and rotates them (else cert-manager or an administrator does).
	PKINamespace        string
	ManagePKI           bool
	CASecret            string
	APIServerSecret     string
	APIServerService    string
	APIService          string
	CALifetime          time.Duration
	CertificateLifetime time.Duration
	// InProcessRestart lets a test start the manager again in the same process (controller
	// names are otherwise checked to be unique per process). No flag sets it.
	InProcessRestart bool

	// EgressConfigMap names the platform's egress policy (in --pki-namespace).
	EgressConfigMap string
	// SnapshotRegistry (host:port) takes the snapshots of paused sandboxes; "": sandboxes
	// cannot pause. SnapshotRepositoryPrefix is where in it, SnapshotRegistrySecret (in
	// --pki-namespace) the credentials and CA, MaxSnapshotBytes the largest layer of changes.
	// NodeSecret is sandbox-node's certificate (the node agent: egress and snapshots).
	SnapshotRegistry         string
	SnapshotRepositoryPrefix string
	SnapshotRegistrySecret   string
	NodeSecret               string
	MaxSnapshotBytes         int64
	PauseStopsExpiry         bool

	// DisableEgress makes pods that wait for no node agent. No flag sets it: every sandbox of
	// a real cluster has an outbound policy. Integration tests, whose simulated node runs no
	// node agent, set it.
	DisableEgress bool
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		MetricsAddr: ":8080",
		ProbeAddr:   ":8081",
		LeaderElect: true,
		// Allocating a 100-replica sandbox takes 100 pod writes; client-go's default of 20/s
		// would make that five seconds. At 100 pooled creates/s the controller writes 200
		// times a second (the pod's allocation, the status) besides refilling the pool:
		// make bench-scale measured 200/s as the limit there. The kube-apiserver's priority and
		// fairness protects it, as for sandbox-apiserver's 500/s.
		KubeAPIQPS:              500,
		KubeAPIBurst:            1000,
		MaxConcurrentReconciles: batchsandbox.DefaultMaxConcurrentReconciles,
		PoolRefillDelay:         pool.DefaultRefillDelay,
		PoolMaxStarting:         pool.DefaultMaxStarting,
		PodSecurityLevel:        admission.DefaultLevel,
		PKINamespace:            defaultNamespace(),
		ManagePKI:               true,
		CASecret:                pki.DefaultCASecret,
		APIServerSecret:         pki.DefaultAPIServerSecret,
		APIServerService:        pki.DefaultAPIServerService,
		APIService:              pki.DefaultAPIService,
		CALifetime:              pki.DefaultCALifetime,
		CertificateLifetime:     pki.DefaultCertificateLifetime,
		EgressConfigMap:         egress.DefaultConfigMap,

		SnapshotRepositoryPrefix: snapshot.DefaultRepositoryPrefix,
		SnapshotRegistrySecret:   snapshot.DefaultSecret,
		NodeSecret:               pki.DefaultNodeSecret,
	}
}

// defaultNamespace is the namespace the controller runs in ($POD_NAMESPACE from the downward
// API), or kube-sandbox-system.
func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "kube-sandbox-system"
}

// AddFlags adds the flags to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "Address of the Prometheus metrics endpoint (reconcile counts and latencies); \"0\" turns it off.")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", o.ProbeAddr, "Address of the /healthz and /readyz endpoints.")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", o.PprofAddr, "Address of net/http/pprof (/debug/pprof/: CPU and heap profiles), for finding where the time goes; off by default.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader so that only one of several replicas reconciles.")
	fs.StringVar(&o.LeaderElectionNS, "leader-election-namespace", o.LeaderElectionNS, "Namespace of the leader election lease (default: the pod's namespace).")
	fs.StringVar(&o.ExecdImage, "execd-image", o.ExecdImage, "Image holding /usr/local/bin/sandbox-execd, copied into every sandbox pod by an init container (required).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig file; in-cluster configuration when empty.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Requests per second to the kube-apiserver (sustained).")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Requests to the kube-apiserver in a burst.")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", o.MaxConcurrentReconciles, "BatchSandboxes reconciled at once; sandboxes created together are allocated together.")
	fs.DurationVar(&o.PoolRefillDelay, "pool-refill-delay", o.PoolRefillDelay, "A pool replaces the pods it gave away only after this long without an allocation (unless sandboxes wait for pods), so refills never slow a burst of allocations down.")
	fs.Int32Var(&o.PoolMaxStarting, "pool-max-starting", o.PoolMaxStarting, "Most idle pods of one pool starting at once.")
	fs.StringVar(&o.PodSecurityLevel, "pod-security-level", o.PodSecurityLevel, "The platform's pod security level (privileged, baseline or restricted, optionally :VERSION) for the templates of Pools with podSecurity Platform; a namespace's pod-security.kubernetes.io/enforce level applies where it is stricter. Keep it equal to sandbox-apiserver's.")
	fs.StringVar(&o.DefaultRuntimeClass, "default-runtime-class", o.DefaultRuntimeClass, "RuntimeClass (like gvisor) of the pods of every sandbox and Pool whose template names none; a Pool with podSecurity Platform that names another is refused (TemplateRefused), as is, at sandbox-apiserver, a sandbox whose creator may not create pods. Empty: the node's default runtime. Keep it equal to sandbox-apiserver's.")
	fs.StringVar(&o.PKINamespace, "pki-namespace", o.PKINamespace, "Namespace of the kube-sandbox CA and sandbox-apiserver's certificate Secrets (default: $POD_NAMESPACE, else kube-sandbox-system). The controller reads no Secrets elsewhere.")
	fs.BoolVar(&o.ManagePKI, "manage-pki", o.ManagePKI, "Make and rotate the kube-sandbox CA, issue sandbox-apiserver's certificate and set the APIService's caBundle. false: cert-manager (or an administrator) provides the CA Secret and sandbox-apiserver's Secret, and the controller only reads the CA.")
	fs.StringVar(&o.CASecret, "ca-secret", o.CASecret, "Secret (in --pki-namespace) of the kube-sandbox CA: tls.crt and tls.key.")
	fs.StringVar(&o.APIServerSecret, "apiserver-secret", o.APIServerSecret, "Secret (in --pki-namespace) of sandbox-apiserver's certificate (tls.crt, tls.key) and the CA bundle (ca.crt).")
	fs.StringVar(&o.APIServerService, "apiserver-service", o.APIServerService, "Service in front of sandbox-apiserver, whose DNS names its certificate holds.")
	fs.StringVar(&o.APIService, "apiservice", o.APIService, "APIService whose caBundle the controller keeps equal to the CA bundle; empty leaves APIServices alone.")
	fs.DurationVar(&o.CALifetime, "ca-lifetime", o.CALifetime, "Lifetime of a CA the controller makes; it is replaced when a fifth of it is left.")
	fs.StringVar(&o.EgressConfigMap, "egress-configmap", o.EgressConfigMap, "ConfigMap (in --pki-namespace) of the platform's egress policy: alwaysDeny, alwaysAllow, defaultPolicy and dnsUpstreams. Missing: everything is denied.")
	fs.StringVar(&o.SnapshotRegistry, "snapshot-registry", o.SnapshotRegistry, "Registry (host:port) that takes the filesystem snapshots of paused sandboxes (spec.paused), which nodes pull with credentials of their own; no sandbox or pool template may name an image there. Empty: sandboxes cannot pause (condition Paused, reason RegistryUnavailable). Keep it equal to sandbox-apiserver's and sandbox-node's, and to the key registry of the ConfigMap kube-sandbox-snapshot-images (in --pki-namespace), from which the admission policy of the same name, which keeps snapshots to their sandboxes' pods, reads it: a sandbox does not start to pause until they agree (reason SnapshotPolicyMissing).")
	fs.StringVar(&o.SnapshotRepositoryPrefix, "snapshot-repository-prefix", o.SnapshotRepositoryPrefix, "Repository prefix of the snapshots in --snapshot-registry: each sandbox's go to PREFIX/NAMESPACE/NAME.")
	fs.StringVar(&o.SnapshotRegistrySecret, "snapshot-registry-secret", o.SnapshotRegistrySecret, "Secret (in --pki-namespace) with the registry's credentials (username, password) and CA (ca.crt), used to delete the snapshots of deleted sandboxes.")
	fs.StringVar(&o.NodeSecret, "node-secret", o.NodeSecret, "Secret (in --pki-namespace) of sandbox-node's serving certificate (the node agent), which the controller issues with --manage-pki; empty: none.")
	fs.BoolVar(&o.PauseStopsExpiry, "pause-stops-expiry", o.PauseStopsExpiry, "A Paused sandbox does not expire, and sandbox-apiserver (with the same flag) moves its expiry forward by the pause when it resumes. false (the default): a paused sandbox keeps its expiry, and is deleted with its snapshots when it expires.")
	fs.Int64Var(&o.MaxSnapshotBytes, "max-snapshot-bytes", o.MaxSnapshotBytes, "Largest compressed layer of a replica's changes a pause takes (SnapshotFailed beyond); 0: sandbox-node's own limit.")
	fs.DurationVar(&o.CertificateLifetime, "certificate-lifetime", o.CertificateLifetime, "Lifetime of sandbox-apiserver's certificate; it is renewed when a third of it is left.")
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.ExecdImage == "" {
		return errors.New("--execd-image is required: sandbox pods need it to get sandbox-execd")
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst <= 0 {
		return errors.New("--kube-api-qps and --kube-api-burst must be positive")
	}
	if o.MaxConcurrentReconciles < 1 || o.PoolMaxStarting < 1 || o.PoolRefillDelay < 0 {
		return errors.New("--max-concurrent-reconciles and --pool-max-starting must be positive, --pool-refill-delay not negative")
	}
	if _, err := admission.ParseLevel(o.PodSecurityLevel); err != nil {
		return fmt.Errorf("--pod-security-level: %w", err)
	}
	if err := admission.ValidateRuntimeClassName(o.DefaultRuntimeClass); err != nil {
		return fmt.Errorf("--default-runtime-class: %w", err)
	}
	if o.PKINamespace == "" || o.CASecret == "" || o.ManagePKI && (o.APIServerSecret == "" || o.APIServerService == "") {
		return errors.New("--pki-namespace, --ca-secret, and with --manage-pki --apiserver-secret and --apiserver-service, must not be empty")
	}
	if o.MaxSnapshotBytes < 0 {
		return errors.New("--max-snapshot-bytes must not be negative")
	}
	if o.SnapshotRegistry != "" && (strings.Contains(o.SnapshotRegistry, "/") || o.SnapshotRegistrySecret == "") {
		return errors.New("--snapshot-registry is a host[:port], without a path (the path is --snapshot-repository-prefix), and needs --snapshot-registry-secret")
	}
	if o.CALifetime < time.Hour || o.CertificateLifetime < time.Hour {
		return errors.New("--ca-lifetime and --certificate-lifetime must be at least 1h")
	}
	return nil
}

// Scheme knows every type the controller reads or writes.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(controlv1alpha1.AddToScheme(Scheme))
	utilruntime.Must(apiregistrationv1.AddToScheme(Scheme))
}

// Run starts the manager and blocks until ctx is done.
func (o *Options) Run(ctx context.Context) error {
	cfg, err := ctrl.GetConfig()
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	}
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	// Cache only the pods the controller made, and the Secrets of its own namespace: a
	// cluster's other pods are none of our business and would cost memory, and it has no
	// rights on other Secrets.
	owned, err := labels.NewRequirement(controlv1alpha1.LabelManagedBy, selection.Equals, []string{controlv1alpha1.ManagedByController})
	if err != nil {
		return err
	}
	ownedSelector := labels.NewSelector().Add(*owned)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  Scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.ProbeAddr,
		PprofBindAddress:        o.PprofAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "sandbox-controller.control.kube-sandbox.io",
		LeaderElectionNamespace: o.LeaderElectionNS,
		// A controller that stops (a rollout, a node drain) hands the lease over at once rather
		// than making its successor wait out the lease: allocations pause for a moment, not 15 s.
		// Safe because Run returns right after the manager stopped.
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(o.InProcessRestart)},
		Cache: cache.Options{
			// Nothing here reads managedFields, and they are a fifth of a cached pod: at 10,000
			// sandboxes that is 50 MB of heap, twice that in RSS.
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Pod{}:                   {Label: ownedSelector, Transform: sandboxpod.Slim},
				&corev1.Secret{}:                {Namespaces: map[string]cache.Config{o.PKINamespace: {}}},
				&corev1.ConfigMap{}:             {Namespaces: map[string]cache.Config{o.PKINamespace: {}}, Field: fields.OneTermEqualSelector("metadata.name", o.EgressConfigMap)},
				&apiregistrationv1.APIService{}: {Field: fields.OneTermEqualSelector("metadata.name", o.APIService)},
			}},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	pods, err := index.Setup(ctx, mgr.GetCache())
	if err != nil {
		return fmt.Errorf("set up indexes: %w", err)
	}
	recorder := mgr.GetEventRecorder("sandbox-controller")
	level, err := admission.ParseLevel(o.PodSecurityLevel)
	if err != nil {
		return err
	}
	checker, err := admission.NewChecker(level)
	if err != nil {
		return err
	}
	checker.SnapshotRegistry = o.SnapshotRegistry
	checker.RuntimeClass = o.DefaultRuntimeClass
	authority := pki.NewAuthority(nil)
	if err := (&certrotation.Reconciler{
		Client: mgr.GetClient(), Recorder: recorder, Authority: authority, Namespace: o.PKINamespace,
		CASecret: o.CASecret, APIServerSecret: o.APIServerSecret, APIServerService: o.APIServerService,
		APIService: o.APIService, Manage: o.ManagePKI, CALifetime: o.CALifetime, CertificateLifetime: o.CertificateLifetime,
		NodeSecret: o.NodeSecret,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up pki controller: %w", err)
	}
	certifier := &identity.Certifier{Authority: authority, Reviewer: identity.ClientReviewer{Client: mgr.GetClient()}}
	if err := (&identity.Reconciler{Client: mgr.GetClient(), Certifier: certifier, Recorder: recorder}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up pod identity controller: %w", err)
	}
	var enforcer *egress.Enforcer
	if !o.DisableEgress {
		enforcer = &egress.Enforcer{
			Source:  &egress.Source{Reader: mgr.GetClient(), Namespace: o.PKINamespace, Name: o.EgressConfigMap, Recorder: recorder},
			Pusher:  egress.NewPusher(authority),
			Denials: egress.NewDenialWatcher(authority, recorder),
		}
		if err := mgr.Add(enforcer.Denials); err != nil {
			return err
		}
	}
	// One watch stream per pod that runs a task, on the leader: task progress arrives as it
	// happens.
	taskWatcher := &tasks.Watcher{Streamer: execdclient.NewTaskClient(authority)}
	if err := mgr.Add(taskWatcher); err != nil {
		return err
	}
	// One stream of OOM kills per node that runs sandbox pods, on the leader: a kill is told
	// at the node agent's sample that counts it.
	oomWatcher := &oomwatch.Watcher{Streamer: &nodeclient.OOMs{
		// The stream lasts: no client timeout, and its start is bounded by the transport.
		Client: &http.Client{Transport: nodeclient.NewTransport(authority, 10*time.Second, 1)}}}
	if err := mgr.Add(oomWatcher); err != nil {
		return err
	}
	var snapshots *batchsandbox.Snapshots
	if o.SnapshotRegistry != "" {
		registry := snapshot.Registry{Host: o.SnapshotRegistry, Prefix: o.SnapshotRepositoryPrefix}
		runner := &snapshot.Runner{Agent: &snapshot.HTTPAgent{Creds: authority}}
		if err := mgr.Add(runner); err != nil {
			return err
		}
		snapshots = &batchsandbox.Snapshots{
			Registry: registry,
			Runner:   runner,
			Deleter: &snapshot.RegistryClient{Registry: registry,
				Source: snapshot.SecretSource{Reader: mgr.GetClient(), Namespace: o.PKINamespace, Name: o.SnapshotRegistrySecret}},
			MaxBytes: o.MaxSnapshotBytes,
			// Read when a pause starts, not cached: a watch of ConfigMaps for that is not worth it.
			Guard: &snapshot.PolicyGuard{Reader: mgr.GetAPIReader(), Namespace: o.PKINamespace, Registry: registry},
		}
	}
	if err := (&batchsandbox.Reconciler{
		Client:    mgr.GetClient(),
		Pods:      pods,
		Snapshots: snapshots,
		// A Paused sandbox's clock stops only with the flag.
		PauseStopsExpiry: o.PauseStopsExpiry,
		Recorder:         recorder,
		ExecdImage:       o.ExecdImage,
		RuntimeClass:     o.DefaultRuntimeClass,
		Authority:        authority,
		Certifier:        certifier,
		Egress:           enforcer,
		Tasks:            taskWatcher,
		OOMs:             oomWatcher,
	}).SetupWithManager(mgr, o.MaxConcurrentReconciles); err != nil {
		return fmt.Errorf("set up batchsandbox controller: %w", err)
	}
	if err := (&pool.Reconciler{
		Client:       mgr.GetClient(),
		Pods:         pods,
		Recorder:     recorder,
		ExecdImage:   o.ExecdImage,
		RuntimeClass: o.DefaultRuntimeClass,
		Authority:    authority,
		Checker:      checker,
		RefillDelay:  o.PoolRefillDelay,
		MaxStarting:  o.PoolMaxStarting,
		Egress:       enforcer,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up pool controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	klog.InfoS("starting sandbox-controller", "execdImage", o.ExecdImage, "podSecurityLevel", level.String(), "defaultRuntimeClass", o.DefaultRuntimeClass,
		"pkiNamespace", o.PKINamespace, "managePKI", o.ManagePKI)
	return mgr.Start(ctx)
}

// NewCommand returns the sandbox-controller command.
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "sandbox-controller",
		Short: "Reconcile BatchSandboxes and Pools (control.kube-sandbox.io): sandbox pods, warm pools, their identities and status",
		Long: `sandbox-controller runs the controllers of kube-sandbox.

For each BatchSandbox with a template it creates one pod per replica, with sandbox-execd
installed by an init container and wrapping the entrypoint; for one with a poolRef it allocates
an idle pod of the Pool per replica (one write on the pod, with its resourceVersion as
precondition) and hands it to the sandbox through execd. It replaces lost pods, and reports
progress and problems in the status conditions and as Events.

It is kube-sandbox's certificate authority: it keeps the kube-sandbox CA in a Secret of its
namespace (or reads the one cert-manager provides), issues sandbox-apiserver's certificate and
the APIService's caBundle, and certifies the execd of every sandbox pod for its pod, after a
TokenReview of the pod's projected token proved which pod answers.

For each Pool it keeps idle pods warm between the buffer and pool bounds, paces refills so they
never compete with allocations, and replaces idle pods of an older template within the
maxUnavailable budget. Pods given to sandboxes are never touched. A Pool's template is held to
the platform's pod security level (--pod-security-level) unless the Pool says podSecurity:
Namespace, which only users who may create pods can set.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			ctrl.SetLogger(klog.NewKlogr())
			return o.Run(cmd.Context())
		},
	}
	cmd.SetContext(ctx)
	o.AddFlags(cmd.Flags())
	return cmd
}
