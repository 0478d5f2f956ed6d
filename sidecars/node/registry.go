package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	remoteserrors "github.com/containerd/containerd/v2/core/remotes/errors"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/semaphore"

	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

const (
	// maxCredentialBytes bounds a username or password file: a token of a few kilobytes.
	maxCredentialBytes = 64 << 10
	// pushConcurrency is how many blobs upload at once: a snapshot is a handful of layers,
	// and more parallel uploads only split the node's bandwidth among them.
	pushConcurrency = 3
	// registryResponseTimeout bounds the wait for a response once a request is sent: a
	// registry that verifies a large layer's digest answers its upload after a while, one
	// that does not answer in minutes is gone.
	registryResponseTimeout = 5 * time.Minute
	// registryDialTimeout bounds connecting to the registry, in the cluster or near it.
	registryDialTimeout = 10 * time.Second
)

// Registry is the snapshot registry the agent pushes to, and the only one: Host
// (host[:port]) and the repositories under RepositoryPrefix.
type Registry struct {
	Host             string
	RepositoryPrefix string
	// CAFile holds the PEM CAs of the registry's serving certificate ("": the system's).
	CAFile string
	// UsernameFile and PasswordFile hold the basic auth credentials ("": anonymous). They
	// are read at every push, so that a rotated Secret takes effect without a restart.
	UsernameFile, PasswordFile string
}

// validate checks the configuration, and that its files can be read now, so that a typo is
// an error at start rather than at the first pause.
func (r *Registry) validate() error {
	if r.Host == "" {
		// No registry: no pause and resume on this cluster; the snapshot endpoint says so.
		return nil
	}
	named, err := reference.ParseNamed(r.Host + "/x")
	if err != nil || reference.Domain(named) != r.Host {
		return fmt.Errorf("--registry %q: want host[:port], without scheme or path", r.Host)
	}
	if r.RepositoryPrefix == "" {
		// Without one the agent could overwrite any repository of the registry, base images
		// included.
		return errors.New("--repository-prefix must not be empty")
	}
	named, err = reference.ParseNamed(r.Host + "/" + r.RepositoryPrefix)
	if err != nil || reference.Path(named) != r.RepositoryPrefix {
		return fmt.Errorf("--repository-prefix %q is not a repository path (lower-case components separated by /)", r.RepositoryPrefix)
	}
	if (r.UsernameFile == "") != (r.PasswordFile == "") {
		return errors.New("--registry-username-file and --registry-password-file go together")
	}
	if r.CAFile != "" {
		if _, err := r.rootCAs(); err != nil {
			return err
		}
	}
	if r.UsernameFile != "" {
		if _, _, err := r.credentials(); err != nil {
			return err
		}
	}
	return nil
}

// checkImage parses a requested image and refuses one outside the registry and prefix, or
// without a tag.
func (r *Registry) checkImage(image string) (reference.NamedTagged, error) {
	named, err := reference.ParseNamed(image)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", image, err)
	}
	tagged, ok := named.(reference.NamedTagged)
	if !ok {
		return nil, fmt.Errorf("image %q has no tag", image)
	}
	if _, digested := named.(reference.Digested); digested {
		return nil, fmt.Errorf("image %q names a digest: the agent pushes to a tag", image)
	}
	if reference.Domain(named) != r.Host {
		return nil, fmt.Errorf("image %q is not in the snapshot registry %s", image, r.Host)
	}
	if !strings.HasPrefix(reference.Path(named), r.RepositoryPrefix+"/") {
		return nil, fmt.Errorf("image %q is not under the repository prefix %s/%s/", image, r.Host, r.RepositoryPrefix)
	}
	return tagged, nil
}

func (r *Registry) rootCAs() (*x509.CertPool, error) {
	if r.CAFile == "" {
		return nil, nil
	}
	data, err := os.ReadFile(r.CAFile)
	if err != nil {
		return nil, fmt.Errorf("registry CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("registry CA %s holds no PEM certificate", r.CAFile)
	}
	return pool, nil
}

func (r *Registry) credentials() (user, password string, err error) {
	if user, err = readCredential(r.UsernameFile); err != nil {
		return "", "", fmt.Errorf("registry username: %w", err)
	}
	if password, err = readCredential(r.PasswordFile); err != nil {
		return "", "", fmt.Errorf("registry password: %w", err)
	}
	return user, password, nil
}

func readCredential(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxCredentialBytes+1))
	if err != nil {
		return "", err
	}
	if len(data) > maxCredentialBytes {
		return "", fmt.Errorf("%s is longer than %d bytes", path, maxCredentialBytes)
	}
	// A Secret written by hand often ends with a newline no registry password has.
	s := strings.TrimRight(string(data), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// resolver is containerd's registry client for this registry only, with the CA and the
// credentials as they are in their files now; close releases its connections.
func (r *Registry) resolver() (remotes.Resolver, func(), error) {
	roots, err := r.rootCAs()
	if err != nil {
		return nil, nil, withReason(nodeapi.ReasonRegistryUnavailable, err)
	}
	transport := &http.Transport{
		// No proxy from the environment: the snapshot registry is the cluster's own.
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: registryDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   registryDialTimeout,
		ResponseHeaderTimeout: registryResponseTimeout,
		ExpectContinueTimeout: 5 * time.Second,
		MaxIdleConnsPerHost:   pushConcurrency,
		ForceAttemptHTTP2:     true,
	}
	client := &http.Client{Transport: closeBodyOnCancel{transport}}
	host := docker.RegistryHost{
		Client:       client,
		Host:         r.Host,
		Scheme:       "https",
		Path:         "/v2",
		Capabilities: docker.HostCapabilityPull | docker.HostCapabilityResolve | docker.HostCapabilityPush,
	}
	if r.UsernameFile != "" {
		user, password, err := r.credentials()
		if err != nil {
			return nil, nil, withReason(nodeapi.ReasonRegistryUnauthorized, err)
		}
		host.Authorizer = docker.NewDockerAuthorizer(docker.WithAuthClient(client),
			docker.WithAuthCreds(func(h string) (string, string, error) {
				if h != r.Host {
					// A token realm elsewhere gets nothing of ours.
					return "", "", nil
				}
				return user, password, nil
			}))
	}
	res := docker.NewResolver(docker.ResolverOptions{
		Hosts: func(h string) ([]docker.RegistryHost, error) {
			if h != r.Host {
				return nil, fmt.Errorf("%s is not the snapshot registry %s", h, r.Host)
			}
			return []docker.RegistryHost{host}, nil
		},
	})
	return res, transport.CloseIdleConnections, nil
}

// closeBodyOnCancel closes a request's body when its context ends. containerd's pusher sends
// a blob through a pipe it hands over only to a writer that is still open: a push cancelled
// between the two leaves the request reading a pipe nobody writes to or closes, and Go's
// transport waits for the request's body before it returns from a cancelled round trip. The
// push, its connection and the registry's upload would wait for ever.
type closeBodyOnCancel struct{ rt http.RoundTripper }

func (c closeBodyOnCancel) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.rt.RoundTrip(req)
	}
	body := req.Body
	stop := context.AfterFunc(req.Context(), func() { _ = body.Close() })
	defer stop()
	return c.rt.RoundTrip(req)
}

