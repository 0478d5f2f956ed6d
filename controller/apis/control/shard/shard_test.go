package shard

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

func raw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }

func batch() *controlv1alpha1.BatchSandbox {
	return &controlv1alpha1.BatchSandbox{Spec: controlv1alpha1.BatchSandboxSpec{
		Replicas: ptr.To[int32](3),
		Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "sandbox", Image: "python", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}},
			{Name: "helper", Image: "busybox"},
		}}},
		ShardPatches: []runtime.RawExtension{
			raw(`{"metadata":{"labels":{"shard":"zero"}},"spec":{"containers":[{"name":"sandbox","env":[{"name":"B","value":"2"}],"resources":{"limits":{"cpu":"2"}}}]}}`),
			{},
		},
		TaskTemplate: &controlv1alpha1.TaskTemplate{Command: []string{"python3", "-c", "work"}, Args: []string{"a"},
			Env: []controlv1alpha1.TaskEnvVar{{Name: "X", Value: "1"}, {Name: "Y", Value: "1"}}},
		ShardTaskPatches: []runtime.RawExtension{
			raw(`{"args":["shard-0"],"env":[{"name":"Y","value":"zero"}]}`),
			raw(`{"args":["shard-1"],"timeoutSeconds":5}`),
		},
	}}
}

func TestPodTemplateByIndex(t *testing.T) {
	bs := batch()
	p0, err := PodTemplateOf(bs, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := p0.Spec.Containers
	if len(c) != 2 || c[0].Name != "sandbox" || c[1].Name != "helper" {
		t.Fatalf("containers are not merged by name: %+v", c)
	}
	if len(c[0].Env) != 2 || c[0].Env[0].Name != "B" && c[0].Env[1].Name != "B" {
		t.Errorf("env of replica 0 = %+v, want A and B", c[0].Env)
	}
	if got := c[0].Resources.Limits[corev1.ResourceCPU]; got.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("cpu limit of replica 0 = %v, want 2", got.String())
	}
	if p0.Labels["shard"] != "zero" {
		t.Errorf("labels of replica 0 = %v", p0.Labels)
	}
	for _, i := range []int32{1, 2} { // an empty patch, and no patch
		p, err := PodTemplateOf(bs, i)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.Containers[0].Env) != 1 || p.Labels["shard"] != "" || p.Spec.Containers[0].Resources.Limits != nil {
			t.Errorf("replica %d got another replica's patch: %+v", i, p)
		}
	}
	if len(bs.Spec.Template.Spec.Containers[0].Env) != 1 {
		t.Error("the template itself was changed")
	}
}

func TestTaskByIndex(t *testing.T) {
	bs := batch()
	want := []struct {
		args    string
		y       string
		timeout *int64
	}{{"shard-0", "zero", nil}, {"shard-1", "1", ptr.To[int64](5)}, {"a", "1", nil}}
	for i, w := range want {
		task, err := TaskOf(bs, int32(i))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(task.Args, " ") != w.args || strings.Join(task.Command, " ") != "python3 -c work" {
			t.Errorf("replica %d: command %v args %v, want args %s", i, task.Command, task.Args, w.args)
		}
		env := map[string]string{}
		for _, e := range task.Env {
			env[e.Name] = e.Value
		}
		if len(env) != 2 || env["X"] != "1" || env["Y"] != w.y {
			t.Errorf("replica %d: env %v, want X=1 Y=%s (merged by name)", i, env, w.y)
		}
		if (task.TimeoutSeconds == nil) != (w.timeout == nil) || task.TimeoutSeconds != nil && *task.TimeoutSeconds != *w.timeout {
			t.Errorf("replica %d: timeout %v, want %v", i, task.TimeoutSeconds, w.timeout)
		}
	}
	bs.Spec.TaskTemplate = nil
	if task, err := TaskOf(bs, 0); task != nil || err != nil {
		t.Errorf("without a taskTemplate: %v, %v", task, err)
	}
}

func TestBadPatches(t *testing.T) {
	tmpl := batch().Spec.Template
	for name, patch := range map[string]string{
		"not JSON":           `{"spec":`,
		"an array":           `[{"op":"add"}]`,
		"renames":            `{"spec":{"containers":[{"name":"sandbox","$patch":"delete"}]}}`,
		"replaces the list":  `{"spec":{"containers":[{"name":"other","image":"x"}],"$setElementOrder/containers":[{"name":"other"}]}}`,
		"unknown field":      `{"spec":{"contaners":[]}}`,
		"wrong type":         `{"spec":{"containers":"x"}}`,
		"deletes containers": `{"spec":{"containers":[{"$patch":"replace"}]}}`,
	} {
		if _, err := PodTemplate(tmpl, raw(patch)); err == nil {
			t.Errorf("%s: a patch %s applied", name, patch)
		}
	}
	task := batch().Spec.TaskTemplate
	for name, patch := range map[string]string{
		"no command":    `{"command":null}`,
		"unknown field": `{"argz":["x"]}`,
		"wrong type":    `{"timeoutSeconds":"soon"}`,
	} {
		if _, err := Task(task, raw(patch)); err == nil {
			t.Errorf("%s: a task patch %s applied", name, patch)
		}
	}
}
