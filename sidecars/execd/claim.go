package execd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/httpjson"
)

const (
	// MaxClaimBytes caps the body of a claim. A claim is a few names, an argv and an env; a
	// megabyte leaves room for large envs without letting a client fill execd's memory.
	MaxClaimBytes = 1 << 20

	// DefaultEntrypointStopGrace is how long StopClaimedEntrypoint waits, after the SIGTERM to a
	// claimed entrypoint's process group, before it sends SIGKILL. kubelet kills the container
	// at the end of the pod's termination grace period anyway, so waiting longer than that
	// costs nothing but execd's own orderly exit.
	DefaultEntrypointStopGrace = 10 * time.Second

	// entrypointKillWait bounds the wait for a claimed entrypoint after SIGKILL: only a process
	// stuck in the kernel survives it, and shutdown must not hang on one.
	entrypointKillWait = 5 * time.Second
)

// Results of a claim, the label of the sandbox_execd_claims_total metric.
const (
	claimResultClaimed     = "claimed"     // first claim, 200
	claimResultRepeated    = "repeated"    // same sandbox again, 200
	claimResultConflict    = "conflict"    // held by another sandbox, 409
	claimResultInvalid     = "invalid"     // malformed or too large body, 400/413
	claimResultFailed      = "failed"      // the entrypoint did not start, 422/500
	claimResultUnavailable = "unavailable" // execd is shutting down, 503
)

var claimResults = []string{
	claimResultClaimed, claimResultRepeated, claimResultConflict, claimResultInvalid,
	claimResultFailed, claimResultUnavailable,
}

// Sandbox names the sandbox an execd belongs to.
type Sandbox struct {
	UID, Namespace, Name string
}

// claim is the sandbox that holds this execd: from the start (a pod made for it) or from the
// first successful claim (a pool pod). It never changes once set, so readers may keep using a
// pointer they loaded.
type claim struct {
	sandboxUID string
	namespace  string
	name       string
	// env holds NAME=VALUE entries: the request's env, then SANDBOX_NAMESPACE and
	// SANDBOX_NAME. Exec sessions get it on top of execd's environment, below their own.
	env  []string
	resp execdapi.ClaimResponse
}

// claimedEntrypoint is the process a claim started.
type claimedEntrypoint struct {
	pid int
	// done is closed once the process exited and its status was collected.
	done chan struct{}
}

// serveClaim serves execdapi.ClaimPath (sandbox-controller only). See execdapi.ClaimRequest
// for the contract; the status codes:
//
//	200 claimed now, or a repeated claim (same sandboxUID): the claim's response
//	400 a malformed body or a request that fails validation
//	409 held by another sandbox
//	413 a body larger than MaxClaimBytes
//	422 the entrypoint cannot be started (not found, not executable)
//	500 the entrypoint failed to start for another reason (fork failed, ...)
//	503 execd is shutting down
//
// Only a 200 changes anything: after any other answer execd is exactly as before, in
// particular still unclaimed when the entrypoint failed to start, so a claim may be repeated
// and the controller can report the error and give the pod up.
func (h *Handler) serveClaim(w http.ResponseWriter, req *http.Request) {
	if !h.allow(w, req, execdapi.ControllerIdentity) {
		return
	}
	cr, code, err := decodeClaim(w, req)
	if err == nil {
		code, err = http.StatusBadRequest, validateClaim(cr)
	}
	if err != nil {
		h.metrics.claims.WithLabelValues(claimResultInvalid).Inc()
		// The messages name fields and env names, never env values.
		klog.InfoS("Rejected invalid claim", "remoteAddr", req.RemoteAddr, "err", err)
		http.Error(w, "invalid claim: "+err.Error(), code)
		return
	}

	resp, result, code, err := h.claim(cr)
	h.metrics.claims.WithLabelValues(result).Inc()
	if err != nil {
		if code == http.StatusInternalServerError {
			klog.ErrorS(err, "Claim failed", "namespace", cr.Namespace, "name", cr.Name, "sandboxUID", cr.SandboxUID)
		} else {
			klog.InfoS("Refused claim", "namespace", cr.Namespace, "name", cr.Name, "sandboxUID", cr.SandboxUID, "reason", err.Error())
		}
		http.Error(w, err.Error(), code)
		return
	}
	httpjson.Write(w, http.StatusOK, resp)
}

