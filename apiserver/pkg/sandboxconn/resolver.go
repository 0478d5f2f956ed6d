// Package sandboxconn finds the execd of a sandbox's replica for the streaming subresources,
// and holds the credentials sandbox-apiserver presents to it.
package sandboxconn

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// Endpoint is the execd of one replica of a sandbox.
type Endpoint struct {
	// Target is its pod: where it listens, and the UID its certificate must name.
	Target execdclient.Target
	// Pod is the pod's name, for messages.
	Pod string
	// Sandbox is the BatchSandbox as it was read, for auto-renew and for the sandbox UID execd
	// must belong to.
	Sandbox *controlv1alpha1.BatchSandbox
}

// Resolver finds the execd endpoint of a sandbox replica.
type Resolver interface {
	Resolve(ctx context.Context, namespace, name string, replica int32) (*Endpoint, error)
}

// KubeResolver reads the BatchSandbox and its pod from the kube-apiserver.
type KubeResolver struct {
	Client client.Reader
}

var _ Resolver = &KubeResolver{}

var sandboxResource = sandboxv1alpha1.Resource("sandboxes")

// Resolve implements Resolver. Its errors are API errors a user can act on: 404 for a missing
// sandbox, 400 for a replica that does not exist, 503 for one that is not ready yet.
func (r *KubeResolver) Resolve(ctx context.Context, namespace, name string, replica int32) (*Endpoint, error) {
	bs := &controlv1alpha1.BatchSandbox{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, bs); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, apierrors.NewNotFound(sandboxResource, name)
		}
		return nil, apierrors.NewInternalError(fmt.Errorf("get batchsandbox: %w", err))
	}
	if bs.DeletionTimestamp != nil {
		return nil, apierrors.NewConflict(sandboxResource, name, fmt.Errorf("the sandbox is being deleted"))
	}
	desired := int32(1)
	if bs.Spec.Replicas != nil {
		desired = *bs.Spec.Replicas
	}
	if replica < 0 || replica >= desired {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("sandbox %q has %d replica(s); replica %d does not exist", name, desired, replica))
	}
	notReady := func(why string) error {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("sandbox %q is not ready: %s", name, why))
	}

	podName, podReadyInStatus := "", false
	for _, p := range bs.Status.Pods {
		if p.Replica == replica {
			podName, podReadyInStatus = p.Name, p.Ready
		}
	}
	if podName == "" && bs.Spec.Paused {
		// No retry helps: only a resume brings a pod back.
		return nil, apierrors.NewConflict(sandboxResource, name, fmt.Errorf("the sandbox is paused (phase %s): resume it (spec.paused false) to use it", phaseOf(bs)))
	}
	if podName == "" {
		return nil, notReady(fmt.Sprintf("replica %d has no pod yet (phase %s)", replica, phaseOf(bs)))
	}
	if !podReadyInStatus {
		// The controller records a replica ready once its execd serves the pod's certificate
		// (and, for a pool pod, belongs to the sandbox).
		return nil, notReady(fmt.Sprintf("pod %s of replica %d is being set up (its execd is not certified or allocated yet)", podName, replica))
	}
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: podName}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, notReady(fmt.Sprintf("pod %s of replica %d is gone and is being replaced", podName, replica))
		}
		return nil, apierrors.NewInternalError(fmt.Errorf("get pod: %w", err))
	}
	// The pod must still belong to this sandbox: its label is the record of ownership.
	if pod.Labels[controlv1alpha1.LabelBatchSandbox] != name {
		return nil, notReady(fmt.Sprintf("pod %s no longer belongs to the sandbox", podName))
	}
	if !metav1.IsControlledBy(pod, bs) {
		return nil, notReady(fmt.Sprintf("pod %s no longer belongs to the sandbox", podName))
	}
	if pod.Status.PodIP == "" || !podReady(pod) {
		return nil, notReady(fmt.Sprintf("pod %s of replica %d is %s and not ready", podName, replica, pod.Status.Phase))
	}
	return &Endpoint{
		Target:  execdclient.Target{PodIP: pod.Status.PodIP, PodUID: string(pod.UID)},
		Pod:     pod.Name,
		Sandbox: bs,
	}, nil
}

func phaseOf(bs *controlv1alpha1.BatchSandbox) string {
	if bs.Status.Phase == "" {
		return string(controlv1alpha1.PhasePending)
	}
	return string(bs.Status.Phase)
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// CachedResolver finds endpoints in informer caches (the BatchSandboxes, and the pods that
// belong to sandboxes), as metrics-server and kueue's visibility server answer from theirs:
// an exec, a files or a proxy request then costs the kube-apiserver nothing. Only when the
// cache does not give a usable endpoint (a sandbox or a pod made a moment ago, a pod that has
// just become ready, or one that is really missing) does it read both from the kube-apiserver,
// a consistent read, and answer from that.
type CachedResolver struct {
	Cache  client.Reader
	Direct client.Reader
}

var _ Resolver = &CachedResolver{}

// Resolve implements Resolver.
func (r *CachedResolver) Resolve(ctx context.Context, namespace, name string, replica int32) (*Endpoint, error) {
	if ep, err := (&KubeResolver{Client: r.Cache}).Resolve(ctx, namespace, name, replica); err == nil {
		return ep, nil
	}
	return (&KubeResolver{Client: r.Direct}).Resolve(ctx, namespace, name, replica)
}
