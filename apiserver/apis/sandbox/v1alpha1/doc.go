// Package v1alpha1 is the sandbox.kube-sandbox.io API served by sandbox-apiserver: Sandbox, a
// virtual resource over the BatchSandbox CRD, and the options of its subresources.
//
// The API has no internal version: these types are registered both as v1alpha1 and as the
// internal version of the group, so the generic apiserver machinery never needs to convert.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +k8s:openapi-model-package=io.kube-sandbox.sandbox.v1alpha1
// +groupName=sandbox.kube-sandbox.io
package v1alpha1
