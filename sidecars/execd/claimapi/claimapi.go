// Package claimapi holds the wire types of sandbox-execd's claim endpoint, shared by execd and
// sandbox-controller. A pool pod starts with the pool's token and no sandbox; the controller
// allocates it to a sandbox by writing the pod's labels and then claiming execd for that
// sandbox: execd takes the sandbox's own token (the pool's no longer opens exec or files), its
// env for every later exec, and starts its entrypoint.
package claimapi

const (
	// Path is where execd serves claims: POST, with the pool's token as bearer token (the
	// token execd started with) in the Authorization header, and a Request as JSON body of at
	// most 1 MiB. A claimed execd keeps accepting the pool's token on Path only, to answer a
	// repeated claim.
	//
	// Answers (errors are a text/plain message):
	//
	//	200 claimed now, or a repeated claim (same SandboxUID and Token): a Response, the
	//	    same one every time
	//	400 a malformed body, or a Request that fails validation
	//	401 not the pool's token
	//	409 already claimed by another sandbox, or by the same one with another token
	//	413 a body over 1 MiB
	//	422 the entrypoint cannot be started (not found, not executable)
	//	500 the entrypoint failed to start for another reason; a retry may pass
	//	503 execd is shutting down
	//
	// Only a 200 changes anything: after any other answer execd is still unclaimed (or still
	// claimed as before).
	Path = "/v1/claim"

	// Env variables execd adds to the sandbox's env on a claim (the sandbox's env may not set
	// them).
	EnvSandboxName      = "SANDBOX_NAME"
	EnvSandboxNamespace = "SANDBOX_NAMESPACE"
)

// Request is the body of a claim (JSON).
//
// Claims are idempotent: a claim for the sandbox that holds the pod, with the same token,
// answers 200 with the state of the first one and changes nothing (the controller repeats a
// claim when it does not know whether the last one arrived). A claim for another sandbox, or
// with another token, answers 409 Conflict: a pod is given to one sandbox only.
type Request struct {
	// SandboxUID is the UID of the BatchSandbox: the identity of the claim.
	SandboxUID string `json:"sandboxUID"`
	// Namespace and Name of the sandbox; execd sets SANDBOX_NAMESPACE and SANDBOX_NAME.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Token is the sandbox's token: after the claim, exec and files accept it and no other.
	// Required; no whitespace or control characters.
	Token string `json:"token"`
	// Entrypoint, when set, is started in the background with the sandbox's env. Its exit does
	// not end the sandbox: execd keeps serving.
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Env is added to the environment of the entrypoint and of every later exec (an exec's own
	// env still wins). Names must be non-empty without '='; SANDBOX_NAME, SANDBOX_NAMESPACE
	// and SANDBOX_EXECD_TOKEN are refused (400).
	Env []EnvVar `json:"env,omitempty"`
}

// EnvVar is one environment variable with a literal value.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Response is the body of a successful claim (JSON).
type Response struct {
	// SandboxUID is the sandbox that holds the pod.
	SandboxUID string `json:"sandboxUID"`
	// EntrypointPID is the process ID of the entrypoint; 0 when there is none.
	EntrypointPID int `json:"entrypointPID,omitempty"`
}
