// Package wait implements `kubectl sandbox wait`.
package wait

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// defaultTimeout is long enough for a sandbox made from a cold template to pull its image and
// start, and the same as delete's --timeout.
const defaultTimeout = 60 * time.Second

// forDelete is the --for value that waits for the sandboxes to be gone, as kubectl wait's.
const forDelete = "delete"

// forTasksComplete is the --for value that waits for every replica's task to have ended:
// short for condition=TasksComplete.
const forTasksComplete = sandboxv1alpha1.ConditionTasksComplete

// forCondition starts the --for value condition=TYPE[=STATUS], as kubectl wait's.
const forCondition = "condition="

// phases are the phases --for accepts. Terminating is left out: it only ever ends in deletion,
// which --for=delete waits for.
var phases = []sandboxv1alpha1.SandboxPhase{
	sandboxv1alpha1.PhasePending,
	sandboxv1alpha1.PhaseRunning,
	sandboxv1alpha1.PhasePaused,
	sandboxv1alpha1.PhaseSucceeded,
	sandboxv1alpha1.PhaseFailed,
	sandboxv1alpha1.PhaseExpired,
}

var (
	waitLong = cmdutil.LongDesc(`
		Wait for sandboxes to reach a phase, to meet a condition, or to be deleted.

		The command waits for each sandbox in turn until its phase is the one given with
		--for (Pending, Running, Paused, Succeeded, Failed or Expired, in any case), until its
		condition TYPE has the status STATUS with --for=condition=TYPE[=STATUS] (True by
		default; any case, as kubectl wait), or with --for=delete until it is gone.
		--for=TasksComplete is short for --for=condition=TasksComplete: every replica's task
		(see 'kubectl sandbox create --task') has ended, whether it succeeded or failed;
		'kubectl sandbox tasks' tells which, and the condition TasksFailed whether any did.

		Waiting for Running, Succeeded or TasksComplete ends at once with an error, and the
		reason, when the sandbox fails, expires or is deleted instead, or (for Running) when
		its tasks have ended already. A wait that times out says why the sandbox is not ready
		yet, such as PoolExhausted (its pool has no idle pod for it yet) or PoolNotFound
		(there is no such pool).

		--timeout bounds the whole wait: zero checks once without waiting, a negative value
		waits without limit.`)

	waitExample = cmdutil.Examples(`
		# Wait until sandbox my-sandbox is running
		kubectl sandbox wait my-sandbox

		# Wait up to five minutes for two sandboxes to be running
		kubectl sandbox wait a b --for=Running --timeout=5m

		# Wait until sandbox my-sandbox has been deleted
		kubectl sandbox wait my-sandbox --for=delete

		# Wait up to an hour for the tasks of sandbox eval to end, then see how they did
		kubectl sandbox wait eval --for=TasksComplete --timeout=1h && kubectl sandbox tasks eval

		# Wait until a task of sandbox eval has failed for good (the condition TasksFailed is True)
		kubectl sandbox wait eval --for=condition=TasksFailed --timeout=-1s

		# Create a sandbox and run a command once it is ready
		kubectl sandbox create my-sandbox --image busybox && kubectl sandbox wait my-sandbox && kubectl sandbox exec my-sandbox -- date`)
)

// WaitOptions are the inputs of `kubectl sandbox wait`.
type WaitOptions struct {
	PrintFlags *genericclioptions.PrintFlags
	PrintObj   printers.ResourcePrinterFunc

	Names   []string
	For     string
	Timeout time.Duration

	// phase is the phase --for names, spelled as the API does; empty with --for=delete or a
	// condition.
	phase     sandboxv1alpha1.SandboxPhase
	forDelete bool
	// conditionType and conditionStatus are the condition --for names, as given (they match
	// in any case); empty without one.
	conditionType   string
	conditionStatus string

	Namespace string
	Client    clientset.Interface

	genericiooptions.IOStreams
}

// NewWaitOptions returns WaitOptions waiting for Running, with kubectl wait's output.
func NewWaitOptions(streams genericiooptions.IOStreams) *WaitOptions {
	return &WaitOptions{
		PrintFlags: genericclioptions.NewPrintFlags("condition met").WithTypeSetter(scheme.Scheme),
		For:        string(sandboxv1alpha1.PhaseRunning),
		Timeout:    defaultTimeout,
		IOStreams:  streams,
	}
}

