package client

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	typedsandbox "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/typed/sandbox/v1alpha1"
)

// Client calls the sandbox.kube-sandbox.io API in one namespace, with the identity of its
// configuration. It is safe for concurrent use.
type Client struct {
	config    *rest.Config
	namespace string
	clientset clientset.Interface
	// rest is the REST client of the group, for the subresources the typed client lacks.
	rest rest.Interface
	// executor runs exec and attach sessions; tests replace it.
	executor RemoteExecutor
}

// New returns a Client of the server config points to, acting in namespace ("default" when
// empty).
func New(config *rest.Config, namespace string) (*Client, error) {
	cs, err := clientset.NewForConfig(rest.CopyConfig(config))
	if err != nil {
		return nil, fmt.Errorf("create sandbox client: %w", err)
	}
	return NewWithClientset(config, namespace, cs)
}

// NewWithClientset is New on a clientset of the caller's, such as the generated fake one of a
// unit test. Calls that stream (exec, files, proxy, logs, code) still go to config's server.
func NewWithClientset(config *rest.Config, namespace string, cs clientset.Interface) (*Client, error) {
	if namespace == "" {
		namespace = "default"
	}
	// The subresources' requests are built by a REST client of the group from config, as
	// kubectl builds pods/exec's, also when cs is a fake.
	typed, err := typedsandbox.NewForConfig(rest.CopyConfig(config))
	if err != nil {
		return nil, fmt.Errorf("create sandbox REST client: %w", err)
	}
	return &Client{
		config:    rest.CopyConfig(config),
		namespace: namespace,
		clientset: cs,
		rest:      typed.RESTClient(),
		executor:  DefaultRemoteExecutor{},
	}, nil
}

// NewFromKubeconfig returns a Client as kubectl would make one: from the kubeconfig file at
// path (else $KUBECONFIG, else ~/.kube/config, else the pod's service account when it runs in
// a cluster), in the namespace of context kubeContext (the current context when empty).
func NewFromKubeconfig(path, kubeContext string) (*Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	config, err := loader.ClientConfig()
	if err != nil {
		return nil, err
	}
	namespace, _, err := loader.Namespace()
	if err != nil {
		return nil, err
	}
	return New(config, namespace)
}

// Namespace is the namespace the Client acts in.
func (c *Client) Namespace() string { return c.namespace }

// InNamespace is a copy of c that acts in namespace.
func (c *Client) InNamespace(namespace string) *Client {
	copied := *c
	copied.namespace = namespace
	return &copied
}

// WithExecutor is a copy of c whose exec and attach sessions run on e, for tests.
func (c *Client) WithExecutor(e RemoteExecutor) *Client {
	copied := *c
	copied.executor = e
	return &copied
}

// Clientset is the generated clientset of the API group, for what this package does not wrap.
func (c *Client) Clientset() clientset.Interface { return c.clientset }

// RESTConfig is a copy of the configuration the Client calls the server with.
func (c *Client) RESTConfig() *rest.Config { return rest.CopyConfig(c.config) }

// subresource is a request of subresource of sandbox name, with further path segments.
func (c *Client) subresource(verb, name string, subresource ...string) *rest.Request {
	return c.rest.Verb(verb).
		Namespace(c.namespace).
		Resource("sandboxes").
		Name(name).
		SubResource(subresource...)
}
