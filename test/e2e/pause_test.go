//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kube-sandbox/kube-sandbox/test/e2e/outside"
)

// pausedSandbox is what the pause tests read of a sandbox.
type pausedSandbox struct {
	Metadata struct{ UID string }
	Spec     struct{ Paused bool }
	Status   struct {
		Phase      string
		Pods       []sandboxPod
		Conditions []condition
		Snapshots  []struct {
			Replica         int32
			Image, Digest   string
			Size, LayerSize int64
			Pod             string
		}
	}
}

func (s pausedSandbox) String() string {
	p := findCondition(s.Status.Conditions, "Paused")
	r := findCondition(s.Status.Conditions, "Ready")
	return fmt.Sprintf("phase %s pods %d snapshots %d Paused=%s/%s (%s) Ready=%s/%s (%s)", s.Status.Phase, len(s.Status.Pods),
		len(s.Status.Snapshots), p.Status, p.Reason, p.Message, r.Status, r.Reason, r.Message)
}

func getPaused(t *testing.T, ns, name string) pausedSandbox {
	t.Helper()
	var s pausedSandbox
	getJSON(t, &s, "-n", ns, "get", "sandbox", name)
	return s
}

// sandboxPodsLeft are the pods of a sandbox that are not being deleted.
func sandboxPodsLeft(t *testing.T, ns, name string) []string {
	t.Helper()
	var list struct{ Items []podObject }
	getJSON(t, &list, "-n", ns, "get", "pods", "-l", labelBatchSandbox+"="+name)
	var out []string
	for _, p := range list.Items {
		if p.Metadata.DeletionTimestamp == nil {
			out = append(out, p.Metadata.Name)
		}
	}
	return out
}

// writeState is Python that leaves a sandbox's work on its filesystem: files, a venv with a
// package in it, and a file of SIZE random bytes; it prints the sha256 of what it wrote.
const writeState = `
import hashlib, os, subprocess, sys
size, tag = int(sys.argv[1]), sys.argv[2]
os.makedirs("/work/data", exist_ok=True)
open("/work/data/note.txt", "w").write("written before the pause by " + tag + "\n")
with open("/work/data/blob", "wb") as f:
    f.write(os.urandom(size))
subprocess.check_call([sys.executable, "-m", "venv", "--without-pip", "/opt/venv"])
site = subprocess.check_output(["/opt/venv/bin/python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).decode().strip()
os.makedirs(site + "/kspkg", exist_ok=True)
open(site + "/kspkg/__init__.py", "w").write("GREETING = 'hello from ' + %r\n" % tag)
os.remove("/etc/issue") if os.path.exists("/etc/issue") else None
print(hashlib.sha256(open("/work/data/blob", "rb").read()).hexdigest())
`

// readState prints what writeState left: the note, the package's greeting (imported by the
// venv's python), the blob's sha256, and whether the deleted file stayed deleted.
const readState = `
import hashlib, os, subprocess
print(open("/work/data/note.txt").read().strip())
print(subprocess.check_output(["/opt/venv/bin/python", "-c", "import kspkg; print(kspkg.GREETING)"]).decode().strip())
print(hashlib.sha256(open("/work/data/blob", "rb").read()).hexdigest())
print("issue-gone" if not os.path.exists("/etc/issue") else "issue-back")
`

// pauseResume pauses a sandbox and resumes it, checking the phases and that no pod is left
// while it is paused; it returns the sandbox as it was when paused.
func pauseResume(t *testing.T, ns, name string) pausedSandbox {
	t.Helper()
	start := time.Now()
	mustSandboxCmd(t, ns, "pause", name, "--wait", "--timeout", "5m")
	t.Logf("%s paused in %.2fs", name, time.Since(start).Seconds())
	paused := getPaused(t, ns, name)
	if paused.Status.Phase != "Paused" || findCondition(paused.Status.Conditions, "Paused").Status != "True" {
		t.Fatalf("after pause --wait: %s", paused)
	}
	if left := sandboxPodsLeft(t, ns, name); len(left) > 0 {
		t.Errorf("pods of a paused sandbox: %v", left)
	}
	start = time.Now()
	mustSandboxCmd(t, ns, "resume", name, "--wait", "--timeout", "5m")
	t.Logf("%s resumed (Running) in %.2fs", name, time.Since(start).Seconds())
	return paused
}

