package jsonclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type echo struct {
	Method      string `json:"method"`
	ContentType string `json:"contentType"`
	Body        string `json:"body"`
}

func TestDo(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/echo":
			_ = json.NewEncoder(w).Encode(echo{Method: r.Method, ContentType: r.Header.Get("Content-Type"), Body: string(body)})
		case "/conflict":
			http.Error(w, "  already claimed by sandbox a  ", http.StatusConflict)
		case "/busy":
			w.WriteHeader(http.StatusTooManyRequests)
		case "/garbage":
			_, _ = w.Write([]byte("{not json"))
		case "/huge":
			_, _ = w.Write([]byte(`"` + strings.Repeat("x", MaxAnswerBytes) + `"`))
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx := context.Background()

	type in struct {
		Name string `json:"name"`
	}
	tests := []struct {
		name    string
		method  string
		path    string
		in      any
		out     bool
		want    *echo
		status  int    // of the *StatusError expected; 0: none
		refused bool   // its Refused()
		errHas  string // a part of any other error expected
		msg     string // the StatusError's Message
	}{
		{name: "a body is sent as JSON", method: http.MethodPut, path: "/echo", in: in{Name: "a"}, out: true,
			want: &echo{Method: http.MethodPut, ContentType: "application/json", Body: `{"name":"a"}`}},
		{name: "no body, no content type", method: http.MethodGet, path: "/echo", out: true,
			want: &echo{Method: http.MethodGet}},
		{name: "a 4xx keeps its status and trimmed text", method: http.MethodPost, path: "/conflict", in: in{}, out: true,
			status: http.StatusConflict, refused: true, msg: "already claimed by sandbox a"},
		{name: "429 is worth a retry", method: http.MethodPost, path: "/busy", out: true,
			status: http.StatusTooManyRequests},
		{name: "a 404 of an unknown path", method: http.MethodGet, path: "/nowhere", out: true,
			status: http.StatusNotFound, refused: true},
		{name: "an answer that is no JSON", method: http.MethodGet, path: "/garbage", out: true, errHas: "decode answer"},
		{name: "an answer over the bound is refused, not cut", method: http.MethodGet, path: "/huge", out: true, errHas: "more than"},
		{name: "no out: a 204 is fine", method: http.MethodDelete, path: "/empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *echo
			var out any
			if tt.out {
				got = &echo{}
				out = got
			}
			err := Do(ctx, srv.Client(), tt.method, srv.URL+tt.path, tt.in, out)
			var se *StatusError
			switch {
			case tt.status != 0:
				if !errors.As(err, &se) {
					t.Fatalf("got %v, want a *StatusError %d", err, tt.status)
				}
				if se.Code != tt.status || se.Refused() != tt.refused {
					t.Fatalf("got %d (refused %v), want %d (refused %v)", se.Code, se.Refused(), tt.status, tt.refused)
				}
				if tt.msg != "" && se.Message != tt.msg {
					t.Fatalf("message %q, want %q", se.Message, tt.msg)
				}
				if !strings.HasPrefix(se.Error(), se.Status) {
					t.Fatalf("error %q does not start with the status %q", se.Error(), se.Status)
				}
			case tt.errHas != "":
				if err == nil || !strings.Contains(err.Error(), tt.errHas) || errors.As(err, &se) {
					t.Fatalf("got %v, want an error with %q that is no *StatusError", err, tt.errHas)
				}
			case err != nil:
				t.Fatal(err)
			case tt.want != nil && *got != *tt.want:
				t.Fatalf("server saw %+v, want %+v", *got, *tt.want)
			}
		})
	}
}

func TestDoUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	err := Do(context.Background(), http.DefaultClient, http.MethodGet, url, nil, nil)
	var se *StatusError
	if err == nil || errors.As(err, &se) {
		t.Fatalf("got %v, want the client's error", err)
	}
}

func TestCheck(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			_, _ = w.Write([]byte("line 1\nline 2\n"))
			return
		}
		http.Error(w, "no such container", http.StatusNotFound)
	}))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(resp); err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(body) != "line 1\nline 2\n" {
		t.Fatalf("Check read the body of a 2xx answer: left %q", body)
	}

	resp, err = http.Get(srv.URL + "/gone")
	if err != nil {
		t.Fatal(err)
	}
	var se *StatusError
	if err := Check(resp); !errors.As(err, &se) || se.Code != http.StatusNotFound || se.Message != "no such container" {
		t.Fatalf("got %v, want 404 with its text", err)
	}
}
