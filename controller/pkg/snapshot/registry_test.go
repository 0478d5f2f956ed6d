package snapshot

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

type staticSource struct{ c *Credentials }

func (s staticSource) Credentials(context.Context) (*Credentials, error) { return s.c, nil }

// digestOf is a well-formed digest that stands for s.
func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// fakeRegistry serves the distribution API's tags list (pages of two, with a Link to the
// next), manifest HEAD and manifest DELETE by digest, to a client with the right basic
// credentials, for one repository. Unlike go-containerregistry's registry it pages the tags
// list, and deleting a manifest deletes its tags, as distribution's registry does.
type fakeRegistry struct {
	mu      sync.Mutex
	repo    string
	tags    map[string]string // tag → digest
	deleted []string
	// pages of the tags list served, and requests that reached the handler.
	pages, requests int
}

func (f *fakeRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	if u, p, ok := r.BasicAuth(); !ok || u != "ks" || p != "secret" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	prefix := "/v2/" + f.repo + "/"
	if !strings.HasPrefix(r.URL.Path, prefix) {
		http.Error(w, `{"errors":[{"code":"NAME_UNKNOWN"}]}`, http.StatusNotFound)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, prefix)
	switch {
	case rest == "tags/list" && r.Method == http.MethodGet:
		f.pages++
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
		ref := strings.TrimPrefix(rest, "manifests/")
		d, ok := f.tags[ref]
		if !ok {
			for _, td := range f.tags {
				if td == ref {
					d, ok = td, true
				}
			}
		}
		if !ok || !strings.Contains(r.Header.Get("Accept"), "application/vnd.oci.image.manifest.v1+json") {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Docker-Content-Digest", d)
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Content-Length", "512")
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

// serve serves h over TLS or plain HTTP and returns a client of it with creds, and a count of the
// connections made to it.
func serve(t *testing.T, h http.Handler, tlsOn bool, creds Credentials) (*RegistryClient, *atomic.Int32) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	if tlsOn {
		srv.StartTLS()
		creds.caPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
		creds.CA = x509Pool(t, creds.caPEM)
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return &RegistryClient{Registry: Registry{Host: srv.Listener.Addr().String()},
		Source: staticSource{&creds}, PlainHTTP: !tlsOn}, &conns
}

// TestRegistryClient: deleting a sandbox's snapshots finds its tags across pages, deletes each
// manifest by digest, leaves other sandboxes' tags alone, and takes a repository the registry
// does not know for empty; over plain HTTP and over TLS to a loopback address, which
// go-containerregistry would otherwise speak plain HTTP to.
func TestRegistryClient(t *testing.T) {
	const repo = "kube-sandbox/snapshots/team-a/demo"
	ours := TagPrefix("uid-1")
	for _, tc := range []struct {
		name string
		tls  bool
	}{{name: "plain HTTP"}, {name: "TLS", tls: true}} {
		t.Run(tc.name, func(t *testing.T) {
			reg := &fakeRegistry{repo: repo, tags: map[string]string{
				ours + "r0-a": digestOf("a"), ours + "r1-b": digestOf("b"), ours + "r2-c": digestOf("c"),
				ours + "r3-d": digestOf("d"), ours + "r4-e": digestOf("e"),
				TagPrefix("uid-2") + "r0-f": digestOf("f"), // a sandbox of the same name before this one
			}}
			c, conns := serve(t, reg, tc.tls, Credentials{Username: "ks", Password: "secret"})

			n, err := c.DeleteTagged(t.Context(), repo, ours)
			if err != nil || n != 5 {
				t.Fatalf("DeleteTagged = %d, %v; want 5", n, err)
			}
			// Six tags in pages of two: the Link header was followed to the end.
			if reg.pages != 3 {
				t.Errorf("%d pages of tags listed, want 3", reg.pages)
			}
			// A list of three pages, then a HEAD and a DELETE per tag: one connection.
			if n := conns.Load(); n != 1 {
				t.Errorf("%d connections for the deletion, want 1", n)
			}
			sort.Strings(reg.deleted)
			want := []string{digestOf("a"), digestOf("b"), digestOf("c"), digestOf("d"), digestOf("e")}
			sort.Strings(want)
			if diff := cmp.Diff(want, reg.deleted); diff != "" {
				t.Errorf("deleted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]string{TagPrefix("uid-2") + "r0-f": digestOf("f")}, reg.tags); diff != "" {
				t.Errorf("left in the registry (-want +got):\n%s", diff)
			}
			if d, err := c.Digest(t.Context(), repo, digestOf("f")); err != nil || d != digestOf("f") {
				t.Errorf("Digest by digest = %q, %v; want %s", d, err, digestOf("f"))
			}
			if n, err := c.DeleteTagged(t.Context(), "kube-sandbox/snapshots/team-a/never", ours); err != nil || n != 0 {
				t.Errorf("DeleteTagged of an unknown repository = %d, %v; want 0, nil", n, err)
			}
			if n, err := c.DeleteTagged(t.Context(), repo, ours); err != nil || n != 0 {
				t.Errorf("DeleteTagged again = %d, %v; want 0, nil", n, err)
			}
			if d, err := c.Digest(t.Context(), repo, "missing"); err != nil || d != "" {
				t.Errorf("Digest of a missing tag = %q, %v; want none", d, err)
			}
			if err := c.DeleteManifest(t.Context(), repo, digestOf("a")); err != nil {
				t.Errorf("DeleteManifest of a manifest already gone = %v, want nil", err)
			}

			wrong := &RegistryClient{Registry: c.Registry, PlainHTTP: c.PlainHTTP,
				Source: staticSource{&Credentials{Username: "ks", Password: "guess", CA: c.Source.(staticSource).c.CA}}}
			var terr *transport.Error
			if _, err := wrong.DeleteTagged(t.Context(), repo, ""); err == nil || !errors.As(err, &terr) || terr.StatusCode != http.StatusUnauthorized {
				t.Errorf("DeleteTagged with a wrong password = %v, want a 401 transport.Error", err)
			}
		})
	}
}

// TestRegistryClientKeepsToTLS: without PlainHTTP the client speaks TLS only, even to a
// loopback address, for which go-containerregistry falls back to plain HTTP; and with it,
// plain HTTP only.
func TestRegistryClientKeepsToTLS(t *testing.T) {
	const repo = "kube-sandbox/snapshots/team-a/demo"
	for _, tc := range []struct {
		name              string
		serverTLS, client bool
	}{
		{name: "TLS client, plain server", client: true},
		{name: "plain client, TLS server", serverTLS: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := &fakeRegistry{repo: repo, tags: map[string]string{"t": digestOf("t")}}
			c, _ := serve(t, reg, tc.serverTLS, Credentials{Username: "ks", Password: "secret"})
			c.PlainHTTP = !tc.client
			if _, err := c.DeleteTagged(t.Context(), repo, ""); err == nil {
				t.Errorf("DeleteTagged = nil error, want one")
			}
			if reg.requests != 0 {
				t.Errorf("%d requests reached the registry, want none", reg.requests)
			}
		})
	}
}

// TestRegistryClientRealRegistry runs the client against go-containerregistry's registry,
// behind basic auth, over TLS, with images pushed to it.
func TestRegistryClientRealRegistry(t *testing.T) {
	const repo = "kube-sandbox/snapshots/team-a/demo"
	ours := TagPrefix("uid-1")
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "ks" || p != "secret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		inner.ServeHTTP(w, r)
	})
	c, _ := serve(t, h, true, Credentials{Username: "ks", Password: "secret"})
	creds := c.Source.(staticSource).c

	push := func(tag string) string {
		t.Helper()
		img, err := random.Image(64, 1)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.NewTag(c.Registry.Host + "/" + repo + ":" + tag)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: "ks", Password: "secret"}),
			remote.WithTransport(schemeOnly{scheme: "https", next: c.httpTransport(creds)})); err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	a, b, other := push(ours+"r0-a"), push(ours+"r1-b"), push(TagPrefix("uid-2")+"r0-c")

	if d, err := c.Digest(t.Context(), repo, ours+"r0-a"); err != nil || d != a {
		t.Fatalf("Digest of a tag = %q, %v; want %s", d, err, a)
	}
	if tags, err := c.Tags(t.Context(), repo, ours); err != nil || !cmp.Equal(tags, []string{ours + "r0-a", ours + "r1-b"}) {
		t.Errorf("Tags = %q, %v; want ours", tags, err)
	}
	if n, err := c.DeleteTagged(t.Context(), repo, ours); err != nil || n != 2 {
		t.Fatalf("DeleteTagged = %d, %v; want 2", n, err)
	}
	for _, tc := range []struct {
		name, ref, want string
	}{
		{name: "deleted", ref: a},
		{name: "deleted too", ref: b},
		{name: "another sandbox's", ref: other, want: other},
		{name: "missing tag", ref: "missing"},
		{name: "never pushed", ref: digestOf("never")},
	} {
		if d, err := c.Digest(t.Context(), repo, tc.ref); err != nil || d != tc.want {
			t.Errorf("Digest of %s = %q, %v; want %q", tc.name, d, err, tc.want)
		}
	}
	// The registry answers MANIFEST_UNKNOWN and NAME_UNKNOWN, both 404: already deleted.
	if err := c.DeleteManifest(t.Context(), repo, a); err != nil {
		t.Errorf("DeleteManifest of a manifest already gone = %v, want nil", err)
	}
	if err := c.DeleteManifest(t.Context(), "kube-sandbox/snapshots/team-a/never", a); err != nil {
		t.Errorf("DeleteManifest in an unknown repository = %v, want nil", err)
	}
	if n, err := c.DeleteTagged(t.Context(), "kube-sandbox/snapshots/team-a/never", ours); err != nil || n != 0 {
		t.Errorf("DeleteTagged of an unknown repository = %d, %v; want 0, nil", n, err)
	}
}

// TestRegistryClientNoRegistry: a server whose /v2/ is not found is not a registry, and
// what it says of manifests is no answer that they are gone.
func TestRegistryClientNoRegistry(t *testing.T) {
	c, _ := serve(t, http.NotFoundHandler(), false, Credentials{})
	if d, err := c.Digest(t.Context(), "r", digestOf("a")); err == nil {
		t.Errorf("Digest = %q, nil error; want one", d)
	}
	if err := c.DeleteManifest(t.Context(), "r", digestOf("a")); err == nil {
		t.Errorf("DeleteManifest = nil error, want one")
	}
	if _, err := (&RegistryClient{Source: staticSource{&Credentials{}}}).Tags(t.Context(), "r", ""); err == nil {
		t.Errorf("Tags without a host = nil error, want one")
	}
}

func x509Pool(t *testing.T, caPEM string) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatalf("no certificate in %q", caPEM)
	}
	return pool
}