// push uploads the manifest desc and all it references, from provider, to image, and calls
// progress with the bytes done so far (those the registry had already count as done).
// Layers and config go first, the manifest last: until it is in, the tag is untouched.
func (r *Registry) push(ctx context.Context, provider content.Provider, image reference.NamedTagged, desc ocispec.Descriptor, progress func(int64)) error {
	res, closeIdle, err := r.resolver()
	if err != nil {
		return err
	}
	defer closeIdle()
	pusher, err := res.Pusher(ctx, image.String())
	if err != nil {
		return registryError(err)
	}
	counted := &countingPusher{Pusher: pusher, progress: progress}
	err = remotes.PushContent(ctx, counted, desc, provider, semaphore.NewWeighted(pushConcurrency), platforms.All, nil)
	return registryError(err)
}

// countingPusher counts the bytes a push writes, and those of blobs the registry has.
type countingPusher struct {
	remotes.Pusher
	done     atomic.Int64
	progress func(int64)
}

func (p *countingPusher) Push(ctx context.Context, desc ocispec.Descriptor) (content.Writer, error) {
	w, err := p.Pusher.Push(ctx, desc)
	if errdefs.IsAlreadyExists(err) {
		p.progress(p.done.Add(desc.Size))
	}
	if err != nil {
		return nil, err
	}
	return &countingWriter{Writer: w, p: p}, nil
}

type countingWriter struct {
	content.Writer
	p *countingPusher
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.Writer.Write(b)
	w.p.progress(w.p.done.Add(int64(n)))
	return n, err
}

// registryError gives a push error the Reason sandbox-controller acts on: a registry that
// cannot be reached (or answers that it cannot serve now) is RegistryUnavailable, one that
// refuses the credentials RegistryUnauthorized. A cancelled context stays what it is.
func registryError(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	if status, ok := errors.AsType[remoteserrors.ErrUnexpectedStatus](err); ok {
		// Its own message has the request's whole URL, with an upload's state in the query.
		msg := fmt.Errorf("the registry answered %s to %s %s", status.Status, status.RequestMethod, redactURL(status.RequestURL))
		switch status.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return withReason(nodeapi.ReasonRegistryUnauthorized, msg)
		case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
			http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return withReason(nodeapi.ReasonRegistryUnavailable, msg)
		}
		return withReason(nodeapi.ReasonSnapshotFailed, msg)
	}
	if errors.Is(err, docker.ErrInvalidAuthorization) {
		return withReason(nodeapi.ReasonRegistryUnauthorized, err)
	}
	if isConnectionError(err) {
		return withReason(nodeapi.ReasonRegistryUnavailable, err)
	}
	return err
}

// isConnectionError tells an error of reaching the registry: dialing, name resolution, TLS
// (a certificate the registry CA did not sign is a registry the agent cannot trust), a
// connection cut, a timeout.
func isConnectionError(err error) bool {
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a registry URL)"
	}
	u.RawQuery = ""
	return u.Redacted()
}

// rememberSource records on each blob of descs that the registry has it now in image's
// repository (containerd's distribution-source label, as a pull records it). The next push of
// another sandbox with the same base image mounts those blobs from that repository instead of
// uploading them again: its own repository does not have them, though the registry does.
// Best effort: a blob whose label is full (it holds a list of repositories, up to containerd's
// 4 KiB for a label) is uploaded as before, and so is one whose source repository is gone.
func rememberSource(ctx context.Context, cs content.Manager, image string, descs []ocispec.Descriptor) {
	h, err := docker.AppendDistributionSourceLabel(cs, image)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("not recording where the blobs were pushed", "image", image, "err", err)
		return
	}
	for _, d := range descs {
		if _, err := h(ctx, d); err != nil {
			klog.FromContext(ctx).V(2).Info("not recording where a blob was pushed", "digest", d.Digest, "err", err)
		}
	}
}
