package util

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
)

// serverFactory is a Factory on a test server (the test helpers' factories import this
// package, so they cannot be used here).
type serverFactory struct {
	ns   string
	host string
}

func (f serverFactory) Namespace() (string, bool, error) { return f.ns, false, nil }
func (f serverFactory) ToRESTConfig() (*rest.Config, error) {
	return &rest.Config{Host: f.host}, nil
}
func (f serverFactory) SandboxClient() (clientset.Interface, error) {
	return clientset.NewForConfig(&rest.Config{Host: f.host})
}

func TestPoolNameCompletion(t *testing.T) {
	pools := []string{"python", "python-gpu", "node"}
	tests := []struct {
		name       string
		toComplete string
		// status is the server's reply to the list; its items are the pools above when 200.
		status int
		want   []string
	}{
		{name: "all", toComplete: "", status: http.StatusOK, want: []string{"python", "python-gpu", "node"}},
		{name: "by prefix", toComplete: "py", status: http.StatusOK, want: []string{"python", "python-gpu"}},
		{name: "no match", toComplete: "go", status: http.StatusOK, want: nil},
		{name: "forbidden lists nothing", toComplete: "", status: http.StatusForbidden, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotPath, gotAccept string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				gotPath, gotAccept = req.URL.Path, req.Header.Get("Accept")
				w.Header().Set("Content-Type", "application/json")
				if tt.status != http.StatusOK {
					w.WriteHeader(tt.status)
					_ = json.NewEncoder(w).Encode(metav1.Status{
						TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
						Status:   metav1.StatusFailure, Code: int32(tt.status), Reason: metav1.StatusReasonForbidden,
					})
					return
				}
				list := metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"}}
				for _, name := range pools {
					list.Items = append(list.Items, metav1.PartialObjectMetadata{
						TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
						ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team"},
					})
				}
				_ = json.NewEncoder(w).Encode(list)
			}))
			defer srv.Close()

			cmd := &cobra.Command{}
			cmd.SetContext(context.Background())
			got, directive := PoolNameCompletion(serverFactory{ns: "team", host: srv.URL})(cmd, nil, tt.toComplete)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
			if directive != cobra.ShellCompDirectiveNoFileComp {
				t.Errorf("directive %v, want NoFileComp", directive)
			}
			if want := "/apis/control.kube-sandbox.io/v1alpha1/namespaces/team/pools"; gotPath != want {
				t.Errorf("listed %q, want %q", gotPath, want)
			}
			if !strings.Contains(gotAccept, "as=PartialObjectMetadataList") {
				t.Errorf("Accept %q asks for more than the pools' metadata", gotAccept)
			}
		})
	}
}
