package execd

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// localServer listens on loopback only, as a dev server does, and echoes what it got.
func localServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := websocket.Upgrader{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if websocket.IsWebSocketUpgrade(req) {
			c, err := up.Upgrade(w, req, nil)
			if err != nil {
				return
			}
			defer func() { _ = c.Close() }()
			for {
				mt, msg, err := c.ReadMessage()
				if err != nil {
					return
				}
				_ = c.WriteMessage(mt, append([]byte("echo:"), msg...))
			}
		}
		if req.URL.Path == "/slow" {
			time.Sleep(2 * time.Second)
		}
		w.Header().Set("X-Seen-Host", req.Host)
		w.Header().Set("X-Seen-Sandbox-Header", req.Header.Get(execdapi.SandboxUIDHeader))
		_, _ = fmt.Fprintf(w, "%s %s %s", req.Method, req.URL.RequestURI(), req.Header.Get("X-Custom"))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

func TestProxy(t *testing.T) {
	port := localServer(t)
	srv, _ := startServer(t)
	base := srv.URL + execdapi.ProxyPath + strconv.Itoa(port)
	client := httpClient(t, asAPIServer)

	tests := []struct {
		name, method, path string
		wantCode           int
		wantBody           string
	}{
		{name: "path and query as sent", method: http.MethodGet, path: "/a/b?path=x&replica=2&q=%2F", wantCode: 200, wantBody: "GET /a/b?path=x&replica=2&q=%2F custom"},
		{name: "escaped path stays escaped", method: http.MethodGet, path: "/a%2Fb/c", wantCode: 200, wantBody: "GET /a%2Fb/c custom"},
		{name: "dot dot passes to the server", method: http.MethodPost, path: "/x/../y", wantCode: 200, wantBody: "POST /x/../y custom"},
		{name: "the root", method: http.MethodGet, path: "", wantCode: 200, wantBody: "GET / custom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(testContext(t), tt.method, base+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Custom", "custom")
			req.Header.Set(execdapi.SandboxUIDHeader, testSandbox.UID)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tt.wantCode || string(body) != tt.wantBody {
				t.Errorf("%d %q, want %d %q", resp.StatusCode, body, tt.wantCode, tt.wantBody)
			}
			if got := resp.Header.Get("X-Seen-Host"); got != "localhost:"+strconv.Itoa(port) {
				t.Errorf("the server saw Host %q", got)
			}
			if got := resp.Header.Get("X-Seen-Sandbox-Header"); got != "" {
				t.Errorf("the server saw %s: %q", execdapi.SandboxUIDHeader, got)
			}
		})
	}

	t.Run("nothing listening is a 502", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		free := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		resp, err := client.Get(srv.URL + execdapi.ProxyPath + strconv.Itoa(free) + "/")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("status %d, want 502", resp.StatusCode)
		}
	})

	t.Run("a server that does not answer in time is a 504", func(t *testing.T) {
		h, err := NewHandler(HandlerConfig{Executor: NewExecutor(nil), Sandbox: testSandbox, ProxyResponseHeaderTimeout: 200 * time.Millisecond}, newTestIdentity(t))
		if err != nil {
			t.Fatal(err)
		}
		short := serveTLS(t, h, h.identity)
		start := time.Now()
		resp, err := client.Get(short.URL + execdapi.ProxyPath + strconv.Itoa(port) + "/slow")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusGatewayTimeout || time.Since(start) > 1500*time.Millisecond {
			t.Errorf("status %d after %s, want 504 after the timeout", resp.StatusCode, time.Since(start))
		}
	})

	t.Run("websocket", func(t *testing.T) {
		d := websocket.Dialer{TLSClientConfig: clientTLS(t, asAPIServer)}
		c, resp, err := d.DialContext(testContext(t), "wss"+strings.TrimPrefix(base, "https")+"/ws", http.Header{execdapi.SandboxUIDHeader: {testSandbox.UID}})
		if err != nil {
			t.Fatalf("dial: %v (%v)", err, resp)
		}
		defer func() { _ = c.Close() }()
		if err := c.WriteMessage(websocket.TextMessage, []byte("hi")); err != nil {
			t.Fatal(err)
		}
		_, msg, err := c.ReadMessage()
		if err != nil || string(msg) != "echo:hi" {
			t.Errorf("got %q (%v), want echo:hi", msg, err)
		}
	})

	t.Run("raw upgrade keeps the buffered bytes", func(t *testing.T) {
		conn, err := tlsDial(t, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_, _ = fmt.Fprintf(conn, "GET %s%d/plain HTTP/1.1\r\nHost: x\r\n%s: %s\r\n\r\n", execdapi.ProxyPath, port, execdapi.SandboxUIDHeader, testSandbox.UID)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
}

func tlsDial(t *testing.T, baseURL string) (net.Conn, error) {
	t.Helper()
	return tlsDialHost(strings.TrimPrefix(baseURL, "https://"), clientTLS(t, asAPIServer))
}

func tlsDialHost(addr string, cfg *tls.Config) (net.Conn, error) {
	return tls.Dial("tcp", addr, cfg)
}
