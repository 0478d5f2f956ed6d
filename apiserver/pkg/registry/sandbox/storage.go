// Package sandbox is the REST storage of sandboxes: a virtual resource over the BatchSandbox
// CRD. It stores nothing itself: writes and gets are calls to the kube-apiserver; lists and
// watches are served from a cache of BatchSandboxes (WatchCache) when there is one.
package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// REST implements the sandboxes resource.
type REST struct {
	tableConvertor
	// backend reads and writes BatchSandboxes as sandbox-apiserver's own identity: users never
	// need rights on the CRD, only on sandboxes, which this server authorizes.
	backend client.WithWatch
	limits  Limits
	clock   clock.PassiveClock
	// admitter admits the pods a new sandbox may have; nil admits everything (tests).
	admitter *Admitter
	// cache serves lists and watches; nil passes them to the backend.
	cache *WatchCache
}

var (
	_ rest.Storage              = &REST{}
	_ rest.Scoper               = &REST{}
	_ rest.SingularNameProvider = &REST{}
	_ rest.ShortNamesProvider   = &REST{}
	_ rest.CategoriesProvider   = &REST{}
	_ rest.Creater              = &REST{}
	_ rest.Getter               = &REST{}
	_ rest.Lister               = &REST{}
	_ rest.Watcher              = &REST{}
	_ rest.Updater              = &REST{}
	_ rest.GracefulDeleter      = &REST{}
	_ rest.CollectionDeleter    = &REST{}
)

// NewREST returns the sandboxes storage over a BatchSandbox client.
func NewREST(backend client.WithWatch, limits Limits, clk clock.PassiveClock, admitter *Admitter) *REST {
	return &REST{tableConvertor: tableConvertor{clock: clk}, backend: backend, limits: limits, clock: clk, admitter: admitter}
}

// WithCache makes r serve lists and watches from c, and tell c of every write it makes (so
// that a list after a write sees it). It returns r.
func (r *REST) WithCache(c *WatchCache) *REST {
	r.cache = c
	return r
}

// maxStoredBytes bounds the JSON of a BatchSandbox this server writes: etcd refuses requests
// above 1.5 MiB by default, and the object grows by its managed fields and status after it.
const maxStoredBytes = 1 << 20

// tooLarge is a 413 for an object that etcd would refuse.
func tooLarge(bs *controlv1alpha1.BatchSandbox) error {
	data, err := json.Marshal(bs)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if len(data) > maxStoredBytes {
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
			"the sandbox is %d bytes as stored; at most %d fit: make its template, env or entrypoint smaller", len(data), maxStoredBytes))
	}
	return nil
}

// New implements rest.Storage.
func (r *REST) New() runtime.Object { return &sandboxv1alpha1.Sandbox{} }

// Destroy implements rest.Storage.
func (r *REST) Destroy() {}

// NamespaceScoped implements rest.Scoper.
func (r *REST) NamespaceScoped() bool { return true }

// GetSingularName implements rest.SingularNameProvider.
func (r *REST) GetSingularName() string { return "sandbox" }

// ShortNames implements rest.ShortNamesProvider.
func (r *REST) ShortNames() []string { return []string{"sbx"} }

// Categories implements rest.CategoriesProvider; `kubectl get kube-sandbox` lists them.
func (r *REST) Categories() []string { return []string{"kube-sandbox"} }

// NewList implements rest.Lister.
func (r *REST) NewList() runtime.Object { return &sandboxv1alpha1.SandboxList{} }

