package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Labels and annotations of pool pods. The allocation of a pool pod is recorded on the pod
// itself: LabelBatchSandbox (and LabelReplica) written by one update with a resourceVersion
// precondition, so that two sandboxes can never both win the same pod.
const (
	// LabelPool names the Pool a pod was made by. It stays on the pod after allocation, so a
	// pool counts the pods it gave away.
	LabelPool = "control.kube-sandbox.io/pool"
	// LabelPoolRevision is the pool's template revision the pod was made from.
	LabelPoolRevision = "control.kube-sandbox.io/pool-revision"
	// LabelPodSecurity is on a pool pod made while its pool had podSecurity: Namespace, with
	// that value: such a pod goes only to a sandbox admitted for it (AnnotationPodSecurity),
	// whatever the pool says later.
	LabelPodSecurity = "control.kube-sandbox.io/pod-security"
	// AnnotationAllocatedAt is when the pod was allocated (RFC 3339). The pool paces its refill
	// by the latest one, so that refilling never competes with a burst of allocations.
	AnnotationAllocatedAt = "control.kube-sandbox.io/allocated-at"

	// LabelManagedBy is on every pod the controller makes; the controller caches only those.
	// Its value is ManagedByController.
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	ManagedByController = "sandbox-controller"
)

// Condition types and reasons of a Pool.
const (
	// PoolConditionReady is True when the pool holds at least bufferMin available pods (or as
	// many as poolMax allows).
	PoolConditionReady = "Ready"
	// PoolConditionProgressing is True while idle pods of an older revision are replaced.
	PoolConditionProgressing = "Progressing"

	ReasonBufferFull      = "BufferFull"
	ReasonBufferFilling   = "BufferFilling"
	ReasonPoolMaxReached  = "PoolMaxReached"
	ReasonRollingUpdate   = "RollingUpdate"
	ReasonUpToDate        = "UpToDate"
	ReasonRefillPaced     = "RefillPaced"
	ReasonPoolPodFailed   = "PodFailed"
	ReasonInvalidTemplate = "InvalidTemplate"
	// ReasonTemplateRefused: the template needs more than podSecurity allows (a pod security
	// level, a service account, a Secret...); the pool makes no pods from it.
	ReasonTemplateRefused = "TemplateRefused"
)

// PodSecurity says which rules a Pool's template is held to.
// +kubebuilder:validation:Enum=Platform;Namespace
type PodSecurity string

const (
	// PodSecurityPlatform: the platform's pod security level (sandbox-controller's
	// --pod-security-level, or the namespace's enforce level where stricter), and nothing that
	// reaches into the namespace (service accounts, tokens, Secrets, ConfigMaps, volumes). Its
	// pods are no more than a sandbox, whoever wrote the Pool.
	PodSecurityPlatform PodSecurity = "Platform"
	// PodSecurityNamespace: the namespace's enforce level only, as any pod there. Setting it,
	// or changing the template while it is set, needs the right to create pods in the
	// namespace (the kube-sandbox-pools ValidatingAdmissionPolicy checks it), and so does
	// creating a sandbox from the pool (sandbox-apiserver checks it).
	PodSecurityNamespace PodSecurity = "Namespace"
)

// RecycleStrategy says what happens to a pod its sandbox no longer needs.
// +kubebuilder:validation:Enum=Delete
type RecycleStrategy string

const (
	// RecycleDelete deletes the pod. A pod that ran a sandbox's code is never given to another
	// sandbox: it may hold that code's files, processes and secrets.
	RecycleDelete RecycleStrategy = "Delete"
)

// CapacitySpec bounds the pool. The idle buffer (pods ready for allocation, plus those
// starting) is kept between bufferMin and bufferMax, and the whole pool (idle and allocated)
// between poolMin and poolMax.
// +kubebuilder:validation:XValidation:rule="self.bufferMin <= self.bufferMax",message="bufferMin must not exceed bufferMax"
// +kubebuilder:validation:XValidation:rule="self.poolMin <= self.poolMax",message="poolMin must not exceed poolMax"
// +kubebuilder:validation:XValidation:rule="self.bufferMin <= self.poolMax",message="bufferMin must not exceed poolMax"
type CapacitySpec struct {
	// bufferMin is the number of idle pods the pool keeps ready for allocation: below it, the
	// pool creates pods.
	// +kubebuilder:validation:Minimum=0
	BufferMin int32 `json:"bufferMin"`
	// bufferMax is the most idle pods the pool keeps: above it, the pool deletes idle pods (never
	// while others are still starting).
	// +kubebuilder:validation:Minimum=0
	BufferMax int32 `json:"bufferMax"`
	// poolMin is the fewest pods, idle and allocated, the pool holds.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:default=0
	// +optional
	PoolMin int32 `json:"poolMin"`
	// poolMax is the most pods, idle and allocated, the pool holds. Sandboxes that find no idle
	// pod make the pool grow up to it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	PoolMax int32 `json:"poolMax"`
}

