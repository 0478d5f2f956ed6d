// Package layout checks the shape of the tree: which parts may import which, and that the
// README's map for engineers names what is there. `make verify` runs it; so does `make test`.
package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/kube-sandbox/kube-sandbox/"

// wireContracts are the packages every part may import: the API types and the wire contracts
// between binaries. They import nothing of the module beyond each other.
var wireContracts = []string{
	"apiserver/apis/",
	"controller/apis/control/v1alpha1",
	"sidecars/execd/execdapi",
	"sidecars/egress/egressapi",
	"sidecars/node/nodeapi",
}

// importRules says, for the packages under a prefix (the longest prefix wins), which of the
// module's packages they may depend on, directly or not, in non-test code. It is an allowlist:
// a new dependency between parts is a decision to write down here, not an accident.
var importRules = []struct {
	prefix string
	allow  []string
	why    string
}{
	{"apiserver/apis/", nil, "API types import no implementation"},
	{"controller/apis/control/v1alpha1", nil, "API types import no implementation"},
	{"sidecars/execd/execdapi", nil, "a wire contract imports no implementation"},
	{"sidecars/egress/egressapi", nil, "a wire contract imports no implementation"},
	{"sidecars/node/nodeapi", nil, "a wire contract imports no implementation"},

	{"controller/apis/", []string{"controller/apis/"},
		"what both servers share (admission, shards, the sandbox pod, the CA) sits beside the API types and imports neither binary"},
	{"apiserver/", []string{"apiserver/", "controller/apis/", "sidecars/execd/execdclient", "sidecars/node/nodeclient"},
		"sandbox-apiserver imports the shared packages under controller/apis, never the controller's own"},
	{"controller/", []string{"controller/", "sidecars/execd/execdclient", "sidecars/node/nodeclient"},
		"sandbox-controller reaches the sidecars only through their wire contracts"},
	{"plugin/", []string{"plugin/", "apiserver/pkg/generated/"},
		"the plugin speaks the Sandbox API only: its types, its clientset and the wire contracts"},
	// The plugin's test server runs the real table printer and the real execd.
	{"plugin/pkg/cmd/testing/", []string{"plugin/", "apiserver/", "controller/apis/", "sidecars/execd", "sidecars/internal/", "sidecars/node/nodeclient"},
		"test support"},
	{"sidecars/execd", []string{"sidecars/execd", "sidecars/internal/"},
		"execd imports no other sidecar's implementation"},
	{"sidecars/egress", []string{"sidecars/egress", "sidecars/internal/"},
		"the enforcer imports no other sidecar's implementation"},
	{"sidecars/node", []string{"sidecars/node", "sidecars/egress", "sidecars/usage", "sidecars/internal/"},
		"the node agent hosts the enforcer and the usage sampler"},
	{"sidecars/usage", []string{"sidecars/usage", "sidecars/egress", "sidecars/internal/"},
		"the usage sampler reads the enforcer's pods and counters"},
	// The clients of the node agent (sandbox-apiserver's stats, sandbox-controller's policy
	// pushes and OOM peaks) dial it as they dial execd, with the same credentials.
	{"sidecars/node/nodeclient", []string{"sidecars/node/nodeclient", "sidecars/execd/execdclient"},
		"a client of the node agent's contract, for the servers"},
	{"sidecars/internal/", []string{"sidecars/internal/"}, "shared by every sidecar, so it imports none of them"},
	{"sidecars/cmd/sandbox-execd", []string{"sidecars/execd", "sidecars/internal/"}, "one binary, one sidecar"},
	{"sidecars/cmd/sandbox-node", []string{"sidecars/node", "sidecars/egress", "sidecars/usage", "sidecars/internal/"}, "one binary, one sidecar"},
	{"test/", []string{""}, "tests may use anything"},
	{"hack/", []string{""}, "tools may use anything"},
}

// hasPathPrefix reports whether pkg is prefix, or below it. A prefix that ends in "/" names
// only what is below it; one that does not names the package and what is below it.
func hasPathPrefix(pkg, prefix string) bool {
	if prefix == "" || strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(pkg, prefix)
	}
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}

// denyRules are refused even where a wire contract would be allowed, by the same prefixes.
var denyRules = map[string][]string{
	// The Sandbox API owns its vocabulary: the plugin never sees the backing CRDs.
	"plugin/": {"controller/"},
}

type rule struct {
	allow, deny []string
	why         string
}

func ruleFor(pkg string) (rule, bool) {
	best := -1
	for i, r := range importRules {
		if hasPathPrefix(pkg, r.prefix) && (best < 0 || len(r.prefix) > len(importRules[best].prefix)) {
			best = i
		}
	}
	if best < 0 {
		return rule{}, false
	}
	r := importRules[best]
	return rule{allow: r.allow, deny: denyRules[r.prefix], why: r.why}, true
}

