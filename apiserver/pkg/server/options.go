package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/client-go/kubernetes"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	netutils "k8s.io/utils/net"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/openapi"
	sandboxregistry "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/registry/sandbox"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/admission"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// Options are the flags of sandbox-apiserver.
type Options struct {
	RecommendedOptions *genericoptions.RecommendedOptions
	// ServerRun holds the generic server's run options: among them the graceful shutdown
	// (--shutdown-delay-duration, --shutdown-send-retry-after), which a rolling restart
	// without failed requests needs.
	ServerRun *genericoptions.ServerRunOptions
	// StreamDrainTimeout bounds how long a stopping server waits for open streams.
	StreamDrainTimeout time.Duration
	Logs               *logsapi.LoggingConfiguration
	// MaxSandboxTimeout bounds spec.timeoutSeconds and renewals.
	MaxSandboxTimeout time.Duration
	// MaxUploadBytes bounds uploads through the files subresource.
	MaxUploadBytes int64
	// PodSecurityLevel is the platform's pod security level for sandbox templates.
	PodSecurityLevel string
	// SnapshotRegistry (host:port) holds the snapshots of paused sandboxes: no template may
	// name an image there.
	SnapshotRegistry string
	// DefaultRuntimeClass is the runtime class of sandboxes whose template names none.
	DefaultRuntimeClass string
	// PauseStopsExpiry moves a resumed sandbox's expiry forward by the time it was Paused.
	PauseStopsExpiry bool
	// PKISecret (NAMESPACE/NAME) holds this server's certificate and the kube-sandbox CA.
	PKISecret string
	// ServePKISecret serves the certificate of PKISecret rather than --tls-cert-file.
	ServePKISecret bool
	// FilesResponseHeaderTimeout and ProxyResponseHeaderTimeout bound the wait for a
	// sandbox's answer to a files and a proxy request.
	FilesResponseHeaderTimeout time.Duration
	ProxyResponseHeaderTimeout time.Duration
	// NodeAgentPort is the port of sandbox-node, the node agent, on every node's address,
	// which the stats subresource asks for each replica's figures.
	NodeAgentPort int
}

// NewOptions returns the defaults. The server stores nothing, so it has no etcd; it admits
// sandboxes itself (package admission) rather than through admission plugins; API Priority and
// Fairness shares its capacity between users, with the kube-apiserver's FlowSchemas.
func NewOptions() *Options {
	o := &Options{
		RecommendedOptions:         genericoptions.NewRecommendedOptions("", Codecs.LegacyCodec(sandboxv1alpha1.SchemeGroupVersion)),
		ServerRun:                  genericoptions.NewServerRunOptions(),
		StreamDrainTimeout:         50 * time.Second,
		Logs:                       logsapi.NewLoggingConfiguration(),
		MaxSandboxTimeout:          24 * time.Hour,
		MaxUploadBytes:             1 << 30,
		PodSecurityLevel:           admission.DefaultLevel,
		PKISecret:                  "kube-sandbox-system/" + pki.DefaultAPIServerSecret,
		ServePKISecret:             true,
		FilesResponseHeaderTimeout: 30 * time.Second,
		ProxyResponseHeaderTimeout: time.Minute,
		NodeAgentPort:              nodeapi.Port,
	}
	o.RecommendedOptions.Etcd = nil
	o.RecommendedOptions.Admission = nil
	o.RecommendedOptions.Features.EnablePriorityAndFairness = true
	o.RecommendedOptions.SecureServing.BindPort = 9443
	return o
}

