// Package cp implements `kubectl sandbox cp`.
package cp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// stdio is the local path that stands for stdin (as the source) or stdout (as the
// destination), as in tar and kubectl.
const stdio = "-"

// defaultDirMode is what local directories are created with before their own mode, if
// preserved, is applied: writable, so that their contents can be written first.
const defaultDirMode = 0o755

// defaultFileMode is what downloaded files are created with under --no-preserve, filtered by
// the umask as any new file.
const defaultFileMode = 0o666

var (
	cpLong = cmdutil.LongDesc(`
		Copy files and directories to and from sandboxes.

		One of SRC and DST is a path in a sandbox, written SANDBOX:PATH or NAMESPACE/SANDBOX:PATH,
		with PATH relative to the sandbox's files root; the other is a local path. Directories
		are copied recursively. A local "-" is standard input as the source and standard output
		as the destination, for a single file. File permissions are kept unless --no-preserve is
		given. Symbolic links are not followed on either side: they are skipped with a warning.`)

	cpExample = cmdutil.Examples(`
		# Copy local file data.csv to /work/data.csv in sandbox my-sandbox
		kubectl sandbox cp data.csv my-sandbox:work/data.csv

		# Copy directory results of sandbox my-sandbox in namespace agents to ./results
		kubectl sandbox cp agents/my-sandbox:results ./results

		# Copy a local directory into the second replica of sandbox workers
		kubectl sandbox cp ./src workers:src --replica 1

		# Stream a file out of the sandbox, or into it from stdin
		kubectl sandbox cp my-sandbox:log.txt - | grep ERROR
		echo hello | kubectl sandbox cp - my-sandbox:hello.txt`)
)

// FileSpec is one side of a copy: a local path, or a path in a sandbox.
type FileSpec struct {
	// Namespace and Sandbox are empty for a local path; Namespace is also empty for a sandbox
	// of the current namespace.
	Namespace string
	Sandbox   string
	Path      string
}

// Remote is whether the spec names a path in a sandbox.
func (s FileSpec) Remote() bool { return s.Sandbox != "" }

// ParseFileSpec parses SANDBOX:PATH, NAMESPACE/SANDBOX:PATH or a local path. Paths starting with
// "/", "." or "~", and those without a colon, are local, so that ./a:b can name a local file.
func ParseFileSpec(arg string) (FileSpec, error) {
	if arg == "" {
		return FileSpec{}, errors.New("empty path")
	}
	if arg == stdio || strings.HasPrefix(arg, "/") || strings.HasPrefix(arg, ".") || strings.HasPrefix(arg, "~") {
		return FileSpec{Path: arg}, nil
	}
	ref, p, ok := strings.Cut(arg, ":")
	if !ok {
		return FileSpec{Path: arg}, nil
	}
	spec := FileSpec{Sandbox: ref, Path: p}
	if ns, name, ok := strings.Cut(ref, "/"); ok {
		spec.Namespace, spec.Sandbox = ns, name
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			return FileSpec{}, fmt.Errorf("invalid namespace %q in %q: %s", ns, arg, strings.Join(msgs, "; "))
		}
	}
	if msgs := validation.IsDNS1123Subdomain(spec.Sandbox); len(msgs) > 0 {
		return FileSpec{}, fmt.Errorf("invalid sandbox name %q in %q (want SANDBOX:PATH or NAMESPACE/SANDBOX:PATH): %s", spec.Sandbox, arg, strings.Join(msgs, "; "))
	}
	return spec, nil
}

// CopyOptions are the inputs of `kubectl sandbox cp`.
type CopyOptions struct {
	Src, Dst   FileSpec
	Replica    int32
	NoPreserve bool

	// Client reaches the files of the sandbox of the remote side.
	Client *sandboxclient.Files

	genericiooptions.IOStreams
}

// NewCopyOptions returns CopyOptions writing to streams.
func NewCopyOptions(streams genericiooptions.IOStreams) *CopyOptions {
	return &CopyOptions{IOStreams: streams}
}

