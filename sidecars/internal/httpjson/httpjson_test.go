package httpjson

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, http.StatusConflict, map[string]string{"reason": "AlreadyExists"})
	if rec.Code != http.StatusConflict {
		t.Errorf("code = %d, want 409", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if got, want := rec.Body.String(), "{\"reason\":\"AlreadyExists\"}\n"; got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
}
