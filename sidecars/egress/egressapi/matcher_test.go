package egressapi

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

func mustCompile(t *testing.T, def Action, rules ...Rule) *Matcher {
	t.Helper()
	m, err := Compile(rules, def)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMatchName(t *testing.T) {
	issueRules := []Rule{
		{Action: ActionAllow, To: "pypi.org"},
		{Action: ActionAllow, To: "*.pythonhosted.org"},
		{Action: ActionAllow, To: "10.250.0.1", Ports: []Port{{Port: 8080, Protocol: ProtocolTCP}}},
		{Action: ActionDeny, To: "192.0.2.0/24"},
	}
	tests := []struct {
		name  string
		def   Action
		rules []Rule
		query string
		want  NameDecision
	}{
		{"exact name", ActionDeny, issueRules, "pypi.org.", NameDecision{Allow: true, Rule: 0, Keys: []string{"pypi.org"}}},
		{"names are case-insensitive", ActionDeny, issueRules, "PyPI.Org", NameDecision{Allow: true, Rule: 0, Keys: []string{"pypi.org"}}},
		{"a subdomain of an exact name is not it", ActionDeny, issueRules, "evil.pypi.org", NameDecision{Rule: -1}},
		{"wildcard matches a subdomain", ActionDeny, issueRules, "files.pythonhosted.org", NameDecision{Allow: true, Rule: 1, Keys: []string{"*.pythonhosted.org"}}},
		{"wildcard matches at any depth", ActionDeny, issueRules, "a.b.pythonhosted.org", NameDecision{Allow: true, Rule: 1, Keys: []string{"*.pythonhosted.org"}}},
		{"wildcard does not match the bare name", ActionDeny, issueRules, "pythonhosted.org", NameDecision{Rule: -1}},
		{"wildcard does not match a lookalike", ActionDeny, issueRules, "evilpythonhosted.org", NameDecision{Rule: -1}},
		{"no rule: default deny", ActionDeny, issueRules, "example.com", NameDecision{Rule: -1}},
		{"no rule: default allow learns nothing", ActionAllow, issueRules, "example.com", NameDecision{Allow: true, Rule: -1}},
		{"first match wins: deny before allow", ActionAllow, []Rule{{Action: ActionDeny, To: "*.example.com"}, {Action: ActionAllow, To: "api.example.com"}},
			"api.example.com", NameDecision{Rule: 0}},
		{"first match wins: allow before deny, both keys learned", ActionDeny, []Rule{{Action: ActionAllow, To: "api.example.com"}, {Action: ActionDeny, To: "*.example.com", Ports: []Port{{Port: 22}}}},
			"api.example.com", NameDecision{Allow: true, Rule: 0, Keys: []string{"api.example.com", "*.example.com"}}},
		{"a deny with ports does not decide the name", ActionDeny, []Rule{{Action: ActionDeny, To: "example.com", Ports: []Port{{Port: 22}}}, {Action: ActionAllow, To: "example.com"}},
			"example.com", NameDecision{Allow: true, Rule: 1, Keys: []string{"example.com"}}},
		{"a deny with ports and default allow: resolves, learned for the deny", ActionAllow, []Rule{{Action: ActionDeny, To: "example.com", Ports: []Port{{Port: 22}}}},
			"example.com", NameDecision{Allow: true, Rule: -1, Keys: []string{"example.com"}}},
		{"an allow with ports resolves the name", ActionDeny, []Rule{{Action: ActionAllow, To: "example.com", Ports: []Port{{Port: 443}}}},
			"example.com", NameDecision{Allow: true, Rule: 0, Keys: []string{"example.com"}}},
		{"address rules do not match names", ActionDeny, []Rule{{Action: ActionAllow, To: "10.0.0.0/8"}}, "10.in-addr.arpa", NameDecision{Rule: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mustCompile(t, tc.def, tc.rules...).MatchName(tc.query)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("MatchName(%q) (-want +got):\n%s", tc.query, diff)
			}
		})
	}
}

