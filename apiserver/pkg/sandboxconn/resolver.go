// Package sandboxconn finds where a sandbox's execd listens and with which token, for the
// streaming subresources.
package sandboxconn

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// Endpoint is the execd of one replica of a sandbox.
type Endpoint struct {
	// Host is "IP:port" of execd in the pod.
	Host string
	// Token authenticates this server to that execd.
	Token string
	// Pod is the pod's name, for messages.
	Pod string
	// Sandbox is the BatchSandbox as it was read, for auto-renew.
	Sandbox *controlv1alpha1.BatchSandbox
}

// URL returns the execd URL for path with the query q; the token travels in the query because
// the WebSocket-to-SPDY translation of the apiserver library gives us no way to set a header
// on its upstream request. The hop is direct from this server to the pod, and execd never
// logs it.
func (e *Endpoint) URL(path string, query url.Values) *url.URL {
	q := url.Values{}
	for k, v := range query {
		q[k] = append([]string(nil), v...)
	}
	q.Set("token", e.Token)
	return &url.URL{Scheme: "http", Host: e.Host, Path: path, RawQuery: q.Encode()}
}

// Resolver finds the execd endpoint of a sandbox replica.
type Resolver interface {
	Resolve(ctx context.Context, namespace, name string, replica int32) (*Endpoint, error)
}

// KubeResolver reads the BatchSandbox, its pod and its token Secret from the kube-apiserver.
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
	if podName == "" {
		return nil, notReady(fmt.Sprintf("replica %d has no pod yet (phase %s)", replica, phaseOf(bs)))
	}
	if bs.Spec.PoolRef != nil && !podReadyInStatus {
		// A pool pod takes the sandbox's token only when the controller allocated it through
		// execd; the status says when that happened.
		return nil, notReady(fmt.Sprintf("pod %s of replica %d is being allocated", podName, replica))
	}
	// The pod and the token are read at once: a sandbox is reached one round trip sooner.
	pod, secret := &corev1.Pod{}, &corev1.Secret{}
	var podErr, secretErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		secretErr = r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: controlv1alpha1.TokenSecretName(name)}, secret)
	})
	podErr = r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: podName}, pod)
	wg.Wait()
	if err := podErr; err != nil {
		if apierrors.IsNotFound(err) {
			return nil, notReady(fmt.Sprintf("pod %s of replica %d is gone and is being replaced", podName, replica))
		}
		return nil, apierrors.NewInternalError(fmt.Errorf("get pod: %w", err))
	}
	// The pod must still belong to this sandbox: its label is the record of ownership.
	if pod.Labels[controlv1alpha1.LabelBatchSandbox] != name {
		return nil, notReady(fmt.Sprintf("pod %s no longer belongs to the sandbox", podName))
	}
	if pod.Status.PodIP == "" || !podReady(pod) {
		return nil, notReady(fmt.Sprintf("pod %s of replica %d is %s and not ready", podName, replica, pod.Status.Phase))
	}
	if err := secretErr; err != nil {
		if apierrors.IsNotFound(err) {
			return nil, notReady("its execd token is missing")
		}
		return nil, apierrors.NewInternalError(fmt.Errorf("get token secret: %w", err))
	}
	token := string(secret.Data[controlv1alpha1.ExecdTokenKey])
	if token == "" {
		return nil, notReady("its execd token is empty")
	}
	return &Endpoint{
		Host:    net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(controlv1alpha1.ExecdPort)),
		Token:   token,
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
