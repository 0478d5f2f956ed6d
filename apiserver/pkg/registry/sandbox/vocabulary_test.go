package sandbox

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// vocabulary pairs each word of the Sandbox API with the control API's word it stands for.
// Conversion passes conditions, reasons and task phases through as they are (toSandbox), so
// each pair must have one value. The key is the control constant's name.
var vocabulary = map[string][2]string{
	"ConditionReady":         {sandboxv1alpha1.ConditionReady, controlv1alpha1.ConditionReady},
	"ConditionPaused":        {sandboxv1alpha1.ConditionPaused, controlv1alpha1.ConditionPaused},
	"ConditionEgressReady":   {sandboxv1alpha1.ConditionEgressReady, controlv1alpha1.ConditionEgressReady},
	"ConditionTasksComplete": {sandboxv1alpha1.ConditionTasksComplete, controlv1alpha1.ConditionTasksComplete},
	"ConditionTasksFailed":   {sandboxv1alpha1.ConditionTasksFailed, controlv1alpha1.ConditionTasksFailed},

	"ReasonPodsReady":             {sandboxv1alpha1.ReasonPodsReady, controlv1alpha1.ReasonPodsReady},
	"ReasonPodsNotReady":          {sandboxv1alpha1.ReasonPodsNotReady, controlv1alpha1.ReasonPodsNotReady},
	"ReasonPodCreateFailed":       {sandboxv1alpha1.ReasonPodCreateFailed, controlv1alpha1.ReasonPodCreateFailed},
	"ReasonPodFailed":             {sandboxv1alpha1.ReasonPodFailed, controlv1alpha1.ReasonPodFailed},
	"ReasonImagePullFailed":       {sandboxv1alpha1.ReasonImagePullFailed, controlv1alpha1.ReasonImagePullFailed},
	"ReasonExpired":               {sandboxv1alpha1.ReasonExpired, controlv1alpha1.ReasonExpired},
	"ReasonPoolExhausted":         {sandboxv1alpha1.ReasonPoolExhausted, controlv1alpha1.ReasonPoolExhausted},
	"ReasonPoolNotFound":          {sandboxv1alpha1.ReasonPoolNotFound, controlv1alpha1.ReasonPoolNotFound},
	"ReasonPoolNotAllowed":        {sandboxv1alpha1.ReasonPoolNotAllowed, controlv1alpha1.ReasonPoolNotAllowed},
	"ReasonAllocated":             {sandboxv1alpha1.ReasonAllocated, controlv1alpha1.ReasonAllocated},
	"ReasonAllocateFailed":        {sandboxv1alpha1.ReasonAllocateFailed, controlv1alpha1.ReasonAllocateFailed},
	"ReasonPodLost":               {sandboxv1alpha1.ReasonPodLost, controlv1alpha1.ReasonPodLost},
	"ReasonOOMKilled":             {sandboxv1alpha1.ReasonOOMKilled, controlv1alpha1.ReasonOOMKilled},
	"ReasonTaskOOMKilled":         {sandboxv1alpha1.ReasonTaskOOMKilled, controlv1alpha1.ReasonTaskOOMKilled},
	"ConditionOOMKilled":          {sandboxv1alpha1.ConditionOOMKilled, controlv1alpha1.ConditionOOMKilled},
	"ReasonIdentityFailed":        {sandboxv1alpha1.ReasonIdentityFailed, controlv1alpha1.ReasonIdentityFailed},
	"ReasonPausing":               {sandboxv1alpha1.ReasonPausing, controlv1alpha1.ReasonPausing},
	"ReasonPaused":                {sandboxv1alpha1.ReasonPaused, controlv1alpha1.ReasonPaused},
	"ReasonResuming":              {sandboxv1alpha1.ReasonResuming, controlv1alpha1.ReasonResuming},
	"ReasonResumed":               {sandboxv1alpha1.ReasonResumed, controlv1alpha1.ReasonResumed},
	"ReasonSnapshotFailed":        {sandboxv1alpha1.ReasonSnapshotFailed, controlv1alpha1.ReasonSnapshotFailed},
	"ReasonRegistryUnavailable":   {sandboxv1alpha1.ReasonRegistryUnavailable, controlv1alpha1.ReasonRegistryUnavailable},
	"ReasonSnapshotPolicyMissing": {sandboxv1alpha1.ReasonSnapshotPolicyMissing, controlv1alpha1.ReasonSnapshotPolicyMissing},
	"ReasonPauseNotSupported":     {sandboxv1alpha1.ReasonPauseNotSupported, controlv1alpha1.ReasonPauseNotSupported},
	"ReasonPolicyApplied":         {sandboxv1alpha1.ReasonPolicyApplied, controlv1alpha1.ReasonPolicyApplied},
	"ReasonPolicyPending":         {sandboxv1alpha1.ReasonPolicyPending, controlv1alpha1.ReasonPolicyPending},
	"ReasonPolicyFailed":          {sandboxv1alpha1.ReasonPolicyFailed, controlv1alpha1.ReasonPolicyFailed},
	"ReasonDeniedName":            {sandboxv1alpha1.ReasonEgressDenied, controlv1alpha1.ReasonDeniedName},
	"ReasonAllSucceeded":          {sandboxv1alpha1.ReasonAllSucceeded, controlv1alpha1.ReasonAllSucceeded},
	"ReasonSomeFailed":            {sandboxv1alpha1.ReasonSomeFailed, controlv1alpha1.ReasonSomeFailed},
	"ReasonTasksRunning":          {sandboxv1alpha1.ReasonTasksRunning, controlv1alpha1.ReasonTasksRunning},
	"ReasonNoTaskFailed":          {sandboxv1alpha1.ReasonNoTaskFailed, controlv1alpha1.ReasonNoTaskFailed},
	"ReasonTaskFailed":            {sandboxv1alpha1.ReasonTaskFailed, controlv1alpha1.ReasonTaskFailed},
	"ReasonTasksSucceeded":        {sandboxv1alpha1.ReasonTasksSucceeded, controlv1alpha1.ReasonTasksSucceeded},
	"ReasonTaskExitCode":          {sandboxv1alpha1.ReasonTaskExitCode, controlv1alpha1.ReasonTaskExitCode},
	"ReasonTaskDeadline":          {sandboxv1alpha1.ReasonTaskDeadline, controlv1alpha1.ReasonTaskDeadline},
	"ReasonTaskBackoffLimit":      {sandboxv1alpha1.ReasonTaskBackoffLimit, controlv1alpha1.ReasonTaskBackoffLimit},
	"ReasonTaskPreStartFailed":    {sandboxv1alpha1.ReasonTaskPreStartFailed, controlv1alpha1.ReasonTaskPreStartFailed},
	"ReasonTaskStartFailed":       {sandboxv1alpha1.ReasonTaskStartFailed, controlv1alpha1.ReasonTaskStartFailed},
	"ReasonTaskPodLost":           {sandboxv1alpha1.ReasonTaskPodLost, controlv1alpha1.ReasonTaskPodLost},
	"ReasonTaskContactLost":       {sandboxv1alpha1.ReasonTaskContactLost, controlv1alpha1.ReasonTaskContactLost},
	"ReasonTaskRetriedOnNewPod":   {sandboxv1alpha1.ReasonTaskRetriedOnNewPod, controlv1alpha1.ReasonTaskRetriedOnNewPod},
	"ReasonTaskContainerRestart":  {sandboxv1alpha1.ReasonTaskContainerRestart, controlv1alpha1.ReasonTaskContainerRestart},

	"TaskPending":   {sandboxv1alpha1.TaskPhasePending, string(controlv1alpha1.TaskPending)},
	"TaskRunning":   {sandboxv1alpha1.TaskPhaseRunning, string(controlv1alpha1.TaskRunning)},
	"TaskSucceeded": {sandboxv1alpha1.TaskPhaseSucceeded, string(controlv1alpha1.TaskSucceeded)},
	"TaskFailed":    {sandboxv1alpha1.TaskPhaseFailed, string(controlv1alpha1.TaskFailed)},
	"TaskUnknown":   {sandboxv1alpha1.TaskPhaseUnknown, string(controlv1alpha1.TaskUnknown)},

	"TaskRestartNever":     {sandboxv1alpha1.TaskRestartNever, string(controlv1alpha1.TaskRestartNever)},
	"TaskRestartOnFailure": {sandboxv1alpha1.TaskRestartOnFailure, string(controlv1alpha1.TaskRestartOnFailure)},
	"TaskResourceRetain":   {sandboxv1alpha1.TaskResourceRetain, string(controlv1alpha1.TaskResourceRetain)},
	"TaskResourceRelease":  {sandboxv1alpha1.TaskResourceRelease, string(controlv1alpha1.TaskResourceRelease)},
}

