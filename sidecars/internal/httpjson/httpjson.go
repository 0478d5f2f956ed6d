// Package httpjson writes the JSON answers of the sidecars' HTTP handlers.
package httpjson

import (
	"encoding/json"
	"net/http"

	"k8s.io/klog/v2"
)

// Write answers with code and v as JSON. The status line is gone once it is called, so an
// encoding failure (the client went away, mostly) can only be logged.
func Write(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		klog.V(4).InfoS("Writing a response failed", "err", err)
	}
}
