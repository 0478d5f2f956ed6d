package node

import (
	"strings"
	"testing"
)

// TestUsageOptionsValidate: the flags of the usage figures and the metrics port.
func TestUsageOptionsValidate(t *testing.T) {
	valid := func() *Options {
		o := NewOptions()
		o.TLSCertFile, o.TLSKeyFile, o.ClientCAFile = "/tls/tls.crt", "/tls/tls.key", "/tls/ca.crt"
		o.Egress.NodeName, o.Egress.NodeAddrs = "node1", []string{"10.250.0.1"}
		return o
	}
	tests := []struct {
		name    string
		modify  func(*Options)
		wantErr string
	}{
		{name: "the defaults", modify: func(*Options) {}},
		{name: "the host's, mounted", modify: func(o *Options) {
			o.CgroupRoot, o.KubeletRootDir = "/host/sys/fs/cgroup", "/host/var/lib/kubelet"
		}},
		{name: "no metrics port", modify: func(o *Options) { o.MetricsAddress = "" }},
		{name: "a bad metrics address", modify: func(o *Options) { o.MetricsAddress = "9450" }, wantErr: "--metrics-address"},
		{name: "a relative cgroup root", modify: func(o *Options) { o.CgroupRoot = "sys/fs/cgroup" }, wantErr: "--cgroup-root"},
		{name: "an empty cgroup root", modify: func(o *Options) { o.CgroupRoot = "" }, wantErr: "--cgroup-root"},
		{name: "an unclean kubelet root", modify: func(o *Options) { o.KubeletRootDir = "/var/lib/kubelet/../x" }, wantErr: "--kubelet-root-dir"},
		{name: "a kubelet root with a slash at the end", modify: func(o *Options) { o.KubeletRootDir = "/var/lib/kubelet/" }, wantErr: "--kubelet-root-dir"},
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

func TestUsageFlags(t *testing.T) {
	cmd := NewCommand()
	for name, want := range map[string]string{
		"metrics-address": ":9450", "cgroup-root": "/sys/fs/cgroup", "kubelet-root-dir": "/var/lib/kubelet",
	} {
		f := cmd.Flags().Lookup(name)
		if f == nil {
			t.Errorf("no --%s", name)
			continue
		}
		if f.DefValue != want {
			t.Errorf("--%s defaults to %q, want %q", name, f.DefValue, want)
		}
	}
}
