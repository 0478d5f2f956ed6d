package network

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/client/netpolicy"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

const sandboxPath = sandboxserver.Prefix + cmdtesting.Namespace + "/sandboxes/sb"

// result is what a command run printed and sent.
type result struct {
	out, errOut string
	// err is the error as main prints it.
	err      string
	requests []sandboxserver.Request
}

// run runs `network args...` against srv.
func run(t *testing.T, srv *sandboxserver.Server, stdin string, args ...string) result {
	t.Helper()
	streams, in, out, errOut := genericiooptions.NewTestIOStreams()
	in.WriteString(stdin)
	f := cmdtesting.NewServerFactory(srv.URL)
	f.RESTConfig.BearerToken = sandboxserver.UserToken
	cmd := NewCmdNetwork(f, streams)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	var msg bytes.Buffer
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		cmdutil.PrintError(&msg, err)
	}
	return result{out: out.String(), errOut: errOut.String(), err: msg.String(), requests: srv.Requests()}
}

// newServer serves sandbox sb of the test namespace with the given spec and status.
func newServer(t *testing.T, spec sandboxv1alpha1.SandboxSpec, status sandboxv1alpha1.SandboxStatus) *sandboxserver.Server {
	t.Helper()
	srv := sandboxserver.New(t, cmdtesting.Namespace)
	srv.Add(&sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sb", Generation: 3}, Spec: spec, Status: status})
	srv.Requests()
	return srv
}

func egressReady(status metav1.ConditionStatus, reason, message string, generation int64) sandboxv1alpha1.SandboxStatus {
	return sandboxv1alpha1.SandboxStatus{Conditions: []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Running"},
		{Type: ConditionEgressReady, Status: status, Reason: reason, Message: message, ObservedGeneration: generation},
	}}
}

// methods are the requests' methods and paths, without the queries.
func methods(requests []sandboxserver.Request) []string {
	var out []string
	for _, r := range requests {
		path := strings.TrimPrefix(r.Path, sandboxserver.Prefix+cmdtesting.Namespace)
		out = append(out, r.Method+" "+path)
	}
	return out
}

