package execd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/internal/reaper"
)

const (
	// shutdownTimeout bounds the graceful part of shutting the HTTP server
	// down (in-flight probes); exec sessions are ended right after.
	shutdownTimeout = 5 * time.Second

	// signalPickupDelay is how long Serve waits, once ctx is cancelled, for
	// the signal that cancelled it to arrive on its own channel too (see
	// waitEntrypoint).
	signalPickupDelay = 100 * time.Millisecond

	// taskStateSubdir is the task state directory in execd's state directory: by default,
	// execdapi.StateDir/task, memory-backed as the rest of it (the state is small).
	taskStateSubdir = "task"
)

// Serve serves exec sessions on cfg.ListenAddr. With an entrypoint it runs
// it and returns its exit code when it exits; signals received on signals
// are forwarded to it. Without one it serves until ctx is cancelled and
// returns 0. The returned code is what the container should exit with.
//
// An entrypoint started by a claim (see execdapi.ClaimPath) is not cfg's: its exit ends
// nothing, signals are not forwarded to it, and when Serve returns it is
// stopped (see Handler.StopClaimedEntrypoint).
//
// When Serve returns, the task's running attempt, if any, has been killed (see
// Handler.StopSessions).
func Serve(ctx context.Context, cfg ServeConfig, signals <-chan os.Signal) (int, error) {
	if err := cfg.Validate(); err != nil {
		return 1, err
	}

	// Goroutines Serve starts end before it returns.
	var wg sync.WaitGroup
	defer wg.Wait()
	// The reaper keeps running after ctx is cancelled: the entrypoint may
	// take its time to exit and its orphans still need reaping.
	reaperCtx, stopReaper := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReaper()
	var r *reaper.Reaper
	if os.Getpid() == 1 {
		r = reaper.New()
		wg.Go(func() { r.Run(reaperCtx) })
	}

	clientCAs, err := ParseClientCAs(cfg.ClientCAs)
	if err != nil {
		return 1, err
	}
	id, err := NewServerIdentity(cfg.StateDir, clientCAs)
	if err != nil {
		return 1, err
	}
	executor := NewExecutor(r)
	taskStateDir, taskLogDir := taskDirs(cfg)
	var contextDir string
	if cfg.StateDir != "" {
		contextDir = filepath.Join(cfg.StateDir, "contexts")
	}
	handler, err := NewHandler(HandlerConfig{
		Executor: executor, Sandbox: cfg.Sandbox, IdentityTokenFile: cfg.IdentityTokenFile,
		StreamIdleTimeout: cfg.StreamIdleTimeout, FilesRoot: cfg.FilesRoot, MaxUploadBytes: cfg.MaxUploadBytes, Reaper: r,
		TaskStateDir: taskStateDir, TaskLogDir: taskLogDir, ContextDir: contextDir,
	}, id)
	if err != nil {
		return 1, err
	}
	defer func() { _ = handler.Close() }()
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return 1, fmt.Errorf("listening for exec sessions: %w", err)
	}
	srv := NewServer(handler, id)
	serveErr := make(chan error, 2)
	wg.Go(func() { serveErr <- srv.ServeTLS(ln, "", "") })
	klog.InfoS("Serving exec sessions", "addr", ln.Addr().String(), "reaping", r != nil,
		"sandbox", cfg.Sandbox != nil, "certified", id.Certified(), "tasks", taskStateDir != "")

	var health *http.Server
	if cfg.HealthListenAddr != "" {
		hln, err := net.Listen("tcp", cfg.HealthListenAddr)
		if err != nil {
			_ = srv.Close()
			return 1, fmt.Errorf("listening for probes: %w", err)
		}
		health = &http.Server{Handler: HealthHandler(), ReadHeaderTimeout: 10 * time.Second}
		wg.Go(func() { serveErr <- health.Serve(hln) })
	}

	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			klog.ErrorS(err, "Shutting down the exec server")
		}
		if health != nil {
			_ = health.Shutdown(shutdownCtx)
		}
		handler.StopSessions()
		// After the server: no claim can start an entrypoint any more.
		handler.StopClaimedEntrypoint()
		executor.Wait()
		klog.V(4).InfoS("Exec server stopped")
	}()

	if len(cfg.Entrypoint) == 0 {
		select {
		case <-ctx.Done():
			klog.InfoS("Shutting down", "reason", context.Cause(ctx))
			return 0, nil
		case err := <-serveErr:
			return 1, fmt.Errorf("serving exec sessions: %w", err)
		}
	}
	return runEntrypoint(ctx, cfg.Entrypoint, r, signals, serveErr)
}

// taskDirs makes the task directories of cfg if they are missing and returns them, or "" for
// both when tasks are disabled. The log directory is the log volume's mount point; it is made
// only where its parent exists (in a sandbox pod, next to execd's other mount points), so that
// execd run elsewhere makes no directory tree. If it cannot be made, as in a pod made before
// tasks existed whose root filesystem is read-only, execd serves without tasks: the task
// endpoints answer 404.
func taskDirs(cfg ServeConfig) (stateDir, logDir string) {
	if cfg.TaskStateDir == "" || cfg.TaskLogDir == "" {
		klog.InfoS("Tasks are disabled: no task state or log directory", "stateDir", cfg.TaskStateDir, "logDir", cfg.TaskLogDir)
		return "", ""
	}
	err := os.Mkdir(cfg.TaskLogDir, 0o755)
	if errors.Is(err, fs.ErrExist) {
		if fi, statErr := os.Stat(cfg.TaskLogDir); statErr != nil || !fi.IsDir() {
			err = fmt.Errorf("%s is not a directory", cfg.TaskLogDir)
		} else {
			err = nil
		}
	}
	if err != nil {
		klog.ErrorS(err, "Tasks are disabled: the task log directory cannot be made (a pod without the log volume?)", "logDir", cfg.TaskLogDir)
		return "", ""
	}
	if err := os.MkdirAll(cfg.TaskStateDir, 0o700); err != nil {
		klog.ErrorS(err, "Tasks are disabled: the task state directory cannot be made", "stateDir", cfg.TaskStateDir)
		return "", ""
	}
	return cfg.TaskStateDir, cfg.TaskLogDir
}