// TestVocabulary: every condition type, reason, task phase and task value the BatchSandbox
// API defines has a Sandbox API word of the same value, so that conversion can pass them
// through and clients never need the control types.
func TestVocabulary(t *testing.T) {
	for name, pair := range vocabulary {
		if pair[0] != pair[1] {
			t.Errorf("%s: the Sandbox API says %q, the control API %q", name, pair[0], pair[1])
		}
	}
	if sandboxv1alpha1.DefaultTaskBackoffLimit != controlv1alpha1.DefaultTaskBackoffLimit {
		t.Errorf("DefaultTaskBackoffLimit: %d, control's %d", sandboxv1alpha1.DefaultTaskBackoffLimit, controlv1alpha1.DefaultTaskBackoffLimit)
	}
	if gvr := controlv1alpha1.SchemeGroupVersion.WithResource("pools"); sandboxv1alpha1.PoolsResource != gvr {
		t.Errorf("PoolsResource %v, want %v", sandboxv1alpha1.PoolsResource, gvr)
	}
	for _, ph := range []controlv1alpha1.TaskPhase{controlv1alpha1.TaskPending, controlv1alpha1.TaskRunning, controlv1alpha1.TaskSucceeded, controlv1alpha1.TaskFailed, controlv1alpha1.TaskUnknown} {
		if got, want := sandboxv1alpha1.TaskPhaseFinal(string(ph)), ph.Final(); got != want {
			t.Errorf("TaskPhaseFinal(%s) = %v, control says %v", ph, got, want)
		}
	}

	// A word added to the BatchSandbox API (outside the Pool's) must be added here too.
	for _, name := range controlConstants(t, "batchsandbox_types.go", "task_types.go", "networkpolicy_types.go") {
		if _, ok := vocabulary[name]; !ok {
			t.Errorf("the control API's %s has no Sandbox API word: add it to apiserver/apis/sandbox/v1alpha1/vocabulary.go and to this table", name)
		}
	}
}

// controlConstants lists the exported Condition*, Reason* and Task* constants of files of the
// control API.
func controlConstants(t *testing.T, files ...string) []string {
	t.Helper()
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, filepath.Join("..", "..", "..", "..", "controller", "apis", "control", "v1alpha1", f), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				for _, n := range spec.(*ast.ValueSpec).Names {
					if n.IsExported() && (strings.HasPrefix(n.Name, "Condition") || strings.HasPrefix(n.Name, "Reason") || strings.HasPrefix(n.Name, "Task")) {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	if len(names) < 40 {
		t.Fatalf("found only %d constants in the control API: %v", len(names), names)
	}
	return names
}