// Flags returns the flags grouped by section, for --help.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	o.RecommendedOptions.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	o.ServerRun.AddUniversalFlags(fss.FlagSet("generic"))
	o.RecommendedOptions.Authentication.AddFlags(fss.FlagSet("authentication"))
	o.RecommendedOptions.Authorization.AddFlags(fss.FlagSet("authorization"))
	o.RecommendedOptions.Audit.AddFlags(fss.FlagSet("auditing"))
	o.RecommendedOptions.Features.AddFlags(fss.FlagSet("features"))
	o.RecommendedOptions.CoreAPI.AddFlags(fss.FlagSet("kube-apiserver"))
	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))
	fss.FlagSet("sandboxes").DurationVar(&o.MaxSandboxTimeout, "max-sandbox-timeout", o.MaxSandboxTimeout,
		"The longest lifetime a sandbox may ask for (spec.timeoutSeconds), and how far ahead a renewal may move its expiry. 0: no maximum.")
	fss.FlagSet("generic").DurationVar(&o.StreamDrainTimeout, "stream-drain-timeout", o.StreamDrainTimeout,
		"How long a stopping server waits for open exec, files, proxy and log streams to end, after it stopped taking requests; keep it below the pod's termination grace period minus --shutdown-delay-duration.")
	fss.FlagSet("sandboxes").Int64Var(&o.MaxUploadBytes, "max-upload-bytes", o.MaxUploadBytes,
		"The largest file an upload through the files subresource may write (413 past it). 0: only sandbox-execd's own limit.")
	fss.FlagSet("sandboxes").StringVar(&o.PodSecurityLevel, "pod-security-level", o.PodSecurityLevel,
		"The pod security level (privileged, baseline or restricted, optionally :VERSION) a sandbox's template is held to, or its namespace's pod-security.kubernetes.io/enforce level where that is stricter. A template that needs more, or that uses a service account, a token, a Secret, a ConfigMap or a volume of the namespace, needs its creator to be allowed to create pods in the namespace.")
	fss.FlagSet("sandboxes").StringVar(&o.SnapshotRegistry, "snapshot-registry", o.SnapshotRegistry,
		"The registry (host:port) of the snapshots of paused sandboxes, which nodes pull with credentials of their own: a template that names an image there is refused (422), whoever creates it. Keep it equal to sandbox-controller's.")
	fss.FlagSet("sandboxes").StringVar(&o.DefaultRuntimeClass, "default-runtime-class", o.DefaultRuntimeClass,
		"The RuntimeClass (like gvisor) a sandbox's template gets when it names none, written into the sandbox when it is created. A template that names another class needs its creator to be allowed to create pods in the namespace (403 otherwise). Empty: the node's default runtime. Keep it equal to sandbox-controller's.")
	fss.FlagSet("sandboxes").BoolVar(&o.PauseStopsExpiry, "pause-stops-expiry", o.PauseStopsExpiry,
		"A sandbox's clock stops while it is Paused: resuming it moves its expiry forward by the time it was Paused. false (the default): a paused sandbox keeps its expiry, and expires paused. Keep it equal to sandbox-controller's.")
	fss.FlagSet("sandboxes").DurationVar(&o.FilesResponseHeaderTimeout, "files-response-header-timeout", o.FilesResponseHeaderTimeout,
		"How long a files request waits for sandbox-execd to start its answer (504 after).")
	fss.FlagSet("sandboxes").DurationVar(&o.ProxyResponseHeaderTimeout, "proxy-response-header-timeout", o.ProxyResponseHeaderTimeout,
		"How long a proxy request waits for the sandbox's server to start its answer (504 after), so that a sandbox that never answers holds no request.")
	fss.FlagSet("sandboxes").IntVar(&o.NodeAgentPort, "node-agent-port", o.NodeAgentPort,
		"The port of sandbox-node, the node agent, on each node's address (mutual TLS): where the stats subresource reads each replica's figures. Keep it equal to the agent's --listen-address.")
	fss.FlagSet("sandbox-execd").StringVar(&o.PKISecret, "pki-secret", o.PKISecret,
		"Secret (NAMESPACE/NAME) with this server's certificate (tls.crt, tls.key), which it presents to sandbox-execd and serves, and the kube-sandbox CA (ca.crt), which sandbox pods' certificates chain to. sandbox-controller (or cert-manager) keeps it current; it is watched.")
	fss.FlagSet("sandbox-execd").BoolVar(&o.ServePKISecret, "serve-pki-secret", o.ServePKISecret,
		"Serve the certificate of --pki-secret, which the APIService's caBundle verifies. false: serve --tls-cert-file (or a self-signed certificate in --cert-dir).")
	return fss
}

// Complete fills in defaults that depend on other options.
func (o *Options) Complete() error {
	return nil
}

// Validate checks the options.
func (o *Options) Validate() error {
	errs := append(o.RecommendedOptions.Validate(), o.ServerRun.Validate()...)
	if o.MaxSandboxTimeout != 0 && o.MaxSandboxTimeout < sandboxregistry.MinTimeoutSeconds*time.Second {
		errs = append(errs, fmt.Errorf("--max-sandbox-timeout must be 0 or at least %ds", sandboxregistry.MinTimeoutSeconds))
	}
	if _, err := admission.ParseLevel(o.PodSecurityLevel); err != nil {
		errs = append(errs, fmt.Errorf("--pod-security-level: %w", err))
	}
	if err := admission.ValidateRuntimeClassName(o.DefaultRuntimeClass); err != nil {
		errs = append(errs, fmt.Errorf("--default-runtime-class: %w", err))
	}
	if ns, name, ok := strings.Cut(o.PKISecret, "/"); !ok || ns == "" || name == "" {
		errs = append(errs, fmt.Errorf("--pki-secret %q: want NAMESPACE/NAME", o.PKISecret))
	}
	if o.NodeAgentPort < 1 || o.NodeAgentPort > 65535 {
		errs = append(errs, fmt.Errorf("--node-agent-port %d: want a port, 1-65535", o.NodeAgentPort))
	}
	if o.FilesResponseHeaderTimeout <= 0 || o.ProxyResponseHeaderTimeout <= 0 {
		errs = append(errs, errors.New("--files-response-header-timeout and --proxy-response-header-timeout must be positive"))
	}
	if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
		errs = append(errs, err)
	}
	return utilerrors.NewAggregate(errs)
}

