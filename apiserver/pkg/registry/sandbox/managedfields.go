package sandbox

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// AnnotationManagedFields, on a BatchSandbox, holds the managedFields of its Sandbox (JSON):
// the field managers of server-side apply and of updates through the Sandbox API, whose paths
// are the Sandbox's. The BatchSandbox's own managedFields describe the CRD's writers (this
// server, the controller) and would mislead. The Sandbox does not show the annotation.
const AnnotationManagedFields = "sandbox.kube-sandbox.io/managed-fields"

// statusSubresource is the subresource of managedFields entries that the controller's status
// writes make on the BatchSandbox; the Sandbox's status is that status, so they are shown as
// the Sandbox's status managers.
const statusSubresource = "status"

// storeManagedFields records the Sandbox's own managers on bs (not the status managers, which
// are the BatchSandbox's).
func storeManagedFields(bs *controlv1alpha1.BatchSandbox, fields []metav1.ManagedFieldsEntry) {
	var own []metav1.ManagedFieldsEntry
	for _, f := range fields {
		if f.Subresource == "" {
			own = append(own, f)
		}
	}
	annotations := make(map[string]string, len(bs.Annotations)+1)
	for k, v := range bs.Annotations {
		annotations[k] = v
	}
	delete(annotations, AnnotationManagedFields)
	if len(own) > 0 {
		data, err := json.Marshal(own)
		if err == nil {
			annotations[AnnotationManagedFields] = string(data)
		}
	}
	if len(annotations) == 0 {
		annotations = nil
	}
	bs.Annotations = annotations
}

// loadManagedFields is what the Sandbox of bs shows: its own managers from the annotation,
// then the status managers of the BatchSandbox; and its annotations without the record.
func loadManagedFields(bs *controlv1alpha1.BatchSandbox) ([]metav1.ManagedFieldsEntry, map[string]string) {
	var fields []metav1.ManagedFieldsEntry
	annotations := bs.Annotations
	if data, ok := bs.Annotations[AnnotationManagedFields]; ok {
		// An unreadable record (written by hand on the BatchSandbox) is dropped: the next
		// write starts a new one, as for an object whose managedFields were reset.
		_ = json.Unmarshal([]byte(data), &fields)
		annotations = make(map[string]string, len(bs.Annotations))
		for k, v := range bs.Annotations {
			if k != AnnotationManagedFields {
				annotations[k] = v
			}
		}
		if len(annotations) == 0 {
			annotations = nil
		}
	}
	for _, f := range bs.ManagedFields {
		if f.Subresource == statusSubresource {
			f.APIVersion = "sandbox.kube-sandbox.io/v1alpha1"
			fields = append(fields, f)
		}
	}
	return fields, annotations
}

// GetResetFields implements rest.ResetFieldsStrategy: writes to a sandbox never set its
// status (the controller's), so server-side apply gives no manager the status fields.
func (r *REST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"sandbox.kube-sandbox.io/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}
