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
	// commands can read it.
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
