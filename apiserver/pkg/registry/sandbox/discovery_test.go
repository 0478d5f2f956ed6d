package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// crdDir holds the CRDs sandbox-controller serves next to this server's sandboxes.
const crdDir = "../../../../artifacts/base/crds"

// TestDiscoveryNames checks what discovery says of sandboxes through the interfaces the
// endpoint installer looks for: the short name sbx, and the category of the CRDs, so that
// `kubectl get kube-sandbox` lists sandboxes, batchsandboxes and pools together. The short
// name must not be one a CRD of ours already takes, which would make it ambiguous.
func TestDiscoveryNames(t *testing.T) {
	var storage rest.Storage = NewREST(nil, Limits{}, nil, nil)
	shortNames, ok := storage.(rest.ShortNamesProvider)
	if !ok {
		t.Fatal("the sandboxes storage does not provide short names")
	}
	categories, ok := storage.(rest.CategoriesProvider)
	if !ok {
		t.Fatal("the sandboxes storage does not provide categories")
	}
	if diff := cmp.Diff([]string{"sbx"}, shortNames.ShortNames()); diff != "" {
		t.Errorf("short names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"kube-sandbox"}, categories.Categories()); diff != "" {
		t.Errorf("categories (-want +got):\n%s", diff)
	}
	if slices.Contains(categories.Categories(), "all") {
		t.Error(`sandboxes are in the category "all": kubectl get all would list them in every namespace`)
	}

	files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", crdDir, err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, c := range categories.Categories() {
			if !slices.Contains(crd.Spec.Names.Categories, c) {
				t.Errorf("CRD %s is not in the category %q of sandboxes (it has %q)", crd.Name, c, crd.Spec.Names.Categories)
			}
		}
		for _, s := range shortNames.ShortNames() {
			if slices.Contains(crd.Spec.Names.ShortNames, s) || crd.Spec.Names.Plural == s || crd.Spec.Names.Singular == s {
				t.Errorf("the short name %q of sandboxes is a name of CRD %s too", s, crd.Name)
			}
		}
	}
}

// TestSandboxTable checks that the table clients' tests are served is the one ConvertToTable
// answers, wide columns and row objects included.
func TestSandboxTable(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	items := []sandboxv1alpha1.Sandbox{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
			Spec:       sandboxv1alpha1.SandboxSpec{Replicas: ptr.To[int32](2), TaskTemplate: &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"true"}}},
			Status:     sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseRunning, TaskSucceeded: 1, TaskFailed: 1},
		},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}},
	}
	want, err := tableConvertor{clock: testingclock.NewFakePassiveClock(now)}.ConvertToTable(t.Context(), &sandboxv1alpha1.SandboxList{Items: items}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := SandboxTable(items, now)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SandboxTable (-ConvertToTable +SandboxTable):\n%s", diff)
	}
	cells := cellsByName(t, got.ColumnDefinitions, got.Rows[0])
	if cells["Tasks"] != "1/2 (1 failed)" || cells["Age"] != "60m" {
		t.Errorf("cells %v, want Tasks 1/2 (1 failed) and Age 60m", cells)
	}
	for i, c := range got.ColumnDefinitions {
		if c.Name == "Tasks" && c.Priority == 0 {
			t.Errorf("column %d, Tasks, is not a wide column", i)
		}
	}
	for i, row := range got.Rows {
		if row.Object.Object != &items[i] {
			t.Errorf("row %d's object is not the sandbox %s", i, items[i].Name)
		}
	}
}
