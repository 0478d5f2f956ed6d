package v1alpha1

// How the controller wires sandbox-execd into a sandbox pod, and how the apiserver reaches it.
// These names are reserved in pod templates.
const (
	// ExecdInitContainerName copies the execd binary into ExecdVolumeName.
	ExecdInitContainerName = "kube-sandbox-install-execd"
	// ExecdVolumeName is the emptyDir shared by the installer and the sandbox container.
	ExecdVolumeName = "kube-sandbox-execd"
	// ExecdMountPath is where the sandbox container sees the execd binary. A dot directory at
	// the root keeps it out of the way of what images put in /usr or /opt.
	ExecdMountPath = "/.kube-sandbox/bin"
	// ExecdBinary is the path of execd inside the sandbox container.
	ExecdBinary = ExecdMountPath + "/sandbox-execd"
	// ExecdPort is where execd listens in the pod: high, so that it does not clash with the
	// servers users start, and below the ephemeral range.
	ExecdPort = 44771
	// ExecdTokenEnv carries the per-sandbox token to execd. execd removes it from its
	// environment before it starts anything, so user code does not inherit it.
	ExecdTokenEnv = "SANDBOX_EXECD_TOKEN"
	// ExecdTokenKey is the key of the token in the token Secret.
	ExecdTokenKey = "token"
)

// TokenSecretName is the name of the Secret holding the execd token of a BatchSandbox.
func TokenSecretName(batchSandboxName string) string {
	return batchSandboxName + "-execd-token"
}
