// Command sandbox-execd runs a sandbox container's entrypoint and serves exec
// sessions into the container. See package execd.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := execd.Execute(ctx, execd.NewCommand())
	stop()
	os.Exit(code)
}
