// Package execdapi is the wire contract of sandbox-execd: its ports and paths, the environment
// and files it reads in a sandbox pod, the identities it accepts, and the JSON types of its
// claim, identity, files and task endpoints. sandbox-execd, sandbox-apiserver,
// sandbox-controller and the kubectl plugin import it, and nothing else of execd: it depends on
// nothing heavier than apimachinery's meta types.
//
// # Transport
//
// execd serves HTTP/1.1 over TLS on Port and accepts only clients that present a certificate
// of the kube-sandbox CA (EnvClientCA) for one of the client identities below: nothing in a
// sandbox pod opens another pod. Its serving certificate is its pod's own: execd makes its key
// when it starts, and sandbox-controller certifies it (IdentityPath) with the DNS name
// PodServerName(pod UID), so that a client knows it reached the pod it meant, even if a pod IP
// was given to another pod meanwhile. Until then execd serves a self-signed certificate no client
// trusts but the controller, which is about to certify it. Kubelet probes, which carry no
// certificate, are answered on HealthPort, in plain HTTP, and learn nothing but "ok".
//
// # Endpoints on Port
//
//	GET, POST ExecPath   exec, the kubelet's remote command protocol (SPDY, WebSocket)   apiserver
//	*         FilesPath  the files API (files.go)                                        apiserver
//	*         ProxyPath  PORT/PATH: HTTP and WebSocket to localhost:PORT in the pod      apiserver
//	GET, PUT  IdentityPath  the pod's token; its serving certificate (identity.go)        controller
//	POST      ClaimPath  allocation of a pool pod to a sandbox (claim.go)                 controller
//	PUT, GET  TaskPath   the pod's task: start it, its state, a watch stream (task.go)    controller
//	GET       TaskLogPath  the task's output (task.go)                                    either
//	POST, GET ProcessesPath  processes that outlive a connection: start, list; below it   apiserver
//	          each one's state, signal, log and attach (process.go)
//	GET       MetricsPath  Prometheus metrics                                             either
//
// exec, files, proxy, the task and processes need execd to belong to a sandbox: from its
// environment (EnvSandboxUID, direct mode) or from a claim (pool mode). Each request must name
// that sandbox (SandboxUIDHeader, or ExecSandboxUIDParam for exec and a process attach): one
// that names none is refused (400).
package execdapi

import (
	"fmt"
	"strings"
)

// Ports. Both are high, so that they do not clash with the servers users start, and below the
// ephemeral range.
const (
	// Port is execd's TLS port (mTLS only).
	Port = 44771
	// HealthPort answers kubelet probes (HealthzPath, ReadyzPath) in plain HTTP.
	HealthPort = 44772
)

// Paths.
const (
	// ExecPath is the exec endpoint, with the kubelet's query parameters (command, input,
	// output, error, tty) and ExecEnvParam, ExecWorkingDirParam, ExecTimeoutSecondsParam.
	ExecPath = "/exec"
	// ProxyPath prefixes the proxy endpoint: ProxyPath + "PORT/PATH" reaches
	// http://localhost:PORT/PATH in the pod's network namespace, with the query as sent.
	ProxyPath = "/proxy/"
	// IdentityPath: GET answers an IdentityResponse, PUT takes a CertificateRequest.
	IdentityPath = "/v1/identity"
	// HealthzPath and ReadyzPath are served on HealthPort only.
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
)

// Query parameters of an exec beyond the kubelet's.
const (
	// ExecEnvParam is repeated, one NAME=VALUE each, added to the command's environment.
	ExecEnvParam = "env"
	// ExecWorkingDirParam is the absolute directory the command starts in.
	ExecWorkingDirParam = "workingDir"
	// ExecTimeoutSecondsParam kills the command's process group after that many seconds.
	ExecTimeoutSecondsParam = "timeoutSeconds"
	// ExecCommandParam is the repeated parameter that carries the argv.
	ExecCommandParam = "command"
	// ExecSandboxUIDParam names the sandbox an exec is for, as SandboxUIDHeader does: the
	// WebSocket translation of sandbox-apiserver makes a request of its own, without the
	// caller's headers.
	ExecSandboxUIDParam = "sandboxUID"
)

// SandboxUIDHeader names the sandbox a request is meant for; execd refuses it (409) if it
// belongs to another, and a files or proxy request without it (400). sandbox-apiserver sends it
// with every exec, files and proxy request.
const SandboxUIDHeader = "X-Kube-Sandbox-Uid"

// Client identities: the common names of the certificates the kube-sandbox CA issues to the
// components that talk to execd. execd authorizes each endpoint by them (see the package doc).
const (
	APIServerIdentity  = "kube-sandbox:sandbox-apiserver"
	ControllerIdentity = "kube-sandbox:sandbox-controller"
)