func TestShow(t *testing.T) {
	rules := &policy{DefaultAction: "Deny", Egress: []rule{
		allow("pypi.org", tcp(443)),
		allow("*.pythonhosted.org", tcp(443)),
		deny("10.0.0.0/8", port{Port: 8080, EndPort: ptr.To[int32](8090), Protocol: "UDP"}, tcp(22)),
		allow("2001:db8::/32"),
	}}
	tests := []struct {
		name    string
		spec    sandboxv1alpha1.SandboxSpec
		status  sandboxv1alpha1.SandboxStatus
		args    []string
		wantOut string
		wantErr string
	}{
		{
			name:   "rules and a condition in force",
			spec:   sandboxv1alpha1.SandboxSpec{NetworkPolicy: rules},
			status: egressReady(metav1.ConditionTrue, "PolicyApplied", "every pod enforces the current policy", 3),
			args:   []string{"sb"},
			wantOut: `Name:                  sb
Namespace:             test
Generation:            3
Policy:                its own (spec.networkPolicy)
Default action:        Deny
Rules:                 4, first match wins
  #  ACTION  TO                  PORTS
  1  Allow   pypi.org            443/TCP
  2  Allow   *.pythonhosted.org  443/TCP
  3  Deny    10.0.0.0/8          8080-8090/UDP, 22/TCP
  4  Allow   2001:db8::/32       all
EgressReady:           True
  Reason:              PolicyApplied
  Message:             every pod enforces the current policy
  Observed generation: 3
`,
		},
		{
			name:   "show is the same, and a condition that lags is pending",
			spec:   sandboxv1alpha1.SandboxSpec{NetworkPolicy: &policy{DefaultAction: "Allow"}},
			status: egressReady(metav1.ConditionTrue, "PolicyApplied", "", 2),
			args:   []string{"show", "sb"},
			wantOut: `Name:                  sb
Namespace:             test
Generation:            3
Policy:                its own (spec.networkPolicy)
Default action:        Allow
Rules:                 none
EgressReady:           pending: True for generation 2, the sandbox is at generation 3
  Reason:              PolicyApplied
  Observed generation: 2
`,
		},
		{
			name: "the status's observed generation stands in for the condition's",
			spec: sandboxv1alpha1.SandboxSpec{PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: "python"}},
			status: func() sandboxv1alpha1.SandboxStatus {
				s := egressReady(metav1.ConditionFalse, "PolicyPending", "1 of 2 pods", 0)
				s.ObservedGeneration = 3
				return s
			}(),
			args: []string{"sb"},
			wantOut: `Name:                  sb
Namespace:             test
Generation:            3
Policy:                none of its own: the policy of pool python applies
EgressReady:           False
  Reason:              PolicyPending
  Message:             1 of 2 pods
  Observed generation: 3
`,
		},
		{
			name: "no policy, no condition",
			args: []string{"sb"},
			wantOut: `Name:                  sb
Namespace:             test
Generation:            3
Policy:                none of its own: the platform's default applies
EgressReady:           <none>: not reported yet
`,
		},
		{
			name: "yaml is the policy alone",
			spec: sandboxv1alpha1.SandboxSpec{NetworkPolicy: &policy{DefaultAction: "Deny", Egress: []rule{allow("pypi.org", tcp(443))}}},
			args: []string{"sb", "-o", "yaml"},
			wantOut: `defaultAction: Deny
egress:
- action: Allow
  ports:
  - port: 443
  to: pypi.org
`,
		},
		{
			name:    "json of no policy is null",
			args:    []string{"show", "sb", "-o", "json"},
			wantOut: "null\n",
		},
		{
			name:    "an unknown format",
			args:    []string{"sb", "-o", "wide"},
			wantErr: "error: unknown output format \"wide\"; use yaml or json, or none for a description\nSee 'network -h' for help and examples\n",
		},
		{
			name:    "not found",
			args:    []string{"ghost"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n",
		},
		{
			name:    "no name",
			args:    []string{},
			wantErr: "error: sandbox NAME is required\nSee 'network -h' for help and examples\n",
		},
		{
			name:    "a mistyped subcommand",
			args:    []string{"alow", "sb", "pypi.org"},
			wantErr: "error: unknown command \"alow\" for \"network\"; did you mean one of [\"show\" \"allow\"]?\nSee 'network -h' for help and examples\n",
		},
		{
			name:    "a mistyped subcommand with one suggestion",
			args:    []string{"deny-al", "sb"},
			wantErr: "error: unknown command \"deny-al\" for \"network\"; did you mean \"deny-all\"?\nSee 'network -h' for help and examples\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, tt.spec, tt.status)
			got := run(t, srv, "", tt.args...)
			if got.err != tt.wantErr {
				t.Errorf("error %q, want %q", got.err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.wantOut, got.out); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			for _, r := range got.requests {
				if r.Method != http.MethodGet {
					t.Errorf("show sent %s %s", r.Method, r.Path)
				}
			}
		})
	}
}