// PoolUpdateStrategy bounds how a template change rolls through the idle pods.
type PoolUpdateStrategy struct {
	// maxUnavailable is how many idle pods may be unavailable at once while idle pods of older
	// revisions are replaced: a number, or a percentage of bufferMax (rounded up). At least 1.
	// Allocated pods are never replaced.
	// +kubebuilder:default="25%"
	// +kubebuilder:validation:XIntOrString
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// PoolSpec is the desired state of a Pool.
// +kubebuilder:validation:XValidation:rule="has(self.template.spec) && size(self.template.spec.containers) > 0",message="template.spec.containers: the first container is the sandbox container"
type PoolSpec struct {
	// template is the pod template of the pool's pods. Its first container is the sandbox
	// container, run under sandbox-execd; a sandbox's entrypoint and env reach it when the pod
	// is allocated. Changing it rolls the idle pods.
	Template corev1.PodTemplateSpec `json:"template"`
	// capacitySpec bounds the idle buffer and the whole pool.
	CapacitySpec CapacitySpec `json:"capacitySpec"`
	// updateStrategy bounds the replacement of idle pods after a template change.
	// +optional
	UpdateStrategy PoolUpdateStrategy `json:"updateStrategy,omitempty"`
	// recycleStrategy says what happens to a pod its sandbox released. Delete, the default and
	// the only strategy, deletes it.
	// +kubebuilder:default=Delete
	// +optional
	RecycleStrategy RecycleStrategy `json:"recycleStrategy,omitempty"`
	// podSecurity: Platform (the default) holds the template to the platform's pod security
	// level and refuses what reaches into the namespace (service accounts, tokens, Secrets,
	// ConfigMaps, volumes), so that the pool's pods are no more than a sandbox whoever wrote it;
	// a template that needs more gets the condition Ready=False, TemplateRefused, and no pods.
	// Namespace holds it to the namespace's enforce level only; only a user who may create pods
	// in the namespace may set it or change the template under it, and only such users may
	// create sandboxes from the pool.
	// +kubebuilder:default=Platform
	// +optional
	PodSecurity PodSecurity `json:"podSecurity,omitempty"`
	// networkPolicy is the outbound policy of the pool's sandboxes that set none of their
	// own. Idle pods deny all outbound traffic; a sandbox's policy is applied when it gets
	// its pod, before its entrypoint starts. Changing it does not roll the pods: it reaches
	// the sandboxes that use it.
	// +optional
	NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`
}

// PoolStatus is the observed state of a Pool.
type PoolStatus struct {
	// observedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// revision is the hash of the current template; pods carry it in the
	// control.kube-sandbox.io/pool-revision label.
	// +optional
	Revision string `json:"revision,omitempty"`
	// total is the number of pods of the pool, idle and allocated (not those being deleted).
	// +kubebuilder:default=0
	// +optional
	Total int32 `json:"total"`
	// allocated is the number of pods given to sandboxes.
	// +kubebuilder:default=0
	// +optional
	Allocated int32 `json:"allocated"`
	// available is the number of idle pods ready for allocation.
	// +kubebuilder:default=0
	// +optional
	Available int32 `json:"available"`
	// updated is the number of idle pods of the current revision.
	// +kubebuilder:default=0
	// +optional
	Updated int32 `json:"updated"`
	// conditions: Ready (the buffer is full) and Progressing (a rolling update).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Pool keeps warm pods from a template, ready to be allocated to sandboxes by one API write.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbxpool,categories=kube-sandbox
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.available`
// +kubebuilder:printcolumn:name="Allocated",type=integer,JSONPath=`.status.allocated`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.total`
// +kubebuilder:printcolumn:name="Buffer",type=integer,JSONPath=`.spec.capacitySpec.bufferMin`,priority=1
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.capacitySpec.poolMax`
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updated`,priority=1
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.revision`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Pool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PoolSpec   `json:"spec,omitempty"`
	Status PoolStatus `json:"status,omitempty"`
}

// PoolList is a list of Pools.
//
// +kubebuilder:object:root=true
type PoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Pool `json:"items"`
}
