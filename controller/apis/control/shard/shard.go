// Package shard gives each replica of a BatchSandbox its own pod template and task: the
// template (or task template) with the replica's strategic merge patch from shardPatches (or
// shardTaskPatches) applied, as `kubectl patch --type strategic` would. sandbox-apiserver
// applies them to validate a sandbox, and sandbox-controller to make its pods and tasks, so
// both agree on what a patch means.
package shard

import (
	"bytes"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// PodTemplate is tmpl with patch applied. tmpl is not changed; an empty patch gives a copy.
// The sandbox container (the first) must keep its name: execd wraps it by position, and
// exec's default container is it.
func PodTemplate(tmpl *corev1.PodTemplateSpec, patch runtime.RawExtension) (*corev1.PodTemplateSpec, error) {
	out := &corev1.PodTemplateSpec{}
	if err := apply(tmpl, patch, out); err != nil {
		return nil, err
	}
	if len(out.Spec.Containers) == 0 {
		return nil, fmt.Errorf("the patched template has no containers")
	}
	if len(tmpl.Spec.Containers) > 0 && out.Spec.Containers[0].Name != tmpl.Spec.Containers[0].Name {
		return nil, fmt.Errorf("the patch renames or replaces the sandbox container %q (the first container): patch it by its name instead", tmpl.Spec.Containers[0].Name)
	}
	return out, nil
}

// Task is t with patch applied; t is not changed.
func Task(t *controlv1alpha1.TaskTemplate, patch runtime.RawExtension) (*controlv1alpha1.TaskTemplate, error) {
	out := &controlv1alpha1.TaskTemplate{}
	if err := apply(t, patch, out); err != nil {
		return nil, err
	}
	if len(out.Command) == 0 || out.Command[0] == "" {
		return nil, fmt.Errorf("the patched task has no command")
	}
	return out, nil
}

// PodTemplateOf is the pod template of replica i of bs (direct mode).
func PodTemplateOf(bs *controlv1alpha1.BatchSandbox, i int32) (*corev1.PodTemplateSpec, error) {
	if int(i) >= len(bs.Spec.ShardPatches) {
		return bs.Spec.Template.DeepCopy(), nil
	}
	return PodTemplate(bs.Spec.Template, bs.Spec.ShardPatches[i])
}

// TaskOf is the task of replica i of bs; nil without a taskTemplate.
func TaskOf(bs *controlv1alpha1.BatchSandbox, i int32) (*controlv1alpha1.TaskTemplate, error) {
	if bs.Spec.TaskTemplate == nil {
		return nil, nil
	}
	if int(i) >= len(bs.Spec.ShardTaskPatches) {
		return bs.Spec.TaskTemplate.DeepCopy(), nil
	}
	return Task(bs.Spec.TaskTemplate, bs.Spec.ShardTaskPatches[i])
}

// apply patches original (a struct whose patch strategies the tags tell) into out.
func apply(original any, patch runtime.RawExtension, out any) error {
	orig, err := json.Marshal(original)
	if err != nil {
		return err
	}
	raw := patch.Raw
	if len(raw) == 0 && patch.Object != nil {
		if raw, err = json.Marshal(patch.Object); err != nil {
			return err
		}
	}
	if len(raw) == 0 || string(raw) == "null" {
		return json.Unmarshal(orig, out)
	}
	var probe any
	if err := json.Unmarshal(raw, &probe); err != nil {
		return fmt.Errorf("the patch is not JSON: %v", err)
	}
	if _, ok := probe.(map[string]any); !ok {
		return fmt.Errorf("a strategic merge patch is a JSON object, not %s", kindOf(probe))
	}
	merged, err := strategicpatch.StrategicMergePatch(orig, raw, out)
	if err != nil {
		return fmt.Errorf("the patch does not apply: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(merged))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("the patched result is not valid: %v", err)
	}
	return nil
}

func kindOf(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}
