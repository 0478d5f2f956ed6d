package create

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// TestCreateTask checks what create sends for --task, on the wire: the task as
// spec.taskTemplate, no entrypoint, and strict field validation, so that a server that does
// not know tasks refuses the sandbox rather than running it idle.
func TestCreateTask(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace)
	f := cmdtesting.NewServerFactory(srv.URL)
	f.RESTConfig.BearerToken = sandboxserver.UserToken
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	cmd := NewCmdCreate(f, streams)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetArgs([]string{"eval", "--image", "python:3.13-slim", "--replicas", "2", "--task", "--task-restart", "OnFailure",
		"--backoff-limit", "1", "--task-timeout", "10m", "--task-env", "MODE=eval", "--release", "--", "python", "eval.py"})
	var msg bytes.Buffer
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		cmdutil.PrintError(&msg, err)
		t.Fatal(msg.String())
	}
	if out.String() != "sandbox.sandbox.kube-sandbox.io/eval created\n" {
		t.Errorf("output %q", out.String())
	}
	requests := srv.Requests()
	if len(requests) != 1 || requests[0].Method != http.MethodPost {
		t.Fatalf("requests %+v, want one POST", requests)
	}
	if !strings.Contains(requests[0].RawQuery, "fieldValidation=Strict") {
		t.Errorf("query %q, want strict field validation", requests[0].RawQuery)
	}
	var body struct {
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(requests[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"command":        []any{"python", "eval.py"},
		"restartPolicy":  "OnFailure",
		"backoffLimit":   1.0,
		"timeoutSeconds": 600.0,
		"env":            []any{map[string]any{"name": "MODE", "value": "eval"}},
	}
	if diff := cmp.Diff(want, body.Spec["taskTemplate"]); diff != "" {
		t.Errorf("taskTemplate sent (-want +got):\n%s", diff)
	}
	if got := body.Spec["taskResourcePolicyWhenCompleted"]; got != "Release" {
		t.Errorf("taskResourcePolicyWhenCompleted %v, want Release", got)
	}
	if ep, sent := body.Spec["entrypoint"]; sent {
		t.Errorf("sent entrypoint %v: the command is the task's", ep)
	}
	if stored := srv.Sandbox("eval"); stored == nil || stored.Spec.TaskTemplate == nil {
		t.Errorf("stored %+v, want a task", stored)
	}
}