func TestUpdate(t *testing.T) {
	pypi := allow("pypi.org", tcp(443))
	hosted := allow("*.pythonhosted.org", tcp(443))
	withRules := sandboxv1alpha1.SandboxSpec{NetworkPolicy: &policy{DefaultAction: "Deny", Egress: []rule{pypi, deny("10.0.0.0/8")}}}
	tests := []struct {
		name  string
		spec  sandboxv1alpha1.SandboxSpec
		args  []string
		stdin string
		// want is the policy stored at the end.
		want       *policy
		wantOut    string
		wantErrOut string
		wantErr    string
		// wantPatch is the merge patch sent; nil when none may be sent.
		wantPatch map[string]any
	}{
		{
			name:       "allow without a policy",
			args:       []string{"allow", "sb", "pypi.org:443", "*.pythonhosted.org:443"},
			want:       &policy{DefaultAction: "Deny", Egress: []rule{pypi, hosted}},
			wantOut:    "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny, 2 rules)\n",
			wantErrOut: "Warning: " + netpolicy.NoPolicyOfItsOwn + "\n",
			wantPatch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "1"},
				"spec": map[string]any{"networkPolicy": map[string]any{"defaultAction": "Deny", "egress": []any{
					map[string]any{"action": "Allow", "to": "pypi.org", "ports": []any{map[string]any{"port": 443.0}}},
					map[string]any{"action": "Allow", "to": "*.pythonhosted.org", "ports": []any{map[string]any{"port": 443.0}}},
				}}},
			},
		},
		{
			name:    "allow appends, comma-separated",
			spec:    withRules,
			args:    []string{"allow", "sb", "*.pythonhosted.org:443,github.com"},
			want:    &policy{DefaultAction: "Deny", Egress: []rule{pypi, deny("10.0.0.0/8"), hosted, allow("github.com")}},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny, 4 rules)\n",
		},
		{
			name:       "allowing what is allowed already changes nothing and sends nothing",
			spec:       withRules,
			args:       []string{"allow", "sb", "pypi.org:443"},
			want:       withRules.NetworkPolicy,
			wantOut:    "sandbox.sandbox.kube-sandbox.io/sb network policy unchanged (deny, 2 rules)\n",
			wantErrOut: "Warning: Allow pypi.org:443 is rule 1 already\n",
		},
		{
			name:    "allow --first",
			spec:    withRules,
			args:    []string{"allow", "sb", "--first", "10.1.2.3"},
			want:    &policy{DefaultAction: "Deny", Egress: []rule{allow("10.1.2.3"), pypi, deny("10.0.0.0/8")}},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny, 3 rules)\n",
		},
		{
			name:    "deny --first",
			spec:    withRules,
			args:    []string{"deny", "sb", "--first", "[2001:db8::1]:443", "evil.example.com"},
			want:    &policy{DefaultAction: "Deny", Egress: []rule{deny("2001:db8::1", tcp(443)), deny("evil.example.com"), pypi, deny("10.0.0.0/8")}},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny, 4 rules)\n",
		},
		{
			name:       "deny appends, with a warning where it changes nothing",
			spec:       withRules,
			args:       []string{"deny", "sb", "evil.example.com"},
			want:       &policy{DefaultAction: "Deny", Egress: []rule{pypi, deny("10.0.0.0/8"), deny("evil.example.com")}},
			wantOut:    "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny, 3 rules)\n",
			wantErrOut: "Warning: the default action is Deny, so Deny rules at the end of the list change nothing; add them with --first to override the Allow rules before them\n",
		},
		{
			name:    "remove by target",
			spec:    withRules,
			args:    []string{"remove", "sb", "PyPI.org"},
			want:    &policy{DefaultAction: "Deny", Egress: []rule{deny("10.0.0.0/8")}},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny, 1 rule)\n",
		},
		{
			name:    "remove by number and target leaves no rules",
			spec:    withRules,
			args:    []string{"remove", "sb", "2", "pypi.org:443"},
			want:    &policy{DefaultAction: "Deny"},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny-all)\n",
			wantPatch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "1"},
				// The rules are removed with null: a merge patch would keep an absent field.
				"spec": map[string]any{"networkPolicy": map[string]any{"defaultAction": "Deny", "egress": nil}},
			},
		},
		{
			name:    "remove what matches nothing",
			spec:    withRules,
			args:    []string{"remove", "sb", "pypi.org:80"},
			want:    withRules.NetworkPolicy,
			wantErr: "error: sandbox \"sb\": no rule matches \"pypi.org:80\"\n",
		},
		{
			name:    "remove without a policy",
			args:    []string{"remove", "sb", "1"},
			wantErr: "error: sandbox \"sb\": the sandbox has no network policy of its own, so no rules to remove\n",
		},
		{
			name:    "deny-all",
			spec:    withRules,
			args:    []string{"deny-all", "sb"},
			want:    &policy{DefaultAction: "Deny"},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny-all)\n",
		},
		{
			name:    "reset removes the policy",
			spec:    withRules,
			args:    []string{"reset", "sb"},
			want:    nil,
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy updated (default)\n",
			wantPatch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "1"},
				"spec":     map[string]any{"networkPolicy": nil},
			},
		},
		{
			name:    "reset without a policy is unchanged",
			args:    []string{"reset", "sb"},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy unchanged (default)\n",
		},
		{
			name:    "set the default action",
			spec:    withRules,
			args:    []string{"set", "sb", "--default-action", "allow"},
			want:    &policy{DefaultAction: "Allow", Egress: []rule{pypi, deny("10.0.0.0/8")}},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy updated (allow, 2 rules)\n",
		},
		{
			name: "set from standard input replaces, leaving out what it leaves out",
			spec: sandboxv1alpha1.SandboxSpec{NetworkPolicy: &policy{DefaultAction: "Allow", Egress: []rule{deny("10.0.0.0/8")}}},
			args: []string{"set", "sb", "-f", "-"},
			stdin: `egress:
- action: Allow
  to: pypi.org
  ports:
  - port: 443
`,
			want:    &policy{Egress: []rule{pypi}},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny, 1 rule)\n",
		},
		{
			name:    "set a file with a typo",
			args:    []string{"set", "sb", "-f", "-"},
			stdin:   "defaultAction: Deny\negres: []\n",
			wantErr: "error: invalid policy in standard input: error unmarshaling JSON: while decoding JSON: json: unknown field \"egres\" (the file holds the policy itself, with defaultAction and egress, as 'kubectl sandbox network show NAME -o yaml' prints it)\n",
		},
		{
			name:    "set an invalid file",
			args:    []string{"set", "sb", "-f", "-"},
			stdin:   `{"defaultAction": "deny", "egress": [{"action": "Allow", "to": "*.com"}]}`,
			wantErr: "error: invalid policy in standard input: defaultAction: Unsupported value: \"deny\": supported values: \"Allow\", \"Deny\"; egress[0].to: Invalid value: \"*.com\": a wildcard needs at least two labels after \"*.\", as in *.example.com\n",
		},
		{
			name:    "set an empty file",
			args:    []string{"set", "sb", "-f", "-"},
			stdin:   "\n",
			wantErr: "error: standard input holds no policy; to remove the sandbox's own policy, use 'kubectl sandbox network reset sb'\n",
		},
		{
			name:    "set both ways",
			args:    []string{"set", "sb", "-f", "-", "--default-action", "Deny"},
			wantErr: "error: -f and --default-action cannot be used together: a file sets the default action too\nSee 'network set -h' for help and examples\n",
		},
		{
			name:    "set neither way",
			args:    []string{"set", "sb"},
			wantErr: "error: one of -f and --default-action is required\nSee 'network set -h' for help and examples\n",
		},
		{
			name:    "set a bad default action",
			args:    []string{"set", "sb", "--default-action", "Reject"},
			wantErr: "error: invalid --default-action \"Reject\": must be Allow or Deny\nSee 'network set -h' for help and examples\n",
		},
		{
			name:    "allow a bad target",
			args:    []string{"allow", "sb", "pypi.org:443", "pypi.org:99999"},
			wantErr: "error: invalid target \"pypi.org:99999\": port 99999 is out of range (1-65535)\nSee 'network allow -h' for help and examples\n",
		},
		{
			name:    "allow nothing",
			args:    []string{"allow", "sb"},
			wantErr: "error: at least one TARGET is required after NAME\nSee 'network allow -h' for help and examples\n",
		},
		{
			name:    "remove nothing",
			args:    []string{"remove", "sb"},
			wantErr: "error: at least one RULE (a rule number or a TARGET) is required after NAME\nSee 'network remove -h' for help and examples\n",
		},
		{
			name:    "deny-all takes no targets",
			args:    []string{"deny-all", "sb", "pypi.org"},
			wantErr: "error: deny-all takes one NAME, got [\"sb\" \"pypi.org\"]\nSee 'network deny-all -h' for help and examples\n",
		},
		{
			name:    "a sandbox that is not there",
			args:    []string{"allow", "ghost", "pypi.org"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"ghost\" not found\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, tt.spec, sandboxv1alpha1.SandboxStatus{})
			got := run(t, srv, tt.stdin, tt.args...)
			if got.err != tt.wantErr {
				t.Errorf("error %q, want %q", got.err, tt.wantErr)
			}
			if got.out != tt.wantOut {
				t.Errorf("output %q, want %q", got.out, tt.wantOut)
			}
			if got.errOut != tt.wantErrOut {
				t.Errorf("stderr %q, want %q", got.errOut, tt.wantErrOut)
			}
			if diff := cmp.Diff(tt.want, srv.Sandbox("sb").Spec.NetworkPolicy); diff != "" {
				t.Errorf("stored policy (-want +got):\n%s", diff)
			}

			var patches []sandboxserver.Request
			for _, r := range got.requests {
				switch r.Method {
				case http.MethodGet:
				case http.MethodPatch:
					patches = append(patches, r)
				default:
					t.Errorf("sent %s %s", r.Method, r.Path)
				}
			}
			changed := strings.Contains(tt.wantOut, " updated ")
			switch {
			case !changed && len(patches) > 0:
				t.Fatalf("sent %d patches, want none", len(patches))
			case changed && len(patches) != 1:
				t.Fatalf("sent %d patches, want one", len(patches))
			case !changed:
				return
			}
			p := patches[0]
			if p.Path != sandboxPath || p.Header.Get("Content-Type") != "application/merge-patch+json" || !strings.Contains(p.RawQuery, "fieldValidation=Strict") {
				t.Errorf("patch %s?%s (Content-Type %q), want a strict merge patch of %s", p.Path, p.RawQuery, p.Header.Get("Content-Type"), sandboxPath)
			}
			if tt.wantPatch != nil {
				var body map[string]any
				if err := json.Unmarshal(p.Body, &body); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.wantPatch, body); diff != "" {
					t.Errorf("patch (-want +got):\n%s", diff)
				}
			}
			if sb := srv.Sandbox("sb"); sb.Generation != 4 {
				t.Errorf("generation %d after the change, want 4", sb.Generation)
			}
		})
	}
}

