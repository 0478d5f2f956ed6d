package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	translator "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// Access is what the streaming subresources share: who may use a sandbox, where its pods are,
// how to reach their execd, and auto-renew on use.
type Access struct {
	Resolver   sandboxconn.Resolver
	Authorizer authorizer.Authorizer
	// Transport reaches execd in the pods, over mutual TLS, verifying each pod's identity.
	Transport *execdclient.Transport
	// ProxyTransport is the same, with the proxy subresource's response-header timeout.
	ProxyTransport *execdclient.Transport
	// Renewer extends the expiry of sandboxes that ask for auto-renew; nil: none.
	Renewer *Renewer
}

// open authorizes the caller to create the subresource, whatever the HTTP method (a WebSocket
// or a download arrives as GET, which RBAC would authorize as "get"; using a sandbox is a
// "create", as kube-apiserver enforces for pods/exec), finds the replica's execd, refuses a
// sandbox whose pods are beyond a sandbox's to callers who may not create pods, and counts the
// access for auto-renew.
func (a *Access) open(ctx context.Context, name string, replica int32) (*sandboxconn.Endpoint, error) {
	if err := ensureAuthorizedForVerb(ctx, a.Authorizer, "create"); err != nil {
		return nil, err
	}
	if replica < 0 {
		return nil, apierrors.NewBadRequest("replica must not be negative")
	}
	ep, err := a.Resolver.Resolve(ctx, genericapirequest.NamespaceValue(ctx), name, replica)
	if err != nil {
		return nil, err
	}
	if err := ensureMayUseElevated(ctx, a.Authorizer, ep.Sandbox.Namespace, name, ep.Sandbox.Annotations, "using it"); err != nil {
		return nil, err
	}
	if a.Renewer != nil && ep.Sandbox != nil {
		a.Renewer.Touch(ctx, ep.Sandbox)
	}
	return ep, nil
}

// ExecREST implements the exec subresource: the pods/exec streaming protocol, streamed to
// execd in the sandbox pod, never through the kubelet.
type ExecREST struct {
	Access
}

var _ rest.Connecter = &ExecREST{}

// upgradeableMethods: GET is what WebSocket clients send, POST what SPDY clients send.
var upgradeableMethods = []string{"GET", "POST"}

// New implements rest.Storage.
func (r *ExecREST) New() runtime.Object { return &sandboxv1alpha1.SandboxExecOptions{} }

// Destroy implements rest.Storage.
func (r *ExecREST) Destroy() {}

// NewConnectOptions implements rest.Connecter.
func (r *ExecREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &sandboxv1alpha1.SandboxExecOptions{}, false, ""
}

// ConnectMethods implements rest.Connecter.
func (r *ExecREST) ConnectMethods() []string { return upgradeableMethods }

// Connect implements rest.Connecter.
func (r *ExecREST) Connect(ctx context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	execOpts, ok := opts.(*sandboxv1alpha1.SandboxExecOptions)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("invalid options object: %T", opts))
	}
	if errs := validateExecOptions(execOpts); len(errs) > 0 {
		return nil, apierrors.NewBadRequest(errs.ToAggregate().Error())
	}
	ep, err := r.open(ctx, name, execOpts.Replica)
	if err != nil {
		return nil, err
	}

	q := url.Values{execdapi.ExecCommandParam: execOpts.Command}
	if len(execOpts.Env) > 0 {
		q[execdapi.ExecEnvParam] = execOpts.Env
	}
	if execOpts.WorkingDir != "" {
		q.Set(execdapi.ExecWorkingDirParam, execOpts.WorkingDir)
	}
	if execOpts.TimeoutSeconds > 0 {
		q.Set(execdapi.ExecTimeoutSecondsParam, strconv.FormatInt(execOpts.TimeoutSeconds, 10))
	}
	// execd speaks the kubelet's parameter names.
	for param, on := range map[string]bool{"input": execOpts.Stdin, "output": execOpts.Stdout, "error": execOpts.Stderr, "tty": execOpts.TTY} {
		if on {
			q.Set(param, "1")
		}
	}
	if ep.Sandbox != nil {
		q.Set(execdapi.ExecSandboxUIDParam, string(ep.Sandbox.UID))
	}
	location := execdclient.URL(ep.Target, execdapi.ExecPath, q.Encode())
	transport, err := r.Transport.Current()
	if err != nil {
		return nil, upstreamError(ep, err)
	}

	// SPDY passes through; WebSocket (v5.channel.k8s.io) is translated to SPDY here, because
	// execd, like the kubelet's CRI streaming server, speaks SPDY only. Both dial with the
	// transport's mutual TLS, and verify that execd is the pod's.
	handler := http.Handler(proxy.NewUpgradeAwareHandler(location, transport, false, true, upstreamResponder{responder, ep}))
	streamTranslator := translator.NewStreamTranslatorHandler(location, transport, 0, translator.Options{
		Stdin:  execOpts.Stdin,
		Stdout: execOpts.Stdout,
		Stderr: execOpts.Stderr,
		Tty:    execOpts.TTY,
	})
	handler = translator.NewTranslatingHandler(handler, streamTranslator, wsstream.IsWebSocketRequestWithStreamCloseProtocol)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		handler.ServeHTTP(w, toPod(req, ep))
	}), nil
}

// upstreamResponder reports a failure to reach execd as the error upstreamError makes of it.
type upstreamResponder struct {
	rest.Responder
	ep *sandboxconn.Endpoint
}

func (u upstreamResponder) Error(w http.ResponseWriter, req *http.Request, err error) {
	u.Responder.Error(upstreamError(u.ep, err))
}

// ensureAuthorizedForVerb re-authorizes the request with another verb, as kube-apiserver does
// for pods/exec (kubernetes/kubernetes#133515).
func ensureAuthorizedForVerb(ctx context.Context, a authorizer.Authorizer, verb string) error {
	requestInfo, ok := genericapirequest.RequestInfoFrom(ctx)
	if !ok {
		return apierrors.NewInternalError(errors.New("no request info in context"))
	}
	if requestInfo.Verb == verb {
		return nil
	}
	if a == nil {
		return apierrors.NewInternalError(errors.New("no authorizer available"))
	}
	attrs, err := filters.GetAuthorizerAttributes(ctx)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("build authorizer attributes: %w", err))
	}
	decision, reason, err := a.Authorize(ctx, &overrideVerb{Attributes: attrs, verb: verb})
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("authorize: %w", err))
	}
	if decision != authorizer.DecisionAllow {
		msg := fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q",
			attrs.GetUser().GetName(), verb, requestInfo.Resource+"/"+requestInfo.Subresource, requestInfo.APIGroup, requestInfo.Namespace)
		if reason != "" {
			msg += ": " + reason
		}
		gr := schema.GroupResource{Group: requestInfo.APIGroup, Resource: requestInfo.Resource}
		return apierrors.NewForbidden(gr, requestInfo.Name, errors.New(msg))
	}
	return nil
}

type overrideVerb struct {
	authorizer.Attributes
	verb string
}

func (o *overrideVerb) GetVerb() string { return o.verb }
