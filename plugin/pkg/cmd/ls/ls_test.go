package ls

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

var mtime = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// populate writes dir/{a.txt,b/,b/c.txt,d.sh,e -> a.txt} with known sizes, modes and times.
func populate(t *testing.T, root string) {
	t.Helper()
	dir := filepath.Join(root, "dir")
	write := func(name, content string, mode os.FileMode) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("a.txt", "hello world\n", 0o644)
	write("b/c.txt", "c", 0o600)
	write("d.sh", "#!/bin/sh\n", 0o755)
	if err := os.Symlink("a.txt", filepath.Join(dir, "e")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "b"), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a.txt", "b/c.txt", "d.sh", "b", "."} {
		if err := os.Chtimes(filepath.Join(dir, p), mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLs(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace, "sb")
	populate(t, srv.Root)
	// A symlink's time cannot be set portably; its line is compared without it.
	linkTime := func() string {
		fi, err := os.Lstat(filepath.Join(srv.Root, "dir", "e"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime().UTC().Format(time.RFC3339)
	}()

	dirSize := func() int64 {
		fi, err := os.Lstat(filepath.Join(srv.Root, "dir", "b"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}()
	w := len(fmt.Sprint(dirSize))

	tests := []struct {
		name      string
		args      []string
		want      string
		wantErr   string
		wantPages int
	}{
		{name: "plain", args: []string{"sb", "dir"}, want: "a.txt\nb/\nd.sh\ne\n", wantPages: 1},
		{name: "long", args: []string{"sb", "dir", "-l"}, wantPages: 1, want: "" +
			fmt.Sprintf("-rw-r--r-- %*d 2026-05-01T12:00:00Z a.txt\n", w, 12) +
			fmt.Sprintf("drwxr-x--- %*d 2026-05-01T12:00:00Z b/\n", w, dirSize) +
			fmt.Sprintf("-rwxr-xr-x %*d 2026-05-01T12:00:00Z d.sh\n", w, 10) +
			fmt.Sprintf("lrwxrwxrwx %*d %s e -> a.txt\n", w, 5, linkTime)},
		{name: "three pages", args: []string{"sb", "dir", "--limit", "2", "--depth", "2"}, want: "a.txt\nb/\nb/c.txt\nd.sh\ne\n", wantPages: 3},
		{name: "a file", args: []string{"sb", "dir/a.txt"}, want: "a.txt\n", wantPages: 1},
		{name: "missing directory", args: []string{"sb", "nope"}, wantErr: "Error from server (NotFound): ", wantPages: 1},
		{name: "missing sandbox", args: []string{"ghost"}, wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n", wantPages: 1},
		{name: "bad depth", args: []string{"sb", "--depth", "11"}, wantErr: "error: --depth must be between 1 and 10, got 11\nSee 'ls -h' for help and examples\n"},
		{name: "bad output", args: []string{"sb", "-o", "wide"}, wantErr: "error: unknown output format \"wide\"; use one of: json, yaml\nSee 'ls -h' for help and examples\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv.Requests()
			out, msg := run(t, srv, tt.args...)
			if !strings.HasPrefix(msg, tt.wantErr) || (strings.HasSuffix(tt.wantErr, "\n") && msg != tt.wantErr) {
				t.Errorf("error %q, want %q", msg, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, out); diff != "" {
				t.Errorf("output differs (-want +got):\n%s", diff)
			}
			var pages int
			for _, r := range srv.Requests() {
				if !strings.Contains(r.RawQuery, "stat=true") {
					pages++
				}
			}
			if pages != tt.wantPages {
				t.Errorf("%d listing requests, want %d", pages, tt.wantPages)
			}
		})
	}
}

func TestLsJSON(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace, "sb")
	populate(t, srv.Root)
	out, msg := run(t, srv, "sb", "dir", "-o", "json", "--limit", "1")
	if msg != "" {
		t.Fatal(msg)
	}
	var list sandboxv1alpha1.SandboxFileList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	type entry struct{ Path, Type, Mode, Target string }
	var got []entry
	for _, fi := range list.Items {
		got = append(got, entry{fi.Path, string(fi.Type), fi.Mode, fi.LinkTarget})
	}
	want := []entry{{"a.txt", "file", "0644", ""}, {"b", "dir", "0750", ""}, {"d.sh", "file", "0755", ""}, {"e", "symlink", "0777", "a.txt"}}
	if list.Kind != "SandboxFileList" || list.Continue != "" {
		t.Errorf("kind %q, continue %q; want %q and none", list.Kind, list.Continue, "SandboxFileList")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("items differ (-want +got):\n%s", diff)
	}
}

func run(t *testing.T, srv *sandboxserver.Server, args ...string) (string, string) {
	t.Helper()
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	f := cmdtesting.NewServerFactory(srv.URL)
	f.RESTConfig.BearerToken = sandboxserver.UserToken
	cmd := NewCmdLs(f, streams)
	cmd.SetArgs(args)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	var msg bytes.Buffer
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		cmdutil.PrintError(&msg, err)
	}
	return out.String(), msg.String()
}
