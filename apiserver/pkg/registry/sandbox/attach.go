package sandbox

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/registry/rest"
	translator "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// AttachREST implements the attach subresource: the pods/attach streaming protocol, joining a
// process of the processes subresource, streamed to the execd of its replica's pod as exec
// is, never through the kubelet.
//
// Attaching is using the sandbox, as exec is: it is authorized as create on sandboxes/attach
// whatever the method (a WebSocket arrives as GET), and a sandbox whose pods are beyond a
// sandbox's needs the right to create pods.
type AttachREST struct {
	Access
}

var _ rest.Connecter = &AttachREST{}

// New implements rest.Storage.
func (r *AttachREST) New() runtime.Object { return &sandboxv1alpha1.SandboxAttachOptions{} }

// Destroy implements rest.Storage.
func (r *AttachREST) Destroy() {}

// NewConnectOptions implements rest.Connecter.
func (r *AttachREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &sandboxv1alpha1.SandboxAttachOptions{}, false, ""
}

// ConnectMethods implements rest.Connecter.
func (r *AttachREST) ConnectMethods() []string { return upgradeableMethods }

// Connect implements rest.Connecter. The process is looked up first, so that a process that
// does not exist or has ended, or options it cannot take, are refused with their own codes
// before any upgrade, whichever protocol the client speaks.
func (r *AttachREST) Connect(ctx context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	attachOpts, ok := opts.(*sandboxv1alpha1.SandboxAttachOptions)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("invalid options object: %T", opts))
	}
	if err := ValidateAttachOptions(name, attachOpts); err != nil {
		return nil, err
	}
	ep, err := r.open(ctx, name, attachOpts.Replica)
	if err != nil {
		return nil, err
	}
	id := attachOpts.Process
	ref := processRef{sandbox: name, replica: attachOpts.Replica, pod: ep.Pod, id: id}
	st := execdapi.ProcessState{}
	if err := r.processCall(ctx, ep, ref, http.MethodGet, execdapi.ProcessPath(id), nil, &st); err != nil {
		return nil, err
	}
	if err := attachable(attachOpts, &st, ref); err != nil {
		return nil, err
	}

	// execd speaks the kubelet's parameter names.
	q := url.Values{}
	for param, on := range map[string]bool{"input": attachOpts.Stdin, "output": attachOpts.Stdout, "error": attachOpts.Stderr, "tty": attachOpts.TTY} {
		if on {
			q.Set(param, "1")
		}
	}
	q.Set(execdapi.ExecSandboxUIDParam, string(ep.Sandbox.UID))
	location := execdclient.URL(ep.Target, execdapi.ProcessAttachPath(id), q.Encode())
	transport, err := r.Transport.Current()
	if err != nil {
		return nil, upstreamError(ep, err)
	}
	// As for exec: SPDY passes through, WebSocket (v5.channel.k8s.io) is translated to SPDY,
	// which execd speaks, both over the transport's mutual TLS to the pod's own execd.
	handler := http.Handler(proxy.NewUpgradeAwareHandler(location, transport, false, true, upstreamResponder{responder, ep}))
	streamTranslator := translator.NewStreamTranslatorHandler(location, transport, 0, translator.Options{
		Stdin:  attachOpts.Stdin,
		Stdout: attachOpts.Stdout,
		Stderr: attachOpts.Stderr,
		Tty:    attachOpts.TTY,
	})
	handler = translator.NewTranslatingHandler(handler, streamTranslator, wsstream.IsWebSocketRequestWithStreamCloseProtocol)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		handler.ServeHTTP(w, toPod(req, ep))
	}), nil
}

// attachable refuses to attach opts to the process st, as execd would: an ended process is
// Gone, a terminal or an input it does not have a bad request.
func attachable(opts *sandboxv1alpha1.SandboxAttachOptions, st *execdapi.ProcessState, ref processRef) error {
	switch {
	case st.Ended():
		return apierrors.NewGone(fmt.Sprintf("process %s has ended (%s): there is nothing to attach to; its log keeps its output (%s)", st.ID, st.Phase, ref.where()))
	case opts.TTY && !st.TTY:
		return apierrors.NewBadRequest(fmt.Sprintf("process %s has no TTY: attach without tty (%s)", st.ID, ref.where()))
	case opts.Stdin && !st.Stdin:
		return apierrors.NewBadRequest(fmt.Sprintf("process %s was started without stdin: attach without it (%s)", st.ID, ref.where()))
	}
	return nil
}
