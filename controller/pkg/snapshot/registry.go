package snapshot

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

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

	// client is kept while the CA it trusts is the Secret's: deleting a sandbox's snapshots is
	// a list, then a HEAD and a DELETE per tag, over one connection.
	mu       sync.Mutex
	client   *http.Client
	clientCA string
}

// httpClient is the client for creds' CA, made anew when the CA changed.
func (c *RegistryClient) httpClient(creds *Credentials) *http.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client == nil || c.clientCA != creds.caPEM {
		c.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: creds.CA}}}
		c.clientCA = creds.caPEM
	}
	return c.client
}

// requestTimeout of one registry request.
const requestTimeout = 30 * time.Second

// manifestTypes: what a HEAD of a tag must accept to answer the digest of what was pushed.
var manifestTypes = strings.Join([]string{
	"application/vnd.oci.image.manifest.v1+json",
	"application/vnd.oci.image.index.v1+json",
	"application/vnd.docker.distribution.manifest.v2+json",
	"application/vnd.docker.distribution.manifest.list.v2+json",
}, ", ")

// RegistryError is an answer of the registry other than success or NotFound.
type RegistryError struct {
	Op         string
	StatusCode int
	Body       string
}

func (e *RegistryError) Error() string {
	return fmt.Sprintf("registry: %s: %d %s: %s", e.Op, e.StatusCode, http.StatusText(e.StatusCode), e.Body)
}

func (c *RegistryClient) do(ctx context.Context, method, path, accept string) (*http.Response, error) {
	creds, err := c.Source.Credentials(ctx)
	if err != nil {
		return nil, err
	}
	scheme := "https"
	if c.PlainHTTP {
		scheme = "http"
	}
	u := scheme + "://" + c.Registry.Host + path
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if creds.Username != "" {
		req.SetBasicAuth(creds.Username, creds.Password)
	}
	resp, err := c.httpClient(creds).Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("registry %s: %w", c.Registry.Host, err)
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

func errorOf(op string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	return &RegistryError{Op: op, StatusCode: resp.StatusCode, Body: strings.TrimSpace(string(body))}
}

// Tags lists the tags of a repository (its path, without the host) that begin with prefix;
// none for a repository the registry does not know.
func (c *RegistryClient) Tags(ctx context.Context, repository, prefix string) ([]string, error) {
	var out []string
	next := "/v2/" + repository + "/tags/list?n=1000"
	for next != "" {
		resp, err := c.do(ctx, http.MethodGet, next, "")
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusNotFound {
			_ = resp.Body.Close()
			return out, nil
		}
		if resp.StatusCode != http.StatusOK {
			err := errorOf("list tags of "+repository, resp)
			_ = resp.Body.Close()
			return nil, err
		}
		var page struct {
			Tags []string `json:"tags"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&page)
		link := resp.Header.Get("Link")
		_ = resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("registry: list tags of %s: %w", repository, err)
		}
		for _, t := range page.Tags {
			if strings.HasPrefix(t, prefix) {
				out = append(out, t)
			}
		}
		next = nextPage(link)
	}
	return out, nil
}

// nextPage is the path of a Link header's rel="next" (`</v2/...?last=x&n=1000>; rel="next"`).
func nextPage(link string) string {
	if link == "" || !strings.Contains(link, `rel="next"`) {
		return ""
	}
	start, end := strings.Index(link, "<"), strings.Index(link, ">")
	if start < 0 || end < start {
		return ""
	}
	u, err := url.Parse(link[start+1 : end])
	if err != nil {
		return ""
	}
	return u.RequestURI()
}

// Digest of the manifest a tag names; "" if there is no such tag.
func (c *RegistryClient) Digest(ctx context.Context, repository, tag string) (string, error) {
	resp, err := c.do(ctx, http.MethodHead, "/v2/"+repository+"/manifests/"+tag, manifestTypes)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	switch resp.StatusCode {
	case http.StatusOK:
		d := resp.Header.Get("Docker-Content-Digest")
		if d == "" {
			return "", fmt.Errorf("registry: %s:%s: no Docker-Content-Digest in the answer", repository, tag)
		}
		return d, nil
	case http.StatusNotFound:
		return "", nil
	default:
		return "", errorOf("head "+repository+":"+tag, resp)
	}
}

// DeleteManifest deletes a manifest by digest, and with it every tag that names it. A
// manifest already gone is no error.
func (c *RegistryClient) DeleteManifest(ctx context.Context, repository, digest string) error {
	resp, err := c.do(ctx, http.MethodDelete, "/v2/"+repository+"/manifests/"+digest, "")
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	switch resp.StatusCode {
	case http.StatusAccepted, http.StatusOK, http.StatusNotFound:
		return nil
	default:
		return errorOf("delete "+repository+"@"+digest, resp)
	}
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