func TestMatchFlow(t *testing.T) {
	rules := []Rule{
		{Action: ActionDeny, To: "169.254.0.0/16"},
		{Action: ActionAllow, To: "pypi.org", Ports: []Port{{Port: 443}}},
		{Action: ActionAllow, To: "10.250.0.1", Ports: []Port{{Port: 8080, Protocol: ProtocolTCP}}},
		{Action: ActionAllow, To: "203.0.113.0/24", Ports: []Port{{Port: 5000, EndPort: ptr.To[int32](5010), Protocol: ProtocolUDP}}},
		{Action: ActionDeny, To: "192.0.2.0/24"},
		{Action: ActionAllow, To: "2001:db8::/32"},
	}
	learned := func(key string, a netip.Addr) bool {
		return key == "pypi.org" && (a == netip.MustParseAddr("151.101.0.223") || a == netip.MustParseAddr("169.254.1.1"))
	}
	tests := []struct {
		name     string
		flow     Flow
		want     Action
		wantRule int
	}{
		{"learned name address, its port", Flow{netip.MustParseAddr("151.101.0.223"), ProtocolTCP, 443}, ActionAllow, 1},
		{"learned name address, another port", Flow{netip.MustParseAddr("151.101.0.223"), ProtocolTCP, 80}, ActionDeny, -1},
		{"always-deny before a learned name", Flow{netip.MustParseAddr("169.254.1.1"), ProtocolTCP, 443}, ActionDeny, 0},
		{"metadata address", Flow{netip.MustParseAddr("169.254.169.254"), ProtocolTCP, 80}, ActionDeny, 0},
		{"address with port and protocol", Flow{netip.MustParseAddr("10.250.0.1"), ProtocolTCP, 8080}, ActionAllow, 2},
		{"address, wrong protocol", Flow{netip.MustParseAddr("10.250.0.1"), ProtocolUDP, 8080}, ActionDeny, -1},
		{"range, inside", Flow{netip.MustParseAddr("203.0.113.9"), ProtocolUDP, 5010}, ActionAllow, 3},
		{"range, past the end", Flow{netip.MustParseAddr("203.0.113.9"), ProtocolUDP, 5011}, ActionDeny, -1},
		{"deny CIDR", Flow{netip.MustParseAddr("192.0.2.77"), ProtocolTCP, 443}, ActionDeny, 4},
		{"IPv6 CIDR, any protocol", Flow{netip.MustParseAddr("2001:db8::1"), "", 0}, ActionAllow, 5},
		{"IPv4-mapped IPv6 is IPv4", Flow{netip.MustParseAddr("::ffff:192.0.2.1"), ProtocolTCP, 1}, ActionDeny, 4},
		{"unknown address: default", Flow{netip.MustParseAddr("8.8.8.8"), ProtocolUDP, 53}, ActionDeny, -1},
	}
	m := mustCompile(t, ActionDeny, rules...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, rule := m.MatchFlow(tc.flow, learned)
			if got != tc.want || rule != tc.wantRule {
				t.Errorf("MatchFlow(%+v) = %s (rule %d), want %s (rule %d)", tc.flow, got, rule, tc.want, tc.wantRule)
			}
		})
	}
}

