package egress

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

func TestParsePlatform(t *testing.T) {
	tests := []struct {
		name    string
		data    map[string]string
		want    *Platform
		wantErr string
	}{
		{"empty: built-in", map[string]string{}, Builtin(), ""},
		{"the shipped ConfigMap", map[string]string{
			KeyAlwaysDeny:    "- cluster:pods\n- cluster:services\n- cluster:nodes\n- 169.254.0.0/16\n- fe80::/10\n",
			KeyAlwaysAllow:   "[]\n",
			KeyDefaultPolicy: "defaultAction: Deny\n",
			KeyDNSUpstreams:  "[]\n",
		}, &Platform{AlwaysDeny: builtinAlwaysDeny, AlwaysAllow: []string{}, DefaultPolicy: egressapi.Policy{DefaultAction: egressapi.ActionDeny}}, ""},
		{"upstreams get port 53", map[string]string{KeyDNSUpstreams: "- 10.96.0.10\n- '[fd00::10]:5353'\n"},
			&Platform{AlwaysDeny: builtinAlwaysDeny, DefaultPolicy: egressapi.DenyAll(), Upstreams: []string{"10.96.0.10:53", "[fd00::10]:5353"}}, ""},
		{"a default that allows", map[string]string{KeyDefaultPolicy: "defaultAction: Allow\negress:\n- {action: Deny, to: 192.0.2.0/24}\n"},
			&Platform{AlwaysDeny: builtinAlwaysDeny, DefaultPolicy: egressapi.Policy{DefaultAction: egressapi.ActionAllow, Egress: []egressapi.Rule{{Action: egressapi.ActionDeny, To: "192.0.2.0/24"}}}}, ""},
		{"a name in alwaysDeny", map[string]string{KeyAlwaysDeny: "- example.com\n"}, nil, "data.alwaysDeny[0]"},
		{"not a list", map[string]string{KeyAlwaysAllow: "pypi.org"}, nil, "data.alwaysAllow"},
		{"an invalid default", map[string]string{KeyDefaultPolicy: "egress: [{action: Allow, to: '*.com'}]"}, nil, "data.defaultPolicy.egress[0].to"},
		{"an unknown field in the default", map[string]string{KeyDefaultPolicy: "defaultAction: Deny\nrules: []"}, nil, "data.defaultPolicy"},
		{"a bad upstream", map[string]string{KeyDNSUpstreams: "- dns.example.com"}, nil, "data.dnsUpstreams[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePlatform(tc.data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigFor(t *testing.T) {
	p := &Platform{
		AlwaysDeny:    []string{KeywordPods, KeywordNodes, KeywordServices, "169.254.0.0/16", "10.244.0.7"},
		AlwaysAllow:   []string{"mirror.internal.example"},
		DefaultPolicy: egressapi.DenyAll(),
		Upstreams:     []string{"10.96.0.10:53"},
	}
	cluster := &Cluster{PodCIDRs: []string{"10.244.0.0/24"}, NodeAddresses: []string{"10.250.0.1"}, ServiceCIDRs: []string{"10.96.0.0/16"}}
	alwaysDeny := []egressapi.Rule{
		{Action: egressapi.ActionDeny, To: "10.244.0.0/24"}, {Action: egressapi.ActionDeny, To: "10.250.0.1/32"},
		{Action: egressapi.ActionDeny, To: "10.96.0.0/16"}, {Action: egressapi.ActionDeny, To: "169.254.0.0/16"},
		{Action: egressapi.ActionDeny, To: "10.244.0.7/32"},
	}
	ref := &egressapi.SandboxRef{Namespace: "ns", Name: "sbx", UID: "u"}
	own := &controlv1alpha1.NetworkPolicy{DefaultAction: controlv1alpha1.EgressAllow, Egress: []controlv1alpha1.EgressRule{
		{Action: controlv1alpha1.EgressAllow, To: "pypi.org", Ports: []controlv1alpha1.EgressPort{{Port: 443}}},
	}}

	t.Run("a sandbox's own policy comes after the platform's lists", func(t *testing.T) {
		got := p.ConfigFor(cluster, "pod", ref, 3, own)
		want := egressapi.Config{PodUID: "pod", Sandbox: ref, Generation: 3, Upstreams: p.Upstreams, DefaultAction: egressapi.ActionAllow,
			Rules: append(append(append([]egressapi.Rule{}, alwaysDeny...), egressapi.Rule{Action: egressapi.ActionAllow, To: "mirror.internal.example"}),
				egressapi.Rule{Action: egressapi.ActionAllow, To: "pypi.org", Ports: []egressapi.Port{{Port: 443}}})}
		want.Revision = want.Hash()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("no policy: the platform's default", func(t *testing.T) {
		got := p.ConfigFor(cluster, "pod", ref, 1, nil)
		if got.DefaultAction != egressapi.ActionDeny || len(got.Rules) != len(alwaysDeny)+1 {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("an idle pool pod denies everything and allows nothing", func(t *testing.T) {
		got := p.ConfigFor(cluster, "pod", nil, 0, own)
		if got.DefaultAction != egressapi.ActionDeny || len(got.Rules) != len(alwaysDeny) {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("the revision follows the policy", func(t *testing.T) {
		a, b := p.ConfigFor(cluster, "pod", ref, 1, own), p.ConfigFor(cluster, "pod", ref, 1, nil)
		if a.Revision == b.Revision {
			t.Error("same revision for different policies")
		}
	})
}

// TestDefaultConfigMapIsShipped: the ConfigMap the controller reads by default is the one the
// manifests install; a controller reading another name would enforce the built-in deny-all
// and ignore every change of the platform's policy.
func TestDefaultConfigMapIsShipped(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "artifacts", "base", "egress-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.Name != DefaultConfigMap {
		t.Fatalf("artifacts/base/egress-policy.yaml installs %s %q, the controller reads ConfigMap %q", cm.Kind, cm.Name, DefaultConfigMap)
	}
	if _, err := ParsePlatform(cm.Data); err != nil {
		t.Errorf("the shipped platform policy does not parse: %v", err)
	}
}
