// Package sandboxevents names the Sandbox in the Events the controller records about a
// sandbox. Users see Sandboxes (sandbox.kube-sandbox.io, served by sandbox-apiserver as a view
// of the BatchSandbox of the same namespace, name and UID), never BatchSandboxes: an Event
// regarding the BatchSandbox is one that `kubectl describe sandbox` and
// `kubectl events --for sandbox/NAME` do not show.
//
// Cost: the events recorder (k8s.io/client-go/tools/events) aggregates. Events with the same
// regarding reference (resourceVersion included), reason, action and type form one series (the
// events API's EventSeries): the first is created, the first repeat patches it, later repeats are
// counted in memory and written when the series ends (6 minutes without one) or every 30
// minutes. The Sandbox's reference groups exactly as the BatchSandbox's did, so retargeting
// adds no writes; only a new Event would.
package sandboxevents

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// SandboxGroupVersionKind is the kind sandbox-apiserver serves (apiserver/apis/sandbox/v1alpha1,
// which the controller does not import).
var SandboxGroupVersionKind = schema.GroupVersionKind{Group: "sandbox.kube-sandbox.io", Version: "v1alpha1", Kind: "Sandbox"}

// SandboxRef is the object to give an EventRecorder as the regarding object of an Event about
// the sandbox bs is: the Sandbox of bs's namespace, name, UID and resourceVersion. Only its
// reference is used (reference.GetReference takes the kind from its TypeMeta, so no scheme
// needs to know Sandboxes).
func SandboxRef(bs *controlv1alpha1.BatchSandbox) runtime.Object {
	ref := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: bs.Name, Namespace: bs.Namespace, UID: bs.UID, ResourceVersion: bs.ResourceVersion,
	}}
	ref.SetGroupVersionKind(SandboxGroupVersionKind)
	return ref
}
