package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
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
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	const prefix = "apiserver_request_total{"
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		labels := line[len(prefix) : i-1]
		verb := strings.ToLower(label(labels, "verb"))
		res := label(labels, "resource")
		if res == "" {
			continue // non-resource requests: health checks, discovery, metrics
		}
		if sub := label(labels, "subresource"); sub != "" {
			res += "/" + sub
		}
		if verb == "watch" || verb == "list" && res == "leases" {
			continue
		}
		out[verb+" "+res] += v
	}
	return out, sc.Err()
}

func isWrite(key string) bool {
	verb, _, _ := strings.Cut(key, " ")
	switch verb {
	case "create", "update", "patch", "delete", "apply", "deletecollection":
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
