// Package server wires sandbox-apiserver: options, config and the generic API server that
// serves sandbox.kube-sandbox.io.
package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	restclient "k8s.io/client-go/rest"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/common/restfuladapter"
	"k8s.io/pod-security-admission/api"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxregistry "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/registry/sandbox"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/admission"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeclient"
)

// ExtraConfig is what sandbox-apiserver needs beyond a generic API server.
type ExtraConfig struct {
	// BackendConfig reaches the kube-apiserver that stores BatchSandboxes, pods and tokens.
	BackendConfig *restclient.Config
	// Limits are the server-side bounds on sandboxes.
	Limits sandboxregistry.Limits
	// MaxUploadBytes bounds uploads through the files subresource; 0: no bound here.
	MaxUploadBytes int64
	// PodSecurityLevel is the platform's pod security level for templates.
	PodSecurityLevel api.LevelVersion
	// SnapshotRegistry holds the snapshots of paused sandboxes (admission.Checker's).
	SnapshotRegistry string
	// DefaultRuntimeClass is given to templates that name no runtime class (admission.Checker's).
	DefaultRuntimeClass string
	// Credentials are what this server presents to execd and trusts of it.
	Credentials *sandboxconn.Credentials
	// FilesResponseHeaderTimeout and ProxyResponseHeaderTimeout bound the wait for a
	// sandbox's answers.
	FilesResponseHeaderTimeout time.Duration
	ProxyResponseHeaderTimeout time.Duration
	// NodeAgentPort is where sandbox-node, the node agent, serves the figures of the stats
	// subresource, on each node's address; 0: nodeapi.Port, where every agent listens.
	// Another port is for stand-ins of the agents, on a machine where a real one holds it.
	NodeAgentPort int
}

