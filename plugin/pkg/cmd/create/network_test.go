package create

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

func allowRule(to string, ports ...sandboxv1alpha1.SandboxEgressPort) sandboxv1alpha1.SandboxEgressRule {
	return sandboxv1alpha1.SandboxEgressRule{Action: "Allow", To: to, Ports: ports}
}

func TestNetworkPolicyFlags(t *testing.T) {
	manyTargets := make([]string, 101)
	for i := range manyTargets {
		manyTargets[i] = fmt.Sprintf("h%d.example.com", i)
	}
	tests := []struct {
		name    string
		allow   []string
		denyAll bool
		want    *sandboxv1alpha1.SandboxNetworkPolicy
		wantErr string
	}{
		{name: "neither leaves the pool's or platform's default", want: nil},
		{name: "deny-all", denyAll: true, want: &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: "Deny"}},
		{
			name:  "allow, repeated and comma-separated, in order",
			allow: []string{"pypi.org:443,*.pythonhosted.org:443", "10.0.0.0/8:8080-8090/UDP", "[2001:db8::1]:443", "github.com:22,443"},
			want: &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: "Deny", Egress: []sandboxv1alpha1.SandboxEgressRule{
				allowRule("pypi.org", sandboxv1alpha1.SandboxEgressPort{Port: 443}),
				allowRule("*.pythonhosted.org", sandboxv1alpha1.SandboxEgressPort{Port: 443}),
				allowRule("10.0.0.0/8", sandboxv1alpha1.SandboxEgressPort{Port: 8080, EndPort: ptr.To[int32](8090), Protocol: "UDP"}),
				allowRule("2001:db8::1", sandboxv1alpha1.SandboxEgressPort{Port: 443}),
				allowRule("github.com", sandboxv1alpha1.SandboxEgressPort{Port: 22}, sandboxv1alpha1.SandboxEgressPort{Port: 443}),
			}},
		},
		{name: "both", allow: []string{"pypi.org"}, denyAll: true,
			wantErr: "--allow and --deny-all cannot be used together: --allow denies what its targets do not match already"},
		{name: "a bad port", allow: []string{"pypi.org:443", "pypi.org:0"}, wantErr: `invalid --allow "pypi.org:0": port 0 is out of range (1-65535)`},
		{name: "a bad name", allow: []string{"pypi..org"}, wantErr: `invalid --allow "pypi..org": not a valid DNS name: `},
		{name: "IPv6 with a port needs brackets", allow: []string{"2001:db8::1:443/tcp"},
			wantErr: `invalid --allow "2001:db8::1:443/tcp": put an IPv6 address in brackets to give it a port, as in [2001:db8::1]:443`},
		{name: "too many", allow: manyTargets, wantErr: "--allow gives 101 targets; at most 100 are allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NetworkPolicy(tt.allow, tt.denyAll)
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
				t.Errorf("policy (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCreateNetworkPolicy checks what create sends for --allow and --deny-all, on the wire.
func TestCreateNetworkPolicy(t *testing.T) {
	tests := []struct {
		name string
		args []string
		// wantPolicy is spec.networkPolicy as sent; absent when it must not be sent.
		wantPolicy any
		wantStrict bool
		wantErr    string
	}{
		{
			name: "allow",
			args: []string{"--allow", "pypi.org:443", "--allow=*.pythonhosted.org:443,10.0.0.0/8:53/udp"},
			wantPolicy: map[string]any{"defaultAction": "Deny", "egress": []any{
				map[string]any{"action": "Allow", "to": "pypi.org", "ports": []any{map[string]any{"port": 443.0}}},
				map[string]any{"action": "Allow", "to": "*.pythonhosted.org", "ports": []any{map[string]any{"port": 443.0}}},
				map[string]any{"action": "Allow", "to": "10.0.0.0/8", "ports": []any{map[string]any{"port": 53.0, "protocol": "UDP"}}},
			}},
			wantStrict: true,
		},
		{
			name:       "deny-all",
			args:       []string{"--deny-all"},
			wantPolicy: map[string]any{"defaultAction": "Deny"},
			wantStrict: true,
		},
		{
			name: "neither sends no policy",
		},
		{
			name:    "both send nothing",
			args:    []string{"--deny-all", "--allow", "pypi.org"},
			wantErr: "error: --allow and --deny-all cannot be used together: --allow denies what its targets do not match already\n",
		},
		{
			name:    "a bad target sends nothing",
			args:    []string{"--allow", "pypi.org:443,https:"},
			wantErr: "error: invalid --allow \"https:\": missing port after :\n",
		},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sandboxserver.New(t, cmdtesting.Namespace)
			f := cmdtesting.NewServerFactory(srv.URL)
			f.RESTConfig.BearerToken = sandboxserver.UserToken
			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			cmd := NewCmdCreate(f, streams)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			cmd.SetArgs(append([]string{"net", "--pool", "python"}, tt.args...))
			var msg bytes.Buffer
			if err := cmd.ExecuteContext(context.Background()); err != nil {
				cmdutil.PrintError(&msg, err)
			}
			if msg.String() != tt.wantErr {
				t.Fatalf("error %q, want %q", msg.String(), tt.wantErr)
			}
			requests := srv.Requests()
			if tt.wantErr != "" {
				if len(requests) > 0 {
					t.Errorf("sent %d requests despite the error", len(requests))
				}
				return
			}
			if out.String() != "sandbox.sandbox.kube-sandbox.io/net created\n" {
				t.Errorf("output %q", out.String())
			}
			if len(requests) != 1 || requests[0].Method != http.MethodPost {
				t.Fatalf("requests %+v, want one POST", requests)
			}
			if strict := strings.Contains(requests[0].RawQuery, "fieldValidation=Strict"); strict != tt.wantStrict {
				t.Errorf("query %q, want strict field validation %v", requests[0].RawQuery, tt.wantStrict)
			}
			var body struct {
				Spec map[string]any `json:"spec"`
			}
			if err := json.Unmarshal(requests[0].Body, &body); err != nil {
				t.Fatal(err)
			}
			policy, sent := body.Spec["networkPolicy"]
			if tt.wantPolicy == nil {
				if sent {
					t.Errorf("sent networkPolicy %v, want none", policy)
				}
			} else if diff := cmp.Diff(tt.wantPolicy, policy); diff != "" {
				t.Errorf("networkPolicy sent (-want +got):\n%s", diff)
			}
			stored := srv.Sandbox("net")
			if stored == nil || stored.Spec.PoolRef == nil || stored.Spec.PoolRef.Name != "python" {
				t.Errorf("stored %+v", stored)
			}
		})
	}
}
