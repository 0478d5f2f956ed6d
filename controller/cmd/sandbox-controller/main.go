// Command sandbox-controller runs the kube-sandbox controllers.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kube-sandbox/kube-sandbox/controller/pkg/manager"
)

func main() {
	os.Exit(cli.Run(manager.NewCommand(ctrl.SetupSignalHandler())))
}
