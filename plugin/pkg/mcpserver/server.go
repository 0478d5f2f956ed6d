// Package mcpserver is kube-sandbox's Model Context Protocol server: tools an agent calls to
// make sandboxes, run commands and code in them, move files, open egress and read what
// sandboxes use, each a call of the client library (plugin/pkg/client) with the identity of
// the kubeconfig it runs with. RBAC therefore scopes the agent as it scopes that user, and a
// denial comes back as a tool error that names the verb and resource.
//
// `kubectl sandbox mcp` serves it over stdio or streamable HTTP (plugin/pkg/cmd/mcp).
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
)

// Labels the server puts on the sandboxes it makes, so that they can be told apart (and
// list_sandboxes shows only them unless asked for all).
const (
	CreatedByLabel = "sandbox.kube-sandbox.io/created-by"
	CreatedByValue = "mcp"
)

// Options are the server's defaults and limits.
type Options struct {
	// Pool is the warm pool create_sandbox takes a pod from when the call names neither a
	// pool nor an image.
	Pool string
	// Timeout is the lifetime of a sandbox the server makes when the call gives none, so that
	// a crashed agent leaves nothing behind for long. Zero: no expiry.
	Timeout time.Duration
	// MaxOutputBytes caps each output a tool returns (a command's stdout and stderr, a file,
	// a process's log); the rest is cut with a note.
	MaxOutputBytes int
	// CommandTimeout is run_command's limit when the call gives none.
	CommandTimeout time.Duration
	// Version is the server's version, as it tells clients.
	Version string
}

// DefaultOptions are the defaults of `kubectl sandbox mcp`.
func DefaultOptions() Options {
	return Options{
		Timeout:        30 * time.Minute,
		MaxOutputBytes: 64 << 10,
		CommandTimeout: 2 * time.Minute,
		Version:        "v0.1.0",
	}
}

// Instructions tell a client what the server is for, and the order of a typical session.
const Instructions = `kube-sandbox gives you isolated Linux sandboxes on Kubernetes, each in milliseconds from a warm pool.
A typical session: create_sandbox, then write_file and run_command (or run_code for Python that keeps its state),
read_file for results, delete_sandbox when done. Sandboxes made here expire by themselves (renew_sandbox extends one).
Outbound network access is denied unless the sandbox's policy allows it (show_network, allow_egress).
sandbox_stats shows what a sandbox uses (CPU, memory against its limit, OOM kills, disk, network, refused connections).
Every call acts with the Kubernetes identity of this server's kubeconfig: a "Forbidden" error means RBAC does not allow it.`

// New returns the MCP server on c.
func New(c *sandboxclient.Client, o Options) *mcp.Server {
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = DefaultOptions().MaxOutputBytes
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = DefaultOptions().CommandTimeout
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "kube-sandbox", Title: "kube-sandbox", Version: o.Version},
		&mcp.ServerOptions{Instructions: Instructions})
	t := &tools{c: c, o: o}
	t.add(s)
	return s
}

// tools holds what every tool handler needs.
type tools struct {
	c *sandboxclient.Client
	o Options
}

// toolError is the message of a failed call: the server's words for an API error, with its
// reason and code, so that an agent can tell a denial (Forbidden: RBAC) from a missing sandbox
// (NotFound) or one that is not ready (ServiceUnavailable).
func toolError(what string, err error) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		return fmt.Errorf("%s: %s (%s, HTTP %d)", what, s.Message, s.Reason, s.Code)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: timed out", what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func ptr[T any](v T) *T { return &v }
