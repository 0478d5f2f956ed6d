package sandboxserver

import (
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxregistry "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/registry/sandbox"
)

// writeObjectOrTable answers a get or list with obj, or with the server's table of items when
// the request asks for one (Accept: application/json;as=Table;v=v1;g=meta.k8s.io), as the
// generic API server does: the rows carry the object as includeObject says (Metadata, the
// default, None or Object) and the table the list's resourceVersion and continue token.
func (s *Server) writeObjectOrTable(w http.ResponseWriter, req *http.Request, listMeta metav1.ListMeta, items []sandboxv1alpha1.Sandbox, obj any) {
	if !wantsTable(req) {
		writeObject(w, http.StatusOK, obj)
		return
	}
	include, err := includeObject(req)
	if err != nil {
		writeStatus(w, err)
		return
	}
	table := sandboxregistry.SandboxTable(items, s.now())
	table.TypeMeta = metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "Table"}
	table.ResourceVersion, table.Continue = listMeta.ResourceVersion, listMeta.Continue
	for i := range table.Rows {
		table.Rows[i].Object = rowObject(include, &items[i])
	}
	writeObject(w, http.StatusOK, table)
}

// includeObject is the request's includeObject, Metadata when it has none, as the generic API
// server reads it.
func includeObject(req *http.Request) (metav1.IncludeObjectPolicy, *apierrors.StatusError) {
	include := metav1.IncludeObjectPolicy(req.URL.Query().Get("includeObject"))
	switch include {
	case "":
		return metav1.IncludeMetadata, nil
	case metav1.IncludeMetadata, metav1.IncludeNone, metav1.IncludeObject:
		return include, nil
	}
	return "", apierrors.NewBadRequest(fmt.Sprintf("includeObject must be one of %s, %s or %s, not %q",
		metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject, include))
}

// rowObject is what a table row carries of sb for include: its metadata, all of it, or
// nothing.
func rowObject(include metav1.IncludeObjectPolicy, sb *sandboxv1alpha1.Sandbox) runtime.RawExtension {
	sb = typed(sb)
	switch include {
	case metav1.IncludeMetadata:
		return runtime.RawExtension{Object: &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "PartialObjectMetadata"},
			ObjectMeta: sb.ObjectMeta,
		}}
	case metav1.IncludeObject:
		return runtime.RawExtension{Object: sb}
	}
	return runtime.RawExtension{}
}

// wantsTable reports whether the first media type of Accept that the server can answer is a
// meta.k8s.io/v1 Table, as kubectl and the plugin ask for one: a table if the server can, else
// the object.
func wantsTable(req *http.Request) bool {
	for _, accept := range strings.Split(req.Header.Get("Accept"), ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(accept))
		if err != nil || (mt != "application/json" && mt != "*/*") {
			continue
		}
		return params["as"] == "Table" && params["g"] == metav1.GroupName && params["v"] == metav1.SchemeGroupVersion.Version
	}
	return false
}

// now is the clock of the tables' AGE and EXPIRES.
func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
