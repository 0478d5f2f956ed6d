package node

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestOptionsValidate(t *testing.T) {
	dir := t.TempDir()
	user := writeFile(t, dir, "user", []byte("u"))
	password := writeFile(t, dir, "password", []byte("p"))
	ca := writeFile(t, dir, "ca.crt", newTestCA(t, "registry CA").pem)
	valid := func() *Options {
		o := NewOptions()
		o.TLSCertFile, o.TLSKeyFile, o.ClientCAFile = "/tls/tls.crt", "/tls/tls.key", "/tls/ca.crt"
		o.Registry.Host = "registry.kube-sandbox.svc:5000"
		o.Egress.NodeName, o.Egress.NodeAddrs = "node1", []string{"10.250.0.1"}
		return o
	}
	tests := []struct {
		name    string
		modify  func(*Options)
		wantErr string
	}{
		{name: "defaults with the required flags", modify: func(*Options) {}},
		{name: "credentials and CA", modify: func(o *Options) {
			o.Registry.UsernameFile, o.Registry.PasswordFile, o.Registry.CAFile = user, password, ca
		}},
		{name: "no registry: no snapshots", modify: func(o *Options) { o.Registry.Host = "" }},
		{name: "a registry with a scheme", modify: func(o *Options) { o.Registry.Host = "https://r.example" }, wantErr: "want host[:port]"},
		{name: "a registry with a path", modify: func(o *Options) { o.Registry.Host = "r.example/x" }, wantErr: "want host[:port]"},
		{name: "an empty prefix", modify: func(o *Options) { o.Registry.RepositoryPrefix = "" }, wantErr: "--repository-prefix must not be empty"},
		{name: "a prefix with a slash at the end", modify: func(o *Options) { o.Registry.RepositoryPrefix = "a/" }, wantErr: "not a repository path"},
		{name: "an upper-case prefix", modify: func(o *Options) { o.Registry.RepositoryPrefix = "Snapshots" }, wantErr: "not a repository path"},
		{name: "a username without a password", modify: func(o *Options) { o.Registry.UsernameFile = user }, wantErr: "go together"},
		{name: "an unreadable password", modify: func(o *Options) {
			o.Registry.UsernameFile, o.Registry.PasswordFile = user, dir+"/missing"
		}, wantErr: "registry password"},
		{name: "a CA file without a certificate", modify: func(o *Options) { o.Registry.CAFile = user }, wantErr: "holds no PEM certificate"},
		{name: "no TLS files", modify: func(o *Options) { o.TLSCertFile = "" }, wantErr: "--tls-cert-file, --tls-key-file and --client-ca-file are required"},
		{name: "no client CA", modify: func(o *Options) { o.ClientCAFile = "" }, wantErr: "--client-ca-file are required"},
		{name: "a relative containerd socket", modify: func(o *Options) { o.ContainerdAddress = "containerd.sock" }, wantErr: "absolute path"},
		{name: "no containerd namespace", modify: func(o *Options) { o.ContainerdNamespace = "" }, wantErr: "--containerd-namespace"},
		{name: "no snapshot size", modify: func(o *Options) { o.MaxSnapshotBytes.Quantity = resource.MustParse("0") }, wantErr: "--max-snapshot-bytes"},
		{name: "no concurrency", modify: func(o *Options) { o.MaxConcurrentSnapshots = 0 }, wantErr: "--max-concurrent-snapshots"},
		{name: "a bad listen address", modify: func(o *Options) { o.ListenAddress = "9446" }, wantErr: "--listen-address"},
		{name: "no health port", modify: func(o *Options) { o.HealthAddress = "" }},
		{name: "no node name", modify: func(o *Options) { o.Egress.NodeName = "" }, wantErr: "--node-name"},
		{name: "a bad node address", modify: func(o *Options) { o.Egress.NodeAddrs = []string{"node1"} }, wantErr: "--node-ip"},
		{name: "DNS addresses of two ports", modify: func(o *Options) { o.Egress.DNSAddresses = []string{":53", ":15353"} }, wantErr: "same port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid()
			tt.modify(o)
			err := o.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one with %q", err, tt.wantErr)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	cmd := NewCommand()
	if err := cmd.ParseFlags([]string{"--max-snapshot-bytes=512Mi", "--registry=r.example:5000"}); err != nil {
		t.Fatal(err)
	}
	if got := cmd.Flags().Lookup("max-snapshot-bytes").Value.String(); got != "512Mi" {
		t.Errorf("--max-snapshot-bytes %s", got)
	}
	for name, want := range map[string]string{
		"listen-address": ":9446", "containerd-address": "/run/containerd/containerd.sock",
		"containerd-namespace": "k8s.io", "repository-prefix": "kube-sandbox/snapshots",
	} {
		if got := cmd.Flags().Lookup(name).DefValue; got != want {
			t.Errorf("--%s defaults to %q, want %q", name, got, want)
		}
	}
	if err := cmd.Flags().Set("max-snapshot-bytes", "lots"); err == nil {
		t.Error("--max-snapshot-bytes=lots was taken")
	}
}