// Create implements rest.Creater.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	sbx, ok := obj.(*sandboxv1alpha1.Sandbox)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a Sandbox: %T", obj))
	}
	ns, ok := genericapirequest.NamespaceFrom(ctx)
	if !ok || ns == "" {
		return nil, apierrors.NewBadRequest("a namespace is required")
	}
	if sbx.Namespace != "" && sbx.Namespace != ns {
		return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	sbx.Namespace = ns
	if sbx.Name == "" && sbx.GenerateName != "" {
		// As the generic registry does before validation; the backend refuses a taken name.
		sbx.Name = names.SimpleNameGenerator.GenerateName(sbx.GenerateName)
	}
	setDefaults(sbx)
	// Status is the server's: what a client sends there is dropped, as for built-in resources.
	sbx.Status = sandboxv1alpha1.SandboxStatus{}
	if errs := validateSandbox(sbx, r.limits); len(errs) > 0 {
		return nil, apierrors.NewInvalid(sandboxKind, sbx.Name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, sbx); err != nil {
			return nil, err
		}
	}
	if err := r.admitter.Admit(ctx, sbx); err != nil {
		return nil, err
	}
	if sbx.Spec.TimeoutSeconds != nil {
		sbx.Status.ExpiresAt = &metav1.Time{Time: r.clock.Now().Add(time.Duration(*sbx.Spec.TimeoutSeconds) * time.Second)}
	}
	bs := toBatchSandbox(sbx)
	bs.ResourceVersion = ""
	// The controller would add it in a write of its own; a sandbox is meant to be usable within
	// milliseconds of its creation.
	controllerutil.AddFinalizer(bs, controlv1alpha1.FinalizerPods)
	if err := tooLarge(bs); err != nil {
		return nil, err
	}
	if err := r.backend.Create(ctx, bs, createOptions(options)); err != nil {
		return nil, translateError(err, sbx.Name)
	}
	if options == nil || len(options.DryRun) == 0 {
		r.cache.wrote(bs.ResourceVersion)
	}
	return fromBatchSandbox(bs), nil
}

// Get implements rest.Getter.
func (r *REST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	bs := &controlv1alpha1.BatchSandbox{}
	key := client.ObjectKey{Namespace: genericapirequest.NamespaceValue(ctx), Name: name}
	if err := r.backend.Get(ctx, key, bs, &client.GetOptions{Raw: options}); err != nil {
		return nil, translateError(err, name)
	}
	return fromBatchSandbox(bs), nil
}

// List implements rest.Lister: from the cache if it can answer (see WatchCache.list), else from
// the kube-apiserver, where selectors, limit/continue and resourceVersion go as they came, so
// they mean what they mean for built-in resources.
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	if out, served, err := r.cache.list(ctx, options); served {
		return out, err
	}
	out, err := r.listBackend(ctx, options)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// listBackend lists from the kube-apiserver.
func (r *REST) listBackend(ctx context.Context, options *metainternalversion.ListOptions) (*sandboxv1alpha1.SandboxList, error) {
	list := &controlv1alpha1.BatchSandboxList{}
	if err := r.backend.List(ctx, list, listOptions(ctx, options)); err != nil {
		return nil, translateError(err, "")
	}
	out := &sandboxv1alpha1.SandboxList{ListMeta: list.ListMeta}
	out.Items = make([]sandboxv1alpha1.Sandbox, 0, len(list.Items))
	for i := range list.Items {
		out.Items = append(out.Items, *fromBatchSandbox(&list.Items[i]))
	}
	return out, nil
}

// Watch implements rest.Watcher: from the cache if it serves (see WatchCache.watch), else a
// watch of BatchSandboxes at the kube-apiserver, each event's object shown as a Sandbox, with
// bookmarks and errors passed through.
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	if w, served, err := r.cache.watch(ctx, options); served {
		return w, err
	}
	w, err := r.backend.Watch(ctx, &controlv1alpha1.BatchSandboxList{}, listOptions(ctx, options))
	if err != nil {
		return nil, translateError(err, "")
	}
	return watch.Filter(w, func(in watch.Event) (watch.Event, bool) {
		if bs, ok := in.Object.(*controlv1alpha1.BatchSandbox); ok {
			in.Object = fromBatchSandbox(bs)
		}
		return in, true
	}), nil
}

