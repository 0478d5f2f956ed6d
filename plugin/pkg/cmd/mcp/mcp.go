// Package mcp is `kubectl sandbox mcp`: the MCP server of plugin/pkg/mcpserver over stdio or
// streamable HTTP, acting with the kubeconfig's identity.
package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/mcpserver"
)

// Transports.
const (
	TransportStdio = "stdio"
	TransportHTTP  = "http"
)

// Path is where the HTTP transport serves.
const Path = "/mcp"

var (
	mcpLong = cmdutil.LongDesc(`
		Serve kube-sandbox to an AI agent over the Model Context Protocol (MCP).

		The server's tools create, list, renew and delete sandboxes; run commands (with a
		timeout and a cap on output); start background processes, read their output and kill
		them; read, write and list files; run Python in code contexts that keep their state;
		and show and allow a sandbox's outbound network access.

		Every call acts with the identity of your kubeconfig, so Kubernetes RBAC decides what
		the agent may do: a denial comes back as a tool error that names the verb and the
		resource. Sandboxes the server makes carry the label
		sandbox.kube-sandbox.io/created-by=mcp and expire after --sandbox-timeout unless the
		agent asks otherwise, so that a crashed agent leaves nothing behind for long.

		--transport stdio (the default) is for an agent that starts the server itself;
		--transport http serves streamable HTTP at http://LISTEN/mcp, on loopback unless
		--listen names another address. Anyone who can reach that address acts as you.`)

	mcpExample = cmdutil.Examples(`
		# An agent that starts its MCP servers itself (Claude Desktop, an IDE, the MCP Inspector)
		kubectl sandbox mcp --pool python

		# A long-running server for agents on this machine, in namespace agents
		kubectl sandbox mcp -n agents --pool python --transport http --listen 127.0.0.1:8931

		# Try it with the MCP Inspector's command line
		npx @modelcontextprotocol/inspector-cli --cli kubectl sandbox mcp --pool python --method tools/list`)
)

// Options are the inputs of `kubectl sandbox mcp`.
type Options struct {
	Transport string
	Listen    string
	Server    mcpserver.Options

	// Ready, when set, is called with the HTTP address once it listens (tests).
	Ready func(addr string)

	server *mcp.Server
	genericiooptions.IOStreams
}

// NewOptions returns the defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{Transport: TransportStdio, Listen: "127.0.0.1:8931", Server: mcpserver.DefaultOptions(), IOStreams: streams}
}

// NewCmdMCP returns `kubectl sandbox mcp`.
func NewCmdMCP(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:                   "mcp [--transport stdio|http] [--pool POOL]",
		DisableFlagsInUseLine: true,
		Short:                 "Serve sandboxes to AI agents over the Model Context Protocol",
		Long:                  mcpLong,
		Example:               mcpExample,
		Args:                  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return cmdutil.UsageErrorf(cmd, "%s", err)
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.Transport, "transport", o.Transport, "How clients connect: stdio (the client starts this server) or http (streamable HTTP at http://LISTEN/mcp).")
	cmd.Flags().StringVar(&o.Listen, "listen", o.Listen, "With --transport http: the address to listen on. Loopback unless you name another; anyone who can reach it acts as you.")
	cmd.Flags().StringVar(&o.Server.Pool, "pool", o.Server.Pool, "The warm pool create_sandbox uses when the agent names neither a pool nor an image.")
	cmd.Flags().DurationVar(&o.Server.Timeout, "sandbox-timeout", o.Server.Timeout, "The lifetime of a sandbox the agent makes without a timeout of its own (whole seconds, at least 1m; 0: none).")
	cmd.Flags().DurationVar(&o.Server.CommandTimeout, "command-timeout", o.Server.CommandTimeout, "How long run_command lets a command run when the agent gives no timeout.")
	cmd.Flags().IntVar(&o.Server.MaxOutputBytes, "max-output-bytes", o.Server.MaxOutputBytes, "The most bytes of each output (stdout, stderr, a file, a log) a tool returns; the rest is cut with a note.")
	_ = cmd.RegisterFlagCompletionFunc("pool", cmdutil.PoolNameCompletion(f))
	_ = cmd.RegisterFlagCompletionFunc("transport", cobra.FixedCompletions([]string{TransportStdio, TransportHTTP}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// Complete makes the server on the factory's client.
func (o *Options) Complete(f cmdutil.Factory) error {
	c, err := cmdutil.Client(f)
	if err != nil {
		return err
	}
	o.server = mcpserver.New(c, o.Server)
	return nil
}

// Validate checks the flags.
func (o *Options) Validate() error {
	switch o.Transport {
	case TransportStdio, TransportHTTP:
	default:
		return fmt.Errorf("--transport must be stdio or http, not %q", o.Transport)
	}
	if o.Server.Timeout < 0 || o.Server.Timeout%time.Second != 0 || (o.Server.Timeout > 0 && o.Server.Timeout < time.Minute) {
		return fmt.Errorf("--sandbox-timeout must be 0 or a whole number of seconds of at least 1m, not %s", o.Server.Timeout)
	}
	if o.Server.CommandTimeout <= 0 {
		return fmt.Errorf("--command-timeout must be positive, not %s", o.Server.CommandTimeout)
	}
	if o.Server.MaxOutputBytes < 1024 {
		return fmt.Errorf("--max-output-bytes must be at least 1024, not %d", o.Server.MaxOutputBytes)
	}
	if _, _, err := net.SplitHostPort(o.Listen); err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT: %v", o.Listen, err)
	}
	return nil
}

// Run serves until ctx ends or, over stdio, the client closes its input.
func (o *Options) Run(ctx context.Context) error {
	if o.Transport == TransportStdio {
		err := o.server.Run(ctx, &mcp.IOTransport{Reader: readCloser{o.In}, Writer: writeCloser{o.Out}})
		if ctx.Err() != nil || errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	return o.serveHTTP(ctx)
}

func (o *Options) serveHTTP(ctx context.Context) error {
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.Listen, err)
	}
	addr := ln.Addr().String()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return o.server }, nil)
	mux := http.NewServeMux()
	mux.Handle(Path, handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		fmt.Fprintf(o.ErrOut, "Serving MCP (streamable HTTP) at http://%s%s, on loopback only: --listen names another address.\n", addr, Path)
	} else {
		fmt.Fprintf(o.ErrOut, "Warning: serving MCP (streamable HTTP) at http://%s%s, beyond loopback: anyone who can reach it acts with your kubeconfig's identity.\n", addr, Path)
	}
	if o.Ready != nil {
		o.Ready(addr)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		return nil
	}
}

// readCloser and writeCloser adapt the command's streams to the IO transport, which closes
// them at the end; the process's own stdin and stdout stay open.
type readCloser struct{ r io.Reader }

func (r readCloser) Read(p []byte) (int, error) { return r.r.Read(p) }
func (readCloser) Close() error                 { return nil }

type writeCloser struct{ w io.Writer }

func (w writeCloser) Write(p []byte) (int, error) { return w.w.Write(p) }
func (writeCloser) Close() error                  { return nil }
