// Package batchsandbox reconciles BatchSandboxes in direct mode: one pod per replica from the
// template, a per-sandbox execd token, and a status that says what a user can act on.
package batchsandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// Reconciler reconciles a BatchSandbox.
type Reconciler struct {
	Client   ctrl.Client
	Recorder events.EventRecorder
	// ExecdImage is the image whose /usr/local/bin/sandbox-execd the init container copies.
	ExecdImage string
	// Clock tells the time for expiry; nil: the real clock.
	Clock clock.PassiveClock
	// APIReader reads around the cache, which holds only what carries our labels; nil: Client.
	APIReader ctrl.Reader
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

var _ reconcile.Reconciler = &Reconciler{}

// Reconcile implements reconcile.Reconciler. It is idempotent: it creates what is missing,
// deletes what is surplus, and writes the status only when it changed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := log.FromContext(ctx)
	bs := &controlv1alpha1.BatchSandbox{}
	if err := r.Client.Get(ctx, req.NamespacedName, bs); err != nil {
		return reconcile.Result{}, ctrl.IgnoreNotFound(err)
	}
	if bs.DeletionTimestamp != nil {
		return reconcile.Result{}, r.finalize(ctx, bs)
	}
	// Expiry is driven by the deadline itself (RequeueAfter below), never by polling; after a
	// restart the initial list brings every BatchSandbox here again.
	var result reconcile.Result
	if bs.Spec.ExpireTime != nil {
		left := bs.Spec.ExpireTime.Sub(r.now())
		if left <= 0 {
			return reconcile.Result{}, r.expire(ctx, bs)
		}
		result.RequeueAfter = left
	}
	if !controllerutil.ContainsFinalizer(bs, controlv1alpha1.FinalizerPods) {
		// A merge patch replaces the whole list: the optimistic lock keeps others' finalizers.
		patch := ctrl.MergeFromWithOptions(bs.DeepCopy(), ctrl.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(bs, controlv1alpha1.FinalizerPods)
		if err := r.Client.Patch(ctx, bs, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}
	if bs.Spec.Template == nil || len(bs.Spec.Template.Spec.Containers) == 0 {
		// The CRD refuses this; an object written before that rule existed gets a condition.
		return result, r.updateStatus(ctx, bs, nil, &createFailure{reason: controlv1alpha1.ReasonPodCreateFailed, message: "spec.template has no containers"})
	}

	if err := r.ensureToken(ctx, bs); err != nil {
		return reconcile.Result{}, err
	}

	pods, err := r.listPods(ctx, bs)
	if err != nil {
		return reconcile.Result{}, err
	}
	desired := replicas(bs)
	byReplica := map[int32]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		idx, err := strconv.ParseInt(p.Labels[controlv1alpha1.LabelReplica], 10, 32)
		if err != nil || idx < 0 || int32(idx) >= desired || p.Name != podName(bs, int32(idx)) {
			// Surplus after a scale-down, or a pod whose label was tampered with.
			if p.DeletionTimestamp == nil {
				logger.V(4).Info("deleting surplus pod", "pod", ctrl.ObjectKeyFromObject(p))
				if err := r.Client.Delete(ctx, p); ctrl.IgnoreNotFound(err) != nil {
					return reconcile.Result{}, fmt.Errorf("delete surplus pod: %w", err)
				}
			}
			continue
		}
		byReplica[int32(idx)] = p
	}

	var failure *createFailure
	for i := int32(0); i < desired; i++ {
		if _, ok := byReplica[i]; ok {
			continue
		}
		pod := buildPod(bs, i, r.ExecdImage)
		err := r.Client.Create(ctx, pod)
		switch {
		case err == nil:
			logger.V(4).Info("created pod", "pod", ctrl.ObjectKeyFromObject(pod), "replica", i)
			byReplica[i] = pod
		case apierrors.IsAlreadyExists(err):
			// Our cache has not seen it yet; the watch will bring it.
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err):
			// The template cannot make a pod (or a quota/policy refuses it): retrying will not
			// help until the user changes something, which brings a new event.
			failure = &createFailure{reason: controlv1alpha1.ReasonPodCreateFailed, message: err.Error()}
			r.Recorder.Eventf(bs, nil, corev1.EventTypeWarning, controlv1alpha1.ReasonPodCreateFailed, "CreatePod", "replica %d: %v", i, err)
		default:
			return reconcile.Result{}, fmt.Errorf("create pod for replica %d: %w", i, err)
		}
	}
	return result, r.updateStatus(ctx, bs, byReplica, failure)
}

