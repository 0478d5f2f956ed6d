// Package ls implements `kubectl sandbox ls`.
package ls

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// Output formats of -o; the default is the plain or long listing.
const (
	outputList = ""
	outputJSON = "json"
	outputYAML = "yaml"
)

var (
	lsLong = cmdutil.LongDesc(`
		List the files of a directory in a sandbox.

		PATH is relative to the sandbox's files root, which is listed when PATH is omitted.
		Names of directories end with "/". With -l, each entry is shown with its permissions,
		size and modification time, and symbolic links with their targets. --depth lists
		subdirectories too, with paths relative to PATH. -o json and -o yaml print the
		entries as a FileList.

		With --watch, PATH (a directory) is watched instead: each change inside it is printed
		as it happens, one line each (Created, Written, Removed or Renamed, and the path
		relative to PATH), until interrupted; --recursive watches its subdirectories too,
		never through symbolic links. -o json prints each change as a JSON object on a line.
		A watch that loses changes (Overflow) ends with an error: list again, then watch.`)

	lsExample = cmdutil.Examples(`
		# List the files root of sandbox my-sandbox
		kubectl sandbox ls my-sandbox

		# Show permissions, sizes and times of the files under results
		kubectl sandbox ls my-sandbox results -l

		# List three levels of the tree under src as JSON
		kubectl sandbox ls my-sandbox src --depth 3 -o json

		# Print the changes under results as they happen
		kubectl sandbox ls my-sandbox results --watch --recursive`)
)

// LsOptions are the inputs of `kubectl sandbox ls`.
type LsOptions struct {
	Name    string
	Path    string
	Long    bool
	Depth   int
	Limit   int
	Output  string
	Replica int32
	// Watch prints the directory's changes instead of listing it; Recursive includes its
	// subdirectories.
	Watch     bool
	Recursive bool

	Client *sandboxclient.Files

	genericiooptions.IOStreams
}

// NewLsOptions returns LsOptions listing one level.
func NewLsOptions(streams genericiooptions.IOStreams) *LsOptions {
	return &LsOptions{Depth: 1, IOStreams: streams}
}