// TestPauseResume: a Python sandbox's files and venv survive a pause, in which its pod is
// gone, and a resume; exec works after; deleting the sandbox deletes its snapshot from the
// registry.
func TestPauseResume(t *testing.T) {
	ns := newNamespace(t)
	createRunningSandbox(t, ns, "work")
	before := getPaused(t, ns, "work")
	sum := strings.TrimSpace(mustSandboxCmd(t, ns, "exec", "work", "--", "python3", "-c", writeState, "1048576", "work"))

	paused := pauseResume(t, ns, "work")
	if len(paused.Status.Snapshots) != 1 || !strings.Contains(paused.Status.Snapshots[0].Image, "@sha256:") {
		t.Fatalf("snapshots of the paused sandbox: %+v", paused.Status.Snapshots)
	}
	snap := paused.Status.Snapshots[0]
	t.Logf("snapshot %s: %d bytes, layer %d", snap.Image, snap.Size, snap.LayerSize)
	if snap.LayerSize < 1<<20 {
		t.Errorf("the layer of changes is %d bytes, less than the 1 MiB of random data written", snap.LayerSize)
	}

	got := mustSandboxCmd(t, ns, "exec", "work", "--", "python3", "-c", readState)
	want := "written before the pause by work\nhello from work\n" + sum + "\nissue-gone\n"
	if got != want {
		t.Errorf("after the resume the sandbox has:\n%s\nwant:\n%s", got, want)
	}
	after := getPaused(t, ns, "work")
	if after.Metadata.UID != before.Metadata.UID || after.Status.Pods[0].Name == "" {
		t.Errorf("the resumed sandbox is another: UID %s, was %s", after.Metadata.UID, before.Metadata.UID)
	}
	img := mustKubectl(t, "-n", ns, "get", "pod", after.Status.Pods[0].Name, "-o", "jsonpath={.spec.containers[0].image}")
	if img != snap.Image {
		t.Errorf("the resumed pod runs %s, want its snapshot %s", img, snap.Image)
	}

	reg := openRegistry(t)
	repo, digest := repositoryOf(t, snap.Image), snap.Digest
	if code := reg.manifest(t, repo, digest); code != http.StatusOK {
		t.Fatalf("GET the snapshot's manifest before the delete: %d", code)
	}
	mustSandboxCmd(t, ns, "delete", "work", "--wait")
	if code := reg.manifest(t, repo, digest); code != http.StatusNotFound {
		t.Errorf("GET the snapshot's manifest after the sandbox was deleted: %d, want 404", code)
	}
}

// TestPauseResumeReplicas: each of three replicas pauses and resumes with its own snapshot.
func TestPauseResumeReplicas(t *testing.T) {
	ns := newNamespace(t)
	mustSandboxCmd(t, ns, "create", "three", "--image", pythonImage, "--replicas", "3")
	waitSandboxRunning(t, ns, 2*time.Minute, "three")
	for i := range 3 {
		mustSandboxCmd(t, ns, "exec", "three", "--replica", strconv.Itoa(i), "--", "sh", "-c", fmt.Sprintf("echo replica-%d > /marker", i))
	}
	paused := pauseResume(t, ns, "three")
	if len(paused.Status.Snapshots) != 3 {
		t.Fatalf("snapshots: %+v, want 3", paused.Status.Snapshots)
	}
	digests := map[string]bool{}
	for _, s := range paused.Status.Snapshots {
		digests[s.Digest] = true
	}
	if len(digests) != 3 {
		t.Errorf("the replicas' snapshots share digests: %+v", paused.Status.Snapshots)
	}
	for i := range 3 {
		if got := mustSandboxCmd(t, ns, "exec", "three", "--replica", strconv.Itoa(i), "--", "cat", "/marker"); got != fmt.Sprintf("replica-%d\n", i) {
			t.Errorf("replica %d after the resume: /marker = %q", i, got)
		}
	}
}

// TestPauseResumePooled: a pooled sandbox pauses, and comes back as pods of its own from its
// snapshot and its pool's template, which its pool no longer counts.
func TestPauseResumePooled(t *testing.T) {
	ns := newNamespace(t)
	applyPool(t, ns, "py", 1, 1, 3)
	waitPoolFull(t, ns, "py", 1, 0, 3*time.Minute)
	mustSandboxCmd(t, ns, "create", "pooled", "--pool", "py", "--env", "KEEP=me")
	waitSandboxRunning(t, ns, time.Minute, "pooled")
	mustSandboxCmd(t, ns, "exec", "pooled", "--", "sh", "-c", "echo pooled-work > /root/state")
	pauseResume(t, ns, "pooled")
	if got := mustSandboxCmd(t, ns, "exec", "pooled", "--", "sh", "-c", "cat /root/state; echo $KEEP"); got != "pooled-work\nme\n" {
		t.Errorf("after the resume: %q, want the file and the env", got)
	}
	s := getPaused(t, ns, "pooled")
	pod := getPod(t, ns, s.Status.Pods[0].Name)
	if pod.Metadata.Labels[labelPool] != "" || pod.controller() != "BatchSandbox/pooled" {
		t.Errorf("the resumed pod: pool label %q, controller %s; want no pool's, the sandbox's", pod.Metadata.Labels[labelPool], pod.controller())
	}
}

