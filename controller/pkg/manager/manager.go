// Package manager wires sandbox-controller: a controller-runtime manager with the
// BatchSandbox reconciler.
package manager

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/batchsandbox"
)

// Options are the flags of sandbox-controller.
type Options struct {
	MetricsAddr      string
	ProbeAddr        string
	LeaderElect      bool
	LeaderElectionNS string
	ExecdImage       string
	Kubeconfig       string
	// InProcessRestart lets a test start the manager again in the same process (controller
	// names are otherwise checked to be unique per process). No flag sets it.
	InProcessRestart bool
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		MetricsAddr: ":8080",
		ProbeAddr:   ":8081",
		LeaderElect: true,
	}
}

// AddFlags adds the flags to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "Address of the Prometheus metrics endpoint (reconcile counts and latencies); \"0\" turns it off.")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", o.ProbeAddr, "Address of the /healthz and /readyz endpoints.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader so that only one of several replicas reconciles.")
	fs.StringVar(&o.LeaderElectionNS, "leader-election-namespace", o.LeaderElectionNS, "Namespace of the leader election lease (default: the pod's namespace).")
	fs.StringVar(&o.ExecdImage, "execd-image", o.ExecdImage, "Image holding /usr/local/bin/sandbox-execd, copied into every sandbox pod by an init container (required).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig file; in-cluster configuration when empty.")
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.ExecdImage == "" {
		return errors.New("--execd-image is required: sandbox pods need it to get sandbox-execd")
	}
	return nil
}

// Scheme knows every type the controller reads or writes.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(controlv1alpha1.AddToScheme(Scheme))
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
	// Cache only the pods and Secrets that sandboxes own: a cluster's other pods and Secrets
	// are none of our business and would cost memory.
	owned, err := labels.NewRequirement(controlv1alpha1.LabelBatchSandbox, selection.Exists, nil)
	if err != nil {
		return err
	}
	ownedSelector := labels.NewSelector().Add(*owned)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  Scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "sandbox-controller.control.kube-sandbox.io",
		LeaderElectionNamespace: o.LeaderElectionNS,
		Controller:              config.Controller{SkipNameValidation: ptr.To(o.InProcessRestart)},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:    {Label: ownedSelector},
			&corev1.Secret{}: {Label: ownedSelector},
		}},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := (&batchsandbox.Reconciler{
		Client:     mgr.GetClient(),
		APIReader:  mgr.GetAPIReader(),
		Recorder:   mgr.GetEventRecorder("sandbox-controller"),
		ExecdImage: o.ExecdImage,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up batchsandbox controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	klog.InfoS("starting sandbox-controller", "execdImage", o.ExecdImage)
	return mgr.Start(ctx)
}

// NewCommand returns the sandbox-controller command.
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "sandbox-controller",
		Short: "Reconcile BatchSandboxes (control.kube-sandbox.io): sandbox pods, tokens and status",
		Long: `sandbox-controller runs the controllers of kube-sandbox. For each BatchSandbox it creates one
pod per replica from the template, with sandbox-execd installed by an init container and
wrapping the entrypoint, creates the per-sandbox execd token, and reports progress and problems
in the status conditions and as Events.`,
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
