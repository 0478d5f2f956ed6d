package execdapi

// ClaimPath is where execd takes claims: POST by sandbox-controller, a ClaimRequest as JSON
// body of at most 1 MiB. A pod of a warm pool starts without a sandbox; the controller
// allocates it by writing the pod's labels and then claiming execd for that sandbox: execd then
// belongs to it (exec, files and proxy work), adds its env to every later exec, and starts its
// entrypoint. The controller claims only an execd whose certificate it verified for that pod.
//
// Answers (errors are a text/plain message):
//
//	200 claimed now, or a repeated claim (same SandboxUID): a ClaimResponse, the same every time
//	400 a malformed body, or a request that fails validation
//	409 execd belongs to another sandbox
//	413 a body over 1 MiB
//	422 the entrypoint cannot be started (not found, not executable)
//	500 the entrypoint failed to start for another reason; a retry may pass
//	503 execd is shutting down
//
// Only a 200 changes anything: after any other answer execd is as it was.
const ClaimPath = "/v1/claim"

// ClaimRequest is the body of a claim.
//
// Claims are idempotent: a claim for the sandbox that holds the pod answers 200 with the state
// of the first one and changes nothing (the controller repeats a claim when it does not know
// whether the last one arrived, and claims a direct-mode pod, which belongs to its sandbox from
// the start, to learn that it does). A claim for another sandbox answers 409 Conflict: a pod is
// given to one sandbox only.
type ClaimRequest struct {
	// SandboxUID is the UID of the BatchSandbox: the identity of the claim.
	SandboxUID string `json:"sandboxUID"`
	// Namespace and Name of the sandbox; execd sets EnvSandboxNamespace and EnvSandboxName.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Entrypoint, when set, is started in the background with the sandbox's env. Its exit does
	// not end the sandbox: execd keeps serving.
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Env is added to the environment of the entrypoint and of every later exec (an exec's own
	// env still wins). Names must be non-empty without '='; the names ReservedEnv reports are
	// refused (400).
	Env []EnvVar `json:"env,omitempty"`
}

// EnvVar is one environment variable with a literal value.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ClaimResponse is the body of a successful claim.
type ClaimResponse struct {
	// SandboxUID is the sandbox that holds the pod.
	SandboxUID string `json:"sandboxUID"`
	// EntrypointPID is the process ID of the entrypoint a claim started; 0 when there is none.
	EntrypointPID int `json:"entrypointPID,omitempty"`
}
