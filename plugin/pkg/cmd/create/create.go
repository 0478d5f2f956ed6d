// Package create implements `kubectl sandbox create`.
package create

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/client/netpolicy"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// ContainerName is the name of the one container of a sandbox made by `create`; the server
// treats the first container of the template as the sandbox container.
const ContainerName = "sandbox"

// minTimeout is the server's minimum timeoutSeconds: a sandbox that expired sooner than its pods
// can start would be of no use. Checked here too, so that the error names the flag.
const minTimeout = 60 * time.Second

// minAutoRenew is the least auto-renew extension the API takes: a positive whole second.
const minAutoRenew = time.Second

// Values of --dry-run, as kubectl's.
const (
	dryRunNone   = "none"
	dryRunClient = "client"
	dryRunServer = "server"
)

var (
	createLong = cmdutil.LongDesc(`
		Create a sandbox running an image, or one from a warm pool.

		With --image, the sandbox gets one pod per replica, each made from a template with a
		single container named "sandbox" running IMAGE. Arguments after -- become the sandbox's
		entrypoint, replacing the image's; without them the container only waits for commands
		sent with 'kubectl sandbox exec'.

		With --pool, each replica is given an idle pod, started already, of the Pool POOL
		(pools.control.kube-sandbox.io) of the same namespace: the sandbox does not wait for a
		pod to start. The entrypoint and --env reach the pod when it is given to the sandbox.
		While the pool has no idle pod, the sandbox stays Pending with the reason PoolExhausted
		until the pool has grown; PoolNotFound says that there is no such pool. Exactly one of
		--image and --pool is required. --runtime-class runs the pods of an --image sandbox
		with a RuntimeClass of the cluster, like gvisor ('kubectl get runtimeclasses'); a pool's
		template names its own.

		With --timeout the sandbox is deleted that long after its creation, unless renewed
		with 'kubectl sandbox renew'; without it, it lives until deleted. --auto-renew keeps
		a sandbox with a timeout alive while it is used: every exec (and file or proxy access)
		moves its expiry to at least that far ahead.

		--allow gives the sandbox a network policy of its own that denies all outbound
		traffic except to the targets given, in the order given (the first rule that matches
		decides). --deny-all gives it one that denies everything. Without either, the
		sandbox has no policy of its own: its pool's policy applies, else the platform's
		default, which denies everything. 'kubectl sandbox network' shows and changes the
		policy later.

		With --task, the arguments after -- are not the entrypoint but a task: each replica
		runs it once its pod is ready, and the sandbox ends up Succeeded when every replica's
		task exited 0, or Failed when one failed for good. 'kubectl sandbox tasks' shows each
		replica's task, 'kubectl sandbox logs' its output, and 'kubectl sandbox wait
		--for=TasksComplete' waits for all of them. --task-restart=OnFailure retries a failed
		attempt up to --backoff-limit times (3 by default); --task-timeout fails an attempt that
		runs longer; --task-env sets variables of the task only. With --release each replica's
		pod is released once its task has ended: deleted, or recycled as its pool says (its
		outcome stays in the status, its log goes with the pod); without it the pods stay for
		exec, cp and logs until the sandbox is deleted or expires.`) + "\n\n" + netpolicy.TargetSyntax

	createExample = cmdutil.Examples(`
		# Create a sandbox running python that waits for commands
		kubectl sandbox create my-sandbox --image python:3.13-slim

		# Create a sandbox with two replicas and environment variables
		kubectl sandbox create workers --image busybox --replicas 2 --env MODE=test --env DEBUG=1

		# Create a sandbox whose container runs an HTTP server
		kubectl sandbox create web --image python:3.13-slim -- python -m http.server 8080

		# Create a sandbox whose pod runs in gVisor (the RuntimeClass gvisor)
		kubectl sandbox create isolated --image python:3.13-slim --runtime-class gvisor

		# Create a sandbox from an idle pod of the warm pool "python" (see 'kubectl get pools')
		kubectl sandbox create fast --pool python

		# Create a sandbox with two replicas from the pool, with environment variables
		kubectl sandbox create pooled --pool python --replicas 2 --env MODE=test

		# Create a sandbox that is deleted after 30 minutes, or 10 minutes after its last use
		# if that is later
		kubectl sandbox create agent --image python:3.13-slim --timeout 30m --auto-renew 10m

		# Create a sandbox that may reach PyPI over HTTPS and nothing else
		kubectl sandbox create pip --image python:3.13-slim --allow pypi.org:443,'*.pythonhosted.org:443'

		# Create a sandbox from a pool whose outbound traffic is all denied
		kubectl sandbox create offline --pool python --deny-all

		# Run a task in 10 replicas, retrying failed attempts, and free each pod when it is done
		kubectl sandbox create eval --image python:3.13-slim --replicas 10 --task \
		  --task-restart OnFailure --backoff-limit 2 --task-timeout 30m --release -- python -c 'print(6*7)'

		# Run a task with a variable of its own, then follow its output
		kubectl sandbox create job --pool python --task --task-env MODE=eval -- python3 eval.py
		kubectl sandbox logs job -f

		# Print the sandbox that would be created, without creating it
		kubectl sandbox create my-sandbox --image busybox --dry-run=client -o yaml`)
)

