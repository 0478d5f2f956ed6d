package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// apiRequests reads the kube-apiserver's apiserver_request_total, summed by verb and
// resource ("create pods", "patch pods/status", "update batchsandboxes/status").
func (b *bench) apiRequests(ctx context.Context) (map[string]float64, error) {
	data, err := b.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	return parseAPIRequests(data)
}

// parseAPIRequests sums apiserver_request_total of a /metrics page by verb and resource.
func parseAPIRequests(data []byte) (map[string]float64, error) {
	out := map[string]float64{}
	err := scanSamples(bytes.NewReader(data), func(name, labels string, v float64) {
		if name != "apiserver_request_total" {
			return
		}
		verb := strings.ToLower(label(labels, "verb"))
		res := label(labels, "resource")
		if res == "" {
			return // non-resource requests: health checks, discovery, metrics
		}
		if sub := label(labels, "subresource"); sub != "" {
			res += "/" + sub
		}
		if verb == "watch" || verb == "list" && res == "leases" {
			return
		}
		out[verb+" "+res] += v
	})
	return out, err
}

// scanSamples calls sample for every labelled sample of a Prometheus text page: the metric's
// name, its labels (what is between the braces) and its value.
func scanSamples(r io.Reader, sample func(name, labels string, v float64)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		open := strings.IndexByte(line, '{')
		end := strings.LastIndexByte(line, ' ')
		if strings.HasPrefix(line, "#") || open < 0 || end <= open+1 || line[end-1] != '}' {
			continue
		}
		v, err := strconv.ParseFloat(line[end+1:], 64)
		if err != nil {
			continue
		}
		sample(line[:open], line[open+1:end-1], v)
	}
	return sc.Err()
}

// isWrite tells the writes among apiRequests' keys, whose verbs are the kube-apiserver's
// metric labels: HTTP methods (post, put, patch, delete), and apply and deletecollection.
func isWrite(key string) bool {
	verb, _, _ := strings.Cut(key, " ")
	switch verb {
	case "post", "put", "patch", "delete", "apply", "deletecollection":
		return true
	}
	return false
}

// printAPICost prints what n sandboxes cost the kube-apiserver between two readings: every
// client's requests (ours, the kube-apiserver's own aggregator and controllers, the kubelet),
// per sandbox, by verb and resource, leases left out (leader election runs regardless).
func printAPICost(before, after map[string]float64, n int) {
	type row struct {
		key string
		v   float64
	}
	var rows []row
	var total, writes float64
	for k, v := range after {
		d := v - before[k]
		if d <= 0 || strings.HasSuffix(k, " leases") {
			continue
		}
		rows = append(rows, row{k, d / float64(n)})
		total += d / float64(n)
		if isWrite(k) {
			writes += d / float64(n)
		}
	}
	sort.Slice(rows, func(a, b int) bool {
		return rows[a].v > rows[b].v || rows[a].v == rows[b].v && rows[a].key < rows[b].key
	})
	fmt.Printf("\nAPI cost of a pooled sandbox, create → first exec, from the kube-apiserver's apiserver_request_total over %d sequential sandboxes (all clients; leases and watches left out): %.1f requests, %.1f writes per sandbox.\n\n", n, total, writes)
	fmt.Println("| verb resource | per sandbox |")
	fmt.Println("|---|---|")
	for _, r := range rows {
		if r.v >= 0.05 {
			fmt.Printf("| %s | %.2f |\n", r.key, r.v)
		}
	}
}
