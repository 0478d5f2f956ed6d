//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// debianPython is Debian's interpreter, the one with python3-kubernetes, python3-websocket and
// python3-requests (TEST_PACKAGES in hack/lib/common.sh): not whatever python3 PATH finds.
const debianPython = "/usr/bin/python3"

// pythonSDKTimeout bounds the Python run: about a minute on the local cluster, most of it a
// pause and a resume.
const pythonSDKTimeout = 15 * time.Minute

// TestPythonSDK runs the Python SDK's end-to-end tests (sdk/python/tests/e2e) against the
// cluster, in a namespace of their own with a pool of the Python image: sandboxes made from
// the pool, exec, files, proxy, processes, code contexts, renewal, pause, the network policy,
// and the errors (not found, invalid, forbidden for a ServiceAccount that may only read). It
// fails with the Python output when a Python test fails, is skipped, or cannot run.
func TestPythonSDK(t *testing.T) {
	if out, err := exec.Command(debianPython, "-c", "import kubernetes, websocket, requests").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import the SDK's dependencies (apt-get install python3-kubernetes python3-websocket python3-requests): %v\n%s",
			debianPython, err, out)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}

	ns := newNamespace(t)
	applyPool(t, ns, "py", 3, 3, 10)
	// kubectl wait watches the pool.
	if r := kubectl(t, "-n", ns, "wait", "--for=condition=Ready", "pool/py", "--timeout=3m"); r.code != 0 {
		t.Fatalf("pool py not Ready: %s%s\n%s", r.stdout, r.stderr, getPool(t, ns, "py"))
	}

	ctx, cancel := context.WithTimeout(context.Background(), pythonSDKTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, debianPython, "-m", "unittest", "discover", "-v", "-s", "sdk/python/tests/e2e", "-t", "sdk/python")
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"KUBE_SANDBOX_NAMESPACE="+ns,
		"KUBE_SANDBOX_POOL=py",
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONUNBUFFERED=1",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start).Round(time.Second)
	text := out.String()
	switch {
	case ctx.Err() != nil:
		t.Fatalf("the Python SDK's e2e tests did not end within %s:\n%s", pythonSDKTimeout, text)
	case err != nil:
		t.Fatalf("the Python SDK's e2e tests failed (%v) after %s:\n%s", err, took, text)
	case !regexp.MustCompile(`(?m)^OK$`).MatchString(text):
		// "OK (skipped=N)" means tests did not run: here they all must.
		t.Fatalf("the Python SDK's e2e tests did not all run after %s:\n%s", took, text)
	}
	ran := regexp.MustCompile(`Ran (\d+) tests? in`).FindStringSubmatch(text)
	if ran == nil || ran[1] == "0" {
		t.Fatalf("the Python SDK's e2e tests ran no test:\n%s", text)
	}
	t.Logf("Python SDK: %s tests passed in %s", ran[1], took)
	if testing.Verbose() {
		t.Log("\n" + strings.TrimSpace(text))
	}
}
