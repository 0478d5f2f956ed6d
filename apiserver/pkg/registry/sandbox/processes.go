package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

const (
	// maxProcessBodyBytes bounds the body of a start or a signal: execd takes a start of at
	// most 1 MiB (an argv and an env), so a larger one could never run.
	maxProcessBodyBytes = 1 << 20
	// listConcurrency bounds the pods asked at once for a list of every replica's processes:
	// a batch sandbox may have hundreds of replicas, each one request to its pod.
	listConcurrency = 16
	// signalSubpath is the action below a process's ID: processes/ID/signal.
	signalSubpath = "signal"
)

// ProcessesREST implements the processes subresource: processes that outlive the connection
// that started them, run by the execd of a replica's pod.
//
//	GET  sandboxes/NAME/processes[?replica=N]   SandboxProcessList (a Table if asked)   get
//	GET  sandboxes/NAME/processes/ID[?replica=N]  SandboxProcess                       get
//	POST sandboxes/NAME/processes               SandboxProcess → 201 SandboxProcess    create
//	POST sandboxes/NAME/processes/ID/signal[?replica=N]  SandboxProcessSignal → 201 SandboxProcess   create
//
// A signal is a create of a SandboxProcessSignal, as an eviction is a create of an Eviction
// on pods/NAME/eviction: an action on something that is not stored, named by the URL, with the
// action's own kind as the body. A process has no resource of its own (nothing stores it, it
// has no resourceVersion and no watch), so it lives below the sandbox's subresource, and one
// right, create on sandboxes/processes, starts and signals processes, as create on pods/exec
// runs commands.
//
// Reads go through the generic GET handler (rest.GetterWithOptions), so that tables,
// includeObject and content negotiation are the API server's own; the process's ID is the
// rest of the path. POSTs are a connecter's (the generic create handler decodes every body of
// an endpoint into one kind, and takes no path below the subresource), decoded here with the
// group's scheme, strictly, and answered through the responder, which negotiates the encoding
// as the API server does.
//
// Reading runs nothing: list and get are authorized as get on sandboxes/processes (which the
// view role grants), and ask no right to create pods of a sandbox whose pods are beyond a
// sandbox's, as the log subresource does not. Starting and signalling are what exec is: a
// create, and for such a sandbox the right to create pods.
type ProcessesREST struct {
	Access
	// Reader reads the BatchSandbox a list of every replica needs the replica count of.
	Reader client.Reader
	// Clock measures the durations of the table; nil: the real clock.
	Clock clock.PassiveClock
}

var (
	_ rest.Storage           = &ProcessesREST{}
	_ rest.GetterWithOptions = &ProcessesREST{}
	_ rest.Connecter         = &ProcessesREST{}
	_ rest.TableConvertor    = &ProcessesREST{}
	_ rest.StorageMetadata   = &ProcessesREST{}
)

// New implements rest.Storage.
func (r *ProcessesREST) New() runtime.Object { return &sandboxv1alpha1.SandboxProcess{} }

// Destroy implements rest.Storage.
func (r *ProcessesREST) Destroy() {}

// NewGetOptions implements rest.GetterWithOptions; the rest of the path is the process's ID.
func (r *ProcessesREST) NewGetOptions() (runtime.Object, bool, string) {
	return &sandboxv1alpha1.SandboxProcessOptions{}, true, "path"
}

// NewConnectOptions implements rest.Connecter; the rest of the path is ID/signal.
func (r *ProcessesREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &sandboxv1alpha1.SandboxProcessOptions{}, true, "path"
}

// ConnectMethods implements rest.Connecter: POST only, so that RBAC's verb is create. GET is
// the getter's.
func (r *ProcessesREST) ConnectMethods() []string { return []string{http.MethodPost} }

// ProducesMIMETypes implements rest.StorageMetadata.
func (r *ProcessesREST) ProducesMIMETypes(string) []string { return nil }

// ProducesObject implements rest.StorageMetadata: a POST answers a SandboxProcess, in the
// OpenAPI of the route (a connecter's would say string).
func (r *ProcessesREST) ProducesObject(verb string) interface{} {
	if verb == http.MethodPost {
		return sandboxv1alpha1.SandboxProcess{}
	}
	return nil
}

// Get implements rest.GetterWithOptions: the processes of the sandbox, or one.
func (r *ProcessesREST) Get(ctx context.Context, name string, options runtime.Object) (runtime.Object, error) {
	opts, ok := options.(*sandboxv1alpha1.SandboxProcessOptions)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("invalid options object: %T", options))
	}
	id, action, err := parseProcessPath(opts.Path)
	if err != nil {
		return nil, err
	}
	if err := ValidateProcessOptions(name, opts); err != nil {
		return nil, err
	}
	if id == "" {
		return r.list(ctx, name, opts.Replica)
	}
	if action != "" {
		return nil, apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes/processes"), "get of processes/ID/"+action)
	}
	replica := ptr.Deref(opts.Replica, 0)
	ep, err := r.Resolver.Resolve(ctx, genericapirequest.NamespaceValue(ctx), name, replica)
	if err != nil {
		return nil, err
	}
	r.touch(ctx, ep)
	st := execdapi.ProcessState{}
	ref := processRef{sandbox: name, replica: replica, pod: ep.Pod, id: id}
	if err := r.processCall(ctx, ep, ref, http.MethodGet, execdapi.ProcessPath(id), nil, &st); err != nil {
		return nil, err
	}
	return sandboxProcess(ep, replica, &st), nil
}