// Config is the configuration of sandbox-apiserver.
type Config struct {
	// streams counts the requests in progress, for the drain after shutdown (drain.go).
	streams       *inFlight
	drainTimeout  time.Duration
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
	if oc := c.GenericConfig.OpenAPIConfig; oc != nil {
		oc.GetOperationIDAndTagsFromRoute = operationIDs
	}
	if oc := c.GenericConfig.OpenAPIV3Config; oc != nil {
		oc.GetOperationIDAndTagsFromRoute = operationIDs
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

	// From caches: namespaces (their pod security labels) and Pools, read on every create;
	// BatchSandboxes and the pods of sandboxes (only those: label-filtered), which exec,
	// files, proxy and log find their pod in. The server is ready once they have synced.
	sandboxPods, err := labels.Parse(controlv1alpha1.LabelBatchSandbox)
	if err != nil {
		return nil, err
	}
	informers, err := cache.New(backendConfig, cache.Options{
		Scheme:           backendScheme,
		ByObject:         map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: sandboxPods, Transform: sandboxpod.Slim}},
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	// Lists and watches of sandboxes are served from this server's own cache, fed by the
	// BatchSandbox informer: one watch at the kube-apiserver for every client's.
	watchCache := sandboxregistry.NewWatchCache(backend)
	genericServer.AddPostStartHookOrDie("sandbox-informers", func(ctx genericapiserver.PostStartHookContext) error {
		for _, obj := range []client.Object{&corev1.Namespace{}, &controlv1alpha1.Pool{}, &controlv1alpha1.BatchSandbox{}, &corev1.Pod{}} {
			if _, err := informers.GetInformer(ctx, obj); err != nil {
				return err
			}
		}
		batchSandboxes, err := informers.GetInformer(ctx, &controlv1alpha1.BatchSandbox{})
		if err != nil {
			return err
		}
		// Until it has caught up with the informer, lists and watches go to the kube-apiserver.
		if err := watchCache.Start(ctx, batchSandboxes); err != nil {
			return err
		}
		go func() { _ = informers.Start(ctx) }()
		if !informers.WaitForCacheSync(ctx) {
			return errors.New("the caches of namespaces, pools, sandboxes and their pods did not sync")
		}
		return nil
	})
	checker, err := admission.NewChecker(c.ExtraConfig.PodSecurityLevel)
	if err != nil {
		return nil, err
	}
	checker.SnapshotRegistry = c.ExtraConfig.SnapshotRegistry
	checker.RuntimeClass = c.ExtraConfig.DefaultRuntimeClass
	admitter := &sandboxregistry.Admitter{Checker: checker, Reader: sandboxregistry.CacheFirst{Cache: informers, Direct: backend}, Authorizer: c.GenericConfig.Authorization.Authorizer}

	clk := clock.RealClock{}
	limits := c.ExtraConfig.Limits
	sandboxes := sandboxregistry.NewREST(backend, limits, clk, admitter).WithCache(watchCache)
	// Renewals are writes through this server too: a list after one shows the new expiry.
	renewer := sandboxregistry.NewRenewer(watchCache.RecordWrites(backend), clk)
	creds := c.ExtraConfig.Credentials
	if creds == nil {
		return nil, fmt.Errorf("no credentials for sandbox-execd")
	}
	access := sandboxregistry.Access{
		Resolver:       &sandboxconn.CachedResolver{Cache: informers, Direct: backend},
		Authorizer:     c.GenericConfig.Authorization.Authorizer,
		Transport:      execdclient.NewTransport(creds, execdclient.Options{ResponseHeaderTimeout: c.ExtraConfig.FilesResponseHeaderTimeout, MaxIdleConnsPerHost: 4}),
		ProxyTransport: execdclient.NewTransport(creds, execdclient.Options{ResponseHeaderTimeout: c.ExtraConfig.ProxyResponseHeaderTimeout, MaxIdleConnsPerHost: 4}),
		Renewer:        renewer,
	}
	// What sandboxes use, from the agents of their nodes, as this server's identity (the
	// agents accept execdapi.APIServerIdentity for their figures). A few idle connections per
	// node: `kubectl sandbox top` asks every node again every few seconds.
	stats := &sandboxregistry.StatsReader{
		Reader: sandboxregistry.CacheFirst{Cache: informers, Direct: backend},
		Pods:   informers,
		Nodes: &nodeclient.Stats{
			Client: &http.Client{Transport: nodeclient.NewTransport(creds, sandboxregistry.StatsTimeout, 2)},
			Port:   c.ExtraConfig.NodeAgentPort,
		},
		Clock: clk,
	}
	apiGroupInfo := genericapiserver.NewDefaultAPIGroupInfo(sandboxv1alpha1.GroupName, Scheme, ParameterCodec, Codecs)
	apiGroupInfo.NegotiatedSerializer = withoutProtobuf{apiGroupInfo.NegotiatedSerializer}
	apiGroupInfo.VersionedResourcesStorageMap[sandboxv1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"sandboxes":        sandboxes,
		"sandboxes/status": sandboxregistry.NewStatusREST(sandboxes),
		"sandboxes/tasks":  sandboxregistry.NewTasksREST(sandboxes),
		"sandboxes/renew":  sandboxregistry.NewRenewREST(renewer, limits, clk),
		"sandboxes/exec":   &sandboxregistry.ExecREST{Access: access},
		"sandboxes/files":  &sandboxregistry.FilesREST{Access: access, MaxUploadBytes: c.ExtraConfig.MaxUploadBytes},
		"sandboxes/log":    &sandboxregistry.LogREST{Access: access, Reader: backend},
		"sandboxes/proxy":  &sandboxregistry.ProxyREST{Access: access},
		"sandboxes/processes": &sandboxregistry.ProcessesREST{
			Access: access, Reader: sandboxregistry.CacheFirst{Cache: informers, Direct: backend}, Clock: clk,
		},
		"sandboxes/attach": &sandboxregistry.AttachREST{Access: access},
		"sandboxes/contexts": &sandboxregistry.ContextsREST{
			Access: access, Reader: sandboxregistry.CacheFirst{Cache: informers, Direct: backend}, Clock: clk,
		},
		"sandboxes/stats": &sandboxregistry.StatsREST{Stats: stats},
		"sandboxstats":    &sandboxregistry.SandboxStatsREST{Stats: stats},
	}
	if err := genericServer.InstallAPIGroup(&apiGroupInfo); err != nil {
		return nil, err
	}
	return &SandboxServer{GenericAPIServer: genericServer}, nil
}

// operationIDs names the operations of the OpenAPI documents as every generic API server does
// (verb, group, version, then kind, or for a subresource its parent's kind and its name),
// but for one: GET sandboxes/NAME/stats ("Sandbox" + "Stats") and GET sandboxstats/NAME (kind
// SandboxStats) would both be readSandboxKubeSandboxIoV1alpha1NamespacedSandboxStats, which
// the OpenAPI builders refuse. The resource keeps the name a client generator expects of a
// resource's get; the subresource's gets "Subresource" after it.
func operationIDs(r openapicommon.Route) (string, []string, error) {
	route, ok := r.(*restfuladapter.RouteAdapter)
	if !ok {
		return "", nil, fmt.Errorf("route %s %s is not a go-restful route", r.Method(), r.Path())
	}
	id, tags, err := openapinamer.GetOperationIDAndTags(route.Route)
	if err == nil && r.Method() == http.MethodGet && strings.HasSuffix(r.Path(), "/sandboxes/{name}/stats") {
		id += "Subresource"
	}
	return id, tags, err
}
