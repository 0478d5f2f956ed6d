// Package v1alpha1 holds the CRD types of group control.kube-sandbox.io: BatchSandbox (the stored
// truth behind a Sandbox, and an API of its own for batch work) and Pool (a warm pool of
// pods that sandboxes are allocated from).
//
// +kubebuilder:object:generate=true
// +groupName=control.kube-sandbox.io
package v1alpha1
