package execd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/claimapi"
)

// ExitError is an error that asks for a specific process exit code. Err, if
// set, is printed; an entrypoint's non-zero exit carries no Err, since the
// program already said what it had to say.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit code %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Execute runs cmd and returns the exit code for the process. It prints the
// error, if any, so main only has to exit with the code.
func Execute(ctx context.Context, cmd *cobra.Command) int {
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	code := 1
	var exitErr *ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.Code
		err = exitErr.Err
	}
	if err != nil {
		_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", cmd.Name(), err)
	}
	return code
}

// forwardedSignals are passed on to the entrypoint. Besides the termination
// signals, the ones programs commonly use for control ("kill -HUP 1" to
// reload) reach the user's program as if it were PID 1 itself.
var forwardedSignals = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}

// NewCommand returns the sandbox-execd root command.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   BinaryName,
		Short: "Agent that runs a sandbox container's entrypoint and serves exec sessions into it",
		Long: `sandbox-execd is injected into every sandbox pod.

An init container runs "sandbox-execd install" to copy this binary into a
volume shared with the user's container, whose command becomes

  ` + InstallPath + ` serve -- <original entrypoint...>

serve then runs the user's program and serves exec sessions (kubelet's remote
command protocol over SPDY or websockets) to the sandbox-apiserver on the pod
IP.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// A container entrypoint needs no shell completion.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		Args:              cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &ExitError{Code: 2, Err: fmt.Errorf("%w\nSee '%s --help'", err, cmd.CommandPath())}
	})
	// Only klog's verbosity flags: the rest (log files, headers) make no
	// sense for a container process that logs to stderr.
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	for _, name := range []string{"v", "vmodule"} {
		root.PersistentFlags().AddGoFlag(klogFlags.Lookup(name))
	}
	root.AddCommand(newInstallCommand(), newServeCommand())
	return root
}

func newInstallCommand() *cobra.Command {
	to := InstallPath
	cmd := &cobra.Command{
		Use:   "install [--to PATH]",
		Short: "Copy this binary to PATH (run by the init container)",
		Long: `install copies the running sandbox-execd executable to PATH, creating parent
directories. The copy is written to a temporary file next to PATH and renamed
into place, so a container starting concurrently never runs a half-written
binary. The init container of a sandbox pod runs it to place execd on the
volume shared with the user's container.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("locating own executable: %w", err)
			}
			if err := InstallBinary(self, to); err != nil {
				return err
			}
			klog.InfoS("Installed sandbox-execd", "path", to)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", to, "Path to install the binary at.")
	return cmd
}