// Update implements rest.Updater; patches (merge, JSON, strategic merge, apply) arrive here too,
// already applied to the current object. Labels, annotations, replicas, autoRenew and the
// network policy may change; what made the pods may not; status is the server's. A
// server-side apply (forceAllowCreate) of a sandbox that does not exist creates it, as for
// built-in resources.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	var out runtime.Object
	created := false
	// As the generic registry does: a write that lost a race with another writer (the
	// controller updates status all the time) is tried again on the new version, unless the
	// caller asked for a specific resourceVersion.
	err := retry.OnError(retry.DefaultRetry, func(err error) bool { return errors.Is(err, errConflict) }, func() error {
		var err error
		out, created, err = r.tryUpdate(ctx, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
		return err
	})
	if errors.Is(err, errConflict) {
		return nil, false, apierrors.NewConflict(sandboxResource, name, errors.New(conflictMessage))
	}
	if err != nil {
		return nil, false, err
	}
	return out, created, nil
}

const conflictMessage = "the object has been modified; please apply your changes to the latest version and try again"

func (r *REST) tryUpdate(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	bs := &controlv1alpha1.BatchSandbox{}
	key := client.ObjectKey{Namespace: genericapirequest.NamespaceValue(ctx), Name: name}
	if err := r.backend.Get(ctx, key, bs); err != nil {
		if apierrors.IsNotFound(err) && forceAllowCreate {
			return r.createOnUpdate(ctx, name, objInfo, createValidation, options)
		}
		// A PUT or a patch other than apply never creates a sandbox.
		return nil, false, translateError(err, name)
	}
	out, err := r.update(ctx, name, key, bs, objInfo, updateValidation, options)
	return out, false, err
}

// createOnUpdate creates the sandbox a server-side apply describes: the patch applied to an
// empty Sandbox, then created as a POST would create it.
func (r *REST) createOnUpdate(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	obj, err := objInfo.UpdatedObject(ctx, &sandboxv1alpha1.Sandbox{})
	if err != nil {
		return nil, false, err
	}
	sbx, ok := obj.(*sandboxv1alpha1.Sandbox)
	if !ok {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("not a Sandbox: %T", obj))
	}
	if sbx.Name == "" {
		sbx.Name = name
	}
	if sbx.Name != name {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", sbx.Name, name))
	}
	var co metav1.CreateOptions
	if options != nil {
		co.DryRun, co.FieldManager, co.FieldValidation = options.DryRun, options.FieldManager, options.FieldValidation
	}
	out, err := r.Create(ctx, sbx, createValidation, &co)
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

