package cp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// run runs `cp args...` against srv and returns stdout, stderr and the error as kubectl prints
// it.
func run(t *testing.T, srv *sandboxserver.Server, stdin string, args ...string) (string, string, string) {
	t.Helper()
	streams, in, out, errOut := genericiooptions.NewTestIOStreams()
	in.WriteString(stdin)
	f := cmdtesting.NewServerFactory(srv.URL)
	f.RESTConfig.BearerToken = sandboxserver.UserToken
	cmd := NewCmdCp(f, streams)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	var msg bytes.Buffer
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		cmdutil.PrintError(&msg, err)
	}
	return out.String(), errOut.String(), msg.String()
}

// fileState is what a copy must keep of a file.
type fileState struct {
	SHA256 string
	Mode   fs.FileMode
}

func writeFile(t *testing.T, p string, size int, mode fs.FileMode) {
	t.Helper()
	data := make([]byte, size)
	_, _ = rand.Read(data)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// tree describes the regular files and directories under root by relative path.
func tree(t *testing.T, root string) map[string]fileState {
	t.Helper()
	states := map[string]fileState{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			states[rel+"/"] = fileState{Mode: info.Mode().Perm()}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		states[rel] = fileState{SHA256: hex.EncodeToString(sum[:]), Mode: info.Mode().Perm()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return states
}

func state(t *testing.T, p string) fileState {
	t.Helper()
	states := tree(t, filepath.Dir(p))
	return states[filepath.Base(p)]
}

func TestCopyFile(t *testing.T) {
	tests := []struct {
		name string
		// remote is whether the source is in the sandbox.
		remote bool
		mode   fs.FileMode
		// args gets the local path and the sandbox's name.
		args func(local string) []string
		// srcPath and dstPath are the files compared, relative to the local dir or the root.
		srcPath, dstPath string
		wantMode         fs.FileMode
	}{
		{name: "upload keeps the mode", mode: 0o750, srcPath: "a.bin", dstPath: "sub/dir/a.bin", wantMode: 0o750,
			args: func(local string) []string { return []string{filepath.Join(local, "a.bin"), "sb:sub/dir/a.bin"} }},
		{name: "upload with --no-preserve", mode: 0o750, srcPath: "a.bin", dstPath: "a.bin", wantMode: 0o644,
			args: func(local string) []string {
				return []string{filepath.Join(local, "a.bin"), "sb:/a.bin", "--no-preserve"}
			}},
		{name: "upload into a directory by trailing slash", mode: 0o600, srcPath: "a.bin", dstPath: "in/a.bin", wantMode: 0o600,
			args: func(local string) []string { return []string{filepath.Join(local, "a.bin"), "test/sb:in/"} }},
		{name: "download keeps the mode", remote: true, mode: 0o640, srcPath: "r/b.bin", dstPath: "b.bin", wantMode: 0o640,
			args: func(local string) []string { return []string{"sb:r/b.bin", filepath.Join(local, "b.bin")} }},
		{name: "download into an existing directory", remote: true, mode: 0o700, srcPath: "b.bin", dstPath: "b.bin", wantMode: 0o700,
			args: func(local string) []string { return []string{"sb:b.bin", local} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sandboxserver.New(t, cmdtesting.Namespace, "sb")
			local := t.TempDir()
			srcRoot, dstRoot := local, srv.Root
			if tt.remote {
				srcRoot, dstRoot = srv.Root, local
			}
			if !tt.remote {
				// A directory named by the trailing-slash case must exist.
				_ = os.Mkdir(filepath.Join(srv.Root, "in"), 0o755)
			}
			// Large enough to take several reads and writes.
			writeFile(t, filepath.Join(srcRoot, tt.srcPath), 3<<20+17, tt.mode)

			stdout, stderr, msg := run(t, srv, "", tt.args(local)...)
			if msg != "" || stdout != "" || stderr != "" {
				t.Fatalf("cp printed %q, %q, error %q; want nothing", stdout, stderr, msg)
			}
			src, dst := state(t, filepath.Join(srcRoot, tt.srcPath)), state(t, filepath.Join(dstRoot, tt.dstPath))
			if dst.SHA256 != src.SHA256 {
				t.Errorf("copy has sha256 %s, source %s", dst.SHA256, src.SHA256)
			}
			if dst.Mode != tt.wantMode {
				t.Errorf("copy has mode %o, want %o", dst.Mode, tt.wantMode)
			}
		})
	}
}

// makeTree writes 20 files over three levels of directories, with various modes, and a
// symbolic link, which is skipped.
func makeTree(t *testing.T, root string) {
	t.Helper()
	modes := []fs.FileMode{0o644, 0o600, 0o755, 0o640}
	dirs := []string{"", "a", "a/b", "a/b/c", "d", "d/e"}
	for i := range 20 {
		dir := dirs[i%len(dirs)]
		writeFile(t, filepath.Join(root, dir, fmt.Sprintf("file %02d.txt", i)), i*1000, modes[i%len(modes)])
	}
	if err := os.Mkdir(filepath.Join(root, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "a", "b"), 0o711); err != nil {
		t.Fatal(err)
	}
}

func TestCopyTree(t *testing.T) {
	tests := []struct {
		name   string
		remote bool
	}{
		{name: "upload"},
		{name: "download", remote: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sandboxserver.New(t, cmdtesting.Namespace, "sb")
			local := t.TempDir()
			var src, dst string
			var args []string
			if tt.remote {
				src, dst = filepath.Join(srv.Root, "tree"), filepath.Join(local, "copy")
				args = []string{"sb:tree", dst}
			} else {
				src, dst = filepath.Join(local, "tree"), filepath.Join(srv.Root, "copy")
				args = []string{src, "sb:copy"}
			}
			makeTree(t, src)
			if err := os.Symlink("a/b", filepath.Join(src, "link")); err != nil {
				t.Fatal(err)
			}

			stdout, stderr, msg := run(t, srv, "", args...)
			if msg != "" || stdout != "" {
				t.Fatalf("cp printed %q, error %q; want nothing", stdout, msg)
			}
			if !strings.Contains(stderr, "Warning: skipping symbolic link") || strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr %q, want one warning about the symbolic link", stderr)
			}
			want := tree(t, src)
			if n := len(want); n != 20+6 {
				t.Fatalf("source tree has %d entries, want 26 (20 files, 6 directories)", n)
			}
			if diff := cmp.Diff(want, tree(t, dst)); diff != "" {
				t.Errorf("copied tree differs (-source +copy):\n%s", diff)
			}
		})
	}
}

func TestCopyStdio(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace, "sb")
	const content = "hello\x00world\n"
	stdout, stderr, msg := run(t, srv, content, "-", "sb:dir/from-stdin.txt")
	if stdout != "" || stderr != "" || msg != "" {
		t.Fatalf("upload printed %q, %q, error %q", stdout, stderr, msg)
	}
	data, err := os.ReadFile(filepath.Join(srv.Root, "dir", "from-stdin.txt"))
	if err != nil || string(data) != content {
		t.Fatalf("uploaded %q, %v; want %q", data, err, content)
	}

	tests := []struct {
		name    string
		args    []string
		wantOut string
		wantErr string
	}{
		{name: "file to stdout", args: []string{"sb:dir/from-stdin.txt", "-"}, wantOut: content},
		{name: "directory to stdout", args: []string{"sb:dir", "-"}, wantErr: "error: sb:dir is a directory; only a file can be copied to standard output\n"},
		{name: "stdin to the root", args: []string{"-", "sb:"}, wantErr: "error: a destination file name is required to copy standard input\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, msg := run(t, srv, "", tt.args...)
			if stdout != tt.wantOut || msg != tt.wantErr {
				t.Errorf("got output %q, error %q; want %q, %q", stdout, msg, tt.wantOut, tt.wantErr)
			}
		})
	}
}

