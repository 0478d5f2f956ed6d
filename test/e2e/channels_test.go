//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// webServer is an HTTP and WebSocket echo server in Python's standard library, so the test
// needs nothing in the image but python3.
const webServer = `
import socket, threading, base64, hashlib, struct
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def handle(c):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(4096)
        if not chunk:
            return
        data += chunk
    head = data.split(b"\r\n\r\n")[0].decode()
    path = head.split(" ")[1]
    hdrs = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in head.split("\r\n")[1:] if ":" in l}
    if hdrs.get("upgrade", "").lower() != "websocket":
        body = ("hello from the sandbox " + path + " auth=" + hdrs.get("authorization", "")).encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        c.close()
        return
    acc = base64.b64encode(hashlib.sha1((hdrs["sec-websocket-key"] + GUID).encode()).digest()).decode()
    c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % acc).encode())
    f = c.makefile("rb")
    def read(k):
        b = b""
        while len(b) < k:
            x = f.read(k - len(b))
            if not x:
                raise EOFError
            b += x
        return b
    while True:
        try:
            h = read(2)
        except EOFError:
            return
        op, n = h[0] & 0x0f, h[1] & 0x7f
        if n == 126:
            n = struct.unpack(">H", read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", read(8))[0]
        mask = read(4)
        p = bytearray(read(n))
        for i in range(n):
            p[i] ^= mask[i % 4]
        if op == 8:
            return
        # Echo each frame as it came (FIN bit and opcode), so fragmented messages stay whole.
        hdr = bytes([h[0]]) + (bytes([n]) if n < 126 else bytes([126]) + struct.pack(">H", n))
        c.sendall(hdr + bytes(p))
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
`

// TestFilesProxyAndPortForward: files, proxy, port-forward and a terminal, in a sandbox of the
// default runtime (runc) and in gVisor.
func TestFilesProxyAndPortForward(t *testing.T) {
	for _, runtimeClass := range []string{"", "gvisor"} {
		name := runtimeClass
		if name == "" {
			name = "runc"
		}
		t.Run(name, func(t *testing.T) { testChannels(t, runtimeClass) })
	}
}

func testChannels(t *testing.T, runtimeClass string) {
	ns := newNamespace(t)
	args := []string{"sandbox", "-n", ns, "create", "web", "--image", pythonImage}
	if runtimeClass != "" {
		args = append(args, "--runtime-class", runtimeClass)
	}
	r := run(t, nil, "kubectl", append(args, "--", "python3", "-c", webServer)...)
	if r.code != 0 {
		t.Fatalf("create: %s", r.stderr)
	}
	if r := run(t, nil, "kubectl", "sandbox", "-n", ns, "wait", "web", "--for=Running", "--timeout=90s"); r.code != 0 {
		t.Fatalf("wait: %s%s", r.stdout, r.stderr)
	}

	t.Run("100 MB round trip through cp", func(t *testing.T) {
		dir := t.TempDir()
		src, back := filepath.Join(dir, "big"), filepath.Join(dir, "back")
		data := make([]byte, 100<<20)
		if _, err := rand.Read(data); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(src, data, 0o640); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if r := run(t, nil, "kubectl", "sandbox", "-n", ns, "cp", src, "web:/tmp/big"); r.code != 0 {
			t.Fatalf("cp up: %s", r.stderr)
		}
		up := time.Since(start)
		start = time.Now()
		if r := run(t, nil, "kubectl", "sandbox", "-n", ns, "cp", "web:/tmp/big", back); r.code != 0 {
			t.Fatalf("cp down: %s", r.stderr)
		}
		t.Logf("100 MiB up %.2fs, down %.2fs", up.Seconds(), time.Since(start).Seconds())
		got, err := os.ReadFile(back)
		if err != nil || sha256.Sum256(got) != sha256.Sum256(data) {
			t.Fatalf("downloaded %d bytes, checksum differs (%v)", len(got), err)
		}
		// The sandbox sees the same bytes.
		r := run(t, nil, "kubectl", "sandbox", "-n", ns, "exec", "web", "--", "sha256sum", "/tmp/big")
		if want := fmt.Sprintf("%x", sha256.Sum256(data)); !strings.HasPrefix(r.stdout, want) {
			t.Errorf("sha256sum in the sandbox: %q, want %s", r.stdout, want)
		}
		r = run(t, nil, "kubectl", "sandbox", "-n", ns, "ls", "-l", "web", "/tmp")
		if !strings.Contains(r.stdout, "-rw-r-----") || !strings.Contains(r.stdout, "big") {
			t.Errorf("ls -l /tmp: %s%s", r.stdout, r.stderr)
		}
	})

	t.Run("proxy subresource", func(t *testing.T) {
		out := mustKubectl(t, "get", "--raw", fmt.Sprintf("/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/%s/sandboxes/web/proxy/8080/through/proxy", ns))
		if out != "hello from the sandbox /through/proxy auth=" {
			t.Errorf("proxy: %q", out)
		}
	})

	t.Run("port-forward of HTTP and WebSocket", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cmd := exec.CommandContext(ctx, "kubectl", "sandbox", "-n", ns, "port-forward", "web", ":8080")
		cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = cmd.Wait() }()
		line, err := bufio.NewReader(stdout).ReadString('\n')
		m := regexp.MustCompile(`127\.0\.0\.1:(\d+)`).FindStringSubmatch(line)
		if err != nil || m == nil {
			t.Fatalf("port-forward said %q (%v)", line, err)
		}
		base := "127.0.0.1:" + m[1]
		req, _ := http.NewRequest(http.MethodGet, "http://"+base+"/via/forward", nil)
		req.Header.Set("Authorization", "Bearer not-for-the-sandbox")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "hello from the sandbox /via/forward auth=" {
			t.Errorf("HTTP through port-forward: %s %q", resp.Status, body)
		}
		ws, _, err := websocket.DefaultDialer.Dial("ws://"+base+"/ws", nil)
		if err != nil {
			t.Fatalf("WebSocket through port-forward: %v", err)
		}
		defer ws.Close()
		for _, msg := range []string{"ping", strings.Repeat("x", 5000)} {
			if err := ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, got, err := ws.ReadMessage()
			if err != nil || string(got) != msg {
				t.Errorf("echo of %d bytes: got %d bytes, %v", len(msg), len(got), err)
			}
		}
	})

	t.Run("a terminal", func(t *testing.T) {
		if _, err := exec.LookPath("script"); err != nil {
			t.Skip("no script(1) to give kubectl a terminal")
		}
		cmd := "kubectl sandbox -n " + ns + " exec -it web -- sh -c 'tty && stty size'"
		r := run(t, nil, "script", "-qec", cmd, "/dev/null")
		if r.code != 0 || !strings.Contains(r.stdout, "/dev/pts/") {
			t.Errorf("tty in the sandbox: exit %d %q %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("files and proxy need RBAC", func(t *testing.T) {
		mustKubectl(t, "-n", ns, "create", "rolebinding", "viewer", "--clusterrole=view", "--user=vic")
		r := run(t, nil, "kubectl", "sandbox", "-n", ns, "--as=vic", "cp", "web:/tmp/big", filepath.Join(t.TempDir(), "x"))
		if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "forbidden") {
			t.Errorf("cp as a viewer: exit %d %q", r.code, r.stderr)
		}
		r = kubectl(t, "--as=vic", "get", "--raw", fmt.Sprintf("/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/%s/sandboxes/web/proxy/8080/", ns))
		if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "forbidden") {
			t.Errorf("proxy as a viewer: exit %d %q", r.code, r.stderr)
		}
	})
}
