package snapshot

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keys of the registry Secret (in the controller's namespace), which sandbox-node
// mounts too. A sandbox user never sees it: it is in no sandbox's namespace.
const (
	SecretUsernameKey = "username"
	SecretPasswordKey = "password"
	SecretCAKey       = "ca.crt"
	// DefaultSecret is its name.
	DefaultSecret = "kube-sandbox-registry"
)

// Credentials are what the controller presents to the registry and what it trusts.
type Credentials struct {
	Username, Password string
	// CA verifies the registry's certificate; nil: the system's roots. caPEM is what it was
	// made from, which tells whether a client made before still fits.
	CA    *x509.CertPool
	caPEM string
}

// SecretSource reads the Credentials from a Secret, through the controller's cache.
type SecretSource struct {
	Reader    client.Reader
	Namespace string
	Name      string
}

// Credentials reads them now: a rotated Secret is used from the next request on.
func (s SecretSource) Credentials(ctx context.Context) (*Credentials, error) {
	sec := &corev1.Secret{}
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Name}, sec); err != nil {
		return nil, fmt.Errorf("registry Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	c := &Credentials{Username: string(sec.Data[SecretUsernameKey]), Password: string(sec.Data[SecretPasswordKey])}
	if ca := sec.Data[SecretCAKey]; len(ca) > 0 {
		c.caPEM = string(ca)
		c.CA = x509.NewCertPool()
		if !c.CA.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("registry Secret %s/%s: %s holds no PEM certificate", s.Namespace, s.Name, SecretCAKey)
		}
	}
	return c, nil
}

// RegistryClient deletes snapshots from the registry through its HTTP API (the OCI
// distribution spec): a sandbox's snapshots when it is deleted, and a replica's previous one
// when a new pause replaced it. The registry's garbage collection reclaims the blobs no
// manifest holds any more.
type RegistryClient struct {
	Registry Registry
	Source   interface {
		Credentials(ctx context.Context) (*Credentials, error)
	}
	// PlainHTTP talks HTTP instead of HTTPS (tests).
	PlainHTTP bool

	// transport is kept while the CA it trusts is the Secret's: deleting a sandbox's snapshots
	// is a list, then a HEAD and a DELETE per tag, over one connection.
	mu          sync.Mutex
	transport   *http.Transport
	transportCA string
}

// requestTimeout bounds one call to the registry (a listing with all its pages, a HEAD, a
// DELETE), with the handshake before it that learns how the registry authenticates.
const requestTimeout = 30 * time.Second

// options to reach the registry with the Credentials of now, and its name.
func (c *RegistryClient) options(ctx context.Context) (name.Registry, []remote.Option, error) {
	creds, err := c.Source.Credentials(ctx)
	if err != nil {
		return name.Registry{}, nil, err
	}
	if c.Registry.Host == "" { // name.NewRegistry would take it for Docker Hub
		return name.Registry{}, nil, errors.New("registry: no host")
	}
	scheme, nameOpts := "https", []name.Option(nil)
	if c.PlainHTTP {
		scheme, nameOpts = "http", []name.Option{name.Insecure}
	}
	// A registry, not a reference parsed from HOST/PATH, where a host with neither a dot nor
	// a port would be a path on Docker Hub.
	host, err := name.NewRegistry(c.Registry.Host, nameOpts...)
	if err != nil {
		return name.Registry{}, nil, fmt.Errorf("registry %q: %w", c.Registry.Host, err)
	}
	var auth authn.Authenticator = authn.Anonymous
	if creds.Username != "" {
		auth = &authn.Basic{Username: creds.Username, Password: creds.Password}
	}
	return host, []remote.Option{
		remote.WithAuth(auth),
		remote.WithTransport(schemeOnly{scheme: scheme, local: !c.PlainHTTP && host.Scheme() == "http", next: c.httpTransport(creds)}),
		// The reconciler tries a failed deletion again; retries here would hold its worker
		// for every tag of a registry that is down.
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
	}, nil
}

// httpTransport is the transport for creds' CA, made anew when the CA changed.
func (c *RegistryClient) httpTransport(creds *Credentials) *http.Transport {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.transport == nil || c.transportCA != creds.caPEM {
		if c.transport != nil {
			c.transport.CloseIdleConnections()
		}
		c.transport = &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: creds.CA}}
		c.transportCA = creds.caPEM
	}
	return c.transport
}

