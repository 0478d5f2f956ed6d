// Integration tests: sandbox-apiserver and sandbox-controller against a real etcd and
// kube-apiserver, with every request going through the aggregator as in a cluster. No kubelet
// runs, so pods stay Pending; test/e2e covers running sandboxes.
package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxclient "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/test/integration/framework"
)

var (
	cp *framework.ControlPlane
	// kube reads and writes what sandboxes are made of, as the cluster admin.
	kube client.Client
	// sandboxes is the typed client of the aggregated API, as the cluster admin.
	sandboxes sandboxclient.Interface
	// stopController stops the in-process sandbox-controller; startController starts it again.
	stopController func()
	suiteCtx       context.Context
)

func startController() error {
	var err error
	stopController, err = framework.StartController(suiteCtx, cp)
	return err
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("integration tests skipped in -short mode")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "kube-sandbox-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cp, err = framework.StartControlPlane(ctx, dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer func() {
		cancel()
		cp.Stop()
		if os.Getenv("KEEP_INTEGRATION_DIR") == "" {
			os.RemoveAll(dir)
		}
	}()
	if err := setUp(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "set up (logs in %s): %v\n", dir, err)
		return 1
	}
	return m.Run()
}

func setUp(ctx context.Context) error {
	var err error
	kube, err = client.New(cp.Config(framework.AdminToken), client.Options{Scheme: framework.Scheme})
	if err != nil {
		return err
	}
	if sandboxes, err = sandboxclient.NewForConfig(cp.Config(framework.AdminToken)); err != nil {
		return err
	}
	if err := framework.InstallCRDs(ctx, kube); err != nil {
		return err
	}
	if err := framework.CreateSystemNamespace(ctx, kube); err != nil {
		return err
	}
	// What the kube-apiserver admits of Pools.
	if err := framework.ApplyManifest(ctx, kube, "artifacts/base/admission-pools.yaml"); err != nil {
		return err
	}
	// The controller first: it makes the CA and sandbox-apiserver's certificate.
	suiteCtx = ctx
	if err := startController(); err != nil {
		return err
	}
	return framework.StartSandboxAPIServer(ctx, cp, kube)
}

// userConfig is a client config for one of the test users.
func userConfig(token string) *rest.Config { return cp.Config(token) }