func TestCopyErrors(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace, "sb")
	local := t.TempDir()
	writeFile(t, filepath.Join(local, "f"), 10, 0o644)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "missing sandbox", args: []string{"ghost:x", local},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n"},
		{name: "missing sandbox on upload", args: []string{filepath.Join(local, "f"), "ghost:x"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n"},
		{name: "missing remote file", args: []string{"sb:nope.txt", local},
			wantErr: "Error from server (NotFound): "},
		{name: "missing local file", args: []string{filepath.Join(local, "nope"), "sb:x"},
			wantErr: "error: lstat " + filepath.Join(local, "nope") + ": no such file or directory\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, msg := run(t, srv, "", tt.args...)
			if !strings.HasPrefix(msg, tt.wantErr) || (strings.HasSuffix(tt.wantErr, "\n") && msg != tt.wantErr) {
				t.Errorf("error %q, want %q", msg, tt.wantErr)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace, "sb")
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "both local", args: []string{"a", "b"}, wantErr: "error: one of SRC and DST must be a path in a sandbox, as SANDBOX:PATH"},
		{name: "both remote", args: []string{"sb:a", "other/sb:b"}, wantErr: "error: copying between sandboxes is not supported"},
		{name: "one argument", args: []string{"sb:a"}, wantErr: "error: cp takes SRC and DST, got 1 arguments"},
		{name: "empty sandbox name", args: []string{":a", "b"}, wantErr: "error: source: invalid sandbox name \"\""},
		{name: "too many slashes", args: []string{"a", "ns/sb/x:b"}, wantErr: "error: destination: invalid sandbox name \"sb/x\""},
		{name: "invalid namespace", args: []string{"a", "NS/sb:b"}, wantErr: "error: destination: invalid namespace \"NS\""},
		{name: "negative replica", args: []string{"a", "sb:b", "--replica", "-1"}, wantErr: "error: --replica must not be negative, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, msg := run(t, srv, "", tt.args...)
			if !strings.HasPrefix(msg, tt.wantErr) {
				t.Errorf("error %q, want it to start with %q", msg, tt.wantErr)
			}
		})
	}
	if reqs := srv.Requests(); len(reqs) != 0 {
		t.Errorf("bad arguments made %d requests", len(reqs))
	}
}

