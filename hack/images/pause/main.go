// Command pause is the sandbox ("pause") container of the local cluster, tagged
// registry.k8s.io/pause:3.10 by hack/images/build.sh: the machine cannot reach the registry
// the real one comes from, and the local cluster's own registry holds only snapshots. It holds the pod's namespaces: it stays alive, reaps zombies and exits on
// SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if os.Getpid() != 1 {
		_, _ = os.Stderr.WriteString("Warning: pause should be the first process\n")
	}
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range ch {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
