// Package server wires sandbox-apiserver: options, config and the generic API server that
// serves sandbox.kube-sandbox.io.
package server

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	restclient "k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxregistry "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/registry/sandbox"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// ExtraConfig is what sandbox-apiserver needs beyond a generic API server.
type ExtraConfig struct {
	// BackendConfig reaches the kube-apiserver that stores BatchSandboxes, pods and tokens.
	BackendConfig *restclient.Config
	// Limits are the server-side bounds on sandboxes.
	Limits sandboxregistry.Limits
	// MaxUploadBytes bounds uploads through the files subresource; 0: no bound here.
	MaxUploadBytes int64
}

// Config is the configuration of sandbox-apiserver.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	ExtraConfig   ExtraConfig
}

type completedConfig struct {
	GenericConfig genericapiserver.CompletedConfig
	ExtraConfig   *ExtraConfig
}

// CompletedConfig can only be made by Complete, so a Config cannot be used uncompleted.
type CompletedConfig struct {
	*completedConfig
}

// SandboxServer is the running server.
type SandboxServer struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// Complete fills in the fields that were not set.
func (cfg *Config) Complete() CompletedConfig {
	return CompletedConfig{&completedConfig{
		GenericConfig: cfg.GenericConfig.Complete(),
		ExtraConfig:   &cfg.ExtraConfig,
	}}
}

// backendScheme knows the types sandbox-apiserver reads and writes on the kube-apiserver.
var backendScheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(backendScheme))
	utilruntime.Must(controlv1alpha1.AddToScheme(backendScheme))
}

// New returns a server that serves the sandboxes API.
func (c completedConfig) New() (*SandboxServer, error) {
	if c.ExtraConfig.BackendConfig == nil {
		return nil, fmt.Errorf("no backend client config: sandbox-apiserver needs to reach the kube-apiserver")
	}
	genericServer, err := c.GenericConfig.New("sandbox-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	// Every sandbox request is one or a few requests to the kube-apiserver: client-go's
	// default rate limit (5/s) would queue them. The kube-apiserver's own priority and
	// fairness protects it.
	backendConfig := restclient.CopyConfig(c.ExtraConfig.BackendConfig)
	backendConfig.QPS, backendConfig.Burst = 500, 1000
	backend, err := client.NewWithWatch(backendConfig, client.Options{Scheme: backendScheme})
	if err != nil {
		return nil, fmt.Errorf("backend client: %w", err)
	}

	clk := clock.RealClock{}
	limits := c.ExtraConfig.Limits
	sandboxes := sandboxregistry.NewREST(backend, limits, clk)
	renewer := sandboxregistry.NewRenewer(backend, clk)
	access := sandboxregistry.Access{
		Resolver:   &sandboxconn.KubeResolver{Client: backend},
		Authorizer: c.GenericConfig.Authorization.Authorizer,
		Transport:  podTransport(),
		Renewer:    renewer,
	}
	apiGroupInfo := genericapiserver.NewDefaultAPIGroupInfo(sandboxv1alpha1.GroupName, Scheme, ParameterCodec, Codecs)
	apiGroupInfo.VersionedResourcesStorageMap[sandboxv1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"sandboxes":        sandboxes,
		"sandboxes/status": sandboxregistry.NewStatusREST(sandboxes),
		"sandboxes/renew":  sandboxregistry.NewRenewREST(renewer, limits, clk),
		"sandboxes/exec":   &sandboxregistry.ExecREST{Access: access},
		"sandboxes/files":  &sandboxregistry.FilesREST{Access: access, MaxUploadBytes: c.ExtraConfig.MaxUploadBytes},
		"sandboxes/proxy":  &sandboxregistry.ProxyREST{Access: access},
	}
	if err := genericServer.InstallAPIGroup(&apiGroupInfo); err != nil {
		return nil, err
	}
	return &SandboxServer{GenericAPIServer: genericServer}, nil
}

// podTransport dials execd in sandbox pods. Pods are on the cluster network, so no proxy from
// the environment applies.
func podTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
}
