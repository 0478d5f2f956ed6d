package server

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	netutils "k8s.io/utils/net"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/openapi"
	sandboxregistry "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/registry/sandbox"
)

// Options are the flags of sandbox-apiserver.
type Options struct {
	RecommendedOptions *genericoptions.RecommendedOptions
	Logs               *logsapi.LoggingConfiguration
	// MaxSandboxTimeout bounds spec.timeoutSeconds and renewals.
	MaxSandboxTimeout time.Duration
	// MaxUploadBytes bounds uploads through the files subresource.
	MaxUploadBytes int64
}

// NewOptions returns the defaults. The server stores nothing, so it has no etcd; admission and
// priority-and-fairness are left to the kube-apiserver in front of it.
func NewOptions() *Options {
	o := &Options{
		RecommendedOptions: genericoptions.NewRecommendedOptions("", Codecs.LegacyCodec(sandboxv1alpha1.SchemeGroupVersion)),
		Logs:               logsapi.NewLoggingConfiguration(),
		MaxSandboxTimeout:  24 * time.Hour,
		MaxUploadBytes:     1 << 30,
	}
	o.RecommendedOptions.Etcd = nil
	o.RecommendedOptions.Admission = nil
	o.RecommendedOptions.Features.EnablePriorityAndFairness = false
	o.RecommendedOptions.SecureServing.BindPort = 9443
	return o
}

// Flags returns the flags grouped by section, for --help.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	o.RecommendedOptions.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	o.RecommendedOptions.Authentication.AddFlags(fss.FlagSet("authentication"))
	o.RecommendedOptions.Authorization.AddFlags(fss.FlagSet("authorization"))
	o.RecommendedOptions.Audit.AddFlags(fss.FlagSet("auditing"))
	o.RecommendedOptions.Features.AddFlags(fss.FlagSet("features"))
	o.RecommendedOptions.CoreAPI.AddFlags(fss.FlagSet("kube-apiserver"))
	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))
	fss.FlagSet("sandboxes").DurationVar(&o.MaxSandboxTimeout, "max-sandbox-timeout", o.MaxSandboxTimeout,
		"The longest lifetime a sandbox may ask for (spec.timeoutSeconds), and how far ahead a renewal may move its expiry. 0: no maximum.")
	fss.FlagSet("sandboxes").Int64Var(&o.MaxUploadBytes, "max-upload-bytes", o.MaxUploadBytes,
		"The largest file an upload through the files subresource may write (413 past it). 0: only sandbox-execd's own limit.")
	return fss
}

// Complete fills in defaults that depend on other options.
func (o *Options) Complete() error {
	return nil
}

// Validate checks the options.
func (o *Options) Validate() error {
	errs := o.RecommendedOptions.Validate()
	if o.MaxSandboxTimeout != 0 && o.MaxSandboxTimeout < sandboxregistry.MinTimeoutSeconds*time.Second {
		errs = append(errs, fmt.Errorf("--max-sandbox-timeout must be 0 or at least %ds", sandboxregistry.MinTimeoutSeconds))
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
	// Streams last as long as the session or the transfer: no request timeout, and not
	// counted against the in-flight limit of short requests, as kube-apiserver does for
	// pods/exec and pods/proxy.
	serverConfig.LongRunningFunc = genericfilters.BasicLongRunningRequestCheck(
		sets.NewString("watch"), sets.NewString("exec", "files", "proxy"))

	namer := openapinamer.NewDefinitionNamer(Scheme)
	serverConfig.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openapi.GetOpenAPIDefinitions, namer)
	serverConfig.OpenAPIConfig.Info.Title = "kube-sandbox"
	serverConfig.OpenAPIConfig.Info.Version = sandboxv1alpha1.SchemeGroupVersion.Version
	serverConfig.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openapi.GetOpenAPIDefinitions, namer)
	serverConfig.OpenAPIV3Config.Info.Title = "kube-sandbox"
	serverConfig.OpenAPIV3Config.Info.Version = sandboxv1alpha1.SchemeGroupVersion.Version

	if err := o.RecommendedOptions.ApplyTo(serverConfig); err != nil {
		return nil, err
	}
	return &Config{
		GenericConfig: serverConfig,
		ExtraConfig: ExtraConfig{
			BackendConfig:  serverConfig.ClientConfig,
			Limits:         sandboxregistry.Limits{MaxTimeout: o.MaxSandboxTimeout},
			MaxUploadBytes: o.MaxUploadBytes,
		},
	}, nil
}

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
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}

// NewCommand returns the sandbox-apiserver command.
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "sandbox-apiserver",
		Short: "Serve the sandboxes API (sandbox.kube-sandbox.io) as an aggregated API server",
		Long: `sandbox-apiserver serves sandboxes, a virtual resource over the BatchSandbox CRD, behind the
kube-apiserver through an APIService. It stores nothing itself. Its subresources stream
commands to sandbox-execd in the sandbox pods. Authentication and authorization are delegated
to the kube-apiserver, so Kubernetes RBAC decides who may do what to which sandbox.`,
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