func newServeCommand() *cobra.Command {
	listen := DefaultListenAddr
	tokenEnv := TokenEnv
	idleTimeout := DefaultStreamIdleTimeout
	filesRoot := "/"
	maxUpload := int64(DefaultMaxUploadBytes)
	cmd := &cobra.Command{
		Use:   "serve [flags] [-- ENTRYPOINT [ARG...]]",
		Short: "Run ENTRYPOINT and serve exec sessions until it exits",
		Long: `serve serves exec sessions at ` + ExecPath + ` on --listen (plain HTTP/1.1, the
SPDY and websocket remote command protocols kubelet speaks) and unauthenticated
probes at ` + HealthzPath + ` and ` + ReadyzPath + `, and Prometheus metrics at ` + MetricsPath + `.

The files API at ` + FilesPath + `PATH reads (GET), writes (PUT), deletes (DELETE)
and moves (POST ?moveTo=) files under --files-root; uploads are atomic and
capped by --max-upload-bytes.

Every exec and files request must carry "Authorization: Bearer <token>", where the token
is read from the environment variable named by --token-env. serve refuses to
start without a token, and removes the variable from its environment before
starting anything, so neither the entrypoint nor exec'd commands see it. It
then re-executes itself once (same PID and arguments) without the variable,
passing the token in an inherited memfd, so that /proc/PID/environ does not
show it either.

A warm pool pod runs serve with the pool's token. POST ` + claimapi.Path + ` with that
token claims execd for a sandbox: from then on exec and files accept only the
sandbox's token, every exec gets the sandbox's env, and the sandbox's
entrypoint, if any, starts in the background (its exit does not end serve; on
shutdown its process group gets SIGTERM, then SIGKILL after a grace period).

With an ENTRYPOINT, serve runs it as a child with serve's stdio, forwards
SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to it, and exits with
its exit code (128+N if signal N killed it) when it exits. Without one, serve
runs until SIGTERM or SIGINT and exits 0.

When it runs as PID 1, serve also reaps orphaned processes.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if tokenEnv == "" {
				return &ExitError{Code: 2, Err: errors.New("--token-env must name an environment variable")}
			}
			token, err := serveToken(cmd, tokenEnv)
			if err != nil {
				return &ExitError{Code: 1, Err: err}
			}
			if token == "" {
				// Validate would refuse it too, but only here is the
				// variable's name known.
				return &ExitError{Code: 1, Err: fmt.Errorf("exec token is empty: set $%s; execd does not serve exec sessions without authentication", tokenEnv)}
			}
			cfg := ServeConfig{ListenAddr: listen, Token: token, Entrypoint: args, StreamIdleTimeout: idleTimeout,
				FilesRoot: filesRoot, MaxUploadBytes: maxUpload}

			var signals chan os.Signal
			if len(args) > 0 {
				signals = make(chan os.Signal, len(forwardedSignals))
				signal.Notify(signals, forwardedSignals...)
				defer signal.Stop(signals)
			}
			code, err := Serve(cmd.Context(), cfg, signals)
			if err != nil && code == 0 {
				code = 1
			}
			if code != 0 {
				return &ExitError{Code: code, Err: err}
			}
			return nil
		},
	}
	// Everything after the first argument belongs to the entrypoint, so
	// "serve nginx -g 'daemon off;'" works as well as "serve -- nginx ...".
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringVar(&listen, "listen", listen, "Address (host:port) to serve exec sessions and probes on.")
	cmd.Flags().StringVar(&tokenEnv, "token-env", tokenEnv, "Environment variable holding the bearer token exec requests must present.")
	cmd.Flags().DurationVar(&idleTimeout, "stream-idle-timeout", idleTimeout, "Close exec connections without traffic for this long (0: never).")
	cmd.Flags().StringVar(&filesRoot, "files-root", filesRoot, "Directory the files API ("+FilesPath+") serves; no path may leave it. Empty disables the files API.")
	cmd.Flags().Int64Var(&maxUpload, "max-upload-bytes", maxUpload, "Largest file upload accepted, in bytes (0: no limit).")
	return cmd
}

// serveToken returns serve's token and makes sure nothing execd starts can read it from its
// environment. On a first start it takes the token from $tokenEnv, removes the variable and,
// when it can, re-executes the process so that /proc/PID/environ loses the token too (see
// reexecWithTokenFD); that call does not return when it succeeds. After the re-exec the token
// comes from the descriptor named by $SANDBOX_EXECD_TOKEN_FD.
func serveToken(cmd *cobra.Command, tokenEnv string) (string, error) {
	// Before anything is started, and whether or not the token is valid: nothing execd
	// runs may inherit these.
	fdVar, fromFD := os.LookupEnv(tokenFDEnv)
	token := os.Getenv(tokenEnv)
	for _, name := range []string{tokenEnv, tokenFDEnv} {
		if err := os.Unsetenv(name); err != nil {
			return "", fmt.Errorf("removing %s from the environment: %w", name, err)
		}
	}
	if fromFD {
		return readTokenFD(fdVar)
	}
	if token == "" || cmd.Context().Err() != nil {
		// Nothing to hide (the caller explains), or already told to stop.
		return token, nil
	}
	if ok, why := canReexec(cmd); !ok {
		klog.InfoS("Not re-executing to drop the token from /proc/self/environ", "reason", why)
		return token, nil
	}
	err := reexecWithTokenFD(token)
	// Still here: the pod keeps working, only less protected.
	klog.ErrorS(err, "Could not re-execute to drop the token from /proc/self/environ; continuing")
	return token, nil
}
