package create

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

func template(image string) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "sandbox", Image: image}},
	}}
}

func TestCreate(t *testing.T) {
	existing := &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: cmdtesting.Namespace}}

	tests := []struct {
		name    string
		args    []string
		objects []*sandboxv1alpha1.Sandbox
		// want is the stored sandbox, nil when nothing may be created.
		want    *sandboxv1alpha1.Sandbox
		wantOut string
		// wantErr is the message main would print.
		wantErr string
	}{
		{
			name: "image only leaves replicas to the server",
			args: []string{"s1", "--image", "busybox"},
			want: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "s1", Namespace: cmdtesting.Namespace},
				Spec:       sandboxv1alpha1.SandboxSpec{Template: template("busybox")},
			},
			wantOut: "sandbox.sandbox.kube-sandbox.io/s1 created\n",
		},
		{
			name: "env, replicas and entrypoint",
			args: []string{"s2", "--image=python:3.13-slim", "--env", "A=1", "-e", "B=x=y", "--env=C=", "--replicas", "3",
				"--", "python", "-m", "http.server", "--bind", "0.0.0.0"},
			want: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "s2", Namespace: cmdtesting.Namespace},
				Spec: sandboxv1alpha1.SandboxSpec{
					Replicas:   ptr.To[int32](3),
					Template:   template("python:3.13-slim"),
					Entrypoint: []string{"python", "-m", "http.server", "--bind", "0.0.0.0"},
					Env: []corev1.EnvVar{
						{Name: "A", Value: "1"},
						{Name: "B", Value: "x=y"},
						{Name: "C", Value: ""},
					},
				},
			},
			wantOut: "sandbox.sandbox.kube-sandbox.io/s2 created\n",
		},
		{
			name: "runtime class",
			args: []string{"s13", "--image", "busybox", "--runtime-class", "gvisor"},
			want: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "s13", Namespace: cmdtesting.Namespace},
				Spec: sandboxv1alpha1.SandboxSpec{Template: func() *corev1.PodTemplateSpec {
					tpl := template("busybox")
					tpl.Spec.RuntimeClassName = ptr.To("gvisor")
					return tpl
				}()},
			},
			wantOut: "sandbox.sandbox.kube-sandbox.io/s13 created\n",
		},
		{
			name:    "runtime class with a pool",
			args:    []string{"s14", "--pool", "python", "--runtime-class", "gvisor"},
			wantErr: "error: --runtime-class cannot be used with --pool: the pool's template names its runtime class\n",
		},
		{
			name:    "runtime class that is not a name",
			args:    []string{"s14", "--image", "busybox", "--runtime-class", "G_Visor"},
			wantErr: `error: invalid --runtime-class "G_Visor": a lowercase RFC 1123 subdomain`,
		},
		{
			name: "timeout and auto-renew in seconds",
			args: []string{"s10", "--image", "busybox", "--timeout", "10m", "--auto-renew=5m"},
			want: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "s10", Namespace: cmdtesting.Namespace},
				Spec: sandboxv1alpha1.SandboxSpec{
					Template:       template("busybox"),
					TimeoutSeconds: ptr.To[int64](600),
					AutoRenew:      &sandboxv1alpha1.SandboxAutoRenew{ExtendSeconds: 300},
				},
			},
			wantOut: "sandbox.sandbox.kube-sandbox.io/s10 created\n",
		},
		{
			name: "timeout of exactly the minimum, no auto-renew",
			args: []string{"s11", "--image", "busybox", "--timeout=60s"},
			want: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "s11", Namespace: cmdtesting.Namespace},
				Spec:       sandboxv1alpha1.SandboxSpec{Template: template("busybox"), TimeoutSeconds: ptr.To[int64](60)},
			},
			wantOut: "sandbox.sandbox.kube-sandbox.io/s11 created\n",
		},
		{
			name:    "timeout below the minimum",
			args:    []string{"s12", "--image", "busybox", "--timeout", "30s"},
			wantErr: "error: --timeout must be at least 60s, got 30s\n",
		},
		{
			name:    "zero timeout is below the minimum, not no timeout",
			args:    []string{"s12", "--image", "busybox", "--timeout", "0"},
			wantErr: "error: --timeout must be at least 60s, got 0s\n",
		},
		{
			name:    "timeout with a fraction of a second",
			args:    []string{"s12", "--image", "busybox", "--timeout", "90.5s"},
			wantErr: "error: --timeout must be a whole number of seconds, got 1m30.5s\n",
		},
		{
			name:    "auto-renew without timeout",
			args:    []string{"s12", "--image", "busybox", "--auto-renew", "5m"},
			wantErr: "error: --auto-renew requires --timeout: a sandbox without a timeout never expires, so there is nothing to renew\n",
		},
		{
			name:    "zero auto-renew",
			args:    []string{"s12", "--image", "busybox", "--timeout", "10m", "--auto-renew", "0s"},
			wantErr: "error: --auto-renew must be at least 1s, got 0s\n",
		},
		{
			name:    "timeout that is not a duration",
			args:    []string{"s12", "--image", "busybox", "--timeout", "600"},
			wantErr: `error: invalid argument "600" for "--timeout" flag: time: missing unit in duration "600"`,
		},
		{
			name:    "client dry run shows the timeout",
			args:    []string{"s13", "--image", "busybox", "--timeout", "1h", "--auto-renew", "90s", "--dry-run=client", "-o", "jsonpath={.spec.timeoutSeconds} {.spec.autoRenew.extendSeconds}"},
			wantOut: "3600 90",
		},
		{
			name:    "output name after server dry run",
			args:    []string{"s3", "--image", "busybox", "--dry-run=server", "-o", "name"},
			want:    nil, // the fake does not honor dry run, so only the output is checked
			wantOut: "sandbox.sandbox.kube-sandbox.io/s3\n",
		},
		{
			name:    "client dry run creates nothing",
			args:    []string{"s4", "--image", "busybox", "--dry-run=client"},
			wantOut: "sandbox.sandbox.kube-sandbox.io/s4 created (dry run)\n",
		},
		{
			name: "pool only leaves the template out",
			args: []string{"p1", "--pool", "python"},
			want: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: cmdtesting.Namespace},
				Spec:       sandboxv1alpha1.SandboxSpec{PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: "python"}},
			},
			wantOut: "sandbox.sandbox.kube-sandbox.io/p1 created\n",
		},
		{
			name: "pool with replicas, env, timeout and entrypoint",
			args: []string{"p2", "--pool=python", "--replicas", "3", "-e", "MODE=test", "--env", "B=x=y",
				"--timeout", "1h", "--auto-renew", "10m", "--", "python3", "-m", "http.server"},
			want: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "p2", Namespace: cmdtesting.Namespace},
				Spec: sandboxv1alpha1.SandboxSpec{
					Replicas:       ptr.To[int32](3),
					PoolRef:        &sandboxv1alpha1.SandboxPoolReference{Name: "python"},
					Entrypoint:     []string{"python3", "-m", "http.server"},
					Env:            []corev1.EnvVar{{Name: "MODE", Value: "test"}, {Name: "B", Value: "x=y"}},
					TimeoutSeconds: ptr.To[int64](3600),
					AutoRenew:      &sandboxv1alpha1.SandboxAutoRenew{ExtendSeconds: 600},
				},
			},
			wantOut: "sandbox.sandbox.kube-sandbox.io/p2 created\n",
		},
		{
			name:    "client dry run shows the pool and no template",
			args:    []string{"p3", "--pool", "python", "--dry-run=client", "-o", "jsonpath={.spec.poolRef.name} {.spec.template}"},
			wantOut: "python ",
		},
		{
			name:    "image and pool",
			args:    []string{"p4", "--image", "busybox", "--pool", "python"},
			wantErr: "error: --image and --pool cannot be used together: a sandbox runs an image of its own or takes pods from a pool\n",
		},
		{
			name:    "invalid pool name",
			args:    []string{"p5", "--pool", "Python_3"},
			wantErr: `error: invalid --pool "Python_3": a lowercase RFC 1123 subdomain`,
		},
		{
			name:    "blank pool",
			args:    []string{"p6", "--pool", " "},
			wantErr: `error: invalid --pool " "`,
		},
		{
			name:    "zero replicas from a pool",
			args:    []string{"p7", "--pool", "python", "--replicas", "0"},
			wantErr: "error: --replicas must be at least 1, got 0",
		},
		{
			name:    "neither image nor pool",
			args:    []string{"s5"},
			wantErr: "error: --image or --pool is required\n",
		},
		{
			name:    "blank image",
			args:    []string{"s5", "--image", " "},
			wantErr: "error: --image or --pool is required\n",
		},
		{
			name:    "empty pool",
			args:    []string{"s5", "--pool="},
			wantErr: "error: --image or --pool is required\n",
		},
		{
			name:    "env without equals",
			args:    []string{"s6", "--image", "busybox", "--env", "FOO"},
			wantErr: `error: invalid --env "FOO": must be KEY=VALUE`,
		},
		{
			name:    "env with empty name",
			args:    []string{"s6", "--image", "busybox", "--env", "=bar"},
			wantErr: `error: invalid --env "=bar": "" is not a valid variable name`,
		},
		{
			name:    "env name starting with a digit",
			args:    []string{"s6", "--image", "busybox", "--env", "1FOO=bar"},
			wantErr: `error: invalid --env "1FOO=bar": "1FOO" is not a valid variable name`,
		},
		{
			name:    "env set twice",
			args:    []string{"s6", "--image", "busybox", "--env", "A=1", "--env", "A=2"},
			wantErr: `error: invalid --env "A=2": A is set more than once`,
		},
		{
			name:    "zero replicas",
			args:    []string{"s7", "--image", "busybox", "--replicas", "0"},
			wantErr: "error: --replicas must be at least 1, got 0",
		},
		{
			name:    "no name",
			args:    []string{"--image", "busybox"},
			wantErr: "error: NAME is required\nSee 'create -h' for help and examples",
		},
		{
			name:    "entrypoint without --",
			args:    []string{"s8", "sleep", "1", "--image", "busybox"},
			wantErr: "error: create takes one NAME; put the entrypoint after --, as in: create NAME --image=IMAGE -- sleep 1\nSee 'create -h' for help and examples",
		},
		{
			name:    "invalid name",
			args:    []string{"Bad_Name", "--image", "busybox"},
			wantErr: `error: invalid sandbox name "Bad_Name"`,
		},
		{
			name:    "bad dry-run value",
			args:    []string{"s9", "--image", "busybox", "--dry-run=maybe"},
			wantErr: `error: invalid --dry-run "maybe"`,
		},
		{
			name: "task: the words after -- are its command, not the entrypoint",
			args: []string{"t1", "--image", "python:3.13-slim", "--replicas", "10", "--task", "--", "python", "-c", "print(6*7)"},
			want: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "t1", Namespace: cmdtesting.Namespace},
				Spec: sandboxv1alpha1.SandboxSpec{
					Replicas:     ptr.To[int32](10),
					Template:     template("python:3.13-slim"),
					TaskTemplate: &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"python", "-c", "print(6*7)"}},
				},
			},
			wantOut: "sandbox.sandbox.kube-sandbox.io/t1 created\n",
		},
		{
			name: "task with every flag",
			args: []string{"t2", "--pool", "python", "--env", "A=1", "--task", "--task-restart", "onfailure", "--backoff-limit", "0",
				"--task-timeout", "30m", "--task-env", "MODE=eval", "--task-env=SEED=", "--release", "--", "python3", "eval.py", "--fast"},
			want: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "t2", Namespace: cmdtesting.Namespace},
				Spec: sandboxv1alpha1.SandboxSpec{
					PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: "python"},
					Env:     []corev1.EnvVar{{Name: "A", Value: "1"}},
					TaskTemplate: &sandboxv1alpha1.SandboxTaskTemplate{
						Command:        []string{"python3", "eval.py", "--fast"},
						RestartPolicy:  "OnFailure",
						BackoffLimit:   ptr.To[int32](0),
						TimeoutSeconds: ptr.To[int64](1800),
						Env:            []sandboxv1alpha1.SandboxTaskEnvVar{{Name: "MODE", Value: "eval"}, {Name: "SEED"}},
					},
					TaskResourcePolicyWhenCompleted: "Release",
				},
			},
			wantOut: "sandbox.sandbox.kube-sandbox.io/t2 created\n",
		},
		{
			name: "task that is never retried",
			args: []string{"t3", "--image", "busybox", "--task", "--task-restart=Never", "--", "true"},
			want: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "t3", Namespace: cmdtesting.Namespace},
				Spec: sandboxv1alpha1.SandboxSpec{
					Template:     template("busybox"),
					TaskTemplate: &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"true"}, RestartPolicy: "Never"},
				},
			},
			wantOut: "sandbox.sandbox.kube-sandbox.io/t3 created\n",
		},
		{
			name:    "task in a client dry run",
			args:    []string{"t4", "--image", "busybox", "--task", "--release", "--dry-run=client", "-o", "jsonpath={.spec.taskTemplate.command} {.spec.entrypoint} {.spec.taskResourcePolicyWhenCompleted}", "--", "sh", "-c", "exit 0"},
			wantOut: `["sh","-c","exit 0"]  Release`,
		},
		{
			name:    "task without a command",
			args:    []string{"t5", "--image", "busybox", "--task"},
			wantErr: "error: --task requires the task's command after --, as in: create t5 --task -- COMMAND [ARG...]\n",
		},
		{
			name:    "task flags without --task",
			args:    []string{"t5", "--image", "busybox", "--release", "--", "sleep", "1"},
			wantErr: "error: --release requires --task\n",
		},
		{
			name:    "task env without --task",
			args:    []string{"t5", "--image", "busybox", "--task-env", "A=1"},
			wantErr: "error: --task-env requires --task\n",
		},
		{
			name:    "restart policy that does not exist",
			args:    []string{"t5", "--image", "busybox", "--task", "--task-restart", "Always", "--", "true"},
			wantErr: "error: invalid --task-restart \"Always\": must be Never or OnFailure\n",
		},
		{
			name:    "backoff limit without retries",
			args:    []string{"t5", "--image", "busybox", "--task", "--backoff-limit", "2", "--", "true"},
			wantErr: "error: --backoff-limit requires --task-restart=OnFailure: otherwise a failed task is not retried\n",
		},
		{
			name:    "backoff limit too high",
			args:    []string{"t5", "--image", "busybox", "--task", "--task-restart", "OnFailure", "--backoff-limit", "101", "--", "true"},
			wantErr: "error: --backoff-limit must be between 0 and 100, got 101\n",
		},
		{
			name:    "task timeout with a fraction of a second",
			args:    []string{"t5", "--image", "busybox", "--task", "--task-timeout", "1.5s", "--", "true"},
			wantErr: "error: --task-timeout must be a whole number of seconds, got 1.5s\n",
		},
		{
			name:    "zero task timeout",
			args:    []string{"t5", "--image", "busybox", "--task", "--task-timeout", "0s", "--", "true"},
			wantErr: "error: --task-timeout must be at least 1s, got 0s\n",
		},
		{
			name:    "task env set twice",
			args:    []string{"t5", "--image", "busybox", "--task", "--task-env", "A=1", "--task-env", "A=2", "--", "true"},
			wantErr: `error: invalid --task-env "A=2": A is set more than once`,
		},
		{
			name:    "already exists",
			args:    []string{"taken", "--image", "busybox"},
			objects: []*sandboxv1alpha1.Sandbox{existing},
			wantErr: `Error from server (AlreadyExists): sandboxes.sandbox.kube-sandbox.io "taken" already exists`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := cmdtesting.NewTestFactory(tt.objects...)
			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			cmd := NewCmdCreate(f, streams)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			cmd.SetArgs(tt.args)
			err := cmd.ExecuteContext(context.Background())

			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("no error, want %q", tt.wantErr)
				}
				var msg bytes.Buffer
				cmdutil.PrintError(&msg, err)
				if !strings.HasPrefix(msg.String(), tt.wantErr) {
					t.Errorf("error:\n%s\nwant prefix:\n%s", msg.String(), tt.wantErr)
				}
				for _, a := range f.Clientset.Actions() {
					if a.GetVerb() == "create" && len(tt.objects) == 0 {
						t.Errorf("a sandbox was created despite the error: %v", a)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got := out.String(); got != tt.wantOut {
				t.Errorf("output %q, want %q", got, tt.wantOut)
			}
			stored, getErr := f.Clientset.Tracker().Get(cmdtesting.SandboxesResource, cmdtesting.Namespace, cmd.Flags().Arg(0))
			if tt.want == nil {
				if strings.Contains(strings.Join(tt.args, " "), "--dry-run=client") && getErr == nil {
					t.Errorf("client dry run created %v", stored)
				}
				return
			}
			if getErr != nil {
				t.Fatalf("sandbox not created: %v", getErr)
			}
			if diff := cmp.Diff(tt.want, stored); diff != "" {
				t.Errorf("created sandbox (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseEnv(t *testing.T) {
	tests := []struct {
		name    string
		flags   []string
		want    []corev1.EnvVar
		wantErr string
	}{
		{name: "none", flags: nil, want: nil},
		{name: "keeps order and '=' in values", flags: []string{"Z=1", "A=b=c", "_x.y-z="},
			want: []corev1.EnvVar{{Name: "Z", Value: "1"}, {Name: "A", Value: "b=c"}, {Name: "_x.y-z"}}},
		{name: "no equals", flags: []string{"A"}, wantErr: `invalid --env "A": must be KEY=VALUE`},
		{name: "space in name", flags: []string{"A B=1"}, wantErr: `"A B" is not a valid variable name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEnv(tt.flags)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
