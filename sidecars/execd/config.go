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
	// ListenAddr is the host:port the HTTP server listens on.
	ListenAddr string
	// Token is the bearer token exec requests must present.
	Token string
	// Entrypoint, if set, is the user's program, run as execd's child.
	Entrypoint []string
	// StreamIdleTimeout closes exec connections idle this long; 0 disables.
	StreamIdleTimeout time.Duration
	// FilesRoot is the directory the files API serves, normally "/" (the
	// container's filesystem); "" disables the files API.
	FilesRoot string
	// MaxUploadBytes caps one file upload; 0 means no cap.
	MaxUploadBytes int64
}

// Validate reports every problem with the configuration at once.
func (c ServeConfig) Validate() error {
	var errs []error
	if err := validateListenAddr(c.ListenAddr); err != nil {
		errs = append(errs, fmt.Errorf("listen address %q: %w", c.ListenAddr, err))
	}
	switch {
	case c.Token == "":
		// No default token: an empty one would let anyone with network
		// access to the pod run commands in it.
		errs = append(errs, errors.New("exec token is empty: set it in the token environment variable"))
	case strings.ContainsFunc(c.Token, invalidTokenRune):
		// HTTP strips surrounding whitespace from header values, so such a
		// token could never match; fail here instead of rejecting every exec.
		errs = append(errs, errors.New("exec token contains whitespace or control characters"))
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

// invalidTokenRune reports the runes a token may not contain: HTTP strips whitespace around
// header values, so a token with them could never be presented.
func invalidTokenRune(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r)
}
