package server

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

var (
	// Scheme holds the served types (as external and internal version, see the API package).
	Scheme = runtime.NewScheme()
	// Codecs serializes them.
	Codecs = serializer.NewCodecFactory(Scheme)
	// ParameterCodec decodes query parameters, including the subresources' options.
	ParameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	utilruntime.Must(sandboxv1alpha1.AddToServerScheme(Scheme))
	utilruntime.Must(Scheme.SetVersionPriority(sandboxv1alpha1.SchemeGroupVersion))

	// The types every API server registers (as k8s.io/sample-apiserver does).
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{},
		&metav1.APIVersions{},
		&metav1.APIGroupList{},
		&metav1.APIGroup{},
		&metav1.APIResourceList{},
	)
}