// NewCmdCp returns the `cp` command.
func NewCmdCp(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewCopyOptions(streams)
	cmd := &cobra.Command{
		Use:                   "cp SRC DST [--replica=N] [--no-preserve]",
		DisableFlagsInUseLine: true,
		Short:                 "Copy files and directories to and from sandboxes",
		Long:                  cpLong,
		Example:               cpExample,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, cmd, args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().Int32Var(&o.Replica, "replica", o.Replica, "Index of the replica to copy to or from.")
	cmd.Flags().BoolVar(&o.NoPreserve, "no-preserve", o.NoPreserve, "Do not keep the permissions of copied files; use the destination's defaults.")
	return cmd
}

// Complete parses SRC and DST and builds the files client of the remote side.
func (o *CopyOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	if len(args) != 2 {
		return cmdutil.UsageErrorf(cmd, "cp takes SRC and DST, got %d arguments", len(args))
	}
	var err error
	if o.Src, err = ParseFileSpec(args[0]); err != nil {
		return cmdutil.UsageErrorf(cmd, "source: %s", err)
	}
	if o.Dst, err = ParseFileSpec(args[1]); err != nil {
		return cmdutil.UsageErrorf(cmd, "destination: %s", err)
	}
	switch {
	case o.Src.Remote() && o.Dst.Remote():
		return cmdutil.UsageErrorf(cmd, "copying between sandboxes is not supported: one of SRC and DST must be a local path")
	case !o.Src.Remote() && !o.Dst.Remote():
		return cmdutil.UsageErrorf(cmd, "one of SRC and DST must be a path in a sandbox, as SANDBOX:PATH")
	}
	remote := o.remote()
	if remote.Namespace == "" {
		if remote.Namespace, _, err = f.Namespace(); err != nil {
			return err
		}
	}
	config, err := f.ToRESTConfig()
	if err != nil {
		return err
	}
	o.Client, err = sandboxclient.NewFiles(config, remote.Namespace, remote.Sandbox, o.Replica)
	return err
}

func (o *CopyOptions) remote() *FileSpec {
	if o.Src.Remote() {
		return &o.Src
	}
	return &o.Dst
}

// Validate checks the options.
func (o *CopyOptions) Validate() error {
	if o.Src.Remote() == o.Dst.Remote() {
		return errors.New("exactly one of SRC and DST must be a path in a sandbox")
	}
	if o.Replica < 0 {
		return fmt.Errorf("--replica must not be negative, got %d", o.Replica)
	}
	if o.Client == nil {
		return errors.New("no files client")
	}
	return nil
}

// Run copies.
func (o *CopyOptions) Run(ctx context.Context) error {
	if o.Src.Remote() {
		return o.download(ctx)
	}
	return o.upload(ctx)
}

// remotePath is p in the sandbox, slash-separated and relative to the files root ("" for it).
func remotePath(p string) string {
	p = path.Clean("/" + p)
	return strings.TrimPrefix(p, "/")
}

func (o *CopyOptions) warnf(format string, args ...any) {
	fmt.Fprintf(o.ErrOut, "Warning: "+format+"\n", args...)
}

// download copies the sandbox's file or directory Src.Path to the local Dst.Path.
func (o *CopyOptions) download(ctx context.Context) error {
	src := remotePath(o.Src.Path)
	fi, err := o.Client.Stat(ctx, src)
	if err != nil {
		return err
	}
	dst := o.Dst.Path
	switch fi.Type {
	case sandboxv1alpha1.SandboxFileTypeFile:
		if dst == stdio {
			return o.downloadTo(ctx, src, o.Out)
		}
		// Into an existing directory, as cp does.
		if st, err := os.Stat(dst); err == nil && st.IsDir() {
			dst = filepath.Join(dst, path.Base("/"+src))
		}
		return o.downloadFile(ctx, src, dst)
	case sandboxv1alpha1.SandboxFileTypeDir:
		if dst == stdio {
			return fmt.Errorf("%s:%s is a directory; only a file can be copied to standard output", o.Src.Sandbox, o.Src.Path)
		}
		return o.downloadDir(ctx, src, dst, fi)
	case sandboxv1alpha1.SandboxFileTypeSymlink:
		o.warnf("skipping symbolic link %s:%s -> %s", o.Src.Sandbox, src, fi.LinkTarget)
		return nil
	default:
		return fmt.Errorf("%s:%s is not a regular file or directory", o.Src.Sandbox, o.Src.Path)
	}
}

func (o *CopyOptions) downloadTo(ctx context.Context, src string, w io.Writer) error {
	body, _, err := o.Client.Download(ctx, src)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	if _, err := io.Copy(w, body); err != nil {
		return fmt.Errorf("copy %s:%s: %w", o.Src.Sandbox, src, err)
	}
	return nil
}

// downloadFile streams the remote file src into the local file dst, replacing it.
func (o *CopyOptions) downloadFile(ctx context.Context, src, dst string) (err error) {
	body, mode, err := o.Client.Download(ctx, src)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, defaultFileMode)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := io.Copy(f, body); err != nil {
		return fmt.Errorf("copy %s:%s to %s: %w", o.Src.Sandbox, src, dst, err)
	}
	if !o.NoPreserve && mode != 0 {
		// Chmod rather than the mode of OpenFile: that is filtered by the umask, and does not
		// apply to a file that existed.
		return f.Chmod(mode)
	}
	return nil
}