// allowed reports whether a package under r may depend on dep.
func (r rule) allowed(dep string) bool {
	for _, d := range r.deny {
		if hasPathPrefix(dep, d) {
			return false
		}
	}
	for _, c := range wireContracts {
		if hasPathPrefix(dep, c) {
			return true
		}
	}
	for _, a := range r.allow {
		if hasPathPrefix(dep, a) {
			return true
		}
	}
	return false
}

type listedPackage struct {
	ImportPath string
	Deps       []string
}

// modulePackages lists the module's packages with their non-test dependencies, as `go list`
// gives them (the e2e build tag included, so its packages are seen too).
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	root := repoRoot(t)
	statSources(t, root)
	cmd := exec.Command("go", "list", "-e", "-tags", "e2e", "-json=ImportPath,Deps", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decoding go list: %v", err)
		}
		if !strings.HasPrefix(p.ImportPath, module) {
			continue
		}
		var own []string
		for _, d := range p.Deps {
			if strings.HasPrefix(d, module) {
				own = append(own, strings.TrimPrefix(d, module))
			}
		}
		pkgs[strings.TrimPrefix(p.ImportPath, module)] = own
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages of the module")
	}
	return pkgs
}

// statSources stats every Go file of the tree, so that go test's cache, which knows the files
// a test looked at but not what `go list` read, runs the test again when one changes.
func statSources(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "_output") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(data, []byte("module "+strings.TrimSuffix(module, "/")+"\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod of the module above the test's directory")
		}
		dir = parent
	}
}

// violations checks every package against its rule and says what breaks one, a line each.
func violations(pkgs map[string][]string) []string {
	var out []string
	for pkg, deps := range pkgs {
		r, ok := ruleFor(pkg)
		if !ok {
			out = append(out, fmt.Sprintf("%s: no import rule covers this package; add one to test/layout", pkg))
			continue
		}
		for _, d := range deps {
			if !r.allowed(d) {
				out = append(out, fmt.Sprintf("%s depends on %s (%s)", pkg, d, r.why))
			}
		}
	}
	sort.Strings(out)
	return out
}

func TestImportRules(t *testing.T) {
	for _, v := range violations(modulePackages(t)) {
		t.Error(v)
	}
}

// The rules themselves: what they must refuse, so that a rule loosened by mistake shows here.
func TestImportRulesRefuse(t *testing.T) {
	for _, tc := range []struct {
		pkg, dep string
		ok       bool
	}{
		{"plugin/pkg/cmd/get", "apiserver/apis/sandbox/v1alpha1", true},
		{"plugin/pkg/cmd/get", "apiserver/pkg/generated/clientset/versioned", true},
		{"plugin/pkg/cmd/exec", "sidecars/execd/execdapi", true},
		{"plugin/pkg/cmd/get", "controller/apis/control/v1alpha1", false},
		{"apiserver/pkg/registry/sandbox", "controller/apis/control/v1alpha1", true},
		{"plugin/pkg/cmd/tasks", "controller/pkg/tasks", false},
		{"plugin/pkg/cmd/tasks", "controller/apis/pki", false},
		{"plugin/pkg/cmd/exec", "sidecars/execd", false},
		{"plugin/pkg/cmd/get", "apiserver/pkg/registry/sandbox", false},
		{"plugin/pkg/cmd/testing/sandboxserver", "apiserver/pkg/registry/sandbox", true},
		{"apiserver/pkg/server", "controller/apis/control/admission", true},
		{"apiserver/pkg/server", "controller/pkg/pool", false},
		{"apiserver/pkg/sandboxconn", "sidecars/execd", false},
		{"apiserver/apis/sandbox/v1alpha1", "controller/apis/pki", false},
		{"controller/apis/pki", "controller/pkg/certrotation", false},
		{"controller/pkg/pool", "apiserver/pkg/registry/sandbox", false},
		{"controller/pkg/pool", "sidecars/node", false},
		{"sidecars/egress", "sidecars/execd", false},
		{"sidecars/execd", "sidecars/node", false},
		{"sidecars/execd", "controller/apis/pki", false},
		{"sidecars/node", "sidecars/egress/internal/dnsproxy", true},
		{"sidecars/internal/mtls", "sidecars/execd", false},
		{"sidecars/execd", "sidecars/internal/mtls", true},
		{"sidecars/execd/execdapi", "sidecars/execd", false},
	} {
		r, ok := ruleFor(tc.pkg)
		if !ok {
			t.Errorf("%s: no rule", tc.pkg)
			continue
		}
		if got := r.allowed(tc.dep); got != tc.ok {
			t.Errorf("%s -> %s: allowed = %v, want %v", tc.pkg, tc.dep, got, tc.ok)
		}
	}
	if _, ok := ruleFor("newtop/pkg/x"); ok {
		t.Error("a package under no prefix has a rule; it must be refused until one is written")
	}
}