// schemeOnly sends requests in one scheme only: go-containerregistry falls back to plain
// HTTP for hosts that look local (RFC 1918 addresses, loopback, localhost) even without
// name.Insecure, and the registry's credentials must not go in the clear for an address.
type schemeOnly struct {
	scheme string
	// local is set for TLS to such a host: go-containerregistry names its URLs http:// and
	// sends them over https, but follows the Link to a tags list's next page only if it has
	// the scheme of those names; the Link gets it.
	local bool
	next  http.RoundTripper
}

func (s schemeOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != s.scheme {
		return nil, fmt.Errorf("registry %s: only %s is allowed, not %s", req.URL.Host, s.scheme, req.URL.Scheme)
	}
	resp, err := s.next.RoundTrip(req)
	if err != nil || !s.local {
		return resp, err
	}
	// Link: </v2/REPOSITORY/tags/list?last=TAG&n=1000>; rel="next"
	if link, ok := strings.CutPrefix(resp.Header.Get("Link"), "<"); ok {
		target, params, _ := strings.Cut(link, ">")
		if u, err := req.URL.Parse(target); err == nil && u.Scheme == "https" {
			u.Scheme = "http"
			resp.Header.Set("Link", "<"+u.String()+">"+params)
		}
	}
	return resp, nil
}

// notFound tells whether the registry answered that a repository or manifest does not
// exist. A 404 to the ping of /v2/ says that there is no registry there, which is not that.
func notFound(err error) bool {
	var terr *transport.Error
	return errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound &&
		(terr.Request == nil || strings.TrimSuffix(terr.Request.URL.Path, "/") != "/v2")
}

// Tags lists the tags of a repository (its path, without the host) that begin with prefix;
// none for a repository the registry does not know.
func (c *RegistryClient) Tags(ctx context.Context, repository, prefix string) ([]string, error) {
	host, opts, err := c.options(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	all, err := remote.List(host.Repo(repository), append(opts, remote.WithContext(ctx))...)
	if err != nil && !notFound(err) {
		return nil, fmt.Errorf("registry: list tags of %s: %w", repository, err)
	}
	var out []string
	for _, t := range all {
		if strings.HasPrefix(t, prefix) {
			out = append(out, t)
		}
	}
	return out, nil
}

// Digest of the manifest a tag, or a digest, names; "" if there is no such manifest.
func (c *RegistryClient) Digest(ctx context.Context, repository, tag string) (string, error) {
	host, opts, err := c.options(ctx)
	if err != nil {
		return "", err
	}
	var ref name.Reference = host.Repo(repository).Tag(tag)
	if strings.Contains(tag, ":") { // ALGORITHM:HEX; a tag has no colon
		ref = host.Repo(repository).Digest(tag)
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	desc, err := remote.Head(ref, append(opts, remote.WithContext(ctx))...)
	switch {
	case notFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("registry: head %s: %w", ref, err)
	}
	return desc.Digest.String(), nil
}

// DeleteManifest deletes a manifest by digest, and with it every tag that names it. A
// manifest already gone is no error.
func (c *RegistryClient) DeleteManifest(ctx context.Context, repository, digest string) error {
	host, opts, err := c.options(ctx)
	if err != nil {
		return err
	}
	ref := host.Repo(repository).Digest(digest)
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if err := remote.Delete(ref, append(opts, remote.WithContext(ctx))...); err != nil && !notFound(err) {
		return fmt.Errorf("registry: delete %s: %w", ref, err)
	}
	return nil
}

// DeleteTagged deletes every manifest of the repository tagged with prefix, and returns how
// many there were. It goes on past a failure and returns the first.
func (c *RegistryClient) DeleteTagged(ctx context.Context, repository, prefix string) (int, error) {
	tags, err := c.Tags(ctx, repository, prefix)
	if err != nil {
		return 0, err
	}
	var errs []error
	deleted := 0
	for _, tag := range tags {
		d, err := c.Digest(ctx, repository, tag)
		if err == nil && d != "" {
			err = c.DeleteManifest(ctx, repository, d)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		deleted++
	}
	return deleted, errors.Join(errs...)
}