// claim applies a valid claim. It returns the response, the metric result and, unless the
// claim succeeded, the status code and error to answer with.
func (h *Handler) claim(cr *execdapi.ClaimRequest) (execdapi.ClaimResponse, string, int, error) {
	// Held across starting the entrypoint: requests read the claim under the read lock, so
	// none sees a half-done claim, and concurrent claims cannot both start one.
	h.claimMu.Lock()
	defer h.claimMu.Unlock()
	if h.claimsStopped {
		return execdapi.ClaimResponse{}, claimResultUnavailable, http.StatusServiceUnavailable, errors.New("sandbox-execd is shutting down")
	}
	if c := h.current; c != nil {
		if c.sandboxUID != cr.SandboxUID {
			return execdapi.ClaimResponse{}, claimResultConflict, http.StatusConflict,
				fmt.Errorf("sandbox-execd belongs to sandbox %s/%s (uid %s)", c.namespace, c.name, c.sandboxUID)
		}
		klog.V(2).InfoS("Repeated claim", "namespace", c.namespace, "name", c.name, "sandboxUID", c.sandboxUID)
		return c.resp, claimResultRepeated, http.StatusOK, nil
	}

	env := make([]string, 0, len(cr.Env)+2)
	for _, e := range cr.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	env = append(env, execdapi.EnvSandboxNamespace+"="+cr.Namespace, execdapi.EnvSandboxName+"="+cr.Name)
	c := &claim{
		sandboxUID: cr.SandboxUID, namespace: cr.Namespace, name: cr.Name,
		env: env, resp: execdapi.ClaimResponse{SandboxUID: cr.SandboxUID},
	}
	if len(cr.Entrypoint) > 0 {
		ep, err := h.startClaimedEntrypoint(cr.Entrypoint, env)
		if err != nil {
			// A missing or non-executable program is the claim's fault: repeating it will not
			// help. Anything else (no memory, no pids left) may pass on a retry.
			code := http.StatusInternalServerError
			if _, ok := startFailureCode(err); ok {
				code = http.StatusUnprocessableEntity
			}
			return execdapi.ClaimResponse{}, claimResultFailed, code, fmt.Errorf("starting the entrypoint: %w", err)
		}
		h.entrypoint = ep
		c.resp.EntrypointPID = ep.pid
	}
	h.current = c

	keys := []any{"namespace", c.namespace, "name", c.name, "sandboxUID", c.sandboxUID, "env", len(cr.Env)}
	if len(cr.Entrypoint) > 0 {
		// argv[0] only: arguments may carry secrets.
		keys = append(keys, "entrypoint", cr.Entrypoint[0], "entrypointPID", c.resp.EntrypointPID)
	}
	klog.InfoS("Claimed by sandbox", keys...)
	return c.resp, claimResultClaimed, http.StatusOK, nil
}

// decodeClaim reads the request body; on error it also returns the status code to answer with.
func decodeClaim(w http.ResponseWriter, req *http.Request) (*execdapi.ClaimRequest, int, error) {
	cr := &execdapi.ClaimRequest{}
	if code, err := decodeJSONBody(w, req, MaxClaimBytes, cr, "a JSON claim"); err != nil {
		return nil, code, err
	}
	return cr, 0, nil
}

