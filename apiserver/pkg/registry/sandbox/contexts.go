package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
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

var (
	codeContextKind        = sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxCodeContext").GroupKind()
	codeRunKind            = sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxCodeRun").GroupKind()
	codeContextOptionsKind = sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxCodeContextOptions").GroupKind()
)

// The actions below a context's ID.
const (
	runSubpath       = "run"
	interruptSubpath = "interrupt"
)

// ContextsREST implements the contexts subresource: stateful interpreters (Jupyter kernels)
// that the execd of a replica's pod runs, and the code run in them.
//
//	GET    sandboxes/NAME/contexts[?replica=N]             SandboxCodeContextList (a Table if asked)  get
//	GET    sandboxes/NAME/contexts/ID[?replica=N]          SandboxCodeContext                         get
//	POST   sandboxes/NAME/contexts                         SandboxCodeContext → 201 SandboxCodeContext create
//	POST   sandboxes/NAME/contexts/ID/run[?replica=N]      SandboxCodeRun → 200 SandboxCodeRunEvents  create
//	POST   sandboxes/NAME/contexts/ID/interrupt[?replica=N] → 201 SandboxCodeContext                  create
//	DELETE sandboxes/NAME/contexts/ID[?replica=N]          → 200 SandboxCodeContext                   delete
//
// As for processes: reads go through the generic GET handler, so tables and content
// negotiation are the API server's; POST and DELETE are a connecter's, whose verbs RBAC
// authorizes as create and delete. Running code is what exec is, so a run, a make and an
// interrupt need create on sandboxes/contexts, and for a sandbox whose pods are beyond a
// sandbox's the right to create pods; so does a delete, which ends a process of the sandbox.
// A run streams the interpreter's outputs, one JSON SandboxCodeRunEvent per line
// (application/jsonl), as execd passes them.
type ContextsREST struct {
	Access
	// Reader reads the BatchSandbox a list of every replica needs the replica count of.
	Reader client.Reader
	// Clock measures the ages of the table; nil: the real clock.
	Clock clock.PassiveClock
}

var (
	_ rest.Storage           = &ContextsREST{}
	_ rest.GetterWithOptions = &ContextsREST{}
	_ rest.Connecter         = &ContextsREST{}
	_ rest.TableConvertor    = &ContextsREST{}
	_ rest.StorageMetadata   = &ContextsREST{}
)

// New implements rest.Storage.
func (r *ContextsREST) New() runtime.Object { return &sandboxv1alpha1.SandboxCodeContext{} }

// Destroy implements rest.Storage.
func (r *ContextsREST) Destroy() {}

// NewGetOptions implements rest.GetterWithOptions; the rest of the path is the context's ID.
func (r *ContextsREST) NewGetOptions() (runtime.Object, bool, string) {
	return &sandboxv1alpha1.SandboxCodeContextOptions{}, true, "path"
}

// NewConnectOptions implements rest.Connecter; the rest of the path is ID[/ACTION].
func (r *ContextsREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &sandboxv1alpha1.SandboxCodeContextOptions{}, true, "path"
}

// ConnectMethods implements rest.Connecter: POST (create) and DELETE (delete). GET is the
// getter's.
func (r *ContextsREST) ConnectMethods() []string { return []string{http.MethodPost, http.MethodDelete} }

// ProducesMIMETypes implements rest.StorageMetadata.
func (r *ContextsREST) ProducesMIMETypes(string) []string { return nil }

// ProducesObject implements rest.StorageMetadata.
func (r *ContextsREST) ProducesObject(verb string) interface{} {
	if verb == http.MethodPost || verb == http.MethodDelete {
		return sandboxv1alpha1.SandboxCodeContext{}
	}
	return nil
}

// parseContextPath splits the path below contexts/: "" (the collection), ID, or ID/ACTION.
func parseContextPath(p string) (id, action string, err error) {
	p = strings.TrimSuffix(strings.TrimPrefix(p, "/"), "/")
	if p == "" {
		return "", "", nil
	}
	parts := strings.Split(p, "/")
	if len(parts) > 2 || (len(parts) == 2 && parts[1] != runSubpath && parts[1] != interruptSubpath) {
		return "", "", apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes/contexts"), p)
	}
	if msgs := processIDErrors(parts[0]); len(msgs) > 0 {
		return "", "", apierrors.NewBadRequest(fmt.Sprintf("%q is not a context ID: %s", parts[0], strings.Join(msgs, "; ")))
	}
	if len(parts) == 2 {
		action = parts[1]
	}
	return parts[0], action, nil
}

