package execd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
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
		Use:   execdapi.BinaryName,
		Short: "Agent that runs a sandbox container's entrypoint and serves exec sessions into it",
		Long: `sandbox-execd is injected into every sandbox pod.

An init container runs "sandbox-execd install" to copy this binary into a
volume shared with the user's container, whose command becomes

  ` + execdapi.BinaryPath + ` serve -- <original entrypoint...>

serve then runs the user's program and serves exec sessions (kubelet's remote
command protocol over SPDY or websockets), files and proxied HTTP to
sandbox-apiserver on the pod IP, over mutual TLS.`,
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
	to := execdapi.BinaryPath
	waitEgress := false
	ew := &EgressWait{NodeAddr: os.Getenv(execdapi.EnvHostIP), PodUID: os.Getenv(execdapi.EnvPodUID)}
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
			if !waitEgress {
				return nil
			}
			ew.CA = []byte(os.Getenv(execdapi.EnvClientCA))
			return ew.Wait(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&to, "to", to, "Path to install the binary at.")
	cmd.Flags().BoolVar(&waitEgress, "wait-egress", waitEgress, "Then wait until the node agent (sandbox-node) says the pod's egress filter is in force: nothing of the sandbox runs before. The node's address, the pod's UID and the CA come from $"+execdapi.EnvHostIP+", $"+execdapi.EnvPodUID+" and $"+execdapi.EnvClientCA+".")
	cmd.Flags().StringVar(&ew.Revision, "egress-revision", ew.Revision, "With --wait-egress: the revision of the policy the pod starts with.")
	return cmd
}

