// Package runcode implements `kubectl sandbox run-code`.
package runcode

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

var (
	runCodeLong = cmdutil.LongDesc(`
		Run code in a code context of a sandbox, and print what it gives.

		A code context is a stateful Python interpreter in the sandbox, a real Jupyter kernel:
		variables, imports and the working directory persist from one run to the next, as in a
		notebook. Without --context the code runs in the context named "default", which the
		first run makes. Make others with 'kubectl sandbox contexts NAME --create ID' (or let
		an agent POST them), list them with 'kubectl sandbox contexts NAME'.

		The code is the arguments after --, or with -f the file's contents ('-f -' reads
		stdin). What the code prints goes to stdout and stderr as it comes; the value of the
		last expression is printed last, as a notebook's Out[N]; an exception prints its
		traceback to stderr and makes run-code exit with 1. Rich outputs, such as a
		matplotlib plot's image/png, are written to --output-dir when it is given (and their
		files named on stderr); otherwise only their text is shown. With -o json each event
		the server sends is printed as one JSON line (SandboxCodeRunEvent), for programs.

		Ctrl-C, or --timeout, interrupts the run (a KeyboardInterrupt in the interpreter): the
		context keeps its variables. The sandbox's image needs python3 with ipykernel (the
		sample Python image has it, with matplotlib). Contexts live as long as the replica's
		container: pausing a sandbox ends them.`)

	runCodeExample = cmdutil.Examples(`
		# Run a line of Python in sandbox my-sandbox, then use its variable
		kubectl sandbox run-code my-sandbox -- 'x = 41'
		kubectl sandbox run-code my-sandbox -- 'x + 1'

		# Run a script file in context "analysis", saving its plots
		kubectl sandbox run-code my-sandbox --context analysis -f plot.py --output-dir plots/

		# Stream the events as JSON lines, stopping the run after 30 seconds
		kubectl sandbox run-code my-sandbox --timeout 30s -o json -- 'import time; [print(i) or time.sleep(1) for i in range(60)]'`)
)

// RunCodeOptions are the inputs of `kubectl sandbox run-code`.
type RunCodeOptions struct {
	Name      string
	Context   string
	Replica   int32
	Code      string
	Filename  string
	Timeout   time.Duration
	Output    string
	OutputDir string

	Namespace string
	Sandboxes *sandboxclient.Client

	genericiooptions.IOStreams
}

// NewRunCodeOptions returns RunCodeOptions for the default context.
func NewRunCodeOptions(streams genericiooptions.IOStreams) *RunCodeOptions {
	return &RunCodeOptions{Context: sandboxv1alpha1.DefaultCodeContext, IOStreams: streams}
}

// NewCmdRunCode returns the `run-code` command.
func NewCmdRunCode(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewRunCodeOptions(streams)
	cmd := &cobra.Command{
		Use:                   "run-code NAME [--context=C] [--replica=N] [--timeout=D] [-o json] [--output-dir=DIR] (-f FILE | -- CODE...)",
		DisableFlagsInUseLine: true,
		Short:                 "Run code in a stateful interpreter of a sandbox",
		Long:                  runCodeLong,
		Example:               runCodeExample,
		ValidArgsFunction:     cmdutil.SandboxNameCompletion(f, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, cmd, args); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.Context, "context", o.Context, "ID of the code context to run in; \"default\" is made by its first run.")
	cmd.Flags().Int32Var(&o.Replica, "replica", o.Replica, "Index of the replica whose context to use.")
	cmd.Flags().StringVarP(&o.Filename, "filename", "f", o.Filename, "File with the code to run; - for stdin.")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "Interrupt the run after this long (whole seconds); 0: no limit.")
	cmd.Flags().StringVarP(&o.Output, "output", "o", o.Output, "Output format. One of: (json). Default: the outputs as text.")
	cmd.Flags().StringVar(&o.OutputDir, "output-dir", o.OutputDir, "Directory to write rich outputs (image/png, image/svg+xml) to.")
	return cmd
}

