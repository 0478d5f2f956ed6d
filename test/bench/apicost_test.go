package main

import (
	"fmt"
	"strings"
	"testing"
)

// The kube-apiserver labels requests with HTTP methods; writes must be counted as such.
func TestParseAPIRequests(t *testing.T) {
	page := `# HELP apiserver_request_total Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="control.kube-sandbox.io",resource="batchsandboxes",scope="resource",subresource="",verb="POST",version="v1alpha1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="control.kube-sandbox.io",resource="batchsandboxes",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PUT",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="DELETE",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="WATCH",version="v1"} 9
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/readyz",verb="GET",version=""} 11
`
	got, err := parseAPIRequests([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"post batchsandboxes": 3, "patch batchsandboxes/status": 5, "put pods": 2, "delete pods": 1, "get pods": 7, "list pods": 4}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	var writes float64
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
		if isWrite(k) {
			writes += v
		}
	}
	if writes != 11 {
		t.Errorf("%v writes, want 11 (post, patch, put and delete)", writes)
	}
}

func TestScanSamples(t *testing.T) {
	page := `# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="pool",result="success"} 4
process_cpu_seconds_total 12.5
rest_client_requests_total{code="200",host="h",method="PATCH"} 2
rest_client_requests_total{code="200",host="h",method="GET"} 9
`
	var got []string
	if err := scanSamples(strings.NewReader(page), func(name, labels string, v float64) {
		got = append(got, fmt.Sprintf("%s|%s|%g", name, label(labels, "controller")+label(labels, "method"), v))
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"controller_runtime_reconcile_total|pool|4", "rest_client_requests_total|PATCH|2", "rest_client_requests_total|GET|9"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("samples = %v, want %v (comments and unlabelled samples skipped)", got, want)
	}
}