func newServeCommand() *cobra.Command {
	listen := fmt.Sprintf(":%d", execdapi.Port)
	healthListen := fmt.Sprintf(":%d", execdapi.HealthPort)
	clientCAEnv := execdapi.EnvClientCA
	stateDir := execdapi.StateDir
	tokenFile := execdapi.IdentityTokenPath
	idleTimeout := DefaultStreamIdleTimeout
	filesRoot := "/"
	maxUpload := int64(DefaultMaxUploadBytes)
	taskStateDir := filepath.Join(execdapi.StateDir, taskStateSubdir)
	taskLogDir := execdapi.LogDir
	cmd := &cobra.Command{
		Use:   "serve [flags] [-- ENTRYPOINT [ARG...]]",
		Short: "Run ENTRYPOINT and serve exec sessions until it exits",
		Long: `serve serves, on --listen, over TLS with client certificates only:
exec sessions at ` + execdapi.ExecPath + ` (the SPDY and websocket remote command protocols kubelet
speaks), the files API at ` + FilesPath + `PATH, HTTP and WebSocket to local servers at
` + execdapi.ProxyPath + `PORT/PATH, the pod's identity at ` + execdapi.IdentityPath + `, claims at
` + execdapi.ClaimPath + ` and Prometheus metrics at ` + MetricsPath + `; and kubelet probes at
` + execdapi.HealthzPath + ` and ` + execdapi.ReadyzPath + ` on --health-listen, in plain HTTP.

Every client must present a certificate issued by the CAs in the environment variable
named by --client-ca-env (the kube-sandbox CA): serve refuses to start without them.
sandbox-apiserver may use exec, files and proxy; sandbox-controller may certify execd and
claim it. serve makes its TLS key at first start and keeps it in --state-dir; until the
controller certifies it for this pod (` + execdapi.IdentityPath + `, with the pod's projected
token from --identity-token-file as proof), it serves a self-signed certificate.

A pod made for a sandbox names it in $` + execdapi.EnvSandboxUID + `, $` + execdapi.EnvSandboxNamespace + ` and
$` + execdapi.EnvSandboxName + `; exec, files and proxy serve that sandbox. A warm pool pod has
none: a claim (POST ` + execdapi.ClaimPath + `) gives it to a sandbox, after which every exec gets
the sandbox's env and the sandbox's entrypoint, if any, starts in the background (its exit does
not end serve; on shutdown its process group gets SIGTERM, then SIGKILL after a grace period).

The files API reads (GET), writes (PUT), deletes (DELETE) and moves (POST ?moveTo=) files
under --files-root; uploads are atomic and capped by --max-upload-bytes.

sandbox-controller may start the pod's task (PUT ` + execdapi.TaskPath + `) and watch its state;
sandbox-apiserver and the controller may read its log (` + execdapi.TaskLogPath + `). serve keeps
the task's state in --task-state-dir, so that a restarted container knows what ran, and each
attempt's output in --task-log-dir. If the log directory cannot be made, serve runs no tasks.
On shutdown the running attempt is killed with its process group.

With an ENTRYPOINT, serve runs it as a child with serve's stdio, forwards SIGTERM, SIGINT,
SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to it, and exits with its exit code (128+N if signal N
killed it) when it exits. Without one, serve runs until SIGTERM or SIGINT and exits 0.

When it runs as PID 1, serve also reaps orphaned processes.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if clientCAEnv == "" {
				return &ExitError{Code: 2, Err: errors.New("--client-ca-env must name an environment variable")}
			}
			clientCAs := os.Getenv(clientCAEnv)
			// Public, but nothing execd starts needs it.
			_ = os.Unsetenv(clientCAEnv)
			if clientCAs == "" {
				return &ExitError{Code: 1, Err: fmt.Errorf("no client CA: set $%s to the kube-sandbox CA's certificates; sandbox-execd serves nobody without them", clientCAEnv)}
			}
			if !cmd.Flags().Changed("task-state-dir") {
				// With the state directory, wherever it is.
				taskStateDir = ""
				if stateDir != "" {
					taskStateDir = filepath.Join(stateDir, taskStateSubdir)
				}
			}
			cfg := ServeConfig{ListenAddr: listen, HealthListenAddr: healthListen, ClientCAs: []byte(clientCAs),
				StateDir: stateDir, IdentityTokenFile: tokenFile, Sandbox: SandboxFromEnv(os.Getenv), Entrypoint: args,
				StreamIdleTimeout: idleTimeout, FilesRoot: filesRoot, MaxUploadBytes: maxUpload,
				TaskStateDir: taskStateDir, TaskLogDir: taskLogDir}

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
	cmd.Flags().StringVar(&listen, "listen", listen, "Address (host:port) of the TLS port: exec, files, proxy, identity, claims, the task, metrics.")
	cmd.Flags().StringVar(&healthListen, "health-listen", healthListen, "Address (host:port) of the plain-HTTP probe endpoints; empty serves none.")
	cmd.Flags().StringVar(&clientCAEnv, "client-ca-env", clientCAEnv, "Environment variable holding the PEM certificates of the CAs whose client certificates are accepted.")
	cmd.Flags().StringVar(&stateDir, "state-dir", stateDir, "Directory that keeps the TLS key and certificate across container restarts; empty keeps them in memory.")
	cmd.Flags().StringVar(&tokenFile, "identity-token-file", tokenFile, "The pod's projected service account token, which proves its identity to sandbox-controller.")
	cmd.Flags().DurationVar(&idleTimeout, "stream-idle-timeout", idleTimeout, "Close exec connections without traffic for this long (0: never).")
	cmd.Flags().StringVar(&filesRoot, "files-root", filesRoot, "Directory the files API ("+FilesPath+") serves; no path may leave it. Empty disables the files API.")
	cmd.Flags().Int64Var(&maxUpload, "max-upload-bytes", maxUpload, "Largest file upload accepted, in bytes (0: no limit).")
	cmd.Flags().StringVar(&taskStateDir, "task-state-dir", taskStateDir, "Directory that keeps the task's state across container restarts; unless set, \""+taskStateSubdir+"\" in --state-dir (none without one). Empty disables tasks.")
	cmd.Flags().StringVar(&taskLogDir, "task-log-dir", taskLogDir, "Directory of the task's logs (the log volume); tasks are disabled if it cannot be made. Empty disables tasks.")
	return cmd
}
