package integration

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
)

func sandboxClientFor(t *testing.T, token string) sandboxclient.Interface {
	t.Helper()
	c, err := sandboxclient.NewForConfig(userConfig(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func execURL(c sandboxclient.Interface, ns, name string, cmd ...string) *url.URL {
	return c.SandboxV1alpha1().RESTClient().Post().Namespace(ns).Resource("sandboxes").Name(name).SubResource("exec").
		VersionedParams(&sandboxv1alpha1.SandboxExecOptions{Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
}

// execWith runs cmd through the exec subresource with the SPDY or the WebSocket executor.
func execWith(t *testing.T, cfg *rest.Config, protocol, ns, name string, cmd ...string) error {
	t.Helper()
	c, err := sandboxclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u := execURL(c, ns, name, cmd...)
	var exec remotecommand.Executor
	switch protocol {
	case "spdy":
		exec, err = remotecommand.NewSPDYExecutor(cfg, "POST", u)
	case "websocket":
		exec, err = remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	return exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
}

func TestExecErrors(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, sandbox("pending"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	admin := userConfig("admin-token")
	for _, protocol := range []string{"spdy", "websocket"} {
		t.Run(protocol, func(t *testing.T) {
			err := execWith(t, admin, protocol, ns, "missing", "true")
			if err == nil || !strings.Contains(err.Error(), "not found") {
				t.Errorf("exec on a missing sandbox: got %v, want not found", err)
			}
			err = execWith(t, admin, protocol, ns, "pending", "true")
			if err == nil || !strings.Contains(err.Error(), `sandbox "pending" is not ready`) {
				t.Errorf("exec on a pending sandbox: got %v, want a not-ready error", err)
			}
		})
	}
}

// TestExecAuthorizedAsCreate: a WebSocket exec arrives as GET, but running commands needs
// "create" on sandboxes/exec, as for pods/exec.
func TestExecAuthorizedAsCreate(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, sandbox("locked"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grant(t, ns, "bob", []string{"sandboxes", "sandboxes/exec"}, []string{"get", "list"})
	bob := userConfig("bob-token")
	for _, protocol := range []string{"spdy", "websocket"} {
		t.Run(protocol, func(t *testing.T) {
			err := execWith(t, bob, protocol, ns, "locked", "true")
			if err == nil || !(apierrors.IsForbidden(err) || strings.Contains(err.Error(), "forbidden")) {
				t.Errorf("exec with only get on sandboxes/exec: got %v, want Forbidden", err)
			}
		})
	}
	// Another user, since the apiserver caches authorization decisions for a few seconds.
	grant(t, ns, "carol", []string{"sandboxes", "sandboxes/exec"}, []string{"get", "create"})
	carol := userConfig("carol-token")
	for _, protocol := range []string{"spdy", "websocket"} {
		t.Run(protocol+" with create", func(t *testing.T) {
			// Allowed; the sandbox is not running, which is the next thing it hears.
			err := execWith(t, carol, protocol, ns, "locked", "true")
			if err == nil || !strings.Contains(err.Error(), "is not ready") {
				t.Errorf("exec with create on sandboxes/exec: got %v, want the not-ready error", err)
			}
		})
	}
}