// contextOptions are a request's options, and the context and action its path names.
func contextOptions(name string, options runtime.Object) (opts *sandboxv1alpha1.SandboxCodeContextOptions, id, action string, err error) {
	opts, ok := options.(*sandboxv1alpha1.SandboxCodeContextOptions)
	if !ok {
		return nil, "", "", apierrors.NewInternalError(fmt.Errorf("invalid options object: %T", options))
	}
	if id, action, err = parseContextPath(opts.Path); err != nil {
		return nil, "", "", err
	}
	if err := validateContextOptions(name, opts); err != nil {
		return nil, "", "", err
	}
	return opts, id, action, nil
}

func validateContextOptions(name string, opts *sandboxv1alpha1.SandboxCodeContextOptions) *apierrors.StatusError {
	if opts.Replica != nil && *opts.Replica < 0 {
		return invalid(codeContextOptionsKind, name, field.ErrorList{
			field.Invalid(field.NewPath("replica"), *opts.Replica, "must be greater than or equal to 0")})
	}
	return nil
}

// Get implements rest.GetterWithOptions: the contexts of the sandbox, or one.
func (r *ContextsREST) Get(ctx context.Context, name string, options runtime.Object) (runtime.Object, error) {
	opts, id, action, err := contextOptions(name, options)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return r.list(ctx, name, opts.Replica)
	}
	if action != "" {
		return nil, apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes/contexts"), "get of contexts/ID/"+action)
	}
	replica := ptr.Deref(opts.Replica, 0)
	ep, err := r.Resolver.Resolve(ctx, genericapirequest.NamespaceValue(ctx), name, replica)
	if err != nil {
		return nil, err
	}
	st := execdapi.ContextState{}
	ref := processRef{sandbox: name, replica: replica, pod: ep.Pod, id: id, contexts: true}
	if err := r.processCall(ctx, ep, ref, http.MethodGet, execdapi.ContextPath(id), nil, &st); err != nil {
		return nil, err
	}
	return sandboxCodeContext(ep, replica, &st), nil
}

// Connect implements rest.Connecter: a make, a run, an interrupt or a delete.
func (r *ContextsREST) Connect(ctx context.Context, name string, options runtime.Object, responder rest.Responder) (http.Handler, error) {
	opts, id, action, err := contextOptions(name, options)
	if err != nil {
		return nil, err
	}
	replica := ptr.Deref(opts.Replica, 0)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var out runtime.Object
		code := http.StatusCreated
		var err error
		switch {
		case req.Method == http.MethodDelete && id != "" && action == "":
			code = http.StatusOK
			out, err = r.contextAction(ctx, name, id, replica, "delete", http.MethodDelete, execdapi.ContextPath(id))
		case req.Method == http.MethodDelete:
			err = apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes/contexts"), "delete of "+strings.Trim("contexts/"+opts.Path, "/")+" (delete a context with DELETE contexts/ID)")
		case id == "":
			cc := &sandboxv1alpha1.SandboxCodeContext{}
			if err = decodeProcessBody(w, req, cc, true); err == nil {
				out, err = r.create(ctx, name, opts, cc)
			}
		case action == interruptSubpath:
			out, err = r.contextAction(ctx, name, id, replica, "create", http.MethodPost, execdapi.ContextInterruptPath(id))
		case action == runSubpath:
			run := &sandboxv1alpha1.SandboxCodeRun{}
			if err = decodeProcessBody(w, req, run, false); err == nil {
				err = r.run(ctx, w, name, id, replica, run)
			}
			if err != nil {
				responder.Error(err)
			}
			return
		default:
			err = apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes/contexts"),
				"create of contexts/ID (make one with POST contexts, run code with POST contexts/ID/run)")
		}
		if err != nil {
			responder.Error(err)
			return
		}
		responder.Object(code, out)
	}), nil
}

// openVerb is open for a verb other than create: the right the request itself needs.
func (r *ContextsREST) openVerb(ctx context.Context, verb, name string, replica int32) (*sandboxconn.Endpoint, error) {
	if verb == "create" {
		return r.open(ctx, name, replica)
	}
	ep, err := r.Resolver.Resolve(ctx, genericapirequest.NamespaceValue(ctx), name, replica)
	if err != nil {
		return nil, err
	}
	if err := ensureMayUseElevated(ctx, r.Authorizer, ep.Sandbox.Namespace, name, ep.Sandbox.Annotations, "using it"); err != nil {
		return nil, err
	}
	return ep, nil
}

