package node

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

const (
	testUser     = "pusher"
	testPassword = "s3cret"
)

// testRegistry is go-containerregistry's registry behind basic auth, over TLS.
type testRegistry struct {
	srv    *httptest.Server
	host   string
	caFile string
	// block holds blob uploads (PUT and PATCH) until their client hangs up; blocked is
	// closed when the first one arrives.
	mu      sync.Mutex
	block   bool
	blocked chan struct{}
}

// newTestRegistry serves a registry; wrap, if set, is put in front of it (after auth).
func newTestRegistry(t *testing.T, wrap func(http.Handler) http.Handler) *testRegistry {
	t.Helper()
	r := &testRegistry{blocked: make(chan struct{})}
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	inner := h
	h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != testUser || p != testPassword {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		r.mu.Lock()
		block := r.block
		r.mu.Unlock()
		if block && strings.Contains(req.URL.Path, "/blobs/uploads/") && (req.Method == http.MethodPut || req.Method == http.MethodPatch) {
			r.mu.Lock()
			select {
			case <-r.blocked:
			default:
				close(r.blocked)
			}
			r.mu.Unlock()
			// The server notices a client that hangs up only once the body is read.
			_, _ = io.Copy(io.Discard, req.Body)
			<-req.Context().Done()
			return
		}
		inner.ServeHTTP(w, req)
	})
	r.srv = httptest.NewUnstartedServer(h)
	r.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	r.srv.StartTLS()
	t.Cleanup(r.srv.Close)
	r.host = r.srv.Listener.Addr().String()
	r.caFile = filepath.Join(t.TempDir(), "registry-ca.crt")
	if err := os.WriteFile(r.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *testRegistry) blockUploads() {
	r.mu.Lock()
	r.block = true
	r.mu.Unlock()
}

// config is a Registry for r, with the credentials given.
func (r *testRegistry) config(t *testing.T, user, password string) *Registry {
	t.Helper()
	dir := t.TempDir()
	reg := &Registry{Host: r.host, RepositoryPrefix: "kube-sandbox/snapshots", CAFile: r.caFile}
	if user != "" {
		reg.UsernameFile = writeFile(t, dir, "username", []byte(user+"\n"))
		reg.PasswordFile = writeFile(t, dir, "password", []byte(password))
	}
	return reg
}

// httpsOnly sends every request over https: go-containerregistry speaks plain http to
// loopback addresses, and the test registry speaks TLS.
type httpsOnly struct{ rt http.RoundTripper }

func (h httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.URL.Scheme = "https"
	return h.rt.RoundTrip(req)
}

// pull reads image back from the registry with go-containerregistry.
func (r *testRegistry) pull(t *testing.T, image string) v1.Image {
	t.Helper()
	ref, err := name.ParseReference(image, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(r.srv.Certificate())
	img, err := remote.Image(ref, remote.WithAuth(&authn.Basic{Username: testUser, Password: testPassword}),
		remote.WithTransport(httpsOnly{&http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}))
	if err != nil {
		t.Fatalf("pull %s: %v", image, err)
	}
	return img
}

// memStore is a content provider of blobs in memory.
type memStore map[digest.Digest][]byte

func (m memStore) add(mediaType string, data []byte) ocispec.Descriptor {
	d := digest.FromBytes(data)
	m[d] = data
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}
}

func (m memStore) ReaderAt(_ context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	b, ok := m[desc.Digest]
	if !ok {
		return nil, errdefs.ErrNotFound
	}
	return readerAt{bytes.NewReader(b)}, nil
}

type readerAt struct{ *bytes.Reader }

func (readerAt) Close() error { return nil }