// expire marks the BatchSandbox Expired and deletes it; the finalizer then removes its pods.
func (r *Reconciler) expire(ctx context.Context, bs *controlv1alpha1.BatchSandbox) error {
	log.FromContext(ctx).Info("sandbox expired", "expireTime", bs.Spec.ExpireTime)
	if bs.Status.Phase != controlv1alpha1.PhaseExpired {
		patch := ctrl.MergeFrom(bs.DeepCopy())
		bs.Status.Phase = controlv1alpha1.PhaseExpired
		meta.SetStatusCondition(&bs.Status.Conditions, metav1.Condition{
			Type: controlv1alpha1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: bs.Generation,
			Reason: controlv1alpha1.ReasonExpired, Message: "expired at " + bs.Spec.ExpireTime.UTC().Format(time.RFC3339),
		})
		if err := r.Client.Status().Patch(ctx, bs, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("mark expired: %w", err)
		}
		r.Recorder.Eventf(bs, nil, corev1.EventTypeNormal, controlv1alpha1.ReasonExpired, "Delete",
			"expired at %s", bs.Spec.ExpireTime.UTC().Format(time.RFC3339))
	}
	// The precondition makes sure a renewal that raced with this decision wins.
	err := r.Client.Delete(ctx, bs, ctrl.Preconditions{UID: &bs.UID, ResourceVersion: &bs.ResourceVersion})
	if apierrors.IsConflict(err) {
		return nil // changed meanwhile (renewed?): the update brings it back here
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete expired sandbox: %w", err)
	}
	return nil
}

// finalize deletes the pods of a BatchSandbox being deleted and lets it go when they are gone.
// Pod deletions arrive as events, so it is called again until then.
func (r *Reconciler) finalize(ctx context.Context, bs *controlv1alpha1.BatchSandbox) error {
	if !controllerutil.ContainsFinalizer(bs, controlv1alpha1.FinalizerPods) {
		return nil
	}
	pods, err := r.listPods(ctx, bs)
	if err != nil {
		return err
	}
	for i := range pods {
		if pods[i].DeletionTimestamp == nil {
			if err := r.Client.Delete(ctx, &pods[i]); ctrl.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete pod: %w", err)
			}
		}
	}
	if len(pods) > 0 {
		log.FromContext(ctx).V(4).Info("waiting for pods to go", "pods", len(pods))
		return nil
	}
	patch := ctrl.MergeFromWithOptions(bs.DeepCopy(), ctrl.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(bs, controlv1alpha1.FinalizerPods)
	if err := r.Client.Patch(ctx, bs, patch); ctrl.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	return nil
}

type createFailure struct {
	reason, message string
}

func replicas(bs *controlv1alpha1.BatchSandbox) int32 {
	if bs.Spec.Replicas == nil {
		return 1
	}
	return *bs.Spec.Replicas
}

func (r *Reconciler) listPods(ctx context.Context, bs *controlv1alpha1.BatchSandbox) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, ctrl.InNamespace(bs.Namespace),
		ctrl.MatchingLabels{controlv1alpha1.LabelBatchSandbox: bs.Name}); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	// Only pods this BatchSandbox controls: a pod of an earlier BatchSandbox of the same name
	// that is still terminating is not ours.
	out := list.Items[:0]
	for _, p := range list.Items {
		if metav1.IsControlledBy(&p, bs) {
			out = append(out, p)
		}
	}
	return out, nil
}