// NewCmdWait returns the `wait` command.
func NewCmdWait(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewWaitOptions(streams)
	cmd := &cobra.Command{
		Use:                   "wait NAME... [--for=Running|Pending|Succeeded|Failed|Expired|TasksComplete|condition=TYPE[=STATUS]|delete] [--timeout=DURATION]",
		DisableFlagsInUseLine: true,
		Short:                 "Wait for sandboxes to reach a phase, meet a condition or be deleted",
		Long:                  waitLong,
		Example:               waitExample,
		ValidArgsFunction:     cmdutil.SandboxNameCompletion(f, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, cmd, args); err != nil {
				return err
			}
			if err := o.Validate(cmd); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.PrintFlags.AddFlags(cmd)
	cmd.Flags().StringVar(&o.For, "for", o.For, "What to wait for: a phase (Pending, Running, Succeeded, Failed or Expired; any case), TasksComplete, condition=TYPE[=STATUS], or delete.")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "How long to wait for all the sandboxes (like 30s or 5m). Zero checks once without waiting; negative waits without limit.")
	_ = cmd.RegisterFlagCompletionFunc("for", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		values := []string{forDelete, forTasksComplete, forCondition + sandboxv1alpha1.ConditionTasksFailed}
		for _, p := range phases {
			values = append(values, string(p))
		}
		return values, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// Complete takes the names, namespace, client and printer.
func (o *WaitOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmdutil.UsageErrorf(cmd, "at least one sandbox NAME is required")
	}
	o.Names = nil
	seen := map[string]bool{}
	for _, name := range args {
		if !seen[name] {
			seen[name] = true
			o.Names = append(o.Names, name)
		}
	}
	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	printer, err := o.PrintFlags.ToPrinter()
	if err != nil {
		return err
	}
	o.PrintObj = printer.PrintObj
	if o.Client, err = f.SandboxClient(); err != nil {
		return err
	}
	return nil
}

// Validate parses --for.
func (o *WaitOptions) Validate(cmd *cobra.Command) error {
	o.phase, o.forDelete, o.conditionType, o.conditionStatus = "", false, "", ""
	if strings.EqualFold(o.For, forDelete) {
		o.forDelete = true
		return nil
	}
	if strings.EqualFold(o.For, forTasksComplete) {
		o.conditionType, o.conditionStatus = sandboxv1alpha1.ConditionTasksComplete, string(metav1.ConditionTrue)
		return nil
	}
	if len(o.For) >= len(forCondition) && strings.EqualFold(o.For[:len(forCondition)], forCondition) {
		typ, status, hasStatus := strings.Cut(o.For[len(forCondition):], "=")
		if !hasStatus {
			status = string(metav1.ConditionTrue)
		}
		if typ == "" || status == "" || strings.Contains(status, "=") {
			return cmdutil.UsageErrorf(cmd, "invalid --for %q: a condition is condition=TYPE or condition=TYPE=STATUS", o.For)
		}
		o.conditionType, o.conditionStatus = typ, status
		return nil
	}
	for _, p := range phases {
		if strings.EqualFold(o.For, string(p)) {
			o.phase = p
			return nil
		}
	}
	return cmdutil.UsageErrorf(cmd, "invalid --for %q: must be one of Pending, Running, Succeeded, Failed, Expired, TasksComplete, condition=TYPE[=STATUS] or delete", o.For)
}

// Run waits for each sandbox in turn, printing each as its condition is met. As kubectl wait,
// it stops at the first that fails; the timeout bounds the whole run.
func (o *WaitOptions) Run(ctx context.Context) error {
	waitCtx := ctx
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	for _, name := range o.Names {
		sb, err := o.waitFor(waitCtx, name)
		if err != nil {
			if waitCtx.Err() != nil && ctx.Err() == nil {
				return fmt.Errorf("timed out waiting for the condition on sandboxes/%s%s", name, o.notMetReason(sb))
			}
			return err
		}
		if err := o.PrintObj(sb, o.Out); err != nil {
			return err
		}
	}
	return nil
}

// waitFor returns the sandbox once its condition is met, or the sandbox as it was last seen
// when it is gone or the wait failed (for the reason in the message). It reads the sandbox,
// for a quick answer and the UID that --for=delete needs, then watches it.
func (o *WaitOptions) waitFor(ctx context.Context, name string) (*sandboxv1alpha1.Sandbox, error) {
	sb, err := o.Client.SandboxV1alpha1().Sandboxes(o.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case o.forDelete && apierrors.IsNotFound(err):
		return o.gone(name), nil
	case err != nil:
		return nil, err
	}
	// With --for=delete the UID tells the sandbox from a new one of the same name, which ends
	// the wait as kubectl wait's does.
	uid := sb.UID
	if done, err := o.met(sb, uid); done || err != nil {
		return sb, err
	}
	if o.Timeout == 0 {
		return nil, fmt.Errorf("condition not met for sandboxes/%s%s", name, o.notMetReason(sb))
	}
	last, err := sandboxclient.WaitForSandbox(ctx, o.Client, o.Namespace, name, func(current *sandboxv1alpha1.Sandbox) (bool, error) {
		switch {
		case current == nil && o.forDelete:
			return true, nil
		case current == nil:
			return false, o.deleted(name)
		}
		return o.met(current, uid)
	})
	if last == nil {
		// Gone before the watch saw it.
		last = sb
	}
	return last, err
}

// met reports whether sb is in the phase waited for, has the condition waited for, or with
// --for=delete has been replaced by a new sandbox of the same name. Waiting for Running,
// Succeeded or TasksComplete fails when sb can no longer get there.
func (o *WaitOptions) met(sb *sandboxv1alpha1.Sandbox, uid types.UID) (bool, error) {
	if o.forDelete {
		return sb.UID != uid, nil
	}
	phase := sandboxclient.Phase(sb)
	if o.conditionType != "" {
		if c := condition(sb, o.conditionType); c != nil && strings.EqualFold(string(c.Status), o.conditionStatus) {
			return true, nil
		}
	} else if phase == o.phase {
		return true, nil
	}
	tasksComplete := strings.EqualFold(o.conditionType, sandboxv1alpha1.ConditionTasksComplete) && strings.EqualFold(o.conditionStatus, string(metav1.ConditionTrue))
	if o.phase != sandboxv1alpha1.PhaseRunning && o.phase != sandboxv1alpha1.PhaseSucceeded && !tasksComplete {
		return false, nil
	}
	if o.phase != sandboxv1alpha1.PhaseRunning && sb.Spec.TaskTemplate == nil {
		return false, fmt.Errorf("sandbox %q runs no task (it has no spec.taskTemplate): its tasks never complete", sb.Name)
	}
	switch phase {
	case sandboxv1alpha1.PhaseFailed:
		return false, fmt.Errorf("sandbox %q failed%s", sb.Name, failedReason(sb))
	case sandboxv1alpha1.PhaseExpired:
		return false, fmt.Errorf("sandbox %q expired", sb.Name)
	case sandboxv1alpha1.PhaseTerminating:
		return false, fmt.Errorf("sandbox %q is being deleted", sb.Name)
	case sandboxv1alpha1.PhaseSucceeded:
		if o.phase == sandboxv1alpha1.PhaseRunning {
			// Its tasks have ended: it will not be Running again.
			return false, fmt.Errorf("sandbox %q succeeded: its tasks have ended (--for=TasksComplete waits for that)", sb.Name)
		}
	}
	return false, nil
}

// condition is the condition of sb of the type typ, in any case, as kubectl wait matches it;
// nil without one.
func condition(sb *sandboxv1alpha1.Sandbox, typ string) *metav1.Condition {
	for i := range sb.Status.Conditions {
		if strings.EqualFold(sb.Status.Conditions[i].Type, typ) {
			return &sb.Status.Conditions[i]
		}
	}
	return nil
}

// failedReason says why a sandbox failed: its tasks' when one failed for good, else the Ready
// condition's.
func failedReason(sb *sandboxv1alpha1.Sandbox) string {
	if c := condition(sb, sandboxv1alpha1.ConditionTasksFailed); c != nil && c.Status == metav1.ConditionTrue {
		return conditionReason(c)
	}
	return readyReason(sb)
}

// readyReason is ": REASON: MESSAGE" of the Ready condition when it is not true, so that a
// failure says what to fix; empty without one.
func readyReason(sb *sandboxv1alpha1.Sandbox) string {
	if c := condition(sb, "Ready"); c != nil && c.Status != metav1.ConditionTrue {
		return conditionReason(c)
	}
	return ""
}

// conditionReason is ": REASON: MESSAGE" of c, without what it lacks.
func conditionReason(c *metav1.Condition) string {
	s := ""
	if c.Reason != "" {
		s += ": " + c.Reason
	}
	if c.Message != "" {
		s += ": " + c.Message
	}
	return s
}

// notMetReason is ": REASON: MESSAGE" of what holds up the sandbox last seen: its Ready
// condition when it is not true, such as PoolExhausted or PoolNotFound, else the condition
// waited for (TasksComplete: TasksRunning, say); empty with --for=delete or without such a
// condition.
func (o *WaitOptions) notMetReason(sb *sandboxv1alpha1.Sandbox) string {
	if o.forDelete || sb == nil {
		return ""
	}
	// A replica without a ready pod is what to fix first, whatever is waited for.
	if s := readyReason(sb); s != "" || o.conditionType == "" {
		return s
	}
	if c := condition(sb, o.conditionType); c != nil {
		return conditionReason(c)
	}
	return ""
}

// deleted is the error of a sandbox that went away while waiting for a phase or condition.
func (o *WaitOptions) deleted(name string) error {
	if o.conditionType != "" {
		return fmt.Errorf("sandbox %q was deleted while waiting for condition %s=%s", name, o.conditionType, o.conditionStatus)
	}
	return fmt.Errorf("sandbox %q was deleted while waiting for phase %s", name, o.phase)
}

// gone is what is printed for a sandbox that no longer exists and was not seen before.
func (o *WaitOptions) gone(name string) *sandboxv1alpha1.Sandbox {
	return &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.Namespace}}
}
