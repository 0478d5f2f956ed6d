package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/mtls"
)

// fileTLS is the agent's TLS configuration from files of a Secret volume, which the kubelet
// rotates by swapping the volume's ..data link: each handshake looks whether a file changed
// (a stat of three files, on a port that sees one connection per snapshot) and reloads all
// three if one did, so a rotated certificate or CA is served from the next connection on,
// without a restart and without a watch to lose when the link is swapped.
type fileTLS struct {
	certFile, keyFile, caFile string

	mu     sync.Mutex
	stamps [3]fileStamp
	config *tls.Config
}

// fileStamp tells whether a file changed: a swapped link names another inode.
type fileStamp struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	s := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = st.Dev, st.Ino
	}
	return s, nil
}

// newFileTLS loads the files, and fails if they do not make a configuration.
func newFileTLS(certFile, keyFile, caFile string) (*fileTLS, error) {
	f := &fileTLS{certFile: certFile, keyFile: keyFile, caFile: caFile}
	if _, err := f.current(); err != nil {
		return nil, err
	}
	return f, nil
}

// serverConfig is what the listener serves: every connection gets the current configuration.
func (f *fileTLS) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return f.current()
		},
	}
}

// serverOnlyConfig serves the same certificate without asking for a client's: the wait port,
// whose one question (is a pod's filter in force?) any client may ask.
func (f *fileTLS) serverOnlyConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cfg, err := f.current()
			if err != nil {
				return nil, err
			}
			c := cfg.Clone()
			c.ClientAuth, c.ClientCAs = tls.NoClientCert, nil
			return c, nil
		},
	}
}

// current is the configuration of the files as they are now; files that do not load
// (half-written, a key that does not match its certificate yet) leave the last good one in
// force, and are tried again at the next handshake.
func (f *fileTLS) current() (*tls.Config, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var stamps [3]fileStamp
	var err error
	for i, p := range []string{f.certFile, f.keyFile, f.caFile} {
		if stamps[i], err = stampOf(p); err != nil {
			break
		}
	}
	if err == nil && f.config != nil && stamps == f.stamps {
		return f.config, nil
	}
	var cfg *tls.Config
	if err == nil {
		cfg, err = f.load()
	}
	if err != nil {
		if f.config == nil {
			return nil, err
		}
		klog.ErrorS(err, "Reloading the TLS files; serving the last ones loaded", "cert", f.certFile, "clientCA", f.caFile)
		return f.config, nil
	}
	if f.config != nil {
		klog.InfoS("Reloaded the TLS files", "cert", f.certFile, "clientCA", f.caFile)
	}
	f.config, f.stamps = cfg, stamps
	return cfg, nil
}

func (f *fileTLS) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	data, err := os.ReadFile(f.caFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	cas := x509.NewCertPool()
	if !cas.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("client CA %s holds no PEM certificate", f.caFile)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{"http/1.1"},
		Certificates: []tls.Certificate{cert},
		// Nothing reaches a handler without a certificate of the kube-sandbox CA; which
		// identity may do what is the handler's check.
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  cas,
	}, nil
}

// errForbidden is a client other than sandbox-controller.
var errForbidden = errors.New("forbidden")

// authorize lets only sandbox-controller through: it alone pauses sandboxes.
func authorize(req *http.Request) error {
	if who := mtls.ClientIdentity(req); who != execdapi.ControllerIdentity {
		return fmt.Errorf("%w: %q may not use %s", errForbidden, who, req.URL.Path)
	}
	return nil
}