func TestValidatePolicy(t *testing.T) {
	many := make([]Rule, MaxRules+1)
	for i := range many {
		many[i] = Rule{Action: ActionAllow, To: "example.com"}
	}
	tests := []struct {
		name   string
		policy Policy
		want   []string // "type field" of each error
	}{
		{"the issue's example", Policy{DefaultAction: ActionDeny, Egress: []Rule{
			{Action: ActionAllow, To: "pypi.org"}, {Action: ActionAllow, To: "*.pythonhosted.org"},
			{Action: ActionAllow, To: "10.250.0.1", Ports: []Port{{Port: 8080, Protocol: ProtocolTCP}}},
			{Action: ActionDeny, To: "192.0.2.0/24"}, {Action: ActionAllow, To: "2001:db8::1"}, {Action: ActionAllow, To: "fd00::/8"},
		}}, nil},
		{"empty is deny-all", Policy{}, nil},
		{"bad default", Policy{DefaultAction: "Maybe"}, []string{"FieldValueNotSupported spec.defaultAction"}},
		{"bad action", Policy{Egress: []Rule{{Action: "allow", To: "a.com"}}}, []string{"FieldValueNotSupported spec.egress[0].action"}},
		{"missing action and target", Policy{Egress: []Rule{{}}}, []string{"FieldValueRequired spec.egress[0].action", "FieldValueRequired spec.egress[0].to"}},
		{"malformed CIDR", Policy{Egress: []Rule{{Action: ActionDeny, To: "10.0.0.0/33"}}}, []string{"FieldValueInvalid spec.egress[0].to"}},
		{"malformed address", Policy{Egress: []Rule{{Action: ActionDeny, To: "10.0.0.256"}}}, []string{"FieldValueInvalid spec.egress[0].to"}},
		{"malformed name", Policy{Egress: []Rule{{Action: ActionDeny, To: "exa_mple.com"}}}, []string{"FieldValueInvalid spec.egress[0].to"}},
		{"wildcard in the middle", Policy{Egress: []Rule{{Action: ActionAllow, To: "api.*.example.com"}}}, []string{"FieldValueInvalid spec.egress[0].to"}},
		{"wildcard at the end", Policy{Egress: []Rule{{Action: ActionAllow, To: "example.*"}}}, []string{"FieldValueInvalid spec.egress[0].to"}},
		{"wildcard of a top-level domain", Policy{Egress: []Rule{{Action: ActionAllow, To: "*.com"}}}, []string{"FieldValueInvalid spec.egress[0].to"}},
		{"port out of range", Policy{Egress: []Rule{{Action: ActionAllow, To: "a.com", Ports: []Port{{Port: 0}, {Port: 70000}}}}},
			[]string{"FieldValueInvalid spec.egress[0].ports[0].port", "FieldValueInvalid spec.egress[0].ports[1].port"}},
		{"range backwards", Policy{Egress: []Rule{{Action: ActionAllow, To: "a.com", Ports: []Port{{Port: 10, EndPort: ptr.To[int32](9)}}}}},
			[]string{"FieldValueInvalid spec.egress[0].ports[0].endPort"}},
		{"bad protocol", Policy{Egress: []Rule{{Action: ActionAllow, To: "a.com", Ports: []Port{{Port: 10, Protocol: "SCTP"}}}}},
			[]string{"FieldValueNotSupported spec.egress[0].ports[0].protocol"}},
		{"too many rules", Policy{Egress: many}, []string{"FieldValueTooMany spec.egress"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range ValidatePolicy(&tc.policy, field.NewPath("spec")) {
				got = append(got, string(e.Type)+" "+e.Field)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ValidatePolicy (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigHash(t *testing.T) {
	a := Config{PodUID: "a", DefaultAction: ActionDeny, Rules: []Rule{{Action: ActionAllow, To: "pypi.org"}}}
	b := a
	b.PodUID = "b"
	if a.Hash() != b.Hash() {
		t.Error("the revision depends on the pod")
	}
	c := a
	c.Rules = []Rule{{Action: ActionAllow, To: "files.pypi.org"}}
	if a.Hash() == c.Hash() {
		t.Error("the revision does not change with the rules")
	}
	if err := ValidateConfig(&Config{PodUID: "x", DefaultAction: ActionDeny, Upstreams: []string{"10.0.0.10"}}); err == nil || !strings.Contains(err.Error(), "upstreams[0]") {
		t.Errorf("an upstream without a port: %v", err)
	}
}
