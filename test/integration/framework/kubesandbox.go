package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	apiserver "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/server"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/manager"
)

// Scheme knows the types the tests read and write on the kube-apiserver.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(Scheme))
	utilruntime.Must(apiregistrationv1.AddToScheme(Scheme))
	utilruntime.Must(controlv1alpha1.AddToScheme(Scheme))
}

// InstallCRDs creates the CRDs of artifacts/base/crds and waits until they are established.
func InstallCRDs(ctx context.Context, c client.Client) error {
	files, err := filepath.Glob(filepath.Join(RepoRoot(), "artifacts", "base", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs found in artifacts/base/crds: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := c.Create(ctx, crd); err != nil {
			return fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(crd), got); err != nil {
				return false, nil
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return fmt.Errorf("CRD %s not established: %w", crd.Name, err)
		}
	}
	return nil
}

// SystemNamespace is where the kube-sandbox components and their PKI live.
const SystemNamespace = "kube-sandbox-system"

// CreateSystemNamespace creates SystemNamespace: the controller keeps the kube-sandbox CA there.
func CreateSystemNamespace(ctx context.Context, c client.Client) error {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: SystemNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// StartSandboxAPIServer runs sandbox-apiserver in this process, as the admin, with delegated
// authentication and authorization against the control plane, and registers it through an
// APIService, so that requests take the same path through the aggregator as in a cluster. The
// controller must run: it issues the apiserver's certificate (--pki-secret) and sets the
// APIService's caBundle, which the aggregator verifies it with, as in a cluster.
func StartSandboxAPIServer(ctx context.Context, cp *ControlPlane, c client.Client) error {
	kubeconfig := filepath.Join(cp.Dir, "sandbox-apiserver.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, AdminToken); err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	cmd := apiserver.NewCommand(ctx)
	cmd.SetArgs([]string{
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(cp.Dir, "sandbox-apiserver-certs"),
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--max-sandbox-timeout=" + MaxSandboxTimeout.String(),
		"--pki-secret=" + SystemNamespace + "/sandbox-apiserver-tls",
		"--node-agent-port=" + strconv.Itoa(NodeAgentPort()),
		"--v=2",
	})
	errCh := make(chan error, 1)
	go func() { errCh <- cmd.Execute() }()

	ns := SystemNamespace
	objs := []client.Object{
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "sandbox-apiserver", Namespace: ns},
			Spec: corev1.ServiceSpec{
				Type:         corev1.ServiceTypeExternalName,
				ExternalName: "localhost",
				Ports:        []corev1.ServicePort{{Name: "https", Port: int32(port)}},
			},
		},
		&apiregistrationv1.APIService{
			ObjectMeta: metav1.ObjectMeta{Name: "v1alpha1.sandbox.kube-sandbox.io"},
			Spec: apiregistrationv1.APIServiceSpec{
				Group:                "sandbox.kube-sandbox.io",
				Version:              "v1alpha1",
				Service:              &apiregistrationv1.ServiceReference{Namespace: ns, Name: "sandbox-apiserver", Port: int32Ptr(int32(port))},
				GroupPriorityMinimum: 2000,
				VersionPriority:      15,
			},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T: %w", o, err)
		}
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-errCh:
			return false, fmt.Errorf("sandbox-apiserver exited: %v", err)
		default:
		}
		svc := &apiregistrationv1.APIService{}
		if err := c.Get(ctx, client.ObjectKey{Name: "v1alpha1.sandbox.kube-sandbox.io"}, svc); err != nil || len(svc.Spec.CABundle) == 0 {
			return false, nil
		}
		for _, cond := range svc.Status.Conditions {
			if cond.Type == apiregistrationv1.Available && cond.Status == apiregistrationv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// StartController runs sandbox-controller in this process until the returned stop function is
// called (which waits until it has stopped) or ctx ends. Each of with changes the options
// after the tests' defaults are set.
func StartController(ctx context.Context, cp *ControlPlane, with ...func(*manager.Options)) (stop func(), err error) {
	kubeconfig := filepath.Join(cp.Dir, "sandbox-controller.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, AdminToken); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	o := manager.NewOptions()
	o.Kubeconfig = kubeconfig
	o.LeaderElect = false
	o.MetricsAddr = "0"
	o.ProbeAddr = "0"
	o.ExecdImage = "kube-sandbox.local/kube-sandbox:test"
	o.PKINamespace = SystemNamespace
	// The simulated node runs no sidecars.
	o.DisableEgress = true
	o.InProcessRestart = true
	for _, f := range with {
		f(o)
	}
	if err := o.Validate(); err != nil {
		cancel()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = o.Run(ctx)
	}()
	return func() { cancel(); <-done }, nil
}

func int32Ptr(i int32) *int32 { return &i }

// MaxSandboxTimeout is the test server's --max-sandbox-timeout.
const MaxSandboxTimeout = 2 * time.Hour

// ApplyManifest creates the objects of a multi-document YAML file of the repository (a path
// relative to its root), as kubectl would.
func ApplyManifest(ctx context.Context, c client.Client, path string) error {
	data, err := os.ReadFile(filepath.Join(RepoRoot(), path))
	if err != nil {
		return err
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: create %s %s: %w", path, obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}
