// Command sandbox-egress enforces a sandbox's outbound policy in its pod. See package egress.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := egress.Execute(ctx, egress.NewCommand())
	stop()
	os.Exit(code)
}
