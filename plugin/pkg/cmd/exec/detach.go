package exec

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/cli-runtime/pkg/printers"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// Output formats of a detached process.
const (
	outputJSON = "json"
	outputYAML = "yaml"
	outputName = "name"
)

var outputFormats = []string{outputJSON, outputYAML, outputName}

// process is the start of the command as a process of the replica.
func (o *ExecOptions) process() *sandboxv1alpha1.SandboxProcess {
	p := &sandboxv1alpha1.SandboxProcess{
		Spec: sandboxv1alpha1.SandboxProcessSpec{
			Replica:        o.Replica,
			Command:        o.Command,
			WorkingDir:     o.WorkingDir,
			TTY:            o.TTY,
			Stdin:          o.Stdin,
			TimeoutSeconds: int64(o.Timeout / time.Second),
		},
	}
	for _, kv := range o.Env {
		name, value, _ := strings.Cut(kv, "=")
		p.Spec.Env = append(p.Spec.Env, sandboxv1alpha1.SandboxProcessEnvVar{Name: name, Value: value})
	}
	return p
}

// runDetached starts the command as a process of the replica (POST sandboxes/NAME/processes)
// and prints what the server answered: the process's ID, or the process with -o. No terminal
// is needed for -t: the process gets its own, for those who attach.
func (o *ExecOptions) runDetached(ctx context.Context) error {
	out, err := o.Sandboxes.StartProcess(ctx, o.Name, o.process().Spec)
	if err != nil {
		return err
	}
	return PrintProcess(out, o.Output, o.Out)
}

// PrintProcess prints p as output says: its ID ("") or the process as JSON, YAML or
// kind.group/ID (name), as kubectl prints what it created.
func PrintProcess(p *sandboxv1alpha1.SandboxProcess, output string, w io.Writer) error {
	// The client's decoder drops the kind, which the printers need.
	p = p.DeepCopy()
	p.SetGroupVersionKind(sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxProcess"))
	switch output {
	case "":
		_, err := fmt.Fprintln(w, p.Name)
		return err
	case outputJSON:
		return (&printers.JSONPrinter{}).PrintObj(p, w)
	case outputYAML:
		return (&printers.YAMLPrinter{}).PrintObj(p, w)
	case outputName:
		return (&printers.NamePrinter{}).PrintObj(p, w)
	}
	return fmt.Errorf("unknown output format %q", output)
}