// CreateOptions are the inputs of `kubectl sandbox create`.
type CreateOptions struct {
	PrintFlags *genericclioptions.PrintFlags
	PrintObj   printers.ResourcePrinterFunc

	Name  string
	Image string
	Pool  string
	// RuntimeClass is the template's runtimeClassName (--image only).
	RuntimeClass string
	Env          []string
	Replicas     int32
	Entrypoint   []string
	DryRun       string
	Timeout      time.Duration
	AutoRenew    time.Duration
	// Allow are the --allow targets, DenyAll --deny-all.
	Allow   []string
	DenyAll bool
	// Task makes the arguments after -- the task of each replica (spec.taskTemplate) rather
	// than the entrypoint. TaskRestart, BackoffLimit, TaskTimeout, TaskEnv and Release shape
	// it, with --task only.
	Task         bool
	TaskRestart  string
	BackoffLimit int32
	TaskTimeout  time.Duration
	TaskEnv      []string
	Release      bool

	// replicasSet is whether --replicas was given; without it the server's default applies.
	replicasSet bool
	// timeoutSet and autoRenewSet are whether --timeout and --auto-renew were given: only then
	// do spec.timeoutSeconds and spec.autoRenew get a value.
	timeoutSet   bool
	autoRenewSet bool
	envVars      []corev1.EnvVar
	// timeoutSeconds and extendSeconds are the flags' values in seconds, set by Validate.
	timeoutSeconds *int64
	extendSeconds  *int64
	// networkPolicy is spec.networkPolicy from --allow or --deny-all, set by Validate.
	networkPolicy *sandboxv1alpha1.SandboxNetworkPolicy
	// taskFlags are the --task-* flags (and --backoff-limit, --release) that were given;
	// taskTemplate is spec.taskTemplate from them, set by Validate.
	taskFlags    []string
	taskTemplate *sandboxv1alpha1.SandboxTaskTemplate

	Namespace string
	Client    clientset.Interface

	genericiooptions.IOStreams
}

// NewCreateOptions returns CreateOptions with kubectl's defaults.
func NewCreateOptions(streams genericiooptions.IOStreams) *CreateOptions {
	return &CreateOptions{
		PrintFlags: genericclioptions.NewPrintFlags("created").WithTypeSetter(scheme.Scheme),
		Replicas:   1,
		DryRun:     dryRunNone,
		IOStreams:  streams,
	}
}