// Connect implements rest.Connecter: a start (POST processes) or a signal (POST
// processes/ID/signal).
func (r *ProcessesREST) Connect(ctx context.Context, name string, options runtime.Object, responder rest.Responder) (http.Handler, error) {
	opts, ok := options.(*sandboxv1alpha1.SandboxProcessOptions)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("invalid options object: %T", options))
	}
	id, action, err := parseProcessPath(opts.Path)
	if err != nil {
		return nil, err
	}
	if err := ValidateProcessOptions(name, opts); err != nil {
		return nil, err
	}
	switch {
	case id == "":
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			proc := &sandboxv1alpha1.SandboxProcess{}
			if err := decodeProcessBody(w, req, proc, false); err != nil {
				responder.Error(err)
				return
			}
			out, err := r.start(ctx, name, opts, proc)
			if err != nil {
				responder.Error(err)
				return
			}
			responder.Object(http.StatusCreated, out)
		}), nil
	case action == signalSubpath:
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			sig := &sandboxv1alpha1.SandboxProcessSignal{}
			if err := decodeProcessBody(w, req, sig, true); err != nil {
				responder.Error(err)
				return
			}
			out, err := r.signal(ctx, name, id, ptr.Deref(opts.Replica, 0), sig)
			if err != nil {
				responder.Error(err)
				return
			}
			// 201, as the create of an Eviction answers: the signal was made.
			responder.Object(http.StatusCreated, out)
		}), nil
	case action == "":
		return nil, apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes/processes"),
			"create of processes/ID (start with POST processes, signal with POST processes/ID/signal)")
	}
	return nil, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes/processes"), opts.Path)
}

// parseProcessPath splits the path below processes/: "" (the collection), ID, or ID/ACTION.
// A trailing slash is the same path without it.
func parseProcessPath(p string) (id, action string, err error) {
	p = strings.TrimSuffix(strings.TrimPrefix(p, "/"), "/")
	if p == "" {
		return "", "", nil
	}
	parts := strings.Split(p, "/")
	if len(parts) > 2 || (len(parts) == 2 && parts[1] != signalSubpath) {
		return "", "", apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes/processes"), p)
	}
	if msgs := processIDErrors(parts[0]); len(msgs) > 0 {
		return "", "", apierrors.NewBadRequest(fmt.Sprintf("%q is not a process ID: %s", parts[0], strings.Join(msgs, "; ")))
	}
	if len(parts) == 2 {
		action = parts[1]
	}
	return parts[0], action, nil
}

// start starts proc in its replica and answers its state.
func (r *ProcessesREST) start(ctx context.Context, name string, opts *sandboxv1alpha1.SandboxProcessOptions, proc *sandboxv1alpha1.SandboxProcess) (*sandboxv1alpha1.SandboxProcess, error) {
	if opts.Replica != nil && *opts.Replica != proc.Spec.Replica {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the query names replica %d and spec.replica %d: a start takes spec.replica", *opts.Replica, proc.Spec.Replica))
	}
	if err := ValidateProcess(name, proc); err != nil {
		return nil, err
	}
	ep, err := r.open(ctx, name, proc.Spec.Replica)
	if err != nil {
		return nil, err
	}
	st := execdapi.ProcessState{}
	ref := processRef{sandbox: name, replica: proc.Spec.Replica, pod: ep.Pod, kind: processKind.Kind}
	if err := r.processCall(ctx, ep, ref, http.MethodPost, execdapi.ProcessesPath, processRequest(&proc.Spec), &st); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(4).Info("Started a process", "sandbox", klog.KRef(ep.Sandbox.Namespace, name), "replica", proc.Spec.Replica, "process", st.ID)
	return sandboxProcess(ep, proc.Spec.Replica, &st), nil
}

// signal sends sig to the group of process id of the replica.
func (r *ProcessesREST) signal(ctx context.Context, name, id string, replica int32, sig *sandboxv1alpha1.SandboxProcessSignal) (*sandboxv1alpha1.SandboxProcess, error) {
	if err := ValidateProcessSignal(id, sig); err != nil {
		return nil, err
	}
	ep, err := r.open(ctx, name, replica)
	if err != nil {
		return nil, err
	}
	st := execdapi.ProcessState{}
	ref := processRef{sandbox: name, replica: replica, pod: ep.Pod, id: id, kind: processSignalKind.Kind}
	req := &execdapi.ProcessSignalRequest{Signal: sig.Signal, GracePeriodSeconds: sig.GracePeriodSeconds}
	if err := r.processCall(ctx, ep, ref, http.MethodPost, execdapi.ProcessSignalPath(id), req, &st); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(4).Info("Signalled a process", "sandbox", klog.KRef(ep.Sandbox.Namespace, name), "replica", replica, "process", id, "signal", sig.Signal)
	return sandboxProcess(ep, replica, &st), nil
}