// create makes the context cc in its replica.
func (r *ContextsREST) create(ctx context.Context, name string, opts *sandboxv1alpha1.SandboxCodeContextOptions, cc *sandboxv1alpha1.SandboxCodeContext) (*sandboxv1alpha1.SandboxCodeContext, error) {
	if opts.Replica != nil && *opts.Replica != cc.Spec.Replica {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the query names replica %d and spec.replica %d: a make takes spec.replica", *opts.Replica, cc.Spec.Replica))
	}
	req, errs := contextRequest(cc)
	if len(errs) > 0 {
		return nil, invalid(codeContextKind, name, errs)
	}
	ep, err := r.open(ctx, name, cc.Spec.Replica)
	if err != nil {
		return nil, err
	}
	st := execdapi.ContextState{}
	ref := processRef{sandbox: name, replica: cc.Spec.Replica, pod: ep.Pod, id: req.ID, kind: codeContextKind.Kind, contexts: true}
	if err := r.processCall(ctx, ep, ref, http.MethodPost, execdapi.ContextsPath, req, &st); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(4).Info("Made a code context", "sandbox", klog.KRef(ep.Sandbox.Namespace, name), "replica", cc.Spec.Replica, "context", st.ID)
	return sandboxCodeContext(ep, cc.Spec.Replica, &st), nil
}

// contextRequest is the make execd is asked for, and what is wrong with cc, with this API's
// field paths.
func contextRequest(cc *sandboxv1alpha1.SandboxCodeContext) (*execdapi.ContextRequest, field.ErrorList) {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if cc.GenerateName != "" {
		errs = append(errs, field.Forbidden(meta.Child("generateName"), "leave metadata.name empty for a random ID"))
	}
	if cc.Spec.Replica < 0 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "replica"), cc.Spec.Replica, "must be greater than or equal to 0"))
	}
	req := &execdapi.ContextRequest{Language: cc.Spec.Language, WorkingDir: cc.Spec.WorkingDir}
	for _, e := range cc.Spec.Env {
		req.Env = append(req.Env, execdapi.EnvVar{Name: e.Name, Value: e.Value})
	}
	for _, e := range execdapi.ValidateContextRequest(req, field.NewPath("spec")) {
		errs = append(errs, e)
	}
	if cc.Name != "" {
		for _, msg := range processIDErrors(cc.Name) {
			errs = append(errs, field.Invalid(meta.Child("name"), cc.Name, msg))
		}
		req.ID = cc.Name
	}
	return req, errs
}

// contextAction asks execd for an action on context id that answers its state.
func (r *ContextsREST) contextAction(ctx context.Context, name, id string, replica int32, verb, method, path string) (*sandboxv1alpha1.SandboxCodeContext, error) {
	ep, err := r.openVerb(ctx, verb, name, replica)
	if err != nil {
		return nil, err
	}
	st := execdapi.ContextState{}
	ref := processRef{sandbox: name, replica: replica, pod: ep.Pod, id: id, contexts: true}
	if err := r.processCall(ctx, ep, ref, method, path, nil, &st); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(4).Info("Acted on a code context", "sandbox", klog.KRef(ep.Sandbox.Namespace, name), "replica", replica, "context", id, "path", path)
	return sandboxCodeContext(ep, replica, &st), nil
}

// run runs code in context id and streams the events execd sends, each checked and
// re-encoded as this API's, flushed as it comes. Once the answer started, an error can only
// end it: the client sees a stream without its end event.
func (r *ContextsREST) run(ctx context.Context, w http.ResponseWriter, name, id string, replica int32, run *sandboxv1alpha1.SandboxCodeRun) error {
	rr := &execdapi.RunRequest{Code: run.Code, TimeoutSeconds: run.TimeoutSeconds}
	if errs := execdapi.ValidateRunRequest(rr, nil); len(errs) > 0 {
		err := apierrors.NewInvalid(codeRunKind, id, errs)
		err.ErrStatus.Message = fmt.Sprintf("%s.%s for context %q is invalid: %s", codeRunKind.Kind, codeRunKind.Group, id, errs.ToAggregate().Error())
		return err
	}
	ep, err := r.open(ctx, name, replica)
	if err != nil {
		return err
	}
	ref := processRef{sandbox: name, replica: replica, pod: ep.Pod, id: id, kind: codeRunKind.Kind, contexts: true}
	resp, err := r.processDo(ctx, ep, ref, http.MethodPost, execdapi.ContextRunPath(id), rr)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	w.Header().Set("Content-Type", execdapi.RunContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	enc := json.NewEncoder(w)
	// One event a line, each at most MaxRunEventBytes: a longer one ends the stream.
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), execdapi.MaxRunEventBytes+1)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		ev := execdapi.RunEvent{}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			klog.FromContext(ctx).Info("A code run ended early: execd sent what is not an event", "sandbox", klog.KRef(ep.Sandbox.Namespace, name), "pod", ep.Pod, "err", err)
			return nil
		}
		if enc.Encode(codeRunEvent(&ev)) != nil || rc.Flush() != nil {
			return nil // the client went away: execd's run is interrupted as our request to it ends
		}
		if ev.Type == execdapi.RunEnd {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		klog.FromContext(ctx).V(2).Info("A code run ended early", "sandbox", klog.KRef(ep.Sandbox.Namespace, name), "pod", ep.Pod, "err", err)
	}
	return nil
}