// NewCmdCreate returns the `create` command.
func NewCmdCreate(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewCreateOptions(streams)
	cmd := &cobra.Command{
		Use:                   "create NAME (--image=IMAGE | --pool=POOL) [--env=KEY=VALUE]... [--replicas=N] [--timeout=DURATION [--auto-renew=DURATION]] [--allow=TARGET[:PORTS]... | --deny-all] [-- ENTRYPOINT [ARG...] | --task [--task-restart=Never|OnFailure] [--backoff-limit=N] [--task-timeout=DURATION] [--task-env=KEY=VALUE]... [--release] -- COMMAND [ARG...]]",
		DisableFlagsInUseLine: true,
		Short:                 "Create a sandbox",
		Long:                  createLong,
		Example:               createExample,
		ValidArgsFunction:     cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, cmd, args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.PrintFlags.AddFlags(cmd)
	cmd.Flags().StringVar(&o.Image, "image", o.Image, "The container image the sandbox runs. Exactly one of --image and --pool.")
	cmd.Flags().StringVar(&o.Pool, "pool", o.Pool, "The warm pool (a Pool of the namespace) whose idle pods the replicas get. Exactly one of --image and --pool.")
	_ = cmd.RegisterFlagCompletionFunc("pool", cmdutil.PoolNameCompletion(f))
	cmd.Flags().StringVar(&o.RuntimeClass, "runtime-class", o.RuntimeClass, "With --image: the RuntimeClass of the sandbox's pods (like gvisor). Default: the platform's (sandbox-apiserver's --default-runtime-class), else the node's default runtime. Another class than the platform's needs the right to create pods.")
	cmd.Flags().StringArrayVarP(&o.Env, "env", "e", o.Env, "An environment variable of the sandbox container, KEY=VALUE; repeat for more.")
	cmd.Flags().Int32Var(&o.Replicas, "replicas", o.Replicas, "Number of sandbox pods.")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "Lifetime of the sandbox (like 30m or 2h, at least 60s): it is deleted that long after creation unless renewed. The server may cap it. Default: no expiry.")
	cmd.Flags().DurationVar(&o.AutoRenew, "auto-renew", o.AutoRenew, "With --timeout: on every exec (and file or proxy access), move the expiry to at least this long ahead (like 10m), so a sandbox in use does not expire.")
	cmd.Flags().StringArrayVar(&o.Allow, "allow", o.Allow, "Deny all outbound traffic except to this TARGET[:PORTS] (like pypi.org:443 or 10.0.0.0/8:8080-8090/UDP); repeat or separate with commas for more, matched in order.")
	cmd.Flags().BoolVar(&o.DenyAll, "deny-all", o.DenyAll, "Deny all outbound traffic. Without --allow or --deny-all, the pool's policy or the platform's default applies.")
	cmd.Flags().BoolVar(&o.Task, "task", o.Task, "Run the command after -- as each replica's task (spec.taskTemplate), once its pod is ready, instead of as the entrypoint.")
	cmd.Flags().StringVar(&o.TaskRestart, "task-restart", o.TaskRestart, "With --task: Never (the default: a failed attempt fails the task) or OnFailure (retry it, up to --backoff-limit times).")
	_ = cmd.RegisterFlagCompletionFunc("task-restart", cobra.FixedCompletions(
		[]string{sandboxv1alpha1.TaskRestartNever, sandboxv1alpha1.TaskRestartOnFailure}, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().Int32Var(&o.BackoffLimit, "backoff-limit", o.BackoffLimit, fmt.Sprintf("With --task-restart=OnFailure: how many times a failed task is retried (0-%d; default %d).", maxBackoffLimit, sandboxv1alpha1.DefaultTaskBackoffLimit))
	cmd.Flags().DurationVar(&o.TaskTimeout, "task-timeout", o.TaskTimeout, "With --task: fail an attempt that runs longer than this (like 30m; whole seconds). Default: no limit.")
	cmd.Flags().StringArrayVar(&o.TaskEnv, "task-env", o.TaskEnv, "With --task: an environment variable of the task only, KEY=VALUE; repeat for more.")
	cmd.Flags().BoolVar(&o.Release, "release", o.Release, "With --task: release each replica's pod (delete it, or recycle it as its pool says) once its task has ended, its log with it, instead of keeping it until the sandbox is deleted.")
	cmd.Flags().StringVar(&o.DryRun, "dry-run", o.DryRun, `Must be "none", "server", or "client". With "client", only print the object that would be sent; with "server", submit it without persisting it.`)
	return cmd
}

// Complete takes the name, entrypoint and namespace from the command line and kubeconfig.
func (o *CreateOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash == 0:
		return cmdutil.UsageErrorf(cmd, "NAME is required before --")
	case dash > 1:
		return cmdutil.UsageErrorf(cmd, "create takes one NAME; put the entrypoint after --, as in: create NAME --image=IMAGE -- %s", strings.Join(args[1:], " "))
	case dash == 1:
		o.Name, o.Entrypoint = args[0], args[1:]
	case len(args) == 1:
		o.Name = args[0]
	case len(args) == 0:
		return cmdutil.UsageErrorf(cmd, "NAME is required")
	default:
		return cmdutil.UsageErrorf(cmd, "create takes one NAME; put the entrypoint after --, as in: create NAME --image=IMAGE -- %s", strings.Join(args[1:], " "))
	}
	o.replicasSet = cmd.Flags().Changed("replicas")
	o.timeoutSet = cmd.Flags().Changed("timeout")
	o.autoRenewSet = cmd.Flags().Changed("auto-renew")
	o.taskFlags = nil
	for _, name := range []string{"task-restart", "backoff-limit", "task-timeout", "task-env", "release"} {
		if cmd.Flags().Changed(name) {
			o.taskFlags = append(o.taskFlags, name)
		}
	}

	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}

	switch o.DryRun {
	case dryRunClient:
		err = o.PrintFlags.Complete("%s (dry run)")
	case dryRunServer:
		err = o.PrintFlags.Complete("%s (server dry run)")
	case dryRunNone:
		err = o.PrintFlags.Complete("%s")
	default:
		return cmdutil.UsageErrorf(cmd, `invalid --dry-run %q: must be "none", "server", or "client"`, o.DryRun)
	}
	if err != nil {
		return err
	}
	printer, err := o.PrintFlags.ToPrinter()
	if err != nil {
		return err
	}
	o.PrintObj = printer.PrintObj

	if o.DryRun != dryRunClient {
		if o.Client, err = f.SandboxClient(); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks the flags before anything is sent, so mistakes get a message that names the
// flag rather than a field path from the server.
func (o *CreateOptions) Validate() error {
	if errs := validation.IsDNS1123Subdomain(o.Name); len(errs) > 0 {
		return fmt.Errorf("invalid sandbox name %q: %s", o.Name, strings.Join(errs, "; "))
	}
	image, pool := strings.TrimSpace(o.Image) != "", o.Pool != ""
	switch {
	case image && pool:
		return fmt.Errorf("--image and --pool cannot be used together: a sandbox runs an image of its own or takes pods from a pool")
	case !image && !pool:
		return fmt.Errorf("--image or --pool is required")
	case pool:
		if errs := validation.IsDNS1123Subdomain(o.Pool); len(errs) > 0 {
			return fmt.Errorf("invalid --pool %q: %s", o.Pool, strings.Join(errs, "; "))
		}
		if o.RuntimeClass != "" {
			return fmt.Errorf("--runtime-class cannot be used with --pool: the pool's template names its runtime class")
		}
	}
	if o.RuntimeClass != "" {
		if errs := validation.IsDNS1123Subdomain(o.RuntimeClass); len(errs) > 0 {
			return fmt.Errorf("invalid --runtime-class %q: %s", o.RuntimeClass, strings.Join(errs, "; "))
		}
	}
	if o.replicasSet && o.Replicas < 1 {
		return fmt.Errorf("--replicas must be at least 1, got %d", o.Replicas)
	}
	env, err := ParseEnv(o.Env)
	if err != nil {
		return err
	}
	o.envVars = env

	o.timeoutSeconds, o.extendSeconds = nil, nil
	if o.timeoutSet {
		seconds, err := cmdutil.WholeSeconds("timeout", o.Timeout, minTimeout)
		if err != nil {
			return err
		}
		o.timeoutSeconds = &seconds
	}
	if o.autoRenewSet {
		if !o.timeoutSet {
			return fmt.Errorf("--auto-renew requires --timeout: a sandbox without a timeout never expires, so there is nothing to renew")
		}
		seconds, err := cmdutil.WholeSeconds("auto-renew", o.AutoRenew, minAutoRenew)
		if err != nil {
			return err
		}
		o.extendSeconds = &seconds
	}

	policy, err := NetworkPolicy(o.Allow, o.DenyAll)
	if err != nil {
		return err
	}
	o.networkPolicy = policy

	task, err := o.task()
	if err != nil {
		return err
	}
	o.taskTemplate = task
	return nil
}

// maxBackoffLimit is the API's maximum backoffLimit.
const maxBackoffLimit = 100

// task is spec.taskTemplate from --task and the flags that shape it; nil without --task.
func (o *CreateOptions) task() (*sandboxv1alpha1.SandboxTaskTemplate, error) {
	if !o.Task {
		if len(o.taskFlags) > 0 {
			return nil, fmt.Errorf("--%s requires --task", o.taskFlags[0])
		}
		return nil, nil
	}
	if len(o.Entrypoint) == 0 {
		return nil, fmt.Errorf("--task requires the task's command after --, as in: create %s --task -- COMMAND [ARG...]", o.Name)
	}
	task := &sandboxv1alpha1.SandboxTaskTemplate{Command: o.Entrypoint}
	switch {
	case o.TaskRestart == "":
	case strings.EqualFold(o.TaskRestart, sandboxv1alpha1.TaskRestartNever):
		task.RestartPolicy = sandboxv1alpha1.TaskRestartNever
	case strings.EqualFold(o.TaskRestart, sandboxv1alpha1.TaskRestartOnFailure):
		task.RestartPolicy = sandboxv1alpha1.TaskRestartOnFailure
	default:
		return nil, fmt.Errorf("invalid --task-restart %q: must be Never or OnFailure", o.TaskRestart)
	}
	if slices.Contains(o.taskFlags, "backoff-limit") {
		if task.RestartPolicy != sandboxv1alpha1.TaskRestartOnFailure {
			return nil, fmt.Errorf("--backoff-limit requires --task-restart=OnFailure: otherwise a failed task is not retried")
		}
		if o.BackoffLimit < 0 || o.BackoffLimit > maxBackoffLimit {
			return nil, fmt.Errorf("--backoff-limit must be between 0 and %d, got %d", maxBackoffLimit, o.BackoffLimit)
		}
		limit := o.BackoffLimit
		task.BackoffLimit = &limit
	}
	if slices.Contains(o.taskFlags, "task-timeout") {
		seconds, err := cmdutil.WholeSeconds("task-timeout", o.TaskTimeout, time.Second)
		if err != nil {
			return nil, err
		}
		task.TimeoutSeconds = &seconds
	}
	env, err := parseEnv("task-env", o.TaskEnv)
	if err != nil {
		return nil, err
	}
	for _, e := range env {
		task.Env = append(task.Env, sandboxv1alpha1.SandboxTaskEnvVar{Name: e.Name, Value: e.Value})
	}
	return task, nil
}

// NetworkPolicy is the policy of --allow and --deny-all (netpolicy.ForCreate).
func NetworkPolicy(allow []string, denyAll bool) (*sandboxv1alpha1.SandboxNetworkPolicy, error) {
	return netpolicy.ForCreate(allow, denyAll)
}

// ParseEnv turns KEY=VALUE flags into environment variables, in order. VALUE may be empty and
// may contain '='; KEY must be a valid environment variable name and appear once.
func ParseEnv(flags []string) ([]corev1.EnvVar, error) {
	return parseEnv("env", flags)
}

// parseEnv is ParseEnv for the values of the flag named flag.
func parseEnv(flag string, flags []string) ([]corev1.EnvVar, error) {
	var env []corev1.EnvVar
	seen := map[string]bool{}
	for _, kv := range flags {
		key, value, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("invalid --%s %q: must be KEY=VALUE", flag, kv)
		}
		if errs := validation.IsEnvVarName(key); len(errs) > 0 {
			return nil, fmt.Errorf("invalid --%s %q: %q is not a valid variable name: %s", flag, kv, key, strings.Join(errs, "; "))
		}
		if seen[key] {
			return nil, fmt.Errorf("invalid --%s %q: %s is set more than once", flag, kv, key)
		}
		seen[key] = true
		env = append(env, corev1.EnvVar{Name: key, Value: value})
	}
	return env, nil
}

// Sandbox is the object the validated options describe.
func (o *CreateOptions) Sandbox() *sandboxv1alpha1.Sandbox {
	sb := &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace},
		Spec: sandboxv1alpha1.SandboxSpec{
			Env:            o.envVars,
			TimeoutSeconds: o.timeoutSeconds,
			NetworkPolicy:  o.networkPolicy,
		},
	}
	if o.taskTemplate != nil {
		// The words after -- are the task; the container runs execd alone, waiting for it.
		sb.Spec.TaskTemplate = o.taskTemplate.DeepCopy()
		if o.Release {
			sb.Spec.TaskResourcePolicyWhenCompleted = sandboxv1alpha1.TaskResourceRelease
		}
	} else {
		sb.Spec.Entrypoint = o.Entrypoint
	}
	if o.Pool != "" {
		sb.Spec.PoolRef = &sandboxv1alpha1.SandboxPoolReference{Name: o.Pool}
	} else {
		sb.Spec.Template = &corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: ContainerName, Image: o.Image}},
			},
		}
		if o.RuntimeClass != "" {
			rc := o.RuntimeClass
			sb.Spec.Template.Spec.RuntimeClassName = &rc
		}
	}
	if o.replicasSet {
		replicas := o.Replicas
		sb.Spec.Replicas = &replicas
	}
	if o.extendSeconds != nil {
		sb.Spec.AutoRenew = &sandboxv1alpha1.SandboxAutoRenew{ExtendSeconds: *o.extendSeconds}
	}
	return sb
}

// Run creates the sandbox (unless --dry-run=client) and prints the result.
func (o *CreateOptions) Run(ctx context.Context) error {
	sb := o.Sandbox()
	if o.DryRun == dryRunClient {
		return o.PrintObj(sb, o.Out)
	}
	opts := metav1.CreateOptions{}
	if o.DryRun == dryRunServer {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if sb.Spec.NetworkPolicy != nil || sb.Spec.TaskTemplate != nil {
		// A server that does not know spec.networkPolicy or spec.taskTemplate refuses the
		// sandbox rather than creating it without the policy asked for, or as an idle
		// sandbox that runs no task.
		opts.FieldValidation = metav1.FieldValidationStrict
	}
	created, err := o.Client.SandboxV1alpha1().Sandboxes(o.Namespace).Create(ctx, sb, opts)
	if err != nil {
		return err
	}
	return o.PrintObj(created, o.Out)
}
