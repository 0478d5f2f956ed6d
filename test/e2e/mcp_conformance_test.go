//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// mcpConformanceBaseline lists the conformance scenarios that `kubectl sandbox mcp` is expected
// to fail, each with the reason.
const mcpConformanceBaseline = "testdata/mcp-conformance-baseline.yml"

// conformanceCheck is one check of a scenario, as the suite writes it to checks.json.
type conformanceCheck struct {
	ID           string          `json:"id"`
	Description  string          `json:"description"`
	Status       string          `json:"status"` // SUCCESS, FAILURE, WARNING, INFO...
	ErrorMessage string          `json:"errorMessage"`
	Details      json.RawMessage `json:"details"`
}

// conformanceResultDir is a scenario's directory in the suite's -o: server-SCENARIO-TIMESTAMP.
var conformanceResultDir = regexp.MustCompile(`^server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$`)

// ansiColor is a color of the suite's summary, which it prints whatever its output is.
var ansiColor = regexp.MustCompile("\x1b\\[[0-9;]*m")

// readConformanceResults reads the checks of each scenario the suite ran from its output dir.
func readConformanceResults(t *testing.T, dir string) map[string][]conformanceCheck {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]conformanceCheck{}
	for _, e := range entries {
		m := conformanceResultDir.FindStringSubmatch(e.Name())
		if !e.IsDir() || m == nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name(), "checks.json"))
		if err != nil {
			t.Fatalf("scenario %s: %v", m[1], err)
		}
		var checks []conformanceCheck
		if err := json.Unmarshal(data, &checks); err != nil {
			t.Fatalf("scenario %s: checks.json: %v", m[1], err)
		}
		out[m[1]] = checks
	}
	return out
}

// failedChecks are the checks that fail a scenario: the suite counts a warning as a failure
// when it compares with a baseline.
func failedChecks(checks []conformanceCheck) []conformanceCheck {
	var failed []conformanceCheck
	for _, c := range checks {
		if c.Status == "FAILURE" || c.Status == "WARNING" {
			failed = append(failed, c)
		}
	}
	return failed
}

// TestMCPConformance runs the MCP conformance suite's server scenarios (the active suite)
// against `kubectl-sandbox mcp --transport http`. The scenarios that need the suite's fixtures
// (tools, prompts and resources named test_*) are expected to fail, and are listed with the
// reason in testdata/mcp-conformance-baseline.yml; every other one must pass. The test fails on a
// failure that the baseline does not list, and on a baseline entry that passes or did not run.
func TestMCPConformance(t *testing.T) {
	tools := installNPMTools(t)
	var baseline struct {
		Server []string `json:"server"`
	}
	data, err := os.ReadFile(mcpConformanceBaseline)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &baseline); err != nil {
		t.Fatalf("%s: %v", mcpConformanceBaseline, err)
	}
	baselinePath, err := filepath.Abs(mcpConformanceBaseline)
	if err != nil {
		t.Fatal(err)
	}

	// The scenarios call no tool of ours (only the fixtures' test_* ones): no pool is needed.
	url := startMCPHTTP(t, newNamespace(t), "")
	results := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tools.node, tools.conformance, "server", "--url", url,
		"--expected-failures", baselinePath, "-o", results)
	cmd.Env = tools.env()
	start := time.Now()
	outBytes, err := cmd.CombinedOutput()
	took := time.Since(start)
	out := ansiColor.ReplaceAllString(string(outBytes), "")
	code := 0
	if exitErr, ok := err.(*exec.ExitError); ok {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("conformance server: %v after %s:\n%s", err, took.Round(time.Millisecond), out)
	}
	if ctx.Err() != nil {
		t.Fatalf("conformance server did not end within 5m:\n%s", out)
	}

	scenarios := readConformanceResults(t, results)
	if len(scenarios) == 0 {
		t.Fatalf("conformance server ran no scenario (exit %d):\n%s", code, out)
	}
	var passed, expected, unexpected, stale []string
	for name, checks := range scenarios {
		failed := failedChecks(checks)
		inBaseline := slices.Contains(baseline.Server, name)
		switch {
		case len(failed) == 0 && !inBaseline:
			passed = append(passed, name)
		case len(failed) == 0 && inBaseline:
			stale = append(stale, name)
		case inBaseline:
			expected = append(expected, name)
		default:
			unexpected = append(unexpected, name)
			for _, c := range failed {
				t.Errorf("conformance scenario %s failed, and the baseline does not expect it: check %s (%s): %s: %s",
					name, c.ID, c.Description, c.Status, c.ErrorMessage)
			}
		}
	}
	for _, s := range [][]string{passed, expected, unexpected, stale} {
		sort.Strings(s)
	}
	for _, name := range stale {
		t.Errorf("conformance scenario %s passes: remove it from %s", name, mcpConformanceBaseline)
	}
	for _, name := range baseline.Server {
		if _, ran := scenarios[name]; !ran {
			t.Errorf("%s lists %s, which the suite did not run: remove it", mcpConformanceBaseline, name)
		}
	}
	// The suite saw this server's tools.
	if checks := scenarios["tools-list"]; len(checks) > 0 {
		var details struct{ Tools []string }
		_ = json.Unmarshal(checks[0].Details, &details)
		sort.Strings(details.Tools)
		if !slices.Equal(details.Tools, mcpTools) {
			t.Errorf("the suite's tools-list saw tools %v, want %v", details.Tools, mcpTools)
		}
	} else {
		t.Error("the suite ran no tools-list scenario")
	}
	// The suite's own verdict, on the same baseline.
	if code != 0 {
		i := strings.Index(out, "=== SUMMARY ===")
		t.Errorf("conformance server exited %d after %s:\n%s", code, took.Round(time.Millisecond), out[max(i, 0):])
	} else if len(unexpected)+len(stale) > 0 {
		t.Errorf("conformance server exited 0, yet unexpected failures %v and stale entries %v", unexpected, stale)
	}
	t.Logf("MCP conformance, %d scenarios in %s: %d passed %v; %d expected failures (need the suite's test_* fixtures) %v",
		len(scenarios), took.Round(time.Millisecond), len(passed), passed, len(expected), expected)
}