func (r *REST) update(ctx context.Context, name string, key client.ObjectKey, bs *controlv1alpha1.BatchSandbox, objInfo rest.UpdatedObjectInfo,
	updateValidation rest.ValidateObjectUpdateFunc, options *metav1.UpdateOptions) (*sandboxv1alpha1.Sandbox, error) {
	old := fromBatchSandbox(bs)
	obj, err := objInfo.UpdatedObject(ctx, old)
	if err != nil {
		return nil, err
	}
	sbx, ok := obj.(*sandboxv1alpha1.Sandbox)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a Sandbox: %T", obj))
	}
	sbx.Status = old.Status
	setDefaults(sbx)
	if v, ok := old.Annotations[controlv1alpha1.AnnotationPodSecurity]; ok {
		if _, set := sbx.Annotations[controlv1alpha1.AnnotationPodSecurity]; !set {
			// The server's record of the creator's rights: an update that leaves it out keeps it.
			if sbx.Annotations == nil {
				sbx.Annotations = map[string]string{}
			}
			sbx.Annotations[controlv1alpha1.AnnotationPodSecurity] = v
		}
	}
	switch sbx.ResourceVersion {
	case "":
		// An update without a resourceVersion is unconditional, as for built-in resources.
		sbx.ResourceVersion = old.ResourceVersion
	case old.ResourceVersion:
	default:
		return nil, apierrors.NewConflict(sandboxResource, name, errors.New(conflictMessage))
	}
	if errs := validateSandboxUpdate(sbx, old, r.limits); len(errs) > 0 {
		return nil, apierrors.NewInvalid(sandboxKind, name, errs)
	}
	if updateValidation != nil {
		if err := updateValidation(ctx, sbx, old); err != nil {
			return nil, err
		}
	}
	if r.admitter != nil && ptr.Deref(sbx.Spec.Replicas, 1) > ptr.Deref(old.Spec.Replicas, 1) {
		if err := ensureMayUseElevated(ctx, r.admitter.Authorizer, key.Namespace, name, old.Annotations, "adding replicas"); err != nil {
			return nil, err
		}
	}
	updated := bs.DeepCopy()
	updated.ResourceVersion = sbx.ResourceVersion
	updated.Labels = sbx.Labels
	updated.Annotations = sbx.Annotations
	storeManagedFields(updated, sbx.ManagedFields)
	updated.OwnerReferences = sbx.OwnerReferences
	updated.Finalizers = sbx.Finalizers
	if controllerutil.ContainsFinalizer(bs, controlv1alpha1.FinalizerPods) {
		// The controller's finalizer guards the pods' cleanup; a user edit does not drop it.
		controllerutil.AddFinalizer(updated, controlv1alpha1.FinalizerPods)
	}
	updated.Spec.Replicas = sbx.Spec.Replicas
	updated.Spec.AutoRenew = toBatchSandbox(sbx).Spec.AutoRenew
	// The outbound policy is mutable: the controller pushes a change to the pods at once.
	updated.Spec.NetworkPolicy = toControlNetworkPolicy(sbx.Spec.NetworkPolicy)
	if sbx.Spec.Paused != old.Spec.Paused {
		// Pausing and resuming make and delete the sandbox's pods, as using it does.
		if err := ensureMayUseElevated(ctx, r.admitter.authorizer(), key.Namespace, name, old.Annotations, "pausing or resuming"); err != nil {
			return nil, err
		}
		updated.Spec.Paused = sbx.Spec.Paused
		if r.limits.PauseStopsExpiry && !sbx.Spec.Paused {
			updated.Spec.ExpireTime = expiryAfterPause(bs, r.clock.Now())
		}
	}
	if err := tooLarge(updated); err != nil {
		return nil, err
	}
	if err := r.backend.Update(ctx, updated, updateOptions(options)); err != nil {
		if apierrors.IsConflict(err) {
			return nil, errConflict
		}
		return nil, translateError(err, name)
	}
	if options == nil || len(options.DryRun) == 0 {
		r.cache.wrote(updated.ResourceVersion)
	}
	return fromBatchSandbox(updated), nil
}

// Delete implements rest.GracefulDeleter. Preconditions, propagation policy and dry-run go to
// the backend as they came.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	bs := &controlv1alpha1.BatchSandbox{}
	key := client.ObjectKey{Namespace: genericapirequest.NamespaceValue(ctx), Name: name}
	if err := r.backend.Get(ctx, key, bs); err != nil {
		return nil, false, translateError(err, name)
	}
	sbx := fromBatchSandbox(bs)
	if deleteValidation != nil {
		if err := deleteValidation(ctx, sbx); err != nil {
			return nil, false, err
		}
	}
	deleted := func(bool) {}
	if options == nil || len(options.DryRun) == 0 {
		deleted = r.cache.deleting(bs)
	}
	if err := r.backend.Delete(ctx, bs, deleteOptions(options)); err != nil {
		deleted(false)
		return nil, false, translateError(err, name)
	}
	deleted(true)
	// The BatchSandbox is gone at once unless finalizers hold it; either way the caller gets
	// the sandbox as it was.
	return sbx, len(bs.Finalizers) == 0, nil
}

// deleteCollectionPageSize is how many sandboxes a deletecollection lists at a time, the
// kube-apiserver's page for the same (a variable for tests).
var deleteCollectionPageSize int64 = 10000