// runEntrypoint runs the user's program with execd's stdio and environment
// and returns its exit code.
func runEntrypoint(ctx context.Context, argv []string, r *reaper.Reaper, signals <-chan os.Signal, serveErr <-chan error) (int, error) {
	c := exec.Command(argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.SysProcAttr = entrypointProcAttr()
	pid, err := r.Start(func() (int, error) {
		if err := c.Start(); err != nil {
			return 0, err
		}
		return c.Process.Pid, nil
	})
	if err != nil {
		// 127/126 for a missing or non-executable program, as a shell exits.
		code, ok := startFailureCode(err)
		if !ok {
			code = 1
		}
		return code, fmt.Errorf("starting entrypoint: %w", err)
	}
	klog.InfoS("Started entrypoint", "command", argv[0], "pid", pid)

	waitDone := make(chan error, 1)
	go func() { waitDone <- c.Wait() }() // always received below
	err = waitEntrypoint(ctx, c.Process, waitDone, signals, serveErr)
	r.Release(pid)

	code := 0
	if err = exitError(err); err != nil {
		var exitErr utilexec.ExitError
		if !errors.As(err, &exitErr) {
			return 1, fmt.Errorf("waiting for entrypoint: %w", err)
		}
		code = exitErr.ExitStatus()
	}
	klog.InfoS("Entrypoint exited", "pid", pid, "exitCode", code)
	return code, nil
}

// waitEntrypoint forwards signals until the entrypoint exits and returns
// its Wait error.
func waitEntrypoint(ctx context.Context, p *os.Process, waitDone <-chan error, signals <-chan os.Signal, serveErr <-chan error) error {
	// main cancels ctx on SIGTERM/SIGINT, and the same signal also arrives
	// on signals, in no particular order. Forwarding on both paths would
	// deliver it twice, which many programs read as "force quit". So ctx
	// only matters when no termination signal shows up on signals shortly
	// after: then ctx was cancelled for another reason and the entrypoint
	// gets a SIGTERM, as the container runtime would send.
	terminationForwarded := false
	ctxDone := ctx.Done()
	var pickup <-chan time.Time
	for {
		select {
		case err := <-waitDone:
			return err
		case sig := <-signals:
			klog.InfoS("Forwarding signal to entrypoint", "signal", sig.String(), "pid", p.Pid)
			if err := p.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
				klog.ErrorS(err, "Forwarding signal to entrypoint failed", "signal", sig.String())
			}
			if sig == syscall.SIGTERM || sig == syscall.SIGINT {
				terminationForwarded = true
			}
		case <-ctxDone:
			ctxDone = nil
			pickup = time.After(signalPickupDelay)
		case <-pickup:
			pickup = nil
			if !terminationForwarded {
				klog.InfoS("Stopping entrypoint", "reason", context.Cause(ctx), "pid", p.Pid)
				terminationForwarded = true
				if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
					klog.ErrorS(err, "Sending SIGTERM to entrypoint failed")
				}
			}
		case err := <-serveErr:
			// Losing exec access is bad, but killing the user's program for
			// it would be worse.
			klog.ErrorS(err, "Exec server stopped; the entrypoint keeps running")
			serveErr = nil
		}
	}
}

// entrypointProcAttr puts the entrypoint in a process group of its own, as
// tini does. Signals execd forwards then reach it exactly once, and when
// stdin is execd's controlling terminal (a pod with tty: true), the
// entrypoint's group becomes the terminal's foreground group: ^C reaches it
// directly and reading the terminal does not stop it with SIGTTIN.
func entrypointProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	// TIOCGPGRP fails unless fd 0 is our controlling terminal, the only
	// case in which the foreground group can be set.
	if _, err := unix.IoctlGetInt(0, unix.TIOCGPGRP); err == nil {
		attr.Foreground = true
		attr.Ctty = 0
	}
	return attr
}

// NewServer is the HTTP server of execd's TLS port: handler behind id's mutual TLS, HTTP/1.1.
// Serve it with ServeTLS(listener, "", "").
func NewServer(handler http.Handler, id *ServerIdentity) *http.Server {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 30 * time.Second,
		// HTTP/1.1 only: SPDY and websocket upgrades do not exist in HTTP/2.
		Protocols: new(http.Protocols),
		TLSConfig: id.TLSConfig(),
		// A client that fails the handshake (no certificate) is no news worth a log line each.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	srv.Protocols.SetHTTP1(true)
	return srv
}

// SandboxFromEnv is the sandbox a direct-mode pod's env names (execdapi.EnvSandboxUID and the
// others), nil in a pool pod, whose sandbox comes with a claim.
func SandboxFromEnv(getenv func(string) string) *Sandbox {
	uid := getenv(execdapi.EnvSandboxUID)
	if uid == "" {
		return nil
	}
	return &Sandbox{UID: uid, Namespace: getenv(execdapi.EnvSandboxNamespace), Name: getenv(execdapi.EnvSandboxName)}
}
