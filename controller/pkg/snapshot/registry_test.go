package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type staticSource struct{ c *Credentials }

func (s staticSource) Credentials(context.Context) (*Credentials, error) { return s.c, nil }

// fakeRegistry serves the distribution API's tags list (a page of two, with a Link to the
// next), manifest HEAD by tag and manifest DELETE by digest, to a client with the right basic
// credentials, for one repository.
type fakeRegistry struct {
	mu      sync.Mutex
	repo    string
	tags    map[string]string // tag → digest
	deleted []string
}

func (f *fakeRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if u, p, ok := r.BasicAuth(); !ok || u != "ks" || p != "secret" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	prefix := "/v2/" + f.repo + "/"
	if !strings.HasPrefix(r.URL.Path, prefix) {
		http.Error(w, `{"errors":[{"code":"NAME_UNKNOWN"}]}`, http.StatusNotFound)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, prefix)
	switch {
	case rest == "tags/list" && r.Method == http.MethodGet:
		var all []string
		for t := range f.tags {
			all = append(all, t)
		}
		sort.Strings(all)
		last := r.URL.Query().Get("last")
		var page []string
		for _, t := range all {
			if t > last && len(page) < 2 {
				page = append(page, t)
			}
		}
		if len(page) == 2 && page[1] != all[len(all)-1] {
			w.Header().Set("Link", `</v2/`+f.repo+`/tags/list?last=`+page[1]+`&n=2>; rel="next"`)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"name": f.repo, "tags": page})
	case strings.HasPrefix(rest, "manifests/") && r.Method == http.MethodHead:
		d, ok := f.tags[strings.TrimPrefix(rest, "manifests/")]
		if !ok || !strings.Contains(r.Header.Get("Accept"), "application/vnd.oci.image.manifest.v1+json") {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Docker-Content-Digest", d)
	case strings.HasPrefix(rest, "manifests/sha256:") && r.Method == http.MethodDelete:
		d := strings.TrimPrefix(rest, "manifests/")
		found := false
		for t, td := range f.tags {
			if td == d {
				delete(f.tags, t)
				found = true
			}
		}
		if !found {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		f.deleted = append(f.deleted, d)
		w.WriteHeader(http.StatusAccepted)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// TestRegistryClient: deleting a sandbox's snapshots finds its tags across pages, deletes each
// manifest by digest, leaves other sandboxes' tags alone, and takes a repository the registry
// does not know for empty.
func TestRegistryClient(t *testing.T) {
	const repo = "kube-sandbox/snapshots/team-a/demo"
	ours := TagPrefix("uid-1")
	reg := &fakeRegistry{repo: repo, tags: map[string]string{
		ours + "r0-a": "sha256:a", ours + "r1-b": "sha256:b", ours + "r2-c": "sha256:c",
		TagPrefix("uid-2") + "r0-d": "sha256:d", // a sandbox of the same name before this one
	}}
	srv := httptest.NewUnstartedServer(reg)
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := &RegistryClient{Registry: Registry{Host: strings.TrimPrefix(srv.URL, "http://")},
		Source: staticSource{&Credentials{Username: "ks", Password: "secret"}}, PlainHTTP: true}

	n, err := c.DeleteTagged(t.Context(), repo, ours)
	if err != nil || n != 3 {
		t.Fatalf("DeleteTagged = %d, %v; want 3", n, err)
	}
	// A list of two pages, then a HEAD and a DELETE per tag: one connection.
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for the deletion, want 1", n)
	}
	sort.Strings(reg.deleted)
	if diff := cmp.Diff([]string{"sha256:a", "sha256:b", "sha256:c"}, reg.deleted); diff != "" {
		t.Errorf("deleted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{TagPrefix("uid-2") + "r0-d": "sha256:d"}, reg.tags); diff != "" {
		t.Errorf("left in the registry (-want +got):\n%s", diff)
	}
	if n, err := c.DeleteTagged(t.Context(), "kube-sandbox/snapshots/team-a/never", ours); err != nil || n != 0 {
		t.Errorf("DeleteTagged of an unknown repository = %d, %v; want 0, nil", n, err)
	}
	if d, err := c.Digest(t.Context(), repo, "missing"); err != nil || d != "" {
		t.Errorf("Digest of a missing tag = %q, %v; want none", d, err)
	}
	if err := c.DeleteManifest(t.Context(), repo, "sha256:a"); err != nil {
		t.Errorf("DeleteManifest of a manifest already gone = %v, want nil", err)
	}

	wrong := &RegistryClient{Registry: c.Registry, Source: staticSource{&Credentials{Username: "ks", Password: "guess"}}, PlainHTTP: true}
	var rerr *RegistryError
	if _, err := wrong.DeleteTagged(t.Context(), repo, ""); err == nil || !errors.As(err, &rerr) || rerr.StatusCode != http.StatusUnauthorized {
		t.Errorf("DeleteTagged with a wrong password = %v, want a 401 RegistryError", err)
	}
}
