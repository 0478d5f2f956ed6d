package netpolicy

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

type (
	rule   = sandboxv1alpha1.SandboxEgressRule
	port   = sandboxv1alpha1.SandboxEgressPort
	policy = sandboxv1alpha1.SandboxNetworkPolicy
)

func allow(to string, ports ...port) rule { return rule{Action: ActionAllow, To: to, Ports: ports} }
func deny(to string, ports ...port) rule  { return rule{Action: ActionDeny, To: to, Ports: ports} }
func tcp(p int32) port                    { return port{Port: p} }

func TestParseRules(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   []rule
		// wantErr is the error's message; empty when none is expected.
		wantErr string
	}{
		{name: "a name matches every port", values: []string{"pypi.org"}, want: []rule{allow("pypi.org")}},
		{name: "a name and a port", values: []string{"pypi.org:443"}, want: []rule{allow("pypi.org", tcp(443))}},
		{name: "a wildcard", values: []string{"*.pythonhosted.org:443"}, want: []rule{allow("*.pythonhosted.org", tcp(443))}},
		{name: "a CIDR with a UDP range", values: []string{"10.0.0.0/8:8080-8090/UDP"},
			want: []rule{allow("10.0.0.0/8", port{Port: 8080, EndPort: ptr.To[int32](8090), Protocol: "UDP"})}},
		{name: "protocol in any case", values: []string{"1.1.1.1:53/udp"}, want: []rule{allow("1.1.1.1", port{Port: 53, Protocol: "UDP"})}},
		{name: "explicit TCP is kept", values: []string{"1.1.1.1:53/Tcp"}, want: []rule{allow("1.1.1.1", port{Port: 53, Protocol: "TCP"})}},
		{name: "a range of one port is the port", values: []string{"pypi.org:443-443"}, want: []rule{allow("pypi.org", tcp(443))}},
		{name: "IPv6 in brackets with a port", values: []string{"[2001:db8::1]:443"}, want: []rule{allow("2001:db8::1", tcp(443))}},
		{name: "IPv6 in brackets without a port", values: []string{"[2001:db8::1]"}, want: []rule{allow("2001:db8::1")}},
		{name: "IPv6 without brackets has no port", values: []string{"2001:db8::1"}, want: []rule{allow("2001:db8::1")}},
		{name: "an IPv6 CIDR", values: []string{"2001:db8::/32"}, want: []rule{allow("2001:db8::/32")}},
		{name: "an IPv6 CIDR in brackets with a port", values: []string{"[2001:db8::/32]:53/UDP"},
			want: []rule{allow("2001:db8::/32", port{Port: 53, Protocol: "UDP"})}},
		{name: "ports after a target with a port add to it", values: []string{"pypi.org:80,443,8000-8100/UDP"},
			want: []rule{allow("pypi.org", tcp(80), tcp(443), port{Port: 8000, EndPort: ptr.To[int32](8100), Protocol: "UDP"})}},
		{name: "comma-separated targets, in order", values: []string{"a.example.com, b.example.com:443,8443,c.example.com"},
			want: []rule{allow("a.example.com"), allow("b.example.com", tcp(443), tcp(8443)), allow("c.example.com")}},
		{name: "several values, in order", values: []string{"b.example.com", "a.example.com:22"},
			want: []rule{allow("b.example.com"), allow("a.example.com", tcp(22))}},
		{name: "a trailing dot", values: []string{"pypi.org.:443"}, want: []rule{allow("pypi.org.", tcp(443))}},

		{name: "port zero", values: []string{"pypi.org:0"}, wantErr: `"pypi.org:0": port 0 is out of range (1-65535)`},
		{name: "port too high", values: []string{"pypi.org:65536"}, wantErr: `"pypi.org:65536": port 65536 is out of range (1-65535)`},
		{name: "a range backwards", values: []string{"pypi.org:90-80"}, wantErr: `"pypi.org:90-80": the port range 90-80 ends before it starts`},
		{name: "a named port", values: []string{"pypi.org:https"}, wantErr: `"pypi.org:https": "https" is not a port number`},
		{name: "an unknown protocol", values: []string{"pypi.org:443/sctp"}, wantErr: `"pypi.org:443/sctp": unknown protocol "sctp": must be TCP or UDP`},
		{name: "nothing after the colon", values: []string{"pypi.org:"}, wantErr: `"pypi.org:": missing port after :`},
		{name: "a signed port", values: []string{"pypi.org:+443"}, wantErr: `"pypi.org:+443": "+443" is not a port number`},
		{name: "IPv6 with a port, no brackets", values: []string{"2001:db8::1:443x"},
			wantErr: `"2001:db8::1:443x": put an IPv6 address in brackets to give it a port, as in [2001:db8::1]:443`},
		{name: "an unclosed bracket", values: []string{"[2001:db8::1:443"}, wantErr: `"[2001:db8::1:443": missing ] after the address`},
		{name: "a name in brackets", values: []string{"[pypi.org]:443"}, wantErr: `"[pypi.org]:443": brackets hold an IP address or a CIDR, as in [2001:db8::1]:443`},
		{name: "junk after the brackets", values: []string{"[::1]443"}, wantErr: `"[::1]443": expected :PORT after ]`},
		{name: "a port alone", values: []string{"443"}, wantErr: `"443": a port needs a target with a port before it, as in pypi.org:80,443`},
		{name: "a port after a target without ports", values: []string{"pypi.org,443"},
			wantErr: `"443": a port needs a target with a port before it, as in pypi.org:80,443`},
		{name: "an empty item", values: []string{"a.example.com,,b.example.com"}, wantErr: `"a.example.com,,b.example.com": empty target in the list`},
		{name: "an empty value", values: []string{""}, wantErr: `"": empty target in the list`},
		{name: "a wildcard of a top-level domain", values: []string{"*.com"},
			wantErr: `"*.com": a wildcard needs at least two labels after "*.", as in *.example.com`},
		{name: "a wildcard inside a name", values: []string{"a.*.example.com"},
			wantErr: `"a.*.example.com": a wildcard may only be the first label, as in *.example.com`},
		{name: "a mistyped address", values: []string{"10.0.0.256:80"},
			wantErr: `"10.0.0.256:80": not a valid IP address, and a DNS name does not end in a number`},
		{name: "a bad CIDR", values: []string{"10.0.0.0/33"}, wantErr: `"10.0.0.0/33": not a valid CIDR: netip.ParsePrefix("10.0.0.0/33"): prefix length out of range`},
		{name: "an underscore", values: []string{"my_host.example.com"}, wantErr: `"my_host.example.com": not a valid DNS name: a lowercase RFC 1123 subdomain`},
		{name: "too many ports", values: []string{"pypi.org:1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"},
			wantErr: `"pypi.org:1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17": at most 16 ports per target`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRules(tt.values, ActionAllow)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
			// What parses is what the server takes.
			if errs := ValidatePolicy(&policy{Egress: got}, nil); len(errs) > 0 {
				t.Errorf("the server would refuse %v: %v", got, errs)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		rule      rule
		wantRule  string
		wantPorts string
	}{
		{rule: allow("pypi.org"), wantRule: "Allow pypi.org", wantPorts: "all"},
		{rule: deny("pypi.org", tcp(80), tcp(443)), wantRule: "Deny pypi.org:80,443", wantPorts: "80/TCP, 443/TCP"},
		{rule: allow("10.0.0.0/8", port{Port: 8080, EndPort: ptr.To[int32](8090), Protocol: "UDP"}), wantRule: "Allow 10.0.0.0/8:8080-8090/UDP", wantPorts: "8080-8090/UDP"},
		{rule: allow("2001:db8::1", port{Port: 443, Protocol: "TCP"}), wantRule: "Allow [2001:db8::1]:443", wantPorts: "443/TCP"},
		{rule: allow("2001:db8::1"), wantRule: "Allow 2001:db8::1", wantPorts: "all"},
	}
	for _, tt := range tests {
		t.Run(tt.wantRule, func(t *testing.T) {
			if got := FormatRule(tt.rule); got != tt.wantRule {
				t.Errorf("FormatRule = %q, want %q", got, tt.wantRule)
			}
			if got := FormatPorts(tt.rule.Ports); got != tt.wantPorts {
				t.Errorf("FormatPorts = %q, want %q", got, tt.wantPorts)
			}
			// The format parses back to the same rule, protocol aside.
			back, err := ParseRules([]string{FormatTarget(tt.rule)}, tt.rule.Action)
			if err != nil {
				t.Fatal(err)
			}
			if len(back) != 1 || !sameMatch(back[0], tt.rule) {
				t.Errorf("%q parses back to %v", FormatTarget(tt.rule), back)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	tests := []struct {
		policy *policy
		want   string
	}{
		{policy: nil, want: "default"},
		{policy: &policy{}, want: "deny-all"},
		{policy: &policy{DefaultAction: "Deny"}, want: "deny-all"},
		{policy: &policy{DefaultAction: "Allow"}, want: "allow-all"},
		{policy: &policy{Egress: []rule{allow("a.example.com")}}, want: "deny, 1 rule"},
		{policy: &policy{DefaultAction: "Allow", Egress: []rule{deny("a.example.com"), deny("10.0.0.0/8")}}, want: "allow, 2 rules"},
	}
	for _, tt := range tests {
		if got := Summary(tt.policy); got != tt.want {
			t.Errorf("Summary(%+v) = %q, want %q", tt.policy, got, tt.want)
		}
	}
}

func TestEdits(t *testing.T) {
	pypi := allow("pypi.org", tcp(443))
	hosted := allow("*.pythonhosted.org", tcp(443))
	tests := []struct {
		name         string
		old          *policy
		edit         Edit
		want         *policy
		wantWarnings []string
		wantErr      string
	}{
		{
			name:         "allow without a policy starts from default Deny",
			edit:         AddRules([]rule{pypi, hosted}, false),
			want:         &policy{DefaultAction: "Deny", Egress: []rule{pypi, hosted}},
			wantWarnings: []string{NoPolicyOfItsOwn},
		},
		{
			name: "allow appends",
			old:  &policy{Egress: []rule{pypi}},
			edit: AddRules([]rule{hosted}, false),
			want: &policy{Egress: []rule{pypi, hosted}},
		},
		{
			name:         "a rule the policy has is not added again",
			old:          &policy{Egress: []rule{pypi}},
			edit:         AddRules([]rule{allow("PyPI.org.", tcp(443)), hosted}, false),
			want:         &policy{Egress: []rule{pypi, hosted}},
			wantWarnings: []string{"Allow PyPI.org.:443 is rule 1 already"},
		},
		{
			name:         "a rule a broader one covers is not added",
			old:          &policy{Egress: []rule{allow("pypi.org")}},
			edit:         AddRules([]rule{pypi}, false),
			want:         &policy{Egress: []rule{allow("pypi.org")}},
			wantWarnings: []string{"Allow pypi.org:443 is not added: rule 1 (Allow pypi.org) covers it already"},
		},
		{
			name: "an Allow after a Deny of the same target is added, with a warning",
			old:  &policy{Egress: []rule{deny("10.1.2.3/8")}},
			edit: AddRules([]rule{allow("10.0.0.0/8", tcp(80))}, false),
			want: &policy{Egress: []rule{deny("10.1.2.3/8"), allow("10.0.0.0/8", tcp(80))}},
			wantWarnings: []string{"Allow 10.0.0.0/8:80 has no effect: rule 1 (Deny 10.1.2.3/8) matches first; " +
				"remove that rule, or add this one with --first"},
		},
		{
			name:         "Deny rules at the end of a default-Deny policy change nothing",
			old:          &policy{DefaultAction: "Deny", Egress: []rule{allow("*.example.com")}},
			edit:         AddRules([]rule{deny("secret.example.com")}, false),
			want:         &policy{DefaultAction: "Deny", Egress: []rule{allow("*.example.com"), deny("secret.example.com")}},
			wantWarnings: []string{"the default action is Deny, so Deny rules at the end of the list change nothing; add them with --first to override the Allow rules before them"},
		},
		{
			name:         "Allow rules at the end of a default-Allow policy change nothing",
			old:          &policy{DefaultAction: "Allow"},
			edit:         AddRules([]rule{pypi}, false),
			want:         &policy{DefaultAction: "Allow", Egress: []rule{pypi}},
			wantWarnings: []string{"the default action is Allow, so Allow rules at the end of the list change nothing"},
		},
		{
			name: "deny --first goes before the others",
			old:  &policy{Egress: []rule{allow("*.example.com"), pypi}},
			edit: AddRules([]rule{deny("secret.example.com"), deny("10.0.0.0/8")}, true),
			want: &policy{Egress: []rule{deny("secret.example.com"), deny("10.0.0.0/8"), allow("*.example.com"), pypi}},
		},
		{
			name:         "--first moves a rule the policy has, and warns of the ones it shadows",
			old:          &policy{Egress: []rule{allow("pypi.org"), pypi, hosted}},
			edit:         AddRules([]rule{deny("pypi.org"), hosted}, true),
			want:         &policy{Egress: []rule{deny("pypi.org"), hosted, allow("pypi.org"), pypi}},
			wantWarnings: []string{"rule 3 (Allow pypi.org) no longer has any effect: Deny pypi.org matches first", "rule 4 (Allow pypi.org:443) no longer has any effect: Deny pypi.org matches first"},
		},
		{
			name: "remove by target removes every rule for it",
			old:  &policy{DefaultAction: "Allow", Egress: []rule{pypi, deny("PYPI.org"), hosted}},
			edit: RemoveRules([]RuleSelector{{Rule: allow("pypi.org"), Arg: "pypi.org"}}),
			want: &policy{DefaultAction: "Allow", Egress: []rule{hosted}},
		},
		{
			name: "remove by target and ports removes only the rules with those ports",
			old:  &policy{Egress: []rule{allow("pypi.org"), allow("pypi.org", tcp(443), tcp(80)), hosted}},
			edit: RemoveRules([]RuleSelector{{Rule: allow("pypi.org", tcp(80), tcp(443)), Arg: "pypi.org:80,443"}}),
			want: &policy{Egress: []rule{allow("pypi.org"), hosted}},
		},
		{
			name: "remove by number",
			old:  &policy{Egress: []rule{pypi, hosted, deny("10.0.0.0/8")}},
			edit: RemoveRules([]RuleSelector{{Number: 3, Arg: "3"}, {Number: 1, Arg: "1"}}),
			want: &policy{Egress: []rule{hosted}},
		},
		{
			name: "remove every rule leaves deny-all",
			old:  &policy{Egress: []rule{pypi}},
			edit: RemoveRules([]RuleSelector{{Number: 1, Arg: "1"}}),
			want: &policy{},
		},
		{
			name:    "remove a number past the end",
			old:     &policy{Egress: []rule{pypi, hosted}},
			edit:    RemoveRules([]RuleSelector{{Number: 1, Arg: "1"}, {Number: 3, Arg: "3"}}),
			wantErr: "there is no rule 3: the policy has 2",
		},
		{
			name:    "remove what matches nothing",
			old:     &policy{Egress: []rule{pypi}},
			edit:    RemoveRules([]RuleSelector{{Rule: allow("pypi.org", tcp(80)), Arg: "pypi.org:80"}}),
			wantErr: `no rule matches "pypi.org:80"`,
		},
		{
			name:    "remove without a policy",
			edit:    RemoveRules([]RuleSelector{{Number: 1, Arg: "1"}}),
			wantErr: "the sandbox has no network policy of its own, so no rules to remove",
		},
		{
			name:    "remove without rules",
			old:     &policy{DefaultAction: "Allow"},
			edit:    RemoveRules([]RuleSelector{{Number: 1, Arg: "1"}}),
			wantErr: "the sandbox's network policy has no rules to remove",
		},
		{
			name: "set the default action keeps the rules",
			old:  &policy{Egress: []rule{deny("10.0.0.0/8")}},
			edit: SetDefaultAction("Allow"),
			want: &policy{DefaultAction: "Allow", Egress: []rule{deny("10.0.0.0/8")}},
		},
		{
			name:         "set the default action without a policy",
			edit:         SetDefaultAction("Allow"),
			want:         &policy{DefaultAction: "Allow"},
			wantWarnings: []string{"the sandbox had no network policy of its own, so its pool's or the platform's default applied; it now has its own, which replaces that one"},
		},
		{
			name: "set replaces",
			old:  &policy{DefaultAction: "Allow", Egress: []rule{deny("10.0.0.0/8")}},
			edit: SetPolicy(&policy{Egress: []rule{pypi}}),
			want: &policy{Egress: []rule{pypi}},
		},
		{
			name: "deny-all drops the rules",
			old:  &policy{DefaultAction: "Allow", Egress: []rule{deny("10.0.0.0/8")}},
			edit: DenyAll(),
			want: &policy{DefaultAction: "Deny"},
		},
		{
			name: "reset removes the policy",
			old:  &policy{Egress: []rule{pypi}},
			edit: Reset(),
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.old.DeepCopy()
			got, warnings, err := tt.edit(tt.old)
			if diff := cmp.Diff(before, tt.old); diff != "" {
				t.Errorf("the edit changed the policy it was given (-before +after):\n%s", diff)
			}
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("policy (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantWarnings, warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSelectors(t *testing.T) {
	got, err := ParseSelectors([]string{"2", "pypi.org:80,443", "a.example.com,b.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	want := []RuleSelector{
		{Number: 2, Arg: "2"},
		{Rule: rule{To: "pypi.org", Ports: []port{tcp(80), tcp(443)}}, Arg: "pypi.org:80,443"},
		{Rule: rule{To: "a.example.com"}, Arg: "a.example.com"},
		{Rule: rule{To: "b.example.com"}, Arg: "b.example.com"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("selectors (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"0", "pypi.org:0"} {
		if _, err := ParseSelectors([]string{bad}); err == nil {
			t.Errorf("ParseSelectors(%q) took it", bad)
		}
	}
}