// IdentityAudience is the audience of the service account token the kubelet projects into
// every sandbox pod (IdentityTokenPath). The token proves to sandbox-controller which pod
// execd runs in (a TokenReview names the pod it is bound to); no other server accepts it, the
// kube-apiserver included, so it opens nothing.
const IdentityAudience = "execd.kube-sandbox.io"

// podServerNameSuffix: see PodServerName. ".internal" is reserved for private names, so it is
// never a real DNS name; clients resolve it to the pod IP themselves.
const podServerNameSuffix = ".pods.kube-sandbox.internal"

// PodServerName is the DNS name of the serving certificate of the execd in the pod with that
// UID. Clients verify it as the TLS server name: a certificate for another pod does not match.
func PodServerName(podUID string) string {
	return podUID + podServerNameSuffix
}

// PodUIDFromServerName is the pod UID of a PodServerName; ok is false for any other name.
func PodUIDFromServerName(name string) (uid string, ok bool) {
	uid, ok = strings.CutSuffix(name, podServerNameSuffix)
	if !ok || uid == "" || strings.Contains(uid, ".") {
		return "", false
	}
	return uid, true
}

// The environment execd reads in a sandbox pod. sandbox-controller sets it.
const (
	// EnvClientCA holds the PEM certificates of the kube-sandbox CA (one, or two while it
	// rotates): execd accepts clients whose certificates they issued. It is public; execd
	// removes it from the environment of what it starts all the same.
	EnvClientCA = "SANDBOX_EXECD_CLIENT_CA"
	// EnvHostIP and EnvPodUID (downward API: status.hostIP, metadata.uid) are set in the init
	// container only: it asks the node agent at the node's address whether the pod's egress
	// filter is in force.
	EnvHostIP = "HOST_IP"
	EnvPodUID = "POD_UID"
	// EnvSandboxUID, EnvSandboxName and EnvSandboxNamespace name the sandbox of a pod made for
	// it (direct mode): execd belongs to it from the start. A pool pod has none until a claim
	// gives it a sandbox, which also sets EnvSandboxName and EnvSandboxNamespace for what runs
	// in it. Templates and claims may not set them.
	EnvSandboxUID       = "SANDBOX_UID"
	EnvSandboxName      = "SANDBOX_NAME"
	EnvSandboxNamespace = "SANDBOX_NAMESPACE"
)

// The layout of a sandbox pod: what sandbox-controller adds to a template, under names that
// templates may not use.
const (
	// InitContainerName copies the execd binary into BinaryVolume.
	InitContainerName = "kube-sandbox-install-execd"
	// BinaryVolume is the emptyDir shared by the installer and the sandbox container, mounted
	// read-only in the sandbox container at InstallDir.
	BinaryVolume = "kube-sandbox-execd"
	// IdentityVolume is the projected service account token (IdentityAudience), at
	// IdentityDir, read-only.
	IdentityVolume = "kube-sandbox-identity"
	// StateVolume is a small memory-backed emptyDir at StateDir where execd keeps its key
	// and certificate, so that a restarted container keeps its identity.
	StateVolume = "kube-sandbox-execd-state"

	// InstallDir is where the sandbox container sees the execd binary. A dot directory at the
	// root keeps it out of the way of what images put in /usr or /opt.
	InstallDir = "/.kube-sandbox/bin"
	// BinaryName is the file name of the installed binary.
	BinaryName = "sandbox-execd"
	// BinaryPath is the installed binary: the sandbox container's command is
	// [BinaryPath, "serve", "--", entrypoint...].
	BinaryPath = InstallDir + "/" + BinaryName
	// IdentityDir holds the projected token, IdentityTokenFile in it.
	IdentityDir       = "/.kube-sandbox/identity"
	IdentityTokenFile = "token"
	IdentityTokenPath = IdentityDir + "/" + IdentityTokenFile
	// StateDir is execd's own writable directory.
	StateDir = "/.kube-sandbox/run"
)

// ReservedEnv reports whether a template's or a claim's env may not set name, and why.
func ReservedEnv(name string) (string, bool) {
	switch name {
	case EnvSandboxUID, EnvSandboxName, EnvSandboxNamespace:
		return "kube-sandbox sets it to the sandbox's own", true
	case EnvClientCA:
		return "sandbox-execd reads its client CA from it", true
	}
	return "", false
}

// ValidatePort reports why port cannot be reached through the proxy, if it cannot.
func ValidatePort(port int) error {
	switch {
	case port < 1 || port > 65535:
		return fmt.Errorf("port %d is not between 1 and 65535", port)
	case port == Port || port == HealthPort:
		return fmt.Errorf("port %d is sandbox-execd's; use the exec and files subresources", port)
	}
	return nil
}