// codeRunEvent is this API's form of an event of execd.
func codeRunEvent(ev *execdapi.RunEvent) *sandboxv1alpha1.SandboxCodeRunEvent {
	out := &sandboxv1alpha1.SandboxCodeRunEvent{
		Type: sandboxv1alpha1.SandboxCodeRunEventType(ev.Type), Text: ev.Text, Data: ev.Data, ExecutionCount: int32(ev.ExecutionCount),
		Status: ev.Status, Reason: ev.Reason, Message: ev.Message, Truncated: ev.Truncated,
	}
	if e := ev.Error; e != nil {
		out.Error = &sandboxv1alpha1.SandboxCodeError{Name: e.Name, Value: e.Value, Traceback: e.Traceback}
	}
	return out
}

// sandboxCodeContext is the SandboxCodeContext of what the execd of ep says of a context.
func sandboxCodeContext(ep *sandboxconn.Endpoint, replica int32, st *execdapi.ContextState) *sandboxv1alpha1.SandboxCodeContext {
	c := &sandboxv1alpha1.SandboxCodeContext{
		ObjectMeta: metav1.ObjectMeta{Name: st.ID, CreationTimestamp: metav1.NewTime(st.StartTime)},
		Spec:       sandboxv1alpha1.SandboxCodeContextSpec{Replica: replica, Language: st.Language, WorkingDir: st.WorkingDir},
		Status: sandboxv1alpha1.SandboxCodeContextStatus{
			Phase: sandboxv1alpha1.SandboxCodeContextPhase(st.Phase), Pod: ep.Pod, PID: int32(st.PID),
			LanguageVersion: st.LanguageVersion, ExecutionCount: int32(st.ExecutionCount), Message: st.Message,
		},
	}
	if ep.Sandbox != nil {
		c.Namespace = ep.Sandbox.Namespace
	}
	if !st.LastRunTime.IsZero() {
		c.Status.LastRunTime = &metav1.Time{Time: st.LastRunTime}
	}
	return c
}

// list lists the contexts of one replica, or of every replica, as processes are listed.
func (r *ContextsREST) list(ctx context.Context, name string, replica *int32) (*sandboxv1alpha1.SandboxCodeContextList, error) {
	results, err := listReplicas(ctx, r.Reader, r.Resolver, name, replica, "code contexts",
		func(ep *sandboxconn.Endpoint, rep int32) ([]execdapi.ContextState, error) {
			list := execdapi.ContextList{}
			ref := processRef{sandbox: name, replica: rep, pod: ep.Pod, contexts: true}
			err := r.processCall(ctx, ep, ref, http.MethodGet, execdapi.ContextsPath, nil, &list)
			return list.Items, err
		})
	if err != nil {
		return nil, err
	}
	out := &sandboxv1alpha1.SandboxCodeContextList{Items: []sandboxv1alpha1.SandboxCodeContext{}}
	for _, res := range results {
		for i := range res.items {
			out.Items = append(out.Items, *sandboxCodeContext(res.ep, res.replica, &res.items[i]))
		}
	}
	return out, nil
}

// ConvertToTable implements rest.TableConvertor: a row per context.
func (r *ContextsREST) ConvertToTable(_ context.Context, obj runtime.Object, opts runtime.Object) (*metav1.Table, error) {
	var items []sandboxv1alpha1.SandboxCodeContext
	switch o := obj.(type) {
	case *sandboxv1alpha1.SandboxCodeContextList:
		items = o.Items
	case *sandboxv1alpha1.SandboxCodeContext:
		items = []sandboxv1alpha1.SandboxCodeContext{*o}
	default:
		return nil, fmt.Errorf("cannot print %T as a table of code contexts", obj)
	}
	now := clock.PassiveClock(clock.RealClock{})
	if r.Clock != nil {
		now = r.Clock
	}
	table := ContextsTable(items, now.Now())
	if to, ok := opts.(*metav1.TableOptions); ok && to.NoHeaders {
		table.ColumnDefinitions = nil
	}
	return table, nil
}
