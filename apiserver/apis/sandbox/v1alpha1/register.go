package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group served by sandbox-apiserver.
const GroupName = "sandbox.kube-sandbox.io"

// SchemeGroupVersion is the served group version.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// internalGroupVersion is where the same Go types are registered as the group's internal
// version; see the package comment.
var internalGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

var (
	// SchemeBuilder registers the types of this group with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this group (external version only) to a scheme; clients use it.
	AddToScheme         = SchemeBuilder.AddToScheme
	serverSchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes, addInternalTypes, addConversionFuncs)
	// AddToServerScheme adds the types as both the external and the internal version; the
	// apiserver uses it.
	AddToServerScheme = serverSchemeBuilder.AddToScheme
)

// Resource takes an unqualified resource and returns a group-qualified one.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func knownTypes() []runtime.Object {
	return []runtime.Object{&Sandbox{}, &SandboxList{}, &SandboxExecOptions{}, &SandboxRenewal{}, &SandboxFilesOptions{}, &SandboxProxyOptions{}, &SandboxLogOptions{},
		&SandboxFile{}, &SandboxFileList{}, &SandboxProcess{}, &SandboxProcessList{}, &SandboxProcessSignal{}, &SandboxProcessOptions{},
		&SandboxAttachOptions{}, &SandboxCodeContext{}, &SandboxCodeContextList{}, &SandboxCodeContextOptions{}, &SandboxCodeRun{},
		&SandboxStats{}, &SandboxStatsList{}}
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, knownTypes()...)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}

func addInternalTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(internalGroupVersion, knownTypes()...)
	return nil
}
