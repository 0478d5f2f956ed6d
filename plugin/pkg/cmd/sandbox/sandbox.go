// Package sandbox is the root of kubectl-sandbox, the kubectl plugin for sandboxes of
// sandbox.kube-sandbox.io: `kubectl sandbox
// create|get|list|exec|ps|top|attach|kill|cp|ls|port-forward|tasks|logs|wait|renew|network|pause|resume|delete`.
package sandbox

import (
	"flag"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/attach"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/cp"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/create"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/delete"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/exec"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/get"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/kill"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/logs"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/ls"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/mcp"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/network"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/pause"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/portforward"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/ps"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/renew"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/runcode"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/tasks"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/top"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/wait"
)

// displayName is how help refers to the root: kubectl runs kubectl-sandbox for `kubectl sandbox`.
const displayName = "kubectl sandbox"

var (
	sandboxLong = cmdutil.LongDesc(`
		Create, inspect, run commands, processes and tasks in, copy files to and from, renew
		and delete sandboxes, and control what they may reach over the network.

		A sandbox (sandboxes.sandbox.kube-sandbox.io) is an isolated, short-lived environment of
		one or more pods that accept commands through the Kubernetes API. These commands use
		the current kubeconfig context, like kubectl, and the same global options.`)

	sandboxExample = cmdutil.Examples(`
		# Create a sandbox, run a command in it once it is running and delete it
		kubectl sandbox create my-sandbox --image python:3.13-slim
		kubectl sandbox wait my-sandbox
		kubectl sandbox exec my-sandbox -- python -c 'print(6*7)'
		kubectl sandbox cp ./data my-sandbox:data
		kubectl sandbox port-forward my-sandbox 8888
		kubectl sandbox delete my-sandbox

		# Create a sandbox from an idle pod of the warm pool "python" and run a command in it
		kubectl sandbox create fast --pool python
		kubectl sandbox exec fast -- python3 -c 'print(6*7)'

		# Start a web server that outlives exec, list it, read its output and stop it
		kubectl sandbox exec fast --detach -- python3 -m http.server 8000
		kubectl sandbox ps fast
		kubectl sandbox logs fast --process p-6c3r2
		kubectl sandbox kill fast p-6c3r2

		# Create a sandbox that expires in an hour, and later keep it for another hour
		kubectl sandbox create scratch --image busybox --timeout 1h
		kubectl sandbox renew scratch --for 1h

		# Run a task in 10 replicas, wait for all of them to end, and see how they did
		kubectl sandbox create eval --image python:3.13-slim --replicas 10 --task -- python -c 'print(6*7)'
		kubectl sandbox wait eval --for=TasksComplete --timeout=1h
		kubectl sandbox tasks eval
		kubectl sandbox logs eval --replica 3

		# Create a sandbox that may only reach PyPI, later let it reach GitHub too
		kubectl sandbox create pip --image python:3.13-slim --allow pypi.org:443,'*.pythonhosted.org:443'
		kubectl sandbox network allow pip github.com:443 --wait
		kubectl sandbox network pip

		# List sandboxes in namespace agents
		kubectl sandbox list -n agents`)
)

// NewCmdSandbox returns the root command, reading the standard kubeconfig flags (-n, --context,
// --kubeconfig, --as, ...) and -v for client logging.
func NewCmdSandbox(streams genericiooptions.IOStreams) *cobra.Command {
	configFlags := genericclioptions.NewConfigFlags(true)
	cmd := NewCmdSandboxWithFactory(cmdutil.NewFactory(configFlags), streams, sandboxclient.DefaultRemoteExecutor{})
	configFlags.AddFlags(cmd.PersistentFlags())
	addKlogFlags(cmd)
	cmd.PersistentPreRun = func(*cobra.Command, []string) {
		// API warnings (deprecations, admission warnings) go to stderr as kubectl prints them,
		// rather than through klog with a log header.
		rest.SetDefaultWarningHandler(rest.NewWarningWriter(streams.ErrOut, rest.WarningWriterOptions{Deduplicate: true}))
	}
	return cmd
}

