// Command sandbox-snapshotter commits sandbox containers' writable layers to the snapshot
// registry for pause and resume. See package snapshotter.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kube-sandbox/kube-sandbox/sidecars/snapshotter"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := snapshotter.Execute(ctx, snapshotter.NewCommand())
	stop()
	os.Exit(code)
}
