package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	utilexec "k8s.io/utils/exec"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
)

// RemoteExecutor runs a command over a streaming connection to url. It is the seam tests
// replace; DefaultRemoteExecutor is the real one.
type RemoteExecutor interface {
	ExecuteWithContext(ctx context.Context, url *url.URL, config *rest.Config, stdin io.Reader, stdout, stderr io.Writer, tty bool, sizeQueue remotecommand.TerminalSizeQueue) error
}

// DefaultRemoteExecutor speaks the pods/exec protocol: WebSocket (v5.channel.k8s.io) first,
// SPDY when the upgrade to WebSocket fails, as kubectl exec does.
type DefaultRemoteExecutor struct{}

var _ RemoteExecutor = DefaultRemoteExecutor{}

// ExecuteWithContext implements RemoteExecutor.
func (DefaultRemoteExecutor) ExecuteWithContext(ctx context.Context, url *url.URL, config *rest.Config, stdin io.Reader, stdout, stderr io.Writer, tty bool, sizeQueue remotecommand.TerminalSizeQueue) error {
	executor, err := newExecutor(url, config)
	if err != nil {
		return err
	}
	return executor.StreamWithContext(ctx, remotecommand.StreamOptions{
		Stdin:             stdin,
		Stdout:            stdout,
		Stderr:            stderr,
		Tty:               tty,
		TerminalSizeQueue: sizeQueue,
	})
}

func newExecutor(url *url.URL, config *rest.Config) (remotecommand.Executor, error) {
	spdy, err := remotecommand.NewSPDYExecutor(config, "POST", url)
	if err != nil {
		return nil, fmt.Errorf("create SPDY executor: %w", err)
	}
	// A WebSocket handshake must be a GET (RFC 6455 section 4.1); the server authorizes it as
	// create, as for pods/exec.
	websocket, err := remotecommand.NewWebSocketExecutor(config, "GET", url.String())
	if err != nil {
		return nil, fmt.Errorf("create WebSocket executor: %w", err)
	}
	return remotecommand.NewFallbackExecutor(websocket, spdy, shouldFallback)
}

// shouldFallback is kubectl's rule, use SPDY when the server or a proxy on the way refused the
// WebSocket upgrade or when the proxy is one gorilla/websocket cannot dial through, except
// that a refusal that is an API server's answer about the request itself (the sandbox is
// missing, RBAC forbids it, it is not ready) is final: SPDY would get the same answer, and
// lose its Status on the way.
func shouldFallback(err error) bool {
	if answeredStatus(err) != nil {
		return false
	}
	return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
}

// answeredStatus is the Status of a WebSocket upgrade that an API server refused for a reason
// of the request's own, nil for any other error.
func answeredStatus(err error) *apierrors.StatusError {
	var upgradeErr *httpstream.UpgradeFailureError
	if !errors.As(err, &upgradeErr) {
		return nil
	}
	var statusErr *apierrors.StatusError
	if !errors.As(upgradeErr.Cause, &statusErr) {
		return nil
	}
	switch statusErr.Status().Code {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusGone,
		http.StatusUnprocessableEntity, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return statusErr
	}
	return nil
}

// ExecOptions are a command to run in a sandbox and the streams it is wired to. A nil stream is
// not opened.
type ExecOptions struct {
	Command []string
	// Replica picks the sandbox's pod (the first when zero).
	Replica int32
	// Env (NAME=VALUE) and WorkingDir apply to this command only.
	Env        []string
	WorkingDir string
	// Timeout kills the command's process group after this long (whole seconds; none when
	// zero).
	Timeout time.Duration

	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// TTY gives the command a terminal, which merges stderr into stdout; TerminalSizes tells
	// it the terminal's size as it changes.
	TTY           bool
	TerminalSizes remotecommand.TerminalSizeQueue
}

// ExecURL is the URL of the exec subresource for o, with o's streams as its query.
func (c *Client) ExecURL(name string, o ExecOptions) *url.URL {
	return c.subresource("POST", name, "exec").
		VersionedParams(&sandboxv1alpha1.SandboxExecOptions{
			Stdin:          o.Stdin != nil,
			Stdout:         o.Stdout != nil,
			Stderr:         o.Stderr != nil && !o.TTY,
			TTY:            o.TTY,
			Replica:        o.Replica,
			Command:        o.Command,
			Env:            o.Env,
			WorkingDir:     o.WorkingDir,
			TimeoutSeconds: int64(o.Timeout / time.Second),
		}, scheme.ParameterCodec).URL()
}

// Exec runs a command in the sandbox and streams its input and output until it ends. A command
// that exits non-zero is a k8s.io/utils/exec.ExitError carrying its code (ExitCode reads it); a
// sandbox that is not ready yet is a 503 (see WaitReady).
func (c *Client) Exec(ctx context.Context, name string, o ExecOptions) error {
	if len(o.Command) == 0 {
		return errors.New("a command is required")
	}
	if o.Timeout < 0 || o.Timeout%time.Second != 0 {
		return fmt.Errorf("timeout must be a whole number of seconds, got %s", o.Timeout)
	}
	stderr := o.Stderr
	if o.TTY {
		stderr = nil
	}
	err := c.executor.ExecuteWithContext(ctx, c.ExecURL(name, o), c.config, o.Stdin, o.Stdout, stderr, o.TTY, o.TerminalSizes)
	return wrap(err)
}

// ExecResult is the outcome of a command Run ran to its end.
type ExecResult struct {
	Stdout, Stderr []byte
	ExitCode       int
}

// Run runs command in the sandbox and returns its output and exit code. A command that ran and
// exited non-zero is not an error; a sandbox or a server that could not run it is.
func (c *Client) Run(ctx context.Context, name string, command ...string) (*ExecResult, error) {
	return c.RunWith(ctx, name, ExecOptions{Command: command})
}

// RunWith is Run with the options of an exec; its Stdout and Stderr are ignored.
func (c *Client) RunWith(ctx context.Context, name string, o ExecOptions) (*ExecResult, error) {
	var stdout, stderr bytes.Buffer
	o.Stdout, o.Stderr, o.TTY, o.TerminalSizes = &stdout, &stderr, false, nil
	err := c.Exec(ctx, name, o)
	res := &ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	if code, ok := ExitCode(err); ok {
		res.ExitCode = code
		return res, nil
	}
	return res, err
}

// ExitCode is the exit code that err, an error of Exec, carries: 0 for nil, the command's code
// for a command that failed; ok is false for an error that is not a command's exit.
func ExitCode(err error) (code int, ok bool) {
	if err == nil {
		return 0, true
	}
	var exitErr utilexec.ExitError
	if errors.As(err, &exitErr) {
		return exitErr.ExitStatus(), true
	}
	return 0, false
}