// list lists the processes of one replica, or of every replica the sandbox has (see
// listReplicas).
func (r *ProcessesREST) list(ctx context.Context, name string, replica *int32) (*sandboxv1alpha1.SandboxProcessList, error) {
	results, err := listReplicas(ctx, r.Reader, r.Resolver, name, replica, "processes",
		func(ep *sandboxconn.Endpoint, rep int32) ([]execdapi.ProcessState, error) {
			list := execdapi.ProcessList{}
			err := r.processCall(ctx, ep, processRef{sandbox: name, replica: rep, pod: ep.Pod}, http.MethodGet, execdapi.ProcessesPath, nil, &list)
			return list.Items, err
		})
	if err != nil {
		return nil, err
	}
	out := &sandboxv1alpha1.SandboxProcessList{Items: []sandboxv1alpha1.SandboxProcess{}}
	for j, res := range results {
		if j == 0 {
			r.touch(ctx, res.ep)
		}
		for i := range res.items {
			out.Items = append(out.Items, *sandboxProcess(res.ep, res.replica, &res.items[i]))
		}
	}
	return out, nil
}

// touch counts a read of the processes as use of the sandbox for auto-renew, as reading its
// log does.
func (r *ProcessesREST) touch(ctx context.Context, ep *sandboxconn.Endpoint) {
	if r.Renewer != nil && ep.Sandbox != nil {
		r.Renewer.Touch(ctx, ep.Sandbox)
	}
}

func (r *ProcessesREST) now() clock.PassiveClock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// ConvertToTable implements rest.TableConvertor: a row per process, its duration measured
// against the server's clock.
func (r *ProcessesREST) ConvertToTable(_ context.Context, obj runtime.Object, opts runtime.Object) (*metav1.Table, error) {
	var items []sandboxv1alpha1.SandboxProcess
	switch o := obj.(type) {
	case *sandboxv1alpha1.SandboxProcessList:
		items = o.Items
	case *sandboxv1alpha1.SandboxProcess:
		items = []sandboxv1alpha1.SandboxProcess{*o}
	default:
		return nil, fmt.Errorf("cannot print %T as a table of processes", obj)
	}
	table := ProcessesTable(items, r.now().Now())
	if to, ok := opts.(*metav1.TableOptions); ok && to.NoHeaders {
		table.ColumnDefinitions = nil
	}
	return table, nil
}

// processBodyScheme knows the kinds a POST to processes may carry.
var processBodyScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(sandboxv1alpha1.AddToScheme(s))
	return s
}()

// decodeProcessBody decodes the body of req (JSON or YAML) into into, strictly, as the API
// server decodes a create with fieldValidation=Strict: an unknown or duplicate field is a 400,
// not a field silently dropped from what would run. The body may name its kind; another kind
// than into's is a 400. An empty body leaves into as it is when emptyOK.
func decodeProcessBody(w http.ResponseWriter, req *http.Request, into runtime.Object, emptyOK bool) error {
	kinds, _, err := processBodyScheme.ObjectKinds(into)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	want := kinds[0]
	yaml := false
	if ct := req.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		switch {
		case err == nil && mt == "application/json":
		case err == nil && mt == "application/yaml":
			yaml = true
		default:
			return negotiation.NewUnsupportedMediaTypeError([]string{"application/json", "application/yaml"})
		}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxProcessBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the body is larger than %d bytes", maxProcessBodyBytes))
	case err != nil:
		return apierrors.NewBadRequest(fmt.Sprintf("reading the body: %v", err))
	case len(strings.TrimSpace(string(data))) == 0:
		if emptyOK {
			return nil
		}
		return apierrors.NewBadRequest(fmt.Sprintf("the body is empty: want a %s", want.Kind))
	}
	s := json.NewSerializerWithOptions(json.DefaultMetaFactory, processBodyScheme, processBodyScheme, json.SerializerOptions{Yaml: yaml, Strict: true})
	obj, gvk, err := s.Decode(data, &want, into)
	if err != nil {
		if runtime.IsStrictDecodingError(err) {
			return apierrors.NewBadRequest(err.Error())
		}
		return apierrors.NewBadRequest(fmt.Sprintf("the body is not a %s: %v", want.Kind, err))
	}
	if obj != into || gvk == nil || *gvk != want {
		got := schema.GroupVersionKind{}
		if gvk != nil {
			got = *gvk
		}
		return apierrors.NewBadRequest(fmt.Sprintf("the body is a %s %s; this path takes a %s %s", got.GroupVersion(), got.Kind, want.GroupVersion(), want.Kind))
	}
	return nil
}