// Config builds the server configuration from the options.
func (o *Options) Config() (*Config, error) {
	if err := o.RecommendedOptions.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil,
		[]net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("create self-signed certificates: %w", err)
	}
	serverConfig := genericapiserver.NewRecommendedConfig(Codecs)
	serverConfig.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	// Streams last as long as the session, the transfer or the followed log: no request
	// timeout, and not counted against the in-flight limit of short requests, as
	// kube-apiserver does for pods/exec, pods/proxy and pods/log.
	serverConfig.LongRunningFunc = genericfilters.BasicLongRunningRequestCheck(
		sets.NewString("watch"), sets.NewString("exec", "files", "proxy", "log"))

	namer := openapinamer.NewDefinitionNamer(Scheme)
	serverConfig.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openapi.GetOpenAPIDefinitions, namer)
	serverConfig.OpenAPIConfig.Info.Title = "kube-sandbox"
	serverConfig.OpenAPIConfig.Info.Version = sandboxv1alpha1.SchemeGroupVersion.Version
	serverConfig.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openapi.GetOpenAPIDefinitions, namer)
	serverConfig.OpenAPIV3Config.Info.Title = "kube-sandbox"
	serverConfig.OpenAPIV3Config.Info.Version = sandboxv1alpha1.SchemeGroupVersion.Version

	if err := o.ServerRun.ApplyTo(&serverConfig.Config); err != nil {
		return nil, err
	}
	streams := newInFlight()
	serverConfig.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
		return genericapiserver.DefaultBuildHandlerChain(streams.track(h), c)
	}
	if err := o.RecommendedOptions.ApplyTo(serverConfig); err != nil {
		return nil, err
	}
	ns, name, _ := strings.Cut(o.PKISecret, "/")
	creds, err := sandboxconn.NewCredentials(ns, name)
	if err != nil {
		return nil, err
	}
	if o.ServePKISecret {
		serverConfig.SecureServing.Cert = creds
	}
	level, err := admission.ParseLevel(o.PodSecurityLevel)
	if err != nil {
		return nil, err
	}
	return &Config{
		streams:       streams,
		drainTimeout:  o.StreamDrainTimeout,
		GenericConfig: serverConfig,
		ExtraConfig: ExtraConfig{
			BackendConfig:              serverConfig.ClientConfig,
			Limits:                     sandboxregistry.Limits{MaxTimeout: o.MaxSandboxTimeout, PauseStopsExpiry: o.PauseStopsExpiry},
			MaxUploadBytes:             o.MaxUploadBytes,
			PodSecurityLevel:           level,
			SnapshotRegistry:           o.SnapshotRegistry,
			DefaultRuntimeClass:        o.DefaultRuntimeClass,
			Credentials:                creds,
			FilesResponseHeaderTimeout: o.FilesResponseHeaderTimeout,
			ProxyResponseHeaderTimeout: o.ProxyResponseHeaderTimeout,
			NodeAgentPort:              o.NodeAgentPort,
		},
	}, nil
}

// credentialsWait bounds how long the server waits for its certificate Secret before it serves
// (a self-signed certificate, which the aggregator refuses, until the Secret comes).
const credentialsWait = 10 * time.Second

// Run starts the server and blocks until ctx is done.
func (o *Options) Run(ctx context.Context) error {
	config, err := o.Config()
	if err != nil {
		return err
	}
	server, err := config.Complete().New()
	if err != nil {
		return err
	}
	// Before serving: the serving certificate comes from the Secret.
	kube, err := kubernetes.NewForConfig(config.ExtraConfig.BackendConfig)
	if err != nil {
		return err
	}
	config.ExtraConfig.Credentials.Start(ctx, kube, credentialsWait)
	err = server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
	// The listener is closed and short requests are done; streams may still run.
	config.streams.wait(config.drainTimeout)
	return err
}

// NewCommand returns the sandbox-apiserver command.
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "sandbox-apiserver",
		Short: "Serve the sandboxes API (sandbox.kube-sandbox.io) as an aggregated API server",
		Long: `sandbox-apiserver serves sandboxes, a virtual resource over the BatchSandbox CRD, behind the
kube-apiserver through an APIService. It stores nothing itself. Its subresources stream
commands, files and HTTP to sandbox-execd in the sandbox pods, over mutual TLS with the
certificate of --pki-secret, verifying that each pod's execd is that pod's. Authentication
and authorization are delegated to the kube-apiserver, so Kubernetes RBAC decides who may do
what to which sandbox; a sandbox's template is admitted as a pod would be (--pod-security-level).`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logs.InitLogs()
			defer logs.FlushLogs()
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.SetContext(ctx)
	fss := o.Flags()
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := termSize(cmd)
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}
