// Package testing provides Factories for the commands' tests: on the generated fake clientset,
// and on real clients of a test server.
package testing

import (
	"fmt"

	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/fake"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// Namespace is the namespace of a TestFactory unless a test sets another.
const Namespace = "test"

// Host is where the REST configuration of a TestFactory points; nothing listens there.
const Host = "https://sandbox-api.test:6443"

// TestFactory is a cmdutil.Factory on a fake clientset.
type TestFactory struct {
	Ns         string
	RESTConfig *rest.Config
	Clientset  *fake.Clientset
}

var _ cmdutil.Factory = &TestFactory{}

// SandboxesResource is the resource of sandboxes.
var SandboxesResource = sandboxv1alpha1.SchemeGroupVersion.WithResource("sandboxes")

// NewTestFactory returns a TestFactory whose clientset holds the sandboxes.
func NewTestFactory(sandboxes ...*sandboxv1alpha1.Sandbox) *TestFactory {
	cs := fake.NewSimpleClientset()
	for _, sb := range sandboxes {
		// Not fake.NewSimpleClientset(objects...): its tracker guesses the resource of kind
		// Sandbox as "sandboxs", where the typed client would never find it.
		if err := cs.Tracker().Create(SandboxesResource, sb.DeepCopy(), sb.Namespace); err != nil {
			panic(fmt.Sprintf("add sandbox %s/%s to the fake clientset: %v", sb.Namespace, sb.Name, err))
		}
	}
	return &TestFactory{
		Ns:         Namespace,
		RESTConfig: &rest.Config{Host: Host},
		Clientset:  cs,
	}
}

// Namespace implements cmdutil.Factory.
func (f *TestFactory) Namespace() (string, bool, error) {
	return f.Ns, false, nil
}

// ToRESTConfig implements cmdutil.Factory.
func (f *TestFactory) ToRESTConfig() (*rest.Config, error) {
	return rest.CopyConfig(f.RESTConfig), nil
}

// SandboxClient implements cmdutil.Factory.
func (f *TestFactory) SandboxClient() (clientset.Interface, error) {
	return f.Clientset, nil
}

// ServerFactory is a cmdutil.Factory whose clients talk to a test server, for what the fake
// clientset does not do: encode requests and stream watches over HTTP.
type ServerFactory struct {
	Ns         string
	RESTConfig *rest.Config
}

var _ cmdutil.Factory = &ServerFactory{}

// NewServerFactory returns a ServerFactory for the server at host, such as an httptest server's
// URL.
func NewServerFactory(host string) *ServerFactory {
	return &ServerFactory{Ns: Namespace, RESTConfig: &rest.Config{Host: host}}
}

// Namespace implements cmdutil.Factory.
func (f *ServerFactory) Namespace() (string, bool, error) {
	return f.Ns, false, nil
}

// ToRESTConfig implements cmdutil.Factory.
func (f *ServerFactory) ToRESTConfig() (*rest.Config, error) {
	return rest.CopyConfig(f.RESTConfig), nil
}

// SandboxClient implements cmdutil.Factory.
func (f *ServerFactory) SandboxClient() (clientset.Interface, error) {
	return clientset.NewForConfig(rest.CopyConfig(f.RESTConfig))
}
