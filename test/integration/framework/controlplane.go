// Package framework starts a real etcd and kube-apiserver (the binaries hack/build-cluster.sh
// builds into _output/cluster/bin) for integration tests, and the kube-sandbox components
// in-process against them.
package framework

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// Users that the test kube-apiserver knows by bearer token.
const (
	AdminToken = "admin-token" // system:masters
	AliceToken = "alice-token" // no rights unless a test grants them
	BobToken   = "bob-token"   // no rights unless a test grants them
	CarolToken = "carol-token" // no rights unless a test grants them
)

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	Dir       string
	URL       string
	caFile    string
	processes []*process
}

type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// RepoRoot finds the repository root: the nearest directory above the working directory (a
// test runs in its package's directory) with our go.mod. (Source file paths are no help: the
// build uses -trimpath.)
func RepoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := dir; ; d = filepath.Dir(d) {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil &&
			strings.Contains(string(data), "module github.com/kube-sandbox/kube-sandbox\n") {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

func clusterBin(name string) (string, error) {
	dir := os.Getenv("CLUSTER_BIN")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "_output", "cluster", "bin")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found (build it with hack/build-cluster.sh, or `make test` does): %w", p, err)
	}
	return p, nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartControlPlane starts etcd and kube-apiserver in dir. Stop stops them.
func StartControlPlane(ctx context.Context, dir string) (*ControlPlane, error) {
	cp := &ControlPlane{Dir: dir}
	if err := cp.start(ctx); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

// AttachControlPlane gives another process a handle on the control plane that
// StartControlPlane(ctx, dir) started and that serves url: its clients and kubeconfigs work,
// Stop does nothing.
func AttachControlPlane(dir, url string) *ControlPlane {
	return &ControlPlane{Dir: dir, URL: url, caFile: filepath.Join(dir, "pki", "ca.crt")}
}

func (cp *ControlPlane) start(ctx context.Context) error {
	etcdBin, err := clusterBin("etcd")
	if err != nil {
		return err
	}
	apiserverBin, err := clusterBin("kube-apiserver")
	if err != nil {
		return err
	}
	pki := filepath.Join(cp.Dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	ca, err := newCA("integration-ca")
	if err != nil {
		return err
	}
	frontProxyCA, err := newCA("integration-front-proxy-ca")
	if err != nil {
		return err
	}
	for _, step := range []func() error{
		func() error { return ca.write(pki, "ca") },
		func() error { return frontProxyCA.write(pki, "front-proxy-ca") },
		func() error {
			return ca.issue(pki, "apiserver", "kube-apiserver", nil, x509.ExtKeyUsageServerAuth, []string{"127.0.0.1", "localhost"})
		},
		func() error {
			return frontProxyCA.issue(pki, "front-proxy-client", "front-proxy-client", nil, x509.ExtKeyUsageClientAuth, nil)
		},
		func() error { return writeRSAKeyPair(pki, "sa") },
		func() error {
			return os.WriteFile(filepath.Join(pki, "tokens.csv"), []byte(
				AdminToken+",admin,admin-uid,system:masters\n"+
					AliceToken+",alice,alice-uid\n"+
					BobToken+",bob,bob-uid\n"+
					CarolToken+",carol,carol-uid\n"), 0o600)
		},
	} {
		if err := step(); err != nil {
			return fmt.Errorf("pki: %w", err)
		}
	}
	cp.caFile = filepath.Join(pki, "ca.crt")

	etcdPort, err := FreePort()
	if err != nil {
		return err
	}
	peerPort, err := FreePort()
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	if err := cp.run(ctx, "etcd", etcdBin,
		"--name=integration", "--data-dir="+filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=integration="+peerURL,
		// Test data is thrown away: skipping fsync makes etcd much faster on a busy disk.
		"--unsafe-no-fsync=true", "--log-level=warn"); err != nil {
		return err
	}

	port, err := FreePort()
	if err != nil {
		return err
	}
	cp.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	if err := cp.run(ctx, "kube-apiserver", apiserverBin,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
		"--tls-cert-file="+filepath.Join(pki, "apiserver.crt"), "--tls-private-key-file="+filepath.Join(pki, "apiserver.key"),
		"--client-ca-file="+cp.caFile,
		"--token-auth-file="+filepath.Join(pki, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(pki, "sa.key"),
		"--requestheader-client-ca-file="+filepath.Join(pki, "front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--proxy-client-cert-file="+filepath.Join(pki, "front-proxy-client.crt"),
		"--proxy-client-key-file="+filepath.Join(pki, "front-proxy-client.key"),
		// Services of type ExternalName "localhost" reach a server in this test process.
		"--enable-aggregator-routing=false",
		// /debug/pprof for the admin: the scale benchmark profiles the kube-apiserver too.
		"--profiling=true", "--v=1"); err != nil {
		return err
	}
	return cp.waitReady(ctx)
}

func (cp *ControlPlane) run(ctx context.Context, name, bin string, args ...string) error {
	logFile, err := os.Create(filepath.Join(cp.Dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that Stop ends it and nothing it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	cp.processes = append(cp.processes, p)
	return nil
}

func (cp *ControlPlane) waitReady(ctx context.Context) error {
	cfg := cp.Config(AdminToken)
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return err
	}
	c := &http.Client{Transport: rt, Timeout: 2 * time.Second}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		resp, err := c.Get(cp.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		for _, p := range cp.processes {
			select {
			case <-p.exited:
				return fmt.Errorf("%s exited; see its log in %s", p.cmd.Path, cp.Dir)
			default:
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(cp.Dir, "kube-apiserver.log"))
	return fmt.Errorf("kube-apiserver not ready after 90s; log tail:\n%s", tail(string(log), 30))
}

// Config returns a client config authenticating with token.
func (cp *ControlPlane) Config(token string) *rest.Config {
	return &rest.Config{
		Host:            cp.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: cp.caFile},
		QPS:             100,
		Burst:           200,
	}
}

// WriteKubeconfig writes a kubeconfig for token to path.
func (cp *ControlPlane) WriteKubeconfig(path, token string) error {
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: integration
  cluster: {server: %q, certificate-authority: %q}
users:
- name: user
  user: {token: %q}
contexts:
- name: integration
  context: {cluster: integration, user: user}
current-context: integration
`, cp.URL, cp.caFile, token)
	return os.WriteFile(path, []byte(content), 0o600)
}

// Stop ends the processes, newest first.
func (cp *ControlPlane) Stop() {
	for i := len(cp.processes) - 1; i >= 0; i-- {
		p := cp.processes[i]
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	}
	cp.processes = nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