// downloadDir copies the remote directory src, described by fi, to the local directory dst,
// creating it if needed, one listing level at a time.
func (o *CopyOptions) downloadDir(ctx context.Context, src, dst string, fi *sandboxv1alpha1.SandboxFile) error {
	if err := os.MkdirAll(dst, defaultDirMode); err != nil {
		return err
	}
	err := o.Client.List(ctx, src, 1, 0, func(item *sandboxv1alpha1.SandboxFile) error {
		// The listing comes from the sandbox, whose code may be hostile: a name that is not one
		// path element would write outside dst (the kubectl cp class of escapes).
		if err := checkEntryName(item.Name); err != nil {
			return fmt.Errorf("%s:%s: %w", o.Src.Sandbox, src, err)
		}
		remote := path.Join(src, item.Name)
		local := filepath.Join(dst, filepath.FromSlash(item.Name))
		switch item.Type {
		case sandboxv1alpha1.SandboxFileTypeFile:
			return o.downloadFile(ctx, remote, local)
		case sandboxv1alpha1.SandboxFileTypeDir:
			return o.downloadDir(ctx, remote, local, item)
		case sandboxv1alpha1.SandboxFileTypeSymlink:
			o.warnf("skipping symbolic link %s:%s -> %s", o.Src.Sandbox, remote, item.LinkTarget)
		default:
			o.warnf("skipping %s:%s, which is not a regular file or directory", o.Src.Sandbox, remote)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if o.NoPreserve {
		return nil
	}
	// Last, so that a read-only directory did not stop its contents being written.
	mode, err := execdapi.ParseMode(fi.Mode)
	if err != nil {
		return fmt.Errorf("%s:%s: %w", o.Src.Sandbox, src, err)
	}
	return os.Chmod(dst, mode)
}

// ErrUnsafeName: a listing named an entry that is not a single path element.
var ErrUnsafeName = errors.New("refusing an entry whose name would leave the destination")

// checkEntryName refuses a listed name unless it is one path element: not empty, "." or "..",
// without a separator (either kind) or a NUL.
func checkEntryName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
		return fmt.Errorf("%w: %q", ErrUnsafeName, name)
	}
	return nil
}

// upload copies the local file or directory Src.Path (or stdin) to the sandbox's Dst.Path.
func (o *CopyOptions) upload(ctx context.Context) error {
	dst := remotePath(o.Dst.Path)
	if o.Src.Path == stdio {
		if dst == "" {
			return errors.New("a destination file name is required to copy standard input")
		}
		return o.Client.Upload(ctx, dst, o.In, nil, true)
	}
	src := o.Src.Path
	st, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		o.warnf("skipping symbolic link %s", src)
		return nil
	case st.Mode().IsRegular():
		// Into an existing directory, as cp does; a trailing slash asks for that too.
		if dst == "" || strings.HasSuffix(o.Dst.Path, "/") {
			dst = path.Join(dst, filepath.Base(src))
		} else if fi, err := o.Client.Stat(ctx, dst); err == nil && fi.Type == sandboxv1alpha1.SandboxFileTypeDir {
			dst = path.Join(dst, filepath.Base(src))
		}
		return o.uploadFile(ctx, src, dst, st.Mode())
	case st.IsDir():
		return o.uploadDir(ctx, src, dst)
	default:
		return fmt.Errorf("%s is not a regular file or directory", src)
	}
}

func (o *CopyOptions) mode(m fs.FileMode) *fs.FileMode {
	if o.NoPreserve {
		return nil
	}
	m = m.Perm()
	return &m
}

func (o *CopyOptions) uploadFile(ctx context.Context, src, dst string, mode fs.FileMode) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	return o.Client.Upload(ctx, dst, f, o.mode(mode), true)
}

// uploadDir copies the local tree src to the remote directory dst, directories first so that
// empty ones are copied too.
func (o *CopyOptions) uploadDir(ctx context.Context, src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			o.warnf("skipping symbolic link %s", p)
		case d.IsDir():
			if target == "" {
				// The files root exists, and its mode is the sandbox's.
				return nil
			}
			return o.Client.Mkdir(ctx, target, o.mode(info.Mode()))
		case d.Type().IsRegular():
			return o.uploadFile(ctx, p, target, info.Mode())
		default:
			o.warnf("skipping %s, which is not a regular file or directory", p)
		}
		return nil
	})
}
