// Package util holds what the kubectl-sandbox commands share: the client factory, kubectl-style
// error printing, help text helpers, the wait for a sandbox (a watch) and its phase.
package util

import (
	"fmt"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
)

// Factory gives commands their clients and namespace, resolved from the kubeconfig flags. It is
// the seam tests replace with a fake clientset.
type Factory interface {
	// Namespace is the namespace of -n, else of the kubeconfig context, else "default".
	// explicit reports whether -n set it.
	Namespace() (ns string, explicit bool, err error)
	// ToRESTConfig is the client configuration of the selected kubeconfig context.
	ToRESTConfig() (*rest.Config, error)
	// SandboxClient is a clientset for the sandbox.kube-sandbox.io API.
	SandboxClient() (clientset.Interface, error)
}

// NewFactory returns a Factory reading the standard kubeconfig flags.
func NewFactory(getter genericclioptions.RESTClientGetter) Factory {
	return &factory{getter: getter}
}

type factory struct {
	getter genericclioptions.RESTClientGetter
}

var _ Factory = &factory{}

// Namespace implements Factory.
func (f *factory) Namespace() (string, bool, error) {
	return f.getter.ToRawKubeConfigLoader().Namespace()
}

// ToRESTConfig implements Factory.
func (f *factory) ToRESTConfig() (*rest.Config, error) {
	return f.getter.ToRESTConfig()
}

// SandboxClient implements Factory.
func (f *factory) SandboxClient() (clientset.Interface, error) {
	config, err := f.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := clientset.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("create sandbox client: %w", err)
	}
	return cs, nil
}

// SandboxKind is how kubectl names the kind in messages such as
// `sandbox.sandbox.kube-sandbox.io "x" deleted`: lowercase kind, dot, group.
const SandboxKind = "sandbox." + sandboxv1alpha1.GroupName

// Client is the kube-sandbox client library on the factory's namespace, configuration and
// clientset: the one implementation of each operation that every command calls.
func Client(f Factory) (*sandboxclient.Client, error) {
	namespace, _, err := f.Namespace()
	if err != nil {
		return nil, err
	}
	config, err := f.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := f.SandboxClient()
	if err != nil {
		return nil, err
	}
	return sandboxclient.NewWithClientset(config, namespace, cs)
}