// ensureToken creates the Secret that holds the token the apiserver presents to execd.
func (r *Reconciler) ensureToken(ctx context.Context, bs *controlv1alpha1.BatchSandbox) error {
	name := controlv1alpha1.TokenSecretName(bs.Name)
	existing := &corev1.Secret{}
	err := r.Client.Get(ctx, ctrl.ObjectKey{Namespace: bs.Namespace, Name: name}, existing)
	if err == nil {
		if !metav1.IsControlledBy(existing, bs) {
			return fmt.Errorf("secret %s/%s exists and does not belong to this sandbox", bs.Namespace, name)
		}
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get token secret: %w", err)
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return fmt.Errorf("generate token: %w", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: bs.Namespace,
			Labels:    map[string]string{controlv1alpha1.LabelBatchSandbox: bs.Name},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{controlv1alpha1.ExecdTokenKey: []byte(hex.EncodeToString(buf))},
	}
	if err := controllerutil.SetControllerReference(bs, secret, r.Client.Scheme()); err != nil {
		return err
	}
	err = r.Client.Create(ctx, secret)
	if apierrors.IsAlreadyExists(err) {
		// The cache holds only Secrets labelled as ours: one by that name without the label
		// is invisible to it. Read it from the API and refuse to use a token we did not make.
		reader := r.APIReader
		if reader == nil {
			reader = r.Client
		}
		if err := reader.Get(ctx, ctrl.ObjectKey{Namespace: bs.Namespace, Name: name}, existing); err != nil {
			return fmt.Errorf("get token secret: %w", err)
		}
		if !metav1.IsControlledBy(existing, bs) {
			r.Recorder.Eventf(bs, nil, corev1.EventTypeWarning, "TokenConflict", "CreateToken",
				"secret %s exists and does not belong to this sandbox; delete or rename it", name)
			return fmt.Errorf("secret %s/%s exists and does not belong to this sandbox", bs.Namespace, name)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("create token secret: %w", err)
	}
	return nil
}

// updateStatus computes the status from the pods and writes it if it changed.
func (r *Reconciler) updateStatus(ctx context.Context, bs *controlv1alpha1.BatchSandbox, byReplica map[int32]*corev1.Pod, failure *createFailure) error {
	status := controlv1alpha1.BatchSandboxStatus{
		ObservedGeneration: bs.Generation,
		Conditions:         append([]metav1.Condition(nil), bs.Status.Conditions...),
	}
	idx := make([]int32, 0, len(byReplica))
	for i := range byReplica {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })

	var podProblem *createFailure
	for _, i := range idx {
		p := byReplica[i]
		ps := controlv1alpha1.SandboxPodStatus{Replica: i, Name: p.Name, IP: p.Status.PodIP, NodeName: p.Spec.NodeName, Ready: podReady(p)}
		if cs := sandboxContainerStatus(p); cs != nil {
			ps.RuntimeID = cs.ContainerID
		}
		status.Pods = append(status.Pods, ps)
		status.Replicas++
		if ps.Ready {
			status.Ready++
		}
		if podProblem == nil {
			podProblem = podFailure(p)
		}
	}

	desired := replicas(bs)
	cond := metav1.Condition{Type: controlv1alpha1.ConditionReady, ObservedGeneration: bs.Generation}
	switch {
	case failure != nil:
		status.Phase = controlv1alpha1.PhaseFailed
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, failure.reason, failure.message
	case podProblem != nil:
		status.Phase = controlv1alpha1.PhaseFailed
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, podProblem.reason, podProblem.message
	case status.Ready == desired:
		status.Phase = controlv1alpha1.PhaseRunning
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, controlv1alpha1.ReasonPodsReady, fmt.Sprintf("%d/%d replicas ready", status.Ready, desired)
	default:
		status.Phase = controlv1alpha1.PhasePending
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, controlv1alpha1.ReasonPodsNotReady, fmt.Sprintf("%d/%d replicas ready", status.Ready, desired)
	}
	meta.SetStatusCondition(&status.Conditions, cond)

	if equality.Semantic.DeepEqual(bs.Status, status) {
		return nil
	}
	if prev := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionReady); cond.Status == metav1.ConditionTrue &&
		(prev == nil || prev.Status != metav1.ConditionTrue) {
		r.Recorder.Eventf(bs, nil, corev1.EventTypeNormal, controlv1alpha1.ReasonPodsReady, "Ready", "%d/%d replicas ready", status.Ready, desired)
	}
	patch := ctrl.MergeFrom(bs.DeepCopy())
	bs.Status = status
	if err := r.Client.Status().Patch(ctx, bs, patch); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func sandboxContainerStatus(p *corev1.Pod) *corev1.ContainerStatus {
	if len(p.Spec.Containers) == 0 {
		return nil
	}
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == p.Spec.Containers[0].Name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// imagePullReasons are the waiting reasons of a container whose image cannot be had.
var imagePullReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
}

// podFailure says why a pod cannot run, in terms a user can act on, or nil.
func podFailure(p *corev1.Pod) *createFailure {
	if p.Status.Phase == corev1.PodFailed {
		return &createFailure{reason: controlv1alpha1.ReasonPodFailed, message: fmt.Sprintf("pod %s failed: %s %s", p.Name, p.Status.Reason, p.Status.Message)}
	}
	statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && imagePullReasons[w.Reason] {
			return &createFailure{reason: controlv1alpha1.ReasonImagePullFailed,
				message: fmt.Sprintf("pod %s container %s: %s: %s", p.Name, cs.Name, w.Reason, w.Message)}
		}
	}
	return nil
}