// validateClaim reports every problem with a claim at once. Its messages never include env
// values.
func validateClaim(cr *execdapi.ClaimRequest) error {
	var errs []error
	for _, f := range []struct{ field, value string }{
		{"sandboxUID", cr.SandboxUID}, {"namespace", cr.Namespace}, {"name", cr.Name},
	} {
		switch {
		case f.value == "":
			errs = append(errs, fmt.Errorf("%s is required", f.field))
		case strings.ContainsFunc(f.value, invalidNameRune):
			// Namespace and name end up in env values and logs.
			errs = append(errs, fmt.Errorf("%s contains whitespace or control characters", f.field))
		}
	}
	if len(cr.Entrypoint) > 0 && cr.Entrypoint[0] == "" {
		errs = append(errs, errors.New("entrypoint[0], the command, is empty"))
	}
	for i, arg := range cr.Entrypoint {
		if strings.ContainsRune(arg, 0) {
			errs = append(errs, fmt.Errorf("entrypoint[%d] contains a NUL byte", i))
		}
	}
	for i, e := range cr.Env {
		switch {
		case e.Name == "":
			errs = append(errs, fmt.Errorf("env[%d]: the name is empty", i))
		case strings.ContainsAny(e.Name, "=\x00"):
			errs = append(errs, fmt.Errorf("env[%d]: the name %q contains '=' or a NUL byte", i, e.Name))
		default:
			if why, reserved := execdapi.ReservedEnv(e.Name); reserved {
				errs = append(errs, fmt.Errorf("env[%d]: %s may not be set: %s", i, e.Name, why))
			}
		}
		// A NUL would make every later exec fail to start.
		if strings.ContainsRune(e.Value, 0) {
			errs = append(errs, fmt.Errorf("env[%d]: the value of %q contains a NUL byte", i, e.Name))
		}
	}
	return errors.Join(errs...)
}

// startClaimedEntrypoint starts a claim's entrypoint in the background: in execd's working
// directory, with execd's environment plus env, execd's stdout and stderr, no stdin, and a
// process group of its own so that StopClaimedEntrypoint reaches whatever it starts. Its exit
// is logged; execd keeps serving.
func (h *Handler) startClaimedEntrypoint(argv, env []string) (*claimedEntrypoint, error) {
	c := exec.Command(argv[0], argv[1:]...)
	c.Env = append(os.Environ(), env...)
	c.Stdout, c.Stderr = os.Stdout, os.Stderr // stdin: /dev/null
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pid, err := h.reaper.Start(func() (int, error) {
		if err := c.Start(); err != nil {
			return 0, err
		}
		return c.Process.Pid, nil
	})
	if err != nil {
		return nil, err
	}
	ep := &claimedEntrypoint{pid: pid, done: make(chan struct{})}
	go func() {
		defer close(ep.done)
		err := exitError(c.Wait())
		// Release only after Wait collected the status, see reaper.Start.
		h.reaper.Release(pid)
		code := 0
		if err != nil {
			var exitErr utilexec.ExitError
			if !errors.As(err, &exitErr) {
				klog.ErrorS(err, "Waiting for the claimed entrypoint failed", "pid", pid)
				return
			}
			code = exitErr.ExitStatus()
		}
		klog.InfoS("Claimed entrypoint exited", "pid", pid, "exitCode", code)
	}()
	klog.V(2).InfoS("Started claimed entrypoint", "command", argv[0], "pid", pid)
	return ep, nil
}

// StopClaimedEntrypoint refuses further claims and stops the entrypoint a claim started, if
// any: SIGTERM to its process group, then, after the grace period or as soon as it exited,
// SIGKILL to what is left of the group. It returns once the entrypoint's status was
// collected. Call it when execd shuts down, after the HTTP server stopped.
func (h *Handler) StopClaimedEntrypoint() {
	h.claimMu.Lock()
	h.claimsStopped = true
	ep := h.entrypoint
	h.claimMu.Unlock()
	if ep == nil {
		return
	}
	// The group outlives its leader while processes the entrypoint started run, and its id
	// is not reused until the group is gone, so signalling it is safe even after the
	// entrypoint exited.
	signalGroup(ep.pid, unix.SIGTERM)
	grace := time.NewTimer(h.entrypointStopGrace)
	defer grace.Stop()
	select {
	case <-ep.done:
	case <-grace.C:
		klog.InfoS("Claimed entrypoint still running after the grace period, killing it", "pid", ep.pid, "grace", h.entrypointStopGrace)
	}
	signalGroup(ep.pid, unix.SIGKILL)
	ctx, cancel := context.WithTimeout(context.Background(), entrypointKillWait)
	defer cancel()
	select {
	case <-ep.done:
	case <-ctx.Done():
		klog.ErrorS(nil, "Claimed entrypoint did not exit after SIGKILL", "pid", ep.pid)
	}
}

func signalGroup(pgid int, sig unix.Signal) {
	if err := unix.Kill(-pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		klog.ErrorS(err, "Signalling the claimed entrypoint's process group failed", "pgid", pgid, "signal", sig.String())
	}
}
