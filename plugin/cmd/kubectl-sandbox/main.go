// Command kubectl-sandbox is the kubectl plugin for sandboxes: `kubectl sandbox ...`.
package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/sandbox"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// exitInterrupted is the shell's code for a process ended by SIGINT (128+2).
const exitInterrupted = 130

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal has cancelled the work, a second one ends the process at once.
	context.AfterFunc(ctx, stop)

	cmd := sandbox.NewCmdSandbox(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	err := cmd.ExecuteContext(ctx)
	stop()
	switch {
	case err == nil:
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		os.Exit(exitInterrupted)
	default:
		os.Exit(cmdutil.PrintError(os.Stderr, err))
	}
}