// testLayer is a gzip tar of files (name → content; "" content with a ".wh." name is a
// whiteout), and the digest of the tar.
func testLayer(t *testing.T, files map[string]string) (gz []byte, diffID digest.Digest) {
	t.Helper()
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for n, c := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var gzBuf bytes.Buffer
	zw := gzip.NewWriter(&gzBuf)
	_, _ = zw.Write(tarBuf.Bytes())
	_ = zw.Close()
	return gzBuf.Bytes(), digest.FromBytes(tarBuf.Bytes())
}

// testImage builds, in store, a snapshot image of a base of one layer: what Committer does
// with containerd's content store.
func testImage(t *testing.T, store memStore) (*builtImage, *baseImage) {
	t.Helper()
	baseGz, baseID := testLayer(t, map[string]string{"base.txt": "base"})
	baseLayer := store.add(ocispec.MediaTypeImageLayerGzip, baseGz)
	cfg, _ := json.Marshal(ocispec.Image{Platform: ocispec.Platform{OS: "linux", Architecture: "amd64"},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{baseID}}})
	base := &baseImage{Name: "example.com/base:1", Digest: digest.FromString("x"), Manifest: ocispec.Manifest{Layers: []ocispec.Descriptor{baseLayer}}, Config: cfg}
	newGz, newID := testLayer(t, map[string]string{"new.txt": "new", ".wh.base.txt": ""})
	built, err := buildImage(base, newLayer{Blob: store.add(ocispec.MediaTypeImageLayerGzip, newGz), DiffID: newID}, time.Now(), "test")
	if err != nil {
		t.Fatal(err)
	}
	store.add(built.ConfigDesc.MediaType, built.Config)
	store.add(built.ManifestDesc.MediaType, built.Manifest)
	return built, base
}

func mustTagged(t *testing.T, s string) reference.NamedTagged {
	t.Helper()
	n, err := reference.ParseNamed(s)
	if err != nil {
		t.Fatal(err)
	}
	return n.(reference.NamedTagged)
}

func TestPushRoundTrip(t *testing.T) {
	reg := newTestRegistry(t, nil)
	store := memStore{}
	built, base := testImage(t, store)
	image := reg.host + "/kube-sandbox/snapshots/ns/sb:1"
	// Blobs upload in parallel, each reporting the count it saw.
	var mu sync.Mutex
	var last int64
	progress := func(n int64) {
		mu.Lock()
		last = max(last, n)
		mu.Unlock()
	}
	if err := reg.config(t, testUser, testPassword).push(t.Context(), store, mustTagged(t, image), built.ManifestDesc, progress); err != nil {
		t.Fatal(err)
	}
	if last != built.Size {
		t.Errorf("progress ended at %d bytes, want the image's %d", last, built.Size)
	}
	img := reg.pull(t, image)
	d, err := img.Digest()
	if err != nil || d.String() != built.ManifestDesc.Digest.String() {
		t.Errorf("pulled digest %v (%v), want %s", d, err, built.ManifestDesc.Digest)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("layers %d (%v), want 2", len(layers), err)
	}
	if ld, _ := layers[0].Digest(); ld.String() != base.Manifest.Layers[0].Digest.String() {
		t.Errorf("base layer %s, want %s", ld, base.Manifest.Layers[0].Digest)
	}

	// Again: everything is in the registry already, and counts as done.
	last = 0
	if err := reg.config(t, testUser, testPassword).push(t.Context(), store, mustTagged(t, image), built.ManifestDesc, progress); err != nil {
		t.Fatal(err)
	}
	if last != built.Size {
		t.Errorf("second push: progress ended at %d bytes, want %d", last, built.Size)
	}
}