// Complete takes the name and the code, checks the flags, and takes the namespace and client.
func (o *RunCodeOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmdutil.UsageErrorf(cmd, "sandbox NAME is required")
	}
	o.Name = args[0]
	code := args[1:]
	dash := cmd.ArgsLenAtDash()
	switch {
	case o.Filename != "" && len(code) > 0:
		return cmdutil.UsageErrorf(cmd, "give the code after -- or with -f, not both")
	case o.Filename == "-":
		data, err := io.ReadAll(o.In)
		if err != nil {
			return fmt.Errorf("reading the code from stdin: %w", err)
		}
		o.Code = string(data)
	case o.Filename != "":
		data, err := os.ReadFile(o.Filename)
		if err != nil {
			return fmt.Errorf("reading the code: %w", err)
		}
		o.Code = string(data)
	case len(code) == 0:
		return cmdutil.UsageErrorf(cmd, "no code: give it after -- (run-code NAME -- 'print(1)') or with -f FILE")
	case dash != 1:
		return cmdutil.UsageErrorf(cmd, "the code goes after --: run-code NAME -- 'CODE'")
	default:
		o.Code = strings.Join(code, " ")
	}
	if strings.TrimSpace(o.Code) == "" {
		return cmdutil.UsageErrorf(cmd, "the code is empty")
	}
	if o.Replica < 0 {
		return cmdutil.UsageErrorf(cmd, "--replica must not be negative, got %d", o.Replica)
	}
	if o.Timeout < 0 || o.Timeout%time.Second != 0 {
		return cmdutil.UsageErrorf(cmd, "--timeout must be whole seconds, 0 or more, got %s", o.Timeout)
	}
	if o.Output != "" && o.Output != "json" {
		return cmdutil.UsageErrorf(cmd, "unknown output format %q; use json", o.Output)
	}
	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	o.Sandboxes, err = cmdutil.Client(f)
	return err
}

// errRunFailed is a run that raised: its traceback was printed; the exit code says it.
type errRunFailed struct{ name string }

func (e errRunFailed) Error() string { return "the code raised " + e.name }

// ExitStatus makes the plugin exit with 1 without printing more.
func (e errRunFailed) ExitStatus() int { return 1 }

// Run runs the code (POST sandboxes/NAME/contexts/C/run) and prints the events as they come.
func (o *RunCodeOptions) Run(ctx context.Context) error {
	body, err := o.Sandboxes.RunCodeStream(ctx, o.Name, sandboxclient.RunCodeOptions{
		Code:    o.Code,
		Context: o.Context,
		Replica: o.Replica,
		Timeout: o.Timeout,
	})
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	return o.print(ctx, body)
}

// errEnded stops the reading of a run's events at its end event.
var errEnded = errors.New("the run ended")

// print prints the events of body; the error says how the run ended, when not well.
func (o *RunCodeOptions) print(ctx context.Context, body io.Reader) error {
	var result, end *sandboxv1alpha1.SandboxCodeRunEvent
	images := 0
	r := &readErrorReader{r: body}
	err := sandboxclient.ReadCodeRunEvents(r, func(ev *sandboxv1alpha1.SandboxCodeRunEvent) error {
		if o.Output == "json" {
			// The event as the server sent it, which encodes each with encoding/json too (a
			// field this plugin does not know is dropped).
			line, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(o.Out, "%s\n", line); err != nil {
				return err
			}
		}
		switch ev.Type {
		case sandboxv1alpha1.CodeRunStdout:
			if o.Output == "" {
				_, _ = io.WriteString(o.Out, ev.Text)
			}
		case sandboxv1alpha1.CodeRunStderr:
			if o.Output == "" {
				_, _ = io.WriteString(o.ErrOut, ev.Text)
			}
		case sandboxv1alpha1.CodeRunResult:
			result = ev
			if err := o.saveRich(ev, &images); err != nil {
				return err
			}
		case sandboxv1alpha1.CodeRunDisplay:
			if err := o.saveRich(ev, &images); err != nil {
				return err
			}
			// A plot's text/plain is a placeholder ("<Figure size 640x480 with 1 Axes>"): the
			// note of its image stands for it.
			if o.Output == "" && ev.Text != "" && !hasRich(ev) {
				_, _ = fmt.Fprintln(o.Out, ev.Text)
			}
		case sandboxv1alpha1.CodeRunError:
			if o.Output == "" && ev.Error != nil {
				printTraceback(o.ErrOut, ev.Error)
			}
		case sandboxv1alpha1.CodeRunEnd:
			if o.Output == "" && result != nil && result.Text != "" {
				_, _ = fmt.Fprintln(o.Out, result.Text)
			}
			end = ev
			return errEnded
		}
		return nil
	})
	switch {
	case end != nil:
		return endError(end)
	case err != nil && !r.failed(err):
		// An event could not be printed, or the server sent what is not one.
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("run interrupted: %w", ctx.Err())
	case err != nil:
		return fmt.Errorf("reading the run's output: %w", errors.Unwrap(err))
	}
	return errors.New("the run's output ended before its end: the connection to the sandbox was lost")
}

