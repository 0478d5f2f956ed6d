package sandboxserver

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxregistry "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/registry/sandbox"
)

// serveTasks answers GET .../sandboxes/NAME/tasks as the real server does: the sandbox, or
// the server's table of its tasks (one row per replica, from the real server's table code,
// each row carrying the sandbox as includeObject says); a sandbox without a task is refused
// with the real server's error.
func (s *Server) serveTasks(w http.ResponseWriter, req *http.Request, name string) {
	if req.Method != http.MethodGet {
		writeStatus(w, apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes/tasks"), req.Method))
		return
	}
	sb := s.Sandbox(name)
	if sb == nil {
		writeStatus(w, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), name))
		return
	}
	if err := sandboxregistry.RequireTask(sb); err != nil {
		writeStatus(w, err)
		return
	}
	if !wantsTable(req) {
		writeObject(w, http.StatusOK, typed(sb))
		return
	}
	include, err := includeObject(req)
	if err != nil {
		writeStatus(w, err)
		return
	}
	table := sandboxregistry.TasksTable(sb, s.now())
	table.TypeMeta = metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "Table"}
	table.ResourceVersion = sb.ResourceVersion
	for i := range table.Rows {
		table.Rows[i].Object = rowObject(include, sb)
	}
	writeObject(w, http.StatusOK, table)
}
