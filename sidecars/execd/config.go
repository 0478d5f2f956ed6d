package execd

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultStreamIdleTimeout is kubelet's default for idle streaming
// connections (--streaming-connection-idle-timeout).
const DefaultStreamIdleTimeout = 4 * time.Hour

// ServeConfig is the validated configuration of the serve command.
type ServeConfig struct {
	// ListenAddr is the host:port of execd's TLS port.
	ListenAddr string
	// HealthListenAddr is the host:port of the plain-HTTP probe endpoints; "" serves none.
	HealthListenAddr string
	// ClientCAs is the PEM of the CAs whose client certificates execd accepts (the
	// kube-sandbox CA). Required: execd serves nobody without it.
	ClientCAs []byte
	// StateDir keeps execd's key and certificate across container restarts; "" keeps them
	// in memory only.
	StateDir string
	// IdentityTokenFile is the projected token that proves the pod's identity.
	IdentityTokenFile string
	// Sandbox, when set, is the sandbox of a pod made for it; nil for a pool pod.
	Sandbox *Sandbox
	// Entrypoint, if set, is the user's program, run as execd's child.
	Entrypoint []string
	// StreamIdleTimeout closes exec connections idle this long; 0 disables.
	StreamIdleTimeout time.Duration
	// FilesRoot is the directory the files API serves, normally "/" (the
	// container's filesystem); "" disables the files API.
	FilesRoot string
	// MaxUploadBytes caps one file upload; 0 means no cap.
	MaxUploadBytes int64
	// TaskStateDir keeps the task's state across container restarts and TaskLogDir its logs
	// (execdapi.LogDir); either "" disables tasks, and so does a log directory that cannot
	// be made (see Serve).
	TaskStateDir string
	TaskLogDir   string
}

// Validate reports every problem with the configuration at once.
func (c ServeConfig) Validate() error {
	var errs []error
	if err := validateListenAddr(c.ListenAddr); err != nil {
		errs = append(errs, fmt.Errorf("listen address %q: %w", c.ListenAddr, err))
	}
	if c.HealthListenAddr != "" {
		if err := validateListenAddr(c.HealthListenAddr); err != nil {
			errs = append(errs, fmt.Errorf("health listen address %q: %w", c.HealthListenAddr, err))
		}
	}
	if _, err := ParseClientCAs(c.ClientCAs); err != nil {
		// No default: without a client CA anyone who reaches the pod could run commands in it.
		errs = append(errs, fmt.Errorf("client CA: %w", err))
	}
	if s := c.Sandbox; s != nil {
		for _, f := range []struct{ name, value string }{{"uid", s.UID}, {"namespace", s.Namespace}, {"name", s.Name}} {
			if f.value == "" || strings.ContainsFunc(f.value, invalidNameRune) {
				errs = append(errs, fmt.Errorf("sandbox %s %q is empty or contains whitespace or control characters", f.name, f.value))
			}
		}
	}
	if len(c.Entrypoint) > 0 && c.Entrypoint[0] == "" {
		errs = append(errs, errors.New("entrypoint command is empty"))
	}
	if c.StreamIdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("stream idle timeout %v is negative", c.StreamIdleTimeout))
	}
	if c.FilesRoot != "" && !filepath.IsAbs(c.FilesRoot) {
		// Relative to what? execd's working directory is the entrypoint's.
		errs = append(errs, fmt.Errorf("files root %q is not an absolute path", c.FilesRoot))
	}
	if c.StateDir != "" && !filepath.IsAbs(c.StateDir) {
		errs = append(errs, fmt.Errorf("state directory %q is not an absolute path", c.StateDir))
	}
	for _, d := range []struct{ name, dir string }{{"task state", c.TaskStateDir}, {"task log", c.TaskLogDir}} {
		if d.dir != "" && !filepath.IsAbs(d.dir) {
			errs = append(errs, fmt.Errorf("%s directory %q is not an absolute path", d.name, d.dir))
		}
	}
	if c.MaxUploadBytes < 0 {
		errs = append(errs, fmt.Errorf("max upload bytes %d is negative", c.MaxUploadBytes))
	}
	return errors.Join(errs...)
}

func validateListenAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q is not a number between 0 and 65535", port)
	}
	if host == "" || net.ParseIP(host) != nil {
		return nil
	}
	if msgs := validation.IsDNS1123Subdomain(strings.ToLower(host)); len(msgs) > 0 {
		return fmt.Errorf("host %q is neither an IP address nor a host name: %s", host, strings.Join(msgs, "; "))
	}
	return nil
}

// invalidNameRune reports the runes a sandbox's UID, namespace or name may not contain: they end
// up in env values and logs.
func invalidNameRune(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r)
}
