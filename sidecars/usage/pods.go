package usage

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// PodOf is the Pod that obj is for the sampler; false for a pod that serves no sandbox (an
// idle pool pod: no figures, no series, no reads), or that has ended (its cgroup is gone).
func PodOf(obj *corev1.Pod) (Pod, bool) {
	sandbox := obj.Labels[controlv1alpha1.LabelBatchSandbox]
	if sandbox == "" || obj.Status.Phase == corev1.PodSucceeded || obj.Status.Phase == corev1.PodFailed {
		return Pod{}, false
	}
	replica, err := strconv.ParseInt(obj.Labels[controlv1alpha1.LabelReplica], 10, 32)
	if err != nil || replica < 0 {
		// The controller writes both labels in one update: a pod with one alone is no
		// sandbox's yet (or any more).
		klog.V(4).InfoS("A sandbox pod without a replica index; not sampled", "pod", klog.KObj(obj),
			"replica", obj.Labels[controlv1alpha1.LabelReplica])
		return Pod{}, false
	}
	return Pod{UID: string(obj.UID), Namespace: obj.Namespace, Name: obj.Name, Sandbox: sandbox, Replica: int32(replica),
		Containers: containerIDs(obj)}, true
}

// containerIDs are the containerd IDs of the pod's containers, from its status
// ("containerd://ID"), comma-separated in the status's order. A container of another runtime,
// or one not created yet, has none: then all of them are left to a list (see Pod.Containers).
func containerIDs(obj *corev1.Pod) string {
	var ids []string
	for _, statuses := range [][]corev1.ContainerStatus{obj.Status.InitContainerStatuses, obj.Status.ContainerStatuses} {
		for _, c := range statuses {
			id, ok := strings.CutPrefix(c.ContainerID, "containerd://")
			if !ok || id == "" {
				return ""
			}
			ids = append(ids, id)
		}
	}
	return strings.Join(ids, ",")
}

// PodHandler feeds the sampler from an informer of the node's sandbox pods (the egress
// enforcer's: egress.Node.AddPodHandler): a pod that serves a sandbox is sampled, and one that
// does not (any more), or is gone, is forgotten.
func (s *Sampler) PodHandler() cache.ResourceEventHandler {
	observe := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		if pod, ok := PodOf(p); ok {
			s.Observe(pod)
		} else {
			s.Forget(string(p.UID))
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				s.Forget(string(p.UID))
			}
		},
	}
}
