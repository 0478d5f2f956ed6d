package sandbox

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

var sandboxTypeMeta = metav1.TypeMeta{APIVersion: "sandbox.kube-sandbox.io/v1alpha1", Kind: "Sandbox"}

func TestToBatchSandbox(t *testing.T) {
	sbx := validSandbox()
	sbx.GenerateName = "demo-"
	sbx.Annotations = map[string]string{"note": "x"}
	sbx.Finalizers = []string{"example.com/keep"}
	sbx.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "owner-uid"}}
	sbx.ResourceVersion = "7"
	// System fields a user cannot set: none of them may reach the BatchSandbox.
	sbx.UID = "user-uid"
	sbx.Generation = 4
	sbx.CreationTimestamp = metav1.NewTime(time.Unix(1700000000, 0))
	// The Sandbox's managers are kept in an annotation (the BatchSandbox's managedFields are
	// the CRD's writers'); status managers are the controller's, on the BatchSandbox.
	sbx.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}, {Manager: "sandbox-controller", Subresource: "status"}}
	sbx.Status = sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseRunning, Ready: 1}

	want := &controlv1alpha1.BatchSandbox{
		ObjectMeta: metav1.ObjectMeta{
			Name:            "demo",
			GenerateName:    "demo-",
			Namespace:       "ns",
			Labels:          map[string]string{"team": "a"},
			Annotations:     map[string]string{"note": "x", AnnotationManagedFields: `[{"manager":"kubectl"}]`},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "owner-uid"}},
			Finalizers:      []string{"example.com/keep"},
			ResourceVersion: "7",
		},
		Spec: controlv1alpha1.BatchSandboxSpec{
			Replicas: ptr.To[int32](1),
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: "python:3.11"}},
			}},
			Entrypoint: []string{"python3", "-m", "http.server"},
			Env:        []corev1.EnvVar{{Name: "GREETING", Value: "hi"}},
		},
	}
	if diff := cmp.Diff(want, toBatchSandbox(sbx)); diff != "" {
		t.Errorf("toBatchSandbox() (-want +got):\n%s", diff)
	}
}

func TestToBatchSandboxDoesNotAlias(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*controlv1alpha1.BatchSandbox)
	}{
		{name: "labels", mutate: func(bs *controlv1alpha1.BatchSandbox) { bs.Labels["team"] = "b" }},
		{name: "annotations", mutate: func(bs *controlv1alpha1.BatchSandbox) { bs.Annotations["note"] = "y" }},
		{name: "finalizers", mutate: func(bs *controlv1alpha1.BatchSandbox) { bs.Finalizers[0] = "changed" }},
		{name: "owner references", mutate: func(bs *controlv1alpha1.BatchSandbox) { bs.OwnerReferences[0].Name = "changed" }},
		{name: "replicas", mutate: func(bs *controlv1alpha1.BatchSandbox) { *bs.Spec.Replicas = 9 }},
		{name: "template", mutate: func(bs *controlv1alpha1.BatchSandbox) { bs.Spec.Template.Spec.Containers[0].Image = "changed" }},
		{name: "entrypoint", mutate: func(bs *controlv1alpha1.BatchSandbox) { bs.Spec.Entrypoint[0] = "changed" }},
		{name: "env", mutate: func(bs *controlv1alpha1.BatchSandbox) { bs.Spec.Env[0].Value = "changed" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sbx := validSandbox()
			sbx.Annotations = map[string]string{"note": "x"}
			sbx.Finalizers = []string{"example.com/keep"}
			sbx.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "owner-uid"}}
			before := sbx.DeepCopy()
			tt.mutate(toBatchSandbox(sbx))
			if diff := cmp.Diff(before, sbx); diff != "" {
				t.Errorf("mutating the BatchSandbox changed the Sandbox (-before +after):\n%s", diff)
			}
		})
	}
}

func TestSpecRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		spec sandboxv1alpha1.SandboxSpec
	}{
		{name: "full", spec: validSandbox().Spec},
		{name: "empty", spec: sandboxv1alpha1.SandboxSpec{}},
		{
			name: "rich template",
			spec: sandboxv1alpha1.SandboxSpec{
				Replicas: ptr.To[int32](3),
				Template: &corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
					Spec: corev1.PodSpec{
						InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
						Containers:     []corev1.Container{{Name: "main", Image: "python:3.11", Args: []string{"-u"}}},
						Volumes:        []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
					},
				},
				Env: []corev1.EnvVar{{Name: "FROM_SECRET", ValueFrom: &corev1.EnvVarSource{
					SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"},
				}}},
			},
		},
		{
			name: "tasks",
			spec: sandboxv1alpha1.SandboxSpec{
				Replicas:     ptr.To[int32](2),
				Template:     &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "python"}}}},
				ShardPatches: []runtime.RawExtension{{Raw: []byte(`{"metadata":{"labels":{"a":"b"}}}`)}},
				TaskTemplate: &sandboxv1alpha1.SandboxTaskTemplate{
					Command: []string{"python3"}, Args: []string{"-c", "1"}, WorkingDir: "/work",
					Env:            []sandboxv1alpha1.SandboxTaskEnvVar{{Name: "A", Value: "1"}},
					TimeoutSeconds: ptr.To[int64](60), RestartPolicy: "OnFailure", BackoffLimit: ptr.To[int32](2),
					Lifecycle: &sandboxv1alpha1.SandboxTaskLifecycle{
						PreStart: &sandboxv1alpha1.SandboxTaskHook{Command: []string{"true"}, TimeoutSeconds: ptr.To[int64](5)},
						PostStop: &sandboxv1alpha1.SandboxTaskHook{Command: []string{"false"}},
					},
				},
				ShardTaskPatches:                []runtime.RawExtension{{Raw: []byte(`{"args":["x"]}`)}},
				TaskResourcePolicyWhenCompleted: "Release",
			},
		},
		{
			name: "lifetime",
			spec: sandboxv1alpha1.SandboxSpec{
				TimeoutSeconds: ptr.To[int64](3600),
				AutoRenew:      &sandboxv1alpha1.SandboxAutoRenew{ExtendSeconds: 600},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sbx := &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"}, Spec: *tt.spec.DeepCopy()}
			got := fromBatchSandbox(toBatchSandbox(sbx))
			if diff := cmp.Diff(tt.spec, got.Spec); diff != "" {
				t.Errorf("spec after the round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFromBatchSandbox(t *testing.T) {
	created := metav1.NewTime(time.Unix(1700000000, 0))
	deleted := metav1.NewTime(time.Unix(1700000100, 0))
	stored := func() *controlv1alpha1.BatchSandbox {
		return &controlv1alpha1.BatchSandbox{
			TypeMeta: metav1.TypeMeta{APIVersion: "control.kube-sandbox.io/v1alpha1", Kind: "BatchSandbox"},
			ObjectMeta: metav1.ObjectMeta{
				Name:              "demo",
				Namespace:         "ns",
				UID:               "uid-1",
				ResourceVersion:   "42",
				Generation:        3,
				CreationTimestamp: created,
				Labels:            map[string]string{"team": "a"},
				Finalizers:        []string{"example.com/keep"},
				ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "sandbox-apiserver", Operation: metav1.ManagedFieldsOperationUpdate}},
			},
			Spec: controlv1alpha1.BatchSandboxSpec{
				Replicas: ptr.To[int32](2),
				Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "main", Image: "python:3.11"}},
				}},
			},
			Status: controlv1alpha1.BatchSandboxStatus{
				ObservedGeneration: 3,
				Phase:              controlv1alpha1.PhaseRunning,
				Replicas:           2,
				Ready:              1,
				Pods: []controlv1alpha1.SandboxPodStatus{
					{Replica: 0, Name: "demo-0", IP: "10.0.0.1", NodeName: "n1", RuntimeID: "containerd://a", Ready: true},
					{Replica: 1, Name: "demo-1"},
				},
				Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "PodsNotReady", LastTransitionTime: created}},
			},
		}
	}
	wantSandbox := func() *sandboxv1alpha1.Sandbox {
		return &sandboxv1alpha1.Sandbox{
			TypeMeta: sandboxTypeMeta,
			ObjectMeta: metav1.ObjectMeta{
				Name:              "demo",
				Namespace:         "ns",
				UID:               "uid-1",
				ResourceVersion:   "42",
				Generation:        3,
				CreationTimestamp: created,
				Labels:            map[string]string{"team": "a"},
				Finalizers:        []string{"example.com/keep"},
			},
			Spec: sandboxv1alpha1.SandboxSpec{
				Replicas: ptr.To[int32](2),
				Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "main", Image: "python:3.11"}},
				}},
			},
			Status: sandboxv1alpha1.SandboxStatus{
				ObservedGeneration: 3,
				Phase:              sandboxv1alpha1.PhaseRunning,
				Replicas:           2,
				Ready:              1,
				Pods: []sandboxv1alpha1.SandboxPodStatus{
					{Replica: 0, Name: "demo-0", IP: "10.0.0.1", NodeName: "n1", RuntimeID: "containerd://a", Ready: true},
					{Replica: 1, Name: "demo-1"},
				},
				Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "PodsNotReady", LastTransitionTime: created}},
			},
		}
	}

	tests := []struct {
		name   string
		modify func(*controlv1alpha1.BatchSandbox)
		want   func(*sandboxv1alpha1.Sandbox)
	}{
		{
			name: "system metadata kept, managedFields dropped, status copied",
		},
		{
			name: "the Sandbox's managers from the annotation, which it does not show, and the status managers",
			modify: func(bs *controlv1alpha1.BatchSandbox) {
				bs.Annotations = map[string]string{AnnotationManagedFields: `[{"manager":"flux","operation":"Apply"}]`}
				bs.ManagedFields = append(bs.ManagedFields, metav1.ManagedFieldsEntry{Manager: "sandbox-controller", Operation: metav1.ManagedFieldsOperationUpdate,
					APIVersion: "control.kube-sandbox.io/v1alpha1", Subresource: "status"})
			},
			want: func(s *sandboxv1alpha1.Sandbox) {
				s.ManagedFields = []metav1.ManagedFieldsEntry{
					{Manager: "flux", Operation: metav1.ManagedFieldsOperationApply},
					{Manager: "sandbox-controller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "sandbox.kube-sandbox.io/v1alpha1", Subresource: "status"},
				}
			},
		},
		{
			name: "deletionTimestamp makes the phase Terminating",
			modify: func(bs *controlv1alpha1.BatchSandbox) {
				bs.DeletionTimestamp = &deleted
				bs.DeletionGracePeriodSeconds = ptr.To[int64](0)
			},
			want: func(s *sandboxv1alpha1.Sandbox) {
				s.DeletionTimestamp = &deleted
				s.DeletionGracePeriodSeconds = ptr.To[int64](0)
				s.Status.Phase = sandboxv1alpha1.PhaseTerminating
			},
		},
		{
			name: "no status",
			modify: func(bs *controlv1alpha1.BatchSandbox) {
				bs.Status = controlv1alpha1.BatchSandboxStatus{}
			},
			want: func(s *sandboxv1alpha1.Sandbox) {
				s.Status = sandboxv1alpha1.SandboxStatus{}
			},
		},
		{
			name: "TypeMeta is the Sandbox's even without one on the BatchSandbox",
			modify: func(bs *controlv1alpha1.BatchSandbox) {
				bs.TypeMeta = metav1.TypeMeta{}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bs := stored()
			if tt.modify != nil {
				tt.modify(bs)
			}
			before := bs.DeepCopy()
			want := wantSandbox()
			if tt.want != nil {
				tt.want(want)
			}
			got := fromBatchSandbox(bs)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("fromBatchSandbox() (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, bs); diff != "" {
				t.Errorf("fromBatchSandbox() changed its input (-before +after):\n%s", diff)
			}
			// The Sandbox must not share memory with the BatchSandbox it came from.
			got.Labels["team"] = "changed"
			got.Spec.Template.Spec.Containers[0].Image = "changed"
			if diff := cmp.Diff(before, bs); diff != "" {
				t.Errorf("mutating the Sandbox changed the BatchSandbox (-before +after):\n%s", diff)
			}
		})
	}
}
