package client

import (
	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// Phase is the phase of sb as the server reports it in status.phase, and as its table shows
// it: Pending until the controller has set one. The server derives Terminating itself (and
// keeps Expired for an expired sandbox that is being deleted), so the plugin derives nothing
// from metadata; every command that shows or compares a phase reads it here.
func Phase(sb *sandboxv1alpha1.Sandbox) sandboxv1alpha1.SandboxPhase {
	if sb.Status.Phase == "" {
		return sandboxv1alpha1.PhasePending
	}
	return sb.Status.Phase
}