func TestParseFileSpec(t *testing.T) {
	tests := []struct {
		name string
		arg  string
		want FileSpec
	}{
		{name: "sandbox path", arg: "sb:dir/f", want: FileSpec{Sandbox: "sb", Path: "dir/f"}},
		{name: "namespaced", arg: "ns/sb:/f", want: FileSpec{Namespace: "ns", Sandbox: "sb", Path: "/f"}},
		{name: "sandbox root", arg: "sb:", want: FileSpec{Sandbox: "sb"}},
		{name: "relative local path with a colon", arg: "./a:b", want: FileSpec{Path: "./a:b"}},
		{name: "absolute local path with a colon", arg: "/tmp/a:b", want: FileSpec{Path: "/tmp/a:b"}},
		{name: "local path", arg: "dir/file", want: FileSpec{Path: "dir/file"}},
		{name: "stdio", arg: "-", want: FileSpec{Path: "-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseFileSpec(tt.arg)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ParseFileSpec(%q) = %+v, want %+v", tt.arg, got, tt.want)
			}
		})
	}
}

// hostileServer answers as a sandbox whose code forged its listing: a directory "d" whose
// entries are named to escape the destination.
func hostileServer(t *testing.T, names ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		apiVersion := sandboxv1alpha1.SchemeGroupVersion.String()
		if req.URL.Query().Get("stat") != "" {
			_ = json.NewEncoder(w).Encode(sandboxv1alpha1.SandboxFile{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: "SandboxFile"},
				Name: "d", Path: "d", Type: sandboxv1alpha1.SandboxFileTypeDir, Mode: "0755"})
			return
		}
		if !strings.HasSuffix(req.URL.Path, "/files/d") {
			// A file's contents, were it ever asked for.
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write([]byte("owned"))
			return
		}
		list := sandboxv1alpha1.SandboxFileList{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: "SandboxFileList"}}
		for _, n := range names {
			list.Items = append(list.Items, sandboxv1alpha1.SandboxFile{Name: n, Path: n, Type: sandboxv1alpha1.SandboxFileTypeFile, Mode: "0644"})
		}
		_ = json.NewEncoder(w).Encode(list)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestCopyRefusesHostileListing: the kubectl cp class of escapes: a listing that names "..",
// a path with separators, or an absolute path, writes nothing outside the destination, and
// says why.
func TestCopyRefusesHostileListing(t *testing.T) {
	for _, name := range []string{"../escaped", "..", "a/../../escaped", "/tmp/escaped", `..\escaped`, "", "."} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			srv := hostileServer(t, "fine.txt", name)
			parent := t.TempDir()
			dst := filepath.Join(parent, "dst")
			streams, _, _, _ := genericiooptions.NewTestIOStreams()
			f := cmdtesting.NewServerFactory(srv.URL)
			cmd := NewCmdCp(f, streams)
			cmd.SetArgs([]string{"sb:d", dst})
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			err := cmd.ExecuteContext(context.Background())
			if !errors.Is(err, ErrUnsafeName) || !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
				t.Fatalf("cp: %v, want it to refuse %q", err, name)
			}
			// Nothing outside dst; inside it, at most the entries before the hostile one.
			entries, _ := os.ReadDir(parent)
			if len(entries) != 1 || entries[0].Name() != "dst" {
				t.Errorf("cp wrote next to the destination: %v", entries)
			}
			if _, err := os.Stat("/tmp/escaped"); err == nil && name == "/tmp/escaped" {
				t.Error("cp wrote /tmp/escaped")
			}
		})
	}
}

func TestCheckEntryName(t *testing.T) {
	for name, ok := range map[string]bool{
		"a": true, "a.txt": true, "...": true, ".hidden": true, "a b": true,
		"": false, ".": false, "..": false, "a/b": false, "/a": false, `a\b`: false, "a\x00b": false,
	} {
		if err := checkEntryName(name); (err == nil) != ok {
			t.Errorf("checkEntryName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}