// readErrorReader remembers the error reading r failed with, to tell a lost connection from
// an event that could not be read.
type readErrorReader struct {
	r   io.Reader
	err error
}

func (r *readErrorReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF && r.err == nil {
		r.err = err
	}
	return n, err
}

// failed reports whether err, of ReadCodeRunEvents, is a failure to read: of the connection,
// or an event larger than the server sends.
func (r *readErrorReader) failed(err error) bool {
	return errors.Is(err, bufio.ErrTooLong) || r.err != nil && errors.Is(err, r.err)
}

// endError is what a run's end event means for the exit code.
func endError(ev *sandboxv1alpha1.SandboxCodeRunEvent) error {
	switch {
	case ev.Reason == sandboxv1alpha1.CodeRunReasonKernelDied:
		return fmt.Errorf("the code context's interpreter died during the run (%s): delete the context and make another", ev.Message)
	case ev.Reason == sandboxv1alpha1.CodeRunReasonDeadlineExceeded:
		return fmt.Errorf("the run was interrupted: %s", ev.Message)
	case ev.Status == sandboxv1alpha1.CodeRunStatusError:
		name := "an exception"
		if ev.Error != nil {
			name = ev.Error.Name
		}
		return errRunFailed{name: name}
	case ev.Status == sandboxv1alpha1.CodeRunStatusAborted:
		return errors.New("the run was aborted")
	}
	return nil
}

// richTypes are the MIME types written to --output-dir, and their files' extensions.
var richTypes = map[string]string{"image/png": ".png", "image/jpeg": ".jpg", "image/svg+xml": ".svg"}

// hasRich reports whether ev has an output of richTypes.
func hasRich(ev *sandboxv1alpha1.SandboxCodeRunEvent) bool {
	for mt := range ev.Data {
		if _, ok := richTypes[mt]; ok {
			return true
		}
	}
	return false
}

// saveRich writes ev's rich outputs to OutputDir, or says on stderr that there are some.
func (o *RunCodeOptions) saveRich(ev *sandboxv1alpha1.SandboxCodeRunEvent, n *int) error {
	types := make([]string, 0, len(ev.Data))
	for mt := range ev.Data {
		if _, ok := richTypes[mt]; ok {
			types = append(types, mt)
		}
	}
	sort.Strings(types)
	for _, mt := range types {
		data := []byte(ev.Data[mt])
		if mt != "image/svg+xml" {
			var err error
			if data, err = base64.StdEncoding.DecodeString(strings.TrimSpace(ev.Data[mt])); err != nil {
				return fmt.Errorf("the run's %s output is not base64: %w", mt, err)
			}
		}
		if o.OutputDir == "" {
			if o.Output == "" {
				_, _ = fmt.Fprintf(o.ErrOut, "[%s, %d bytes: --output-dir saves it]\n", mt, len(data))
			}
			continue
		}
		if err := os.MkdirAll(o.OutputDir, 0o755); err != nil {
			return err
		}
		*n++
		file := filepath.Join(o.OutputDir, fmt.Sprintf("output-%d%s", *n, richTypes[mt]))
		if err := os.WriteFile(file, data, 0o644); err != nil {
			return err
		}
		if o.Output == "" {
			_, _ = fmt.Fprintf(o.ErrOut, "[%s written to %s]\n", mt, file)
		}
	}
	return nil
}

// printTraceback prints an exception as Python does.
func printTraceback(w io.Writer, e *sandboxv1alpha1.SandboxCodeError) {
	if len(e.Traceback) == 0 {
		_, _ = fmt.Fprintf(w, "%s: %s\n", e.Name, e.Value)
		return
	}
	for _, l := range e.Traceback {
		_, _ = fmt.Fprintln(w, strings.TrimRight(l, "\n"))
	}
}
