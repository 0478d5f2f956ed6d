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

// withoutProtobuf offers no protobuf for the group's resources, as the kube-apiserver offers none
// for custom resources: the served types have no protobuf encoding. Clients that prefer protobuf
// and take JSON too (the metadata client the namespace controller and the garbage collector use
// for delete and deletecollection asks "protobuf, then JSON") get JSON, instead of an error the
// protobuf serializer would only meet when writing the response.
type withoutProtobuf struct{ runtime.NegotiatedSerializer }

func (s withoutProtobuf) SupportedMediaTypes() []runtime.SerializerInfo {
	var infos []runtime.SerializerInfo
	for _, info := range s.NegotiatedSerializer.SupportedMediaTypes() {
		if info.MediaType != runtime.ContentTypeProtobuf {
			infos = append(infos, info)
		}
	}
	return infos
}

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