func TestPushErrors(t *testing.T) {
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedHost := ln.Addr().String()
	_ = ln.Close()

	good := newTestRegistry(t, nil)
	forbidden := newTestRegistry(t, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"errors":[{"code":"DENIED","message":"no push"}]}`, http.StatusForbidden)
		})
	})
	unavailable := newTestRegistry(t, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		})
	})
	// httptest's servers share one certificate: another CA is one of the tests'.
	otherCA := writeFile(t, t.TempDir(), "other-ca.crt", newTestCA(t, "other").pem)

	tests := []struct {
		name       string
		reg        func(t *testing.T) *Registry
		wantReason string
	}{
		{"wrong password", func(t *testing.T) *Registry { return good.config(t, testUser, "wrong") }, nodeapi.ReasonRegistryUnauthorized},
		{"no credentials", func(t *testing.T) *Registry { return good.config(t, "", "") }, nodeapi.ReasonRegistryUnauthorized},
		{"403", func(t *testing.T) *Registry { return forbidden.config(t, testUser, testPassword) }, nodeapi.ReasonRegistryUnauthorized},
		{"503", func(t *testing.T) *Registry { return unavailable.config(t, testUser, testPassword) }, nodeapi.ReasonRegistryUnavailable},
		{"nothing listens", func(t *testing.T) *Registry {
			r := good.config(t, testUser, testPassword)
			r.Host = closedHost
			return r
		}, nodeapi.ReasonRegistryUnavailable},
		{"certificate of another CA", func(t *testing.T) *Registry {
			r := good.config(t, testUser, testPassword)
			r.CAFile = otherCA
			return r
		}, nodeapi.ReasonRegistryUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := memStore{}
			built, _ := testImage(t, store)
			r := tt.reg(t)
			err := r.push(t.Context(), store, mustTagged(t, r.Host+"/kube-sandbox/snapshots/a:1"), built.ManifestDesc, func(int64) {})
			if err == nil {
				t.Fatal("push succeeded")
			}
			t.Logf("%s: %v", reasonOf(err), err)
			if got := reasonOf(err); got != tt.wantReason {
				t.Errorf("reason %s (%v), want %s", got, err, tt.wantReason)
			}
			if strings.Contains(err.Error(), testPassword) || strings.Contains(err.Error(), "_state") {
				t.Errorf("the error tells a secret: %v", err)
			}
		})
	}
}

func TestRegistryErrorKeepsCancellation(t *testing.T) {
	for _, err := range []error{context.Canceled, context.DeadlineExceeded} {
		if got := registryError(err); !errors.Is(got, err) || reasonOf(got) != nodeapi.ReasonSnapshotFailed {
			t.Errorf("registryError(%v) = %v", err, got)
		}
	}
}

func TestCheckImage(t *testing.T) {
	r := &Registry{Host: "registry.example:5000", RepositoryPrefix: "kube-sandbox/snapshots"}
	tests := []struct {
		image   string
		wantErr string
	}{
		{image: "registry.example:5000/kube-sandbox/snapshots/ns/name:r1"},
		{image: "registry.example:5000/kube-sandbox/snapshots/x:latest"},
		{image: "other.example:5000/kube-sandbox/snapshots/ns/name:r1", wantErr: "not in the snapshot registry"},
		{image: "registry.example/kube-sandbox/snapshots/ns/name:r1", wantErr: "not in the snapshot registry"},
		{image: "registry.example:5000/kube-sandbox/base:r1", wantErr: "not under the repository prefix"},
		{image: "registry.example:5000/kube-sandbox/snapshots:r1", wantErr: "not under the repository prefix"},
		{image: "registry.example:5000/kube-sandbox/snapshotsx/a:r1", wantErr: "not under the repository prefix"},
		{image: "registry.example:5000/kube-sandbox/snapshots/ns/name", wantErr: "no tag"},
		{image: "registry.example:5000/kube-sandbox/snapshots/ns/name:r1@sha256:" + strings.Repeat("a", 64), wantErr: "digest"},
		{image: "kube-sandbox/snapshots/ns/name:r1", wantErr: "must be canonical"},
		{image: "registry.example:5000/Kube-Sandbox/snapshots/x:1", wantErr: "image"},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			_, err := r.checkImage(tt.image)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one with %q", err, tt.wantErr)
			}
		})
	}
}
