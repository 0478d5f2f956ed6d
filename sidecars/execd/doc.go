// Package execd implements sandbox-execd, the agent injected into every
// sandbox pod.
//
// An init container runs "sandbox-execd install" to copy the static binary
// into a shared emptyDir mounted at InstallDir. The user's container then
// runs "sandbox-execd serve -- <entrypoint...>", so any image works
// unchanged: execd starts the user's entrypoint as its child and, next to
// it, serves exec sessions on the pod IP. The sandbox-apiserver streams
// those sessions with the same SPDY/websocket remote command protocol
// kubelet's streaming server speaks, so client-go's remotecommand executors
// work against execd as they do against kubelet. Each request must carry the
// sandbox's token as a bearer token.
//
// execd also serves the files API at FilesPath (see api.go): downloads with
// Range support, paged listings, atomic uploads, mkdir, delete and move, all
// resolved through an os.Root so that no path or symlink leaves the files
// root. Prometheus metrics are at MetricsPath.
//
// # Token
//
// serve reads the token from TokenEnv and removes the variable before it
// starts anything. Because os.Unsetenv does not change /proc/PID/environ, it
// then re-executes itself once (syscall.Exec of /proc/self/exe: same PID,
// same arguments) with the variable gone and the token in an inherited memfd
// named by $SANDBOX_EXECD_TOKEN_FD, which the new image reads and closes. The
// exec happens on the main thread (this package's init locks main.main to it),
// so per-thread state such as a parent-death signal survives it. If the
// re-exec fails, execd logs it and carries on as before.
//
// # Warm pools and claims
//
// A pod of a warm pool starts "sandbox-execd serve" (with no entrypoint, or
// the pool template's) before any sandbox exists, with the pool's token, which
// all idle pods of the pool share. When the controller allocates the pod to a
// sandbox it claims execd: POST claimapi.Path with the pool's token as bearer
// token and a claimapi.Request as body (claimapi.Path lists the answers).
// The first valid claim, atomically:
//
//   - replaces the token exec and files accept with the sandbox's; the pool's
//     token keeps working for claimapi.Path only, to repeat a claim;
//   - ends exec sessions opened with the pool's token;
//   - adds the sandbox's env, plus SANDBOX_NAME and SANDBOX_NAMESPACE, to the
//     environment of every later exec (an exec's own env still wins);
//   - starts the sandbox's entrypoint, if any, in the background with that
//     env, in execd's working directory, with execd's stdout and stderr and
//     in a process group of its own. Its exit is logged and ends nothing;
//     when execd shuts down, the group gets SIGTERM, then SIGKILL after a
//     grace period (DefaultEntrypointStopGrace).
//
// A repeated claim (same sandbox UID and token) answers 200 with the first
// answer and starts nothing; a claim for another sandbox or with another
// token answers 409. A claim whose entrypoint cannot start answers 422 (or
// 500 for a failure that may pass) and leaves execd unclaimed. Probes answer
// "ok" whether or not execd is claimed: kubelet probes idle pool pods too.
package execd

import (
	"net"
	"net/url"
	"strconv"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

const (
	// DefaultPort is where serve listens by default. It is a high port,
	// outside the ranges dev servers and databases pick by default, because
	// execd shares the pod's network namespace with whatever the user runs.
	DefaultPort = 44771

	// DefaultListenAddr is serve's default --listen: all interfaces, since
	// the apiserver connects over the pod IP.
	DefaultListenAddr = ":44771"

	// TokenEnv is the environment variable serve reads the exec token from
	// by default (see --token-env). execd removes it from its environment
	// before starting anything, so neither the entrypoint nor exec'd
	// commands can read it, and re-executes itself so that its
	// /proc/PID/environ loses it too. A claim may not set it.
	TokenEnv = "SANDBOX_EXECD_TOKEN"

	// ExecPath is the exec endpoint, with kubelet's query parameters
	// (command, input, output, error, tty).
	ExecPath = "/exec"
	// HealthzPath and ReadyzPath are unauthenticated probe endpoints.
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"

	// CommandParam is the repeated query parameter carrying the argv.
	CommandParam = "command"
	// TokenParam is the query parameter that may carry the token instead of the Authorization
	// header (see Handler.authorized).
	TokenParam = "token"

	// InstallDir is where the init container installs the binary, on an
	// emptyDir shared with the user's container. The leading dot keeps it out
	// of the way of the image's own directories.
	InstallDir = "/.kube-sandbox/bin"
	// BinaryName is the file name of the installed binary.
	BinaryName = "sandbox-execd"
	// InstallPath is the installed binary: the user container's command is
	// [InstallPath, "serve", "--", entrypoint...].
	InstallPath = InstallDir + "/" + BinaryName
)

// Endpoint returns the base URL of the execd serving on DefaultPort at host
// (a pod IP, IPv4 or IPv6).
func Endpoint(host string) string {
	return "http://" + net.JoinHostPort(host, strconv.Itoa(DefaultPort))
}

// ExecURL returns the exec URL for running command with the given streams on
// the execd at baseURL (see Endpoint). Use it with client-go's
// remotecommand.NewSPDYExecutor and a rest.Config whose BearerToken is the
// sandbox's exec token.
func ExecURL(baseURL string, command []string, streams remotecommand.Options) (*url.URL, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, err
	}
	u = u.JoinPath(ExecPath)
	q := url.Values{}
	for _, arg := range command {
		q.Add(CommandParam, arg)
	}
	for param, on := range map[string]bool{
		remotecommand.ExecStdinParam:  streams.Stdin,
		remotecommand.ExecStdoutParam: streams.Stdout,
		remotecommand.ExecStderrParam: streams.Stderr,
		remotecommand.ExecTTYParam:    streams.TTY,
	} {
		if on {
			q.Set(param, "1")
		}
	}
	u.RawQuery = q.Encode()
	return u, nil
}