// NewCmdLs returns the `ls` command.
func NewCmdLs(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewLsOptions(streams)
	cmd := &cobra.Command{
		Use:                   "ls NAME [PATH] [-l] [--depth=N] [-o json|yaml] | ls NAME [PATH] --watch [--recursive] [-o json]",
		DisableFlagsInUseLine: true,
		Short:                 "List the files of a directory in a sandbox",
		Long:                  lsLong,
		Example:               lsExample,
		ValidArgsFunction:     cmdutil.SandboxNameCompletion(f, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, cmd, args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return cmdutil.UsageErrorf(cmd, "%s", err)
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVarP(&o.Long, "long", "l", o.Long, "Show permissions, size, modification time and link targets.")
	cmd.Flags().IntVar(&o.Depth, "depth", o.Depth, fmt.Sprintf("How many levels to list, from 1 to %d.", execdapi.MaxListDepth))
	cmd.Flags().IntVar(&o.Limit, "limit", o.Limit, "Entries to fetch per request; 0 for the server's default. All entries are listed either way.")
	cmd.Flags().StringVarP(&o.Output, "output", "o", o.Output, "Output format. One of: (json, yaml). Default: a listing.")
	cmd.Flags().Int32Var(&o.Replica, "replica", o.Replica, "Index of the replica whose files to list.")
	cmd.Flags().BoolVar(&o.Watch, "watch", o.Watch, "Print the changes of the directory as they happen, until interrupted, instead of listing it.")
	cmd.Flags().BoolVar(&o.Recursive, "recursive", o.Recursive, "With --watch, watch the subdirectories too.")
	return cmd
}

// Complete takes the name and path from the command line and builds the files client.
func (o *LsOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	switch len(args) {
	case 1:
		o.Name = args[0]
	case 2:
		o.Name, o.Path = args[0], args[1]
	case 0:
		return cmdutil.UsageErrorf(cmd, "sandbox NAME is required")
	default:
		return cmdutil.UsageErrorf(cmd, "ls takes NAME and at most one PATH, got %q", args)
	}
	ns, _, err := f.Namespace()
	if err != nil {
		return err
	}
	config, err := f.ToRESTConfig()
	if err != nil {
		return err
	}
	o.Client, err = sandboxclient.NewFiles(config, ns, o.Name, o.Replica)
	return err
}

// Validate checks the flags.
func (o *LsOptions) Validate() error {
	if o.Depth < 1 || o.Depth > execdapi.MaxListDepth {
		return fmt.Errorf("--depth must be between 1 and %d, got %d", execdapi.MaxListDepth, o.Depth)
	}
	if o.Limit < 0 || o.Limit > execdapi.MaxListLimit {
		return fmt.Errorf("--limit must be between 0 and %d, got %d", execdapi.MaxListLimit, o.Limit)
	}
	if o.Replica < 0 {
		return fmt.Errorf("--replica must not be negative, got %d", o.Replica)
	}
	switch o.Output {
	case outputList, outputJSON, outputYAML:
	default:
		return fmt.Errorf("unknown output format %q; use one of: json, yaml", o.Output)
	}
	if o.Recursive && !o.Watch {
		return errors.New("--recursive needs --watch; use --depth to list subdirectories")
	}
	if o.Watch && (o.Long || o.Output == outputYAML || o.Depth != 1 || o.Limit != 0) {
		return errors.New("--watch prints changes: -l, -o yaml, --depth and --limit do not apply")
	}
	return nil
}

// runWatch prints the changes of the directory until ctx ends.
func (o *LsOptions) runWatch(ctx context.Context) error {
	return o.Client.Watch(ctx, o.Path, o.Recursive, func(ev *execdapi.FileEvent) error {
		if o.Output == outputJSON {
			data, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.Out, "%s\n", data)
			return err
		}
		if ev.Type == execdapi.FileOverflow {
			return nil // the error says it
		}
		name := ev.Path
		if ev.Dir && name != "." {
			name += "/"
		}
		_, err := fmt.Fprintf(o.Out, "%-8s %s\n", ev.Type, name)
		return err
	})
}

// Run lists all pages, then prints them: columns are aligned over the whole listing.
func (o *LsOptions) Run(ctx context.Context) error {
	if o.Watch {
		return o.runWatch(ctx)
	}
	list := sandboxv1alpha1.SandboxFileList{TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxFileList"}, Items: []sandboxv1alpha1.SandboxFile{}}
	err := o.Client.List(ctx, o.Path, o.Depth, o.Limit, func(fi *sandboxv1alpha1.SandboxFile) error {
		list.Items = append(list.Items, *fi)
		return nil
	})
	if errors.Is(err, sandboxclient.ErrNotADirectory) {
		// As ls does for a file: list the file itself.
		fi, serr := o.Client.Stat(ctx, o.Path)
		if serr != nil {
			return serr
		}
		fi.Path = fi.Name
		list.Items = append(list.Items, *fi)
	} else if err != nil {
		return err
	}

	switch o.Output {
	case outputJSON:
		data, err := json.MarshalIndent(&list, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.Out, "%s\n", data)
		return err
	case outputYAML:
		data, err := yaml.Marshal(&list)
		if err != nil {
			return err
		}
		_, err = o.Out.Write(data)
		return err
	}
	if !o.Long {
		for _, fi := range list.Items {
			fmt.Fprintln(o.Out, displayName(&fi))
		}
		return nil
	}
	// Sizes right-aligned as ls aligns them; the other columns have fixed widths.
	width := 1
	for _, fi := range list.Items {
		width = max(width, len(strconv.FormatInt(fi.Size, 10)))
	}
	for _, fi := range list.Items {
		name := displayName(&fi)
		if fi.Type == sandboxv1alpha1.SandboxFileTypeSymlink {
			name += " -> " + fi.LinkTarget
		}
		if _, err := fmt.Fprintf(o.Out, "%s %*d %s %s\n", modeString(&fi), width, fi.Size, fi.ModTime.UTC().Format(time.RFC3339), name); err != nil {
			return err
		}
	}
	return nil
}

// displayName is the entry's path, with a "/" after directories as ls -p prints them.
func displayName(fi *sandboxv1alpha1.SandboxFile) string {
	name := fi.Path
	if name == "" {
		name = fi.Name
	}
	if fi.Type == sandboxv1alpha1.SandboxFileTypeDir && !strings.HasSuffix(name, "/") {
		name += "/"
	}
	return name
}

// modeString is the entry's type and permissions as ls -l shows them, like drwxr-xr-x.
func modeString(fi *sandboxv1alpha1.SandboxFile) string {
	mode, err := execdapi.ParseMode(fi.Mode)
	if err != nil {
		return "?" + fi.Mode
	}
	kind := "-"
	switch fi.Type {
	case sandboxv1alpha1.SandboxFileTypeDir:
		kind = "d"
	case sandboxv1alpha1.SandboxFileTypeSymlink:
		kind = "l"
	case sandboxv1alpha1.SandboxFileTypeOther:
		kind = "?"
	}
	// Perm().String() is "-rwxr-xr-x": a type letter, which ls's differ from, and the bits.
	return kind + mode.Perm().String()[1:]
}
