// Command sandbox-execd runs a sandbox container's entrypoint and serves, over mutual TLS,
// exec sessions, files, the proxy to the container's ports, claims and tasks. See package
// execd.
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