// TestPauseResumeKeepsPolicy: a sandbox's egress policy holds after a resume: the allowed host
// answers, the other is refused.
func TestPauseResumeKeepsPolicy(t *testing.T) {
	net := outside.New(t)
	web := net.AddHost(t, "web")
	other := net.AddHost(t, "other")
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("outside")) })
	web.ServeHTTP(t, 80, handler)
	other.ServeHTTP(t, 80, handler)

	ns := newNamespace(t)
	mustSandboxCmd(t, ns, "create", "fenced", "--image", pythonImage, "--allow", web.IP.String())
	waitSandboxRunning(t, ns, 2*time.Minute, "fenced")
	check := func(when string) {
		got := probeSandbox(t, ns, "fenced", "tcp,allowed,"+web.IP.String()+",80", "tcp,denied,"+other.IP.String()+",80")
		if got["allowed"] != "ok" || got["denied"] != "refused" {
			t.Errorf("%s: allowed %s, denied %s; want ok and refused", when, got["allowed"], got["denied"])
		}
	}
	check("before the pause")
	mustSandboxCmd(t, ns, "pause", "fenced", "--wait")
	if c := findCondition(getPaused(t, ns, "fenced").Status.Conditions, "EgressReady"); c.Status != "True" || c.Reason != "Paused" {
		t.Errorf("EgressReady while paused = %s/%s (%s), want True/Paused", c.Status, c.Reason, c.Message)
	}
	mustSandboxCmd(t, ns, "resume", "fenced", "--wait")
	waitEgressReady(t, ns, "fenced")
	check("after the resume")
}

// TestPauseSnapshotterKilled: killing the node agent (sandbox-node, which takes snapshots) during a pause keeps the pod and the
// sandbox usable, and the condition says the snapshot failed.
func TestPauseSnapshotterKilled(t *testing.T) {
	ns := newNamespace(t)
	createRunningSandbox(t, ns, "victim")
	// Enough random data for the snapshot to take a few seconds.
	mustSandboxCmd(t, ns, "exec", "victim", "--", "python3", "-c", writeState, strconv.Itoa(300<<20), "victim")
	mustSandboxCmd(t, ns, "pause", "victim")
	waitFor(t, "the snapshot under way", time.Minute, func() (bool, string) {
		s := getPaused(t, ns, "victim")
		c := findCondition(s.Status.Conditions, "Paused")
		return c.Reason == "Pausing" && (strings.Contains(c.Message, "Committing") || strings.Contains(c.Message, "Pushing")), s.String()
	})
	pid := nodeAgentPID(t)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill sandbox-node (pid %d): %v", pid, err)
	}
	s := waitPausedFailed(t, ns, "victim")
	t.Logf("after the kill: %s", s)
	if left := sandboxPodsLeft(t, ns, "victim"); len(left) != 1 {
		t.Errorf("pods after the failed snapshot: %v, want the one kept", left)
	}
	if got := mustSandboxCmd(t, ns, "exec", "victim", "--", "cat", "/work/data/note.txt"); got != "written before the pause by victim\n" {
		t.Errorf("exec after the failed snapshot: %q", got)
	}
	// Called off: the sandbox runs on as it is.
	mustSandboxCmd(t, ns, "resume", "victim", "--wait")
}

func waitPausedFailed(t *testing.T, ns, name string) pausedSandbox {
	t.Helper()
	var s pausedSandbox
	waitFor(t, "the Paused condition to say the snapshot failed", 2*time.Minute, func() (bool, string) {
		s = getPaused(t, ns, name)
		c := findCondition(s.Status.Conditions, "Paused")
		return c.Status == "False" && (c.Reason == "SnapshotFailed" || c.Reason == "RegistryUnavailable") && s.Status.Phase == "Running", s.String()
	})
	return s
}

// processPID is the node's first process whose command line begins with prefix.
func processPID(t *testing.T, prefix string) int {
	t.Helper()
	pids := processPIDs(t, prefix)
	if len(pids) == 0 {
		t.Fatalf("no process %q on the node", strings.TrimSuffix(prefix, "\x00"))
	}
	return pids[0]
}