func TestSetFromFile(t *testing.T) {
	srv := newServer(t, sandboxv1alpha1.SandboxSpec{}, sandboxv1alpha1.SandboxStatus{})
	file := filepath.Join(t.TempDir(), "policy.yaml")
	policyYAML := "defaultAction: Allow\negress:\n- action: Deny\n  to: 169.254.0.0/16\n"
	if err := os.WriteFile(file, []byte(policyYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	got := run(t, srv, "", "set", "sb", "-f", file)
	if got.err != "" || got.out != "sandbox.sandbox.kube-sandbox.io/sb network policy updated (allow, 1 rule)\n" {
		t.Fatalf("set printed %q, error %q", got.out, got.err)
	}
	// What show -o yaml prints, set -f reads back unchanged.
	shown := run(t, srv, "", "show", "sb", "-o", "yaml")
	if shown.out != "defaultAction: Allow\negress:\n- action: Deny\n  to: 169.254.0.0/16\n" {
		t.Errorf("show -o yaml printed %q", shown.out)
	}
	again := run(t, srv, shown.out, "set", "sb", "-f", "-")
	if again.out != "sandbox.sandbox.kube-sandbox.io/sb network policy unchanged (allow, 1 rule)\n" {
		t.Errorf("set of what show printed: %q, error %q", again.out, again.err)
	}

	missing := run(t, srv, "", "set", "sb", "-f", filepath.Join(t.TempDir(), "nope.yaml"))
	if !strings.HasPrefix(missing.err, "error: read the policy: open ") {
		t.Errorf("error %q for a missing file", missing.err)
	}
}

// TestUpdateConflict checks that a change that loses a race with another writer is made again on
// what that writer stored, rather than overwriting it.
func TestUpdateConflict(t *testing.T) {
	srv := newServer(t, sandboxv1alpha1.SandboxSpec{NetworkPolicy: &policy{Egress: []rule{allow("pypi.org")}}}, sandboxv1alpha1.SandboxStatus{})
	raced := false
	srv.BeforeWrite = func(name string) {
		if raced {
			return
		}
		raced = true
		srv.Modify(name, func(sb *sandboxv1alpha1.Sandbox) {
			sb.Spec.NetworkPolicy.Egress = append(sb.Spec.NetworkPolicy.Egress, allow("github.com"))
		})
	}
	got := run(t, srv, "", "allow", "sb", "files.pythonhosted.org")
	if got.err != "" || got.out != "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny, 3 rules)\n" {
		t.Fatalf("printed %q, error %q", got.out, got.err)
	}
	want := &policy{Egress: []rule{allow("pypi.org"), allow("github.com"), allow("files.pythonhosted.org")}}
	if diff := cmp.Diff(want, srv.Sandbox("sb").Spec.NetworkPolicy); diff != "" {
		t.Errorf("stored policy (-want +got):\n%s", diff)
	}
	wantRequests := []string{"GET /sandboxes/sb", "PATCH /sandboxes/sb", "GET /sandboxes/sb", "PATCH /sandboxes/sb"}
	if diff := cmp.Diff(wantRequests, methods(got.requests)); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestWait(t *testing.T) {
	// inForce marks the sandbox's policy as in force for its current generation.
	inForce := func(srv *sandboxserver.Server) {
		srv.Modify("sb", func(sb *sandboxv1alpha1.Sandbox) {
			sb.Status = egressReady(metav1.ConditionTrue, "PolicyApplied", "", sb.Generation)
		})
	}
	tests := []struct {
		name string
		args []string
		// afterWrite and watchStarted play the controller.
		afterWrite   func(srv *sandboxserver.Server)
		watchStarted func(srv *sandboxserver.Server)
		wantOut      string
		wantErr      string
	}{
		{
			name:       "in force by the time the wait starts",
			args:       []string{"allow", "sb", "pypi.org", "--wait"},
			afterWrite: inForce,
			wantOut:    "sandbox.sandbox.kube-sandbox.io/sb network policy updated (allow, 2 rules)\nsandbox.sandbox.kube-sandbox.io/sb network policy in force (generation 4)\n",
		},
		{
			name: "in force while watching",
			args: []string{"deny-all", "sb", "--wait"},
			afterWrite: func(srv *sandboxserver.Server) {
				srv.Modify("sb", func(sb *sandboxv1alpha1.Sandbox) {
					sb.Status = egressReady(metav1.ConditionFalse, "PolicyPending", "0 of 1 pods", sb.Generation)
				})
			},
			watchStarted: inForce,
			wantOut:      "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny-all)\nsandbox.sandbox.kube-sandbox.io/sb network policy in force (generation 4)\n",
		},
		{
			name: "an older generation in force is not enough",
			args: []string{"reset", "sb", "--wait", "--timeout", "300ms"},
			// The condition stays at generation 3, True.
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy updated (default)\n",
			wantErr: "error: timed out waiting for the network policy of sandbox \"sb\" (generation 4) to be in force: EgressReady is pending (reported for generation 3)\n",
		},
		{
			name: "a policy that failed to apply ends the wait",
			args: []string{"set", "sb", "--default-action", "Deny", "--wait"},
			watchStarted: func(srv *sandboxserver.Server) {
				srv.Modify("sb", func(sb *sandboxv1alpha1.Sandbox) {
					sb.Status = egressReady(metav1.ConditionFalse, "PolicyFailed", "pod sb-0: nftables: no such table", sb.Generation)
				})
			},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny, 1 rule)\n",
			wantErr: "error: the network policy of sandbox \"sb\" failed to apply: PolicyFailed: pod sb-0: nftables: no such table\n",
		},
		{
			name:         "deleted while waiting",
			args:         []string{"deny-all", "sb", "--wait"},
			watchStarted: func(srv *sandboxserver.Server) { srv.Delete("sb") },
			wantOut:      "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny-all)\n",
			wantErr:      "error: sandbox \"sb\" was deleted while waiting for its network policy\n",
		},
		{
			name:    "unchanged waits for the current generation",
			args:    []string{"allow", "sb", "10.0.0.0/8", "--wait", "--timeout=0"},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy unchanged (allow, 1 rule)\nsandbox.sandbox.kube-sandbox.io/sb network policy in force (generation 3)\n",
		},
		{
			name:    "zero timeout checks once",
			args:    []string{"deny-all", "sb", "--wait", "--timeout=0"},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb network policy updated (deny-all)\n",
			wantErr: "error: the network policy of sandbox \"sb\" (generation 4) is not in force yet: EgressReady is pending (reported for generation 3)\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t,
				sandboxv1alpha1.SandboxSpec{NetworkPolicy: &policy{DefaultAction: "Allow", Egress: []rule{allow("10.0.0.0/8")}}},
				egressReady(metav1.ConditionTrue, "PolicyApplied", "", 3))
			if tt.afterWrite != nil {
				srv.AfterWrite = func(*sandboxv1alpha1.Sandbox) { tt.afterWrite(srv) }
			}
			if tt.watchStarted != nil {
				srv.WatchStarted = func() { tt.watchStarted(srv) }
			}
			got := run(t, srv, "", tt.args...)
			if got.err != tt.wantErr {
				t.Errorf("error %q, want %q", got.err, tt.wantErr)
			}
			if got.out != tt.wantOut {
				t.Errorf("output %q, want %q", got.out, tt.wantOut)
			}
		})
	}
}
