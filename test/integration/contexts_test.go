package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/test/integration/framework"
)

// contexts is the contexts subresource of sandbox name, as c's user.
func contexts(c sandboxclient.Interface, ns, name, verb string, path ...string) *rest.Request {
	return c.SandboxV1alpha1().RESTClient().Verb(verb).Namespace(ns).Resource("sandboxes").Name(name).
		SubResource(append([]string{"contexts"}, path...)...)
}

// runCode runs code in context id and answers its events.
func runCode(ctx context.Context, c sandboxclient.Interface, ns, name, id, code string) ([]sandboxv1alpha1.SandboxCodeRunEvent, error) {
	body, err := contexts(c, ns, name, "POST", id, "run").Body(&sandboxv1alpha1.SandboxCodeRun{Code: code}).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	var events []sandboxv1alpha1.SandboxCodeRunEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		ev := sandboxv1alpha1.SandboxCodeRunEvent{}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return events, err
		}
		events = append(events, ev)
	}
	return events, sc.Err()
}

// TestCodeContexts: through the aggregator to the real execd of a pod, which runs a real
// Jupyter kernel (Debian's ipykernel): a context is made, keeps a variable between runs,
// returns results and exceptions as events, is listed (as a table too), and is deleted;
// discovery names the verbs, and bad input is a typed error.
func TestCodeContexts(t *testing.T) {
	ctx, cancel := context.WithTimeout(suiteCtx, 2*time.Minute)
	defer cancel()
	ns := newNamespace(t)
	nodeCtx, stopNode := context.WithCancel(suiteCtx)
	t.Cleanup(stopNode)
	if _, err := framework.StartSimulatedNode(nodeCtx, cp, ns, true, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, sandbox("nb"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSandboxPhase(t, ns, "nb", sandboxv1alpha1.PhaseRunning)

	resources, err := sandboxes.Discovery().ServerResourcesForGroupVersion(sandboxv1alpha1.SchemeGroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resources.APIResources {
		if r.Name == "sandboxes/contexts" {
			if diff := cmp.Diff([]string{"create", "delete", "get"}, []string(r.Verbs)); diff != "" || r.Kind != "SandboxCodeContext" {
				t.Errorf("discovery of sandboxes/contexts, kind %s (-want +got verbs):\n%s", r.Kind, diff)
			}
		}
	}

	made := &sandboxv1alpha1.SandboxCodeContext{}
	err = contexts(sandboxes, ns, "nb", "POST").Body(&sandboxv1alpha1.SandboxCodeContext{
		ObjectMeta: metav1.ObjectMeta{Name: "calc"}, Spec: sandboxv1alpha1.SandboxCodeContextSpec{WorkingDir: "/tmp"}}).Do(ctx).Into(made)
	if err != nil {
		t.Fatalf("make: %v", err)
	}
	if made.Name != "calc" || made.Namespace != ns || made.Status.Phase != sandboxv1alpha1.CodeContextIdle || made.Status.PID == 0 ||
		!strings.HasPrefix(made.Status.LanguageVersion, "3.") || made.Status.Pod != "nb-0" {
		t.Errorf("made: %+v", made)
	}

	if _, err := runCode(ctx, sandboxes, ns, "nb", "calc", "import os\nx = 41\nprint('cwd', os.getcwd())"); err != nil {
		t.Fatalf("first run: %v", err)
	}
	events, err := runCode(ctx, sandboxes, ns, "nb", "calc", "x + 1")
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	var types []string
	for _, ev := range events {
		types = append(types, string(ev.Type))
	}
	if diff := cmp.Diff([]string{"result", "end"}, types); diff != "" || events[0].Text != "42" || events[1].Status != sandboxv1alpha1.CodeRunStatusOK {
		t.Errorf("x + 1 (-want +got types):\n%s\n%+v", diff, events)
	}
	events, err = runCode(ctx, sandboxes, ns, "nb", "calc", "1/0")
	if err != nil {
		t.Fatalf("third run: %v", err)
	}
	last := events[len(events)-1]
	if len(events) != 2 || events[0].Type != sandboxv1alpha1.CodeRunError || events[0].Error == nil || events[0].Error.Name != "ZeroDivisionError" ||
		len(events[0].Error.Traceback) == 0 || last.Status != sandboxv1alpha1.CodeRunStatusError {
		t.Errorf("1/0: %+v", events)
	}

	got := &sandboxv1alpha1.SandboxCodeContext{}
	if err := contexts(sandboxes, ns, "nb", "GET", "calc").Do(ctx).Into(got); err != nil || got.Status.ExecutionCount != 3 || got.Status.LastRunTime == nil {
		t.Errorf("get after three runs: %+v %v", got.Status, err)
	}
	result := contexts(sandboxes, ns, "nb", "GET").SetHeader("Accept", tasksTableAccept).Do(ctx)
	if err := result.Error(); err != nil {
		t.Fatalf("table: %v", err)
	}
	data, _ := result.Raw()
	table := &metav1.Table{}
	if err := utiljson.Unmarshal(data, table); err != nil || table.Kind != "Table" || len(table.Rows) != 1 || table.Rows[0].Cells[0] != "calc" || table.Rows[0].Cells[3] != "Idle" {
		t.Errorf("table (%v): %s", err, data)
	}

	// Bad input: a typed error with its field; an unknown context: 404.
	err = contexts(sandboxes, ns, "nb", "POST").Body(&sandboxv1alpha1.SandboxCodeContext{
		ObjectMeta: metav1.ObjectMeta{Name: "Bad"}, Spec: sandboxv1alpha1.SandboxCodeContextSpec{Language: "ruby"}}).Do(ctx).Error()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("an invalid make: %v, want 422", err)
	}
	var fields []string
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		fields = append(fields, c.Field)
	}
	if diff := cmp.Diff([]string{"spec.language", "metadata.name"}, fields); diff != "" {
		t.Errorf("fields of an invalid make (-want +got):\n%s", diff)
	}
	if _, err := runCode(ctx, sandboxes, ns, "nb", "nope", "1"); !apierrors.IsNotFound(err) {
		t.Errorf("a run in an unknown context: %v, want 404", err)
	}

	if err := contexts(sandboxes, ns, "nb", "DELETE", "calc").Do(ctx).Error(); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := contexts(sandboxes, ns, "nb", "GET", "calc").Do(ctx).Error(); !apierrors.IsNotFound(err) {
		t.Errorf("get of a deleted context: %v, want 404", err)
	}
}
