package portforward

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
)

const proxyPath = sandboxserver.Prefix + cmdtesting.Namespace + "/sandboxes/sb/proxy/"

var forwarding = regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:(\d+)) -> 8888\n$`)

// forward runs port-forward of a random local port to port 8888 of sandbox sb and returns the
// local address and a function that stops it and returns Run's error; it is stopped when the
// test ends at the latest.
func forward(t *testing.T, srv *sandboxserver.Server) (string, func() error) {
	t.Helper()
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	f := cmdtesting.NewServerFactory(srv.URL)
	f.RESTConfig.BearerToken = sandboxserver.UserToken
	o := NewPortForwardOptions(streams)
	o.Ready = make(chan struct{})
	cmd := NewCmdPortForward(f, streams)
	if err := o.Complete(f, cmd, []string{"sb", ":8888"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	var stopped bool
	var runErr error
	stop := func() error {
		if stopped {
			return runErr
		}
		stopped = true
		cancel()
		select {
		case runErr = <-done:
		case <-time.After(10 * time.Second):
			t.Error("port-forward did not stop")
		}
		if errOut.Len() > 0 {
			t.Errorf("port-forward printed errors: %s", errOut)
		}
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("port-forward ended with %v", err)
		}
	})
	select {
	case <-o.Ready:
	case err := <-done:
		t.Fatalf("port-forward ended before listening: %v", err)
	}
	m := forwarding.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("output %q does not report a listener", out)
	}
	if m[2] == "0" || m[2] == "8888" {
		t.Errorf("listens on port %s, want a random one", m[2])
	}
	return m[1], stop
}

func TestForwardHTTP(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace, "sb")
	addr, _ := forward(t, srv)
	tests := []struct {
		name   string
		method string
		path   string
		want   sandboxserver.Echo
	}{
		{name: "path and query", method: http.MethodGet, path: "/api/v1/items?q=1&x=a%2Fb",
			want: sandboxserver.Echo{Method: "GET", Path: proxyPath + "8888/api/v1/items", RawQuery: "q=1&x=a%2Fb", Authorization: "Bearer " + sandboxserver.UserToken}},
		{name: "root", method: http.MethodPost, path: "/",
			want: sandboxserver.Echo{Method: "POST", Path: proxyPath + "8888/", Authorization: "Bearer " + sandboxserver.UserToken}},
		{name: "escaped segment", method: http.MethodGet, path: "/files/a%2Fb%20c?q=1",
			want: sandboxserver.Echo{Method: "GET", Path: proxyPath + "8888/files/a%2Fb%20c", RawQuery: "q=1", Authorization: "Bearer " + sandboxserver.UserToken}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, "http://"+addr+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer local-client-secret")
			req.Header.Set("Cookie", "session=local")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != http.StatusOK {
				body, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var got sandboxserver.Echo
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("the sandbox got (-want +got):\n%s", diff)
			}
		})
	}
}

// TestForwardUpgrade opens an upgraded connection (as a WebSocket handshake does) through the
// forwarded port and checks that bytes go both ways.
func TestForwardUpgrade(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace, "sb")
	addr, _ := forward(t, srv)
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	handshake := "GET /ws?room=1 HTTP/1.1\r\nHost: " + addr + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nAuthorization: Bearer local-client-secret\r\n\r\n"
	if _, err := io.WriteString(conn, handshake); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") {
		t.Fatalf("status %s, Upgrade %q; want 101 to websocket", resp.Status, resp.Header.Get("Upgrade"))
	}
	for _, msg := range []string{"ping", strings.Repeat("x", 100<<10)} {
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(r, got); err != nil {
			t.Fatal(err)
		}
		if string(got) != msg {
			t.Errorf("echoed %d bytes differ from the %d sent", len(got), len(msg))
		}
	}

	var upgrade *sandboxserver.Request
	for _, req := range srv.Requests() {
		if req.Header.Get("Upgrade") != "" {
			upgrade = &req
		}
	}
	switch {
	case upgrade == nil:
		t.Fatal("the upgrade request did not reach the server")
	case upgrade.Path != proxyPath+"8888/ws" || upgrade.RawQuery != "room=1":
		t.Errorf("upgrade went to %s?%s, want %s8888/ws?room=1", upgrade.Path, upgrade.RawQuery, proxyPath)
	case upgrade.Header.Get("Authorization") != "Bearer "+sandboxserver.UserToken:
		t.Errorf("upgrade carried Authorization %q, want the user's token", upgrade.Header.Get("Authorization"))
	}
}

// TestStop checks that port-forward returns without error once the context ends, with the
// listener closed, while an upgraded connection is still open.
func TestStop(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace, "sb")
	addr, stop := forward(t, srv)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_, _ = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("port-forward ended with %v, want nil", err)
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		_ = conn.Close()
		t.Errorf("%s still accepts connections", addr)
	}
}

func TestParsePortMapping(t *testing.T) {
	tests := []struct {
		arg     string
		want    PortMapping
		wantErr bool
	}{
		{arg: "8080", want: PortMapping{Local: 8080, Remote: 8080}},
		{arg: "3000:80", want: PortMapping{Local: 3000, Remote: 80}},
		{arg: ":80", want: PortMapping{Local: 0, Remote: 80}},
		{arg: "0:80", want: PortMapping{Local: 0, Remote: 80}},
		{arg: "80:0", wantErr: true},
		{arg: "70000", wantErr: true},
		{arg: "a:80", wantErr: true},
		{arg: "", wantErr: true},
		{arg: "1:2:3", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.arg, func(t *testing.T) {
			got, err := ParsePortMapping(tt.arg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
