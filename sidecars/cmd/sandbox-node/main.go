// Command sandbox-node is kube-sandbox's node agent: on every node (a DaemonSet), it enforces
// each sandbox pod's outbound policy from the node's network namespace and commits sandbox
// containers' writable layers to the snapshot registry for pause and resume. See package node.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := node.Execute(ctx, node.NewCommand())
	stop()
	os.Exit(code)
}