// DeleteCollection implements rest.CollectionDeleter, as the kube-apiserver's generic registry
// does: it lists the selected sandboxes a page at a time and deletes each as Delete would (with
// the same options, admission and dry-run), one after another (the kube-apiserver's default of
// one worker). The pages come from the kube-apiserver, not the cache: the cache ignores limit,
// and here a limit says how many to delete. A sandbox gone meanwhile is no error; any other
// error stops it, and the sandboxes deleted so far stay deleted. It returns the sandboxes it
// selected. Kubernetes' namespace controller uses it to empty a namespace that is being deleted.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	if listOptions == nil {
		listOptions = &metainternalversion.ListOptions{}
	} else {
		listOptions = listOptions.DeepCopy()
	}
	onePage := listOptions.Limit > 0
	if !onePage {
		listOptions.Limit = deleteCollectionPageSize
	}
	// all is the first page, with the later pages' items added: a list at its resourceVersion.
	var all *sandboxv1alpha1.SandboxList
	for {
		page, err := r.listBackend(ctx, listOptions)
		if err != nil {
			return nil, err
		}
		for i := range page.Items {
			if _, _, err := r.Delete(ctx, page.Items[i].Name, deleteValidation, options.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
				return nil, err
			}
		}
		if all == nil {
			all = page
		} else {
			all.Items = append(all.Items, page.Items...)
		}
		if onePage {
			return all, nil
		}
		if page.Continue == "" {
			all.Continue, all.RemainingItemCount = "", nil
			return all, nil
		}
		listOptions.Continue = page.Continue
		// A continued list is read at the first page's resourceVersion.
		listOptions.ResourceVersion, listOptions.ResourceVersionMatch = "", ""
	}
}

// createOptions and deleteOptions carry the caller's options to the backend. (controller-runtime
// overwrites the Raw options with its own fields, so each field is set on both.)
func createOptions(in *metav1.CreateOptions) *client.CreateOptions {
	if in == nil {
		return &client.CreateOptions{}
	}
	return &client.CreateOptions{DryRun: in.DryRun, FieldManager: in.FieldManager, Raw: in.DeepCopy()}
}

func updateOptions(in *metav1.UpdateOptions) *client.UpdateOptions {
	if in == nil {
		return &client.UpdateOptions{}
	}
	return &client.UpdateOptions{DryRun: in.DryRun, FieldManager: in.FieldManager, Raw: in.DeepCopy()}
}

func deleteOptions(in *metav1.DeleteOptions) *client.DeleteOptions {
	if in == nil {
		return &client.DeleteOptions{}
	}
	return &client.DeleteOptions{
		GracePeriodSeconds: in.GracePeriodSeconds,
		Preconditions:      in.Preconditions,
		PropagationPolicy:  in.PropagationPolicy,
		DryRun:             in.DryRun,
		Raw:                in.DeepCopy(),
	}
}

func listOptions(ctx context.Context, in *metainternalversion.ListOptions) *client.ListOptions {
	out := &client.ListOptions{Namespace: genericapirequest.NamespaceValue(ctx), Raw: &metav1.ListOptions{}}
	if in == nil {
		return out
	}
	out.LabelSelector = in.LabelSelector
	out.FieldSelector = in.FieldSelector
	out.Limit = in.Limit
	out.Continue = in.Continue
	out.Raw.ResourceVersion = in.ResourceVersion
	out.Raw.ResourceVersionMatch = in.ResourceVersionMatch
	out.Raw.AllowWatchBookmarks = in.AllowWatchBookmarks
	out.Raw.TimeoutSeconds = in.TimeoutSeconds
	out.Raw.SendInitialEvents = in.SendInitialEvents
	return out
}

// expiryAfterPause is the expiry of a sandbox resumed now, when a pause stops its clock
// (Limits.PauseStopsExpiry): moved forward by the time it spent Paused (since its Paused
// condition became True). A sandbox that was not Paused yet (still pausing) keeps it.
func expiryAfterPause(bs *controlv1alpha1.BatchSandbox, now time.Time) *metav1.Time {
	exp := bs.Spec.ExpireTime
	c := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionPaused)
	if exp == nil || bs.Status.Phase != controlv1alpha1.PhasePaused || c == nil || c.Status != metav1.ConditionTrue {
		return exp
	}
	paused := now.Sub(c.LastTransitionTime.Time)
	if paused <= 0 {
		return exp
	}
	return &metav1.Time{Time: exp.Add(paused).Truncate(time.Second)}
}