// processPIDs are the node's processes whose command line begins with prefix.
func processPIDs(t *testing.T, prefix string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.HasPrefix(string(cmdline), prefix) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// registry is the snapshot registry, as the components reach it (Secret kube-sandbox-registry).
type registry struct {
	host, user, password string
	client               *http.Client
}

func openRegistry(t *testing.T) *registry {
	t.Helper()
	var sec struct{ Data map[string]string }
	getJSON(t, &sec, "-n", "kube-sandbox-system", "get", "secret", "kube-sandbox-registry")
	field := func(k string) string {
		v, err := base64.StdEncoding.DecodeString(sec.Data[k])
		if err != nil {
			t.Fatalf("Secret kube-sandbox-registry key %s: %v", k, err)
		}
		return string(v)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(field("ca.crt"))) {
		t.Fatal("Secret kube-sandbox-registry: ca.crt holds no certificate")
	}
	return &registry{host: field("registry"), user: field("username"), password: field("password"),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
}

// manifest is the status code of a GET of repository@digest.
func (r *registry) manifest(t *testing.T, repository, digest string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "https://"+r.host+"/v2/"+repository+"/manifests/"+digest, nil)
	req.SetBasicAuth(r.user, r.password)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json")
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// repositoryOf is the repository path of HOST/PATH@DIGEST.
func repositoryOf(t *testing.T, image string) string {
	t.Helper()
	repo, _, _ := strings.Cut(image, "@")
	_, path, ok := strings.Cut(repo, "/")
	if !ok {
		t.Fatalf("image %q has no repository path", image)
	}
	return path
}

// TestPauseControllerRestart: a controller killed in the middle of a pause, restarted by the
// kubelet, takes the snapshot again and finishes it; the files come back on resume.
func TestPauseControllerRestart(t *testing.T) {
	ns := newNamespace(t)
	createRunningSandbox(t, ns, "steady")
	sum := strings.TrimSpace(mustSandboxCmd(t, ns, "exec", "steady", "--", "python3", "-c", writeState, strconv.Itoa(200<<20), "steady"))
	mustSandboxCmd(t, ns, "pause", "steady")
	waitFor(t, "the snapshot under way", time.Minute, func() (bool, string) {
		s := getPaused(t, ns, "steady")
		c := findCondition(s.Status.Conditions, "Paused")
		return c.Reason == "Pausing" && (strings.Contains(c.Message, "Committing") || strings.Contains(c.Message, "Pushing")), s.String()
	})
	// Killed, not stopped: it neither finishes the snapshot nor hands its lease over. The
	// kubelet starts it again, and it takes the lease once the old one has expired.
	pid := processPID(t, "/usr/local/bin/sandbox-controller\x00")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill sandbox-controller (pid %d): %v", pid, err)
	}
	if s := getPaused(t, ns, "steady"); s.Status.Phase != "Pausing" || len(sandboxPodsLeft(t, ns, "steady")) != 1 {
		t.Fatalf("right after the kill: %s, want Pausing with the pod", s)
	}
	waitFor(t, "Paused after the controller's restart", 4*time.Minute, func() (bool, string) {
		s := getPaused(t, ns, "steady")
		return s.Status.Phase == "Paused", s.String()
	})
	mustSandboxCmd(t, ns, "resume", "steady", "--wait", "--timeout", "3m")
	got := mustSandboxCmd(t, ns, "exec", "steady", "--", "python3", "-c", readState)
	if want := "written before the pause by steady\nhello from steady\n" + sum + "\nissue-gone\n"; got != want {
		t.Errorf("after the resume the sandbox has:\n%s\nwant:\n%s", got, want)
	}
}

// TestPauseSnapshotImages: a paused sandbox's snapshot runs in no pod but the sandbox's own. The
// nodes pull from the snapshot registry with credentials of their own, so the policy
// kube-sandbox-snapshot-images is what stops a user who may create pods, and read the
// sandbox's status with its digest, from reading its files in a pod of theirs: such a pod is
// refused (a container, an init container, another namespace, a cluster admin too), and so are
// an image named by its ID alone and an update that puts the snapshot into a pod. The sandbox
// resumes from it all the same, and its pod can still be labelled.
func TestPauseSnapshotImages(t *testing.T) {
	ns, other := newNamespace(t), newNamespace(t)
	bindUsers(t, ns)
	bindUsers(t, other)
	createRunningSandbox(t, ns, "private")
	mustSandboxCmd(t, ns, "exec", "private", "--", "sh", "-c", "echo only the sandbox reads this > /root/secret")
	mustSandboxCmd(t, ns, "pause", "private", "--wait", "--timeout", "5m")
	paused := getPaused(t, ns, "private")
	if len(paused.Status.Snapshots) != 1 {
		t.Fatalf("snapshots of the paused sandbox: %s", paused)
	}
	snapshot := paused.Status.Snapshots[0].Image
	// What pat may read: the digest is in the status.
	if got := mustKubectl(t, "-n", ns, "--as="+podCreator, "get", "sandbox", "private", "-o", "jsonpath={.status.snapshots[0].image}"); got != snapshot {
		t.Fatalf("%s reads the snapshot as %q, want %q", podCreator, got, snapshot)
	}
	// reader is a pod that prints the sandbox's file from its snapshot, in list (containers or
	// initContainers).
	reader := func(list string) []byte {
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata: {name: reader}\nspec:\n  restartPolicy: Never\n  %s:\n  - {name: c, image: %q, command: [cat, /root/secret]}\n", list, snapshot)
		if list != "containers" {
			fmt.Fprintf(&b, "  containers:\n  - {name: main, image: %q, command: [sleep, \"1\"]}\n", pythonImage)
		}
		return []byte(b.String())
	}
	for _, tc := range []struct {
		name, ns, list string
		as             []string
	}{
		{name: "a pod creator's pod in another namespace", ns: other, list: "containers", as: []string{"--as=" + podCreator}},
		{name: "a pod creator's init container", ns: ns, list: "initContainers", as: []string{"--as=" + podCreator}},
		{name: "a cluster admin's pod", ns: other, list: "containers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"-n", tc.ns}, tc.as...), "create", "-f", "-")
			r := run(t, reader(tc.list), "kubectl", args...)
			if r.code == 0 || !strings.Contains(r.stderr, "kube-sandbox-snapshot-images") || !strings.Contains(r.stderr, "is a sandbox's snapshot") {
				t.Fatalf("create a pod of %s: exit %d: %s%s, want refused by kube-sandbox-snapshot-images", snapshot, r.code, r.stdout, r.stderr)
			}
			if g := kubectl(t, "-n", tc.ns, "get", "pod", "reader"); g.code == 0 {
				t.Fatal("the refused pod was stored")
			}
		})
	}
	t.Run("an image named by its ID alone", func(t *testing.T) {
		// Whatever image of that ID the node holds would run: the snapshot is there once its
		// pod ran on the node.
		byID := fmt.Appendf(nil, "apiVersion: v1\nkind: Pod\nmetadata: {name: by-id}\nspec:\n  containers:\n  - {name: c, image: %q}\n", "sha256:"+strings.Repeat("0", 64))
		r := run(t, byID, "kubectl", "-n", other, "--as="+podCreator, "create", "-f", "-")
		if r.code == 0 || !strings.Contains(r.stderr, "names an image by its ID only") {
			t.Fatalf("create: exit %d: %s%s, want refused", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("an update that puts the snapshot into a pod", func(t *testing.T) {
		plain := fmt.Appendf(nil, "apiVersion: v1\nkind: Pod\nmetadata: {name: plain}\nspec:\n  containers:\n  - {name: c, image: %q, command: [sleep, \"3600\"]}\n", pythonImage)
		if r := run(t, plain, "kubectl", "-n", other, "--as="+podCreator, "create", "-f", "-"); r.code != 0 {
			t.Fatalf("create a plain pod: exit %d: %s", r.code, r.stderr)
		}
		r := kubectl(t, "-n", other, "--as="+podCreator, "set", "image", "pod/plain", "c="+snapshot)
		if r.code == 0 || !strings.Contains(r.stderr, "is a sandbox's snapshot") {
			t.Fatalf("set image: exit %d: %s%s, want refused", r.code, r.stdout, r.stderr)
		}
		if img := mustKubectl(t, "-n", other, "get", "pod", "plain", "-o", "jsonpath={.spec.containers[0].image}"); img != pythonImage {
			t.Errorf("the pod's image is now %s", img)
		}
	})

	mustSandboxCmd(t, ns, "resume", "private", "--wait", "--timeout", "5m")
	if got := mustSandboxCmd(t, ns, "exec", "private", "--", "cat", "/root/secret"); got != "only the sandbox reads this\n" {
		t.Errorf("after the resume /root/secret = %q", got)
	}
	resumed := getPaused(t, ns, "private").Status.Pods[0].Name
	if img := mustKubectl(t, "-n", ns, "get", "pod", resumed, "-o", "jsonpath={.spec.containers[0].image}"); img != snapshot {
		t.Errorf("the resumed pod runs %s, want %s", img, snapshot)
	}
	// An update that leaves the images as they were is no business of the policy.
	mustKubectl(t, "-n", ns, "label", "pod", resumed, "e2e.kube-sandbox.io/checked=true")
}