// NewCmdSandboxWithFactory returns the root command on the given clients and executor, without
// global flags; tests use it with fakes.
func NewCmdSandboxWithFactory(f cmdutil.Factory, streams genericiooptions.IOStreams, executor sandboxclient.RemoteExecutor) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sandbox",
		Short:   "Manage sandboxes of sandbox.kube-sandbox.io",
		Long:    sandboxLong,
		Example: sandboxExample,
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: displayName,
		},
		// main prints errors the way kubectl does; cobra's "Error:" and usage dump would repeat
		// them.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	cmd.CompletionOptions.HiddenDefaultCmd = true
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return cmdutil.UsageErrorf(c, "%s", err)
	})
	cmd.SetUsageFunc(usage)

	cmd.AddCommand(
		create.NewCmdCreate(f, streams),
		get.NewCmdGet(f, streams),
		get.NewCmdList(f, streams),
		exec.NewCmdExec(f, streams, executor),
		ps.NewCmdPs(f, streams),
		top.NewCmdTop(f, streams),
		attach.NewCmdAttach(f, streams, executor),
		kill.NewCmdKill(f, streams),
		runcode.NewCmdRunCode(f, streams),
		runcode.NewCmdContexts(f, streams),
		cp.NewCmdCp(f, streams),
		ls.NewCmdLs(f, streams),
		portforward.NewCmdPortForward(f, streams),
		tasks.NewCmdTasks(f, streams),
		logs.NewCmdLogs(f, streams),
		wait.NewCmdWait(f, streams),
		renew.NewCmdRenew(f, streams),
		pause.NewCmdPause(f, streams),
		pause.NewCmdResume(f, streams),
		network.NewCmdNetwork(f, streams),
		mcp.NewCmdMCP(f, streams),
		delete.NewCmdDelete(f, streams),
		newCmdOptions(streams),
	)
	return cmd
}

// addKlogFlags exposes klog's -v, as kubectl does, so that -v=6 and up show the HTTP requests.
func addKlogFlags(cmd *cobra.Command) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	v := fs.Lookup("v")
	cmd.PersistentFlags().AddGoFlag(v)
	cmd.PersistentFlags().Lookup("v").Shorthand = "v"
}

// newCmdOptions lists the global flags, which the help of each command leaves out, as
// `kubectl options` does.
func newCmdOptions(streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "options",
		Short: "Print the list of flags inherited by all commands",
		Long:  "Print the list of flags inherited by all commands.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(streams.Out, "The following options can be passed to any command:\n\n%s", cmd.InheritedFlags().FlagUsages())
			return nil
		},
	}
}

// usage prints a command's usage in kubectl's layout: examples, commands, options, usage line,
// and where to find more.
func usage(c *cobra.Command) error {
	var b strings.Builder
	if c.HasExample() {
		fmt.Fprintf(&b, "Examples:\n%s\n\n", c.Example)
	}
	if c.HasAvailableSubCommands() {
		b.WriteString("Available Commands:\n")
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(&b, "  %-*s %s\n", sub.NamePadding(), sub.Name(), sub.Short)
			}
		}
		b.WriteString("\n")
	}
	if flags := c.LocalNonPersistentFlags(); flags.HasAvailableFlags() {
		fmt.Fprintf(&b, "Options:\n%s\n", flags.FlagUsages())
	}
	b.WriteString("Usage:\n")
	if c.Runnable() {
		fmt.Fprintf(&b, "  %s\n", c.UseLine())
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(&b, "  %s [command] [options]\n", c.CommandPath())
	}
	if len(c.Aliases) > 0 {
		fmt.Fprintf(&b, "\nAliases:\n  %s\n", c.NameAndAliases())
	}
	root := c.Root().CommandPath()
	b.WriteString("\n")
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(&b, "Use \"%s <command> --help\" for more information about a given command.\n", root)
	}
	if c.Root().HasAvailablePersistentFlags() {
		fmt.Fprintf(&b, "Use \"%s options\" for a list of global command-line options (applies to all commands).\n", root)
	}
	_, err := fmt.Fprint(c.OutOrStderr(), b.String())
	return err
}
