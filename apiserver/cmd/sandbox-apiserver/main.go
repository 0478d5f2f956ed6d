// Command sandbox-apiserver serves the sandbox.kube-sandbox.io API.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/server"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	os.Exit(cli.Run(server.NewCommand(ctx)))
}
