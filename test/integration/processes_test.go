package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/test/integration/framework"
)

// processes is the processes subresource of sandbox name, as c's user.
func processes(c sandboxclient.Interface, ns, name string, verb string, path ...string) *rest.Request {
	rc := c.SandboxV1alpha1().RESTClient()
	req := rc.Get()
	if verb == "POST" {
		req = rc.Post()
	}
	return req.Namespace(ns).Resource("sandboxes").Name(name).SubResource(append([]string{"processes"}, path...)...)
}

func startProcess(ctx context.Context, c sandboxclient.Interface, ns, name string, spec sandboxv1alpha1.SandboxProcessSpec) (*sandboxv1alpha1.SandboxProcess, error) {
	out := &sandboxv1alpha1.SandboxProcess{}
	err := processes(c, ns, name, "POST").Body(&sandboxv1alpha1.SandboxProcess{Spec: spec}).Do(ctx).Into(out)
	return out, err
}

func getProcess(ctx context.Context, c sandboxclient.Interface, ns, name, id string, replica int32) (*sandboxv1alpha1.SandboxProcess, error) {
	out := &sandboxv1alpha1.SandboxProcess{}
	err := processes(c, ns, name, "GET", id).Param("replica", fmt.Sprint(replica)).Do(ctx).Into(out)
	return out, err
}

func listProcesses(ctx context.Context, c sandboxclient.Interface, ns, name string, params map[string]string) (*sandboxv1alpha1.SandboxProcessList, error) {
	req := processes(c, ns, name, "GET")
	for k, v := range params {
		req = req.Param(k, v)
	}
	out := &sandboxv1alpha1.SandboxProcessList{}
	err := req.Do(ctx).Into(out)
	return out, err
}

func signalProcess(ctx context.Context, c sandboxclient.Interface, ns, name, id string, replica int32, sig sandboxv1alpha1.SandboxProcessSignal) (*sandboxv1alpha1.SandboxProcess, error) {
	out := &sandboxv1alpha1.SandboxProcess{}
	err := processes(c, ns, name, "POST", id, "signal").Param("replica", fmt.Sprint(replica)).Body(&sig).Do(ctx).Into(out)
	return out, err
}

// processLog reads the log of process id of replica 0 as the admin, with params; it answers
// the body and execd's offset headers.
func processLog(ctx context.Context, ns, name, id string, params map[string]string) (body, offset, next string, err error) {
	req := sandboxes.SandboxV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxes").Name(name).SubResource("log").Param("process", id)
	for k, v := range params {
		req = req.Param(k, v)
	}
	// The REST client's Stream hides the headers: the request goes through its HTTP client.
	resp, err := sandboxes.SandboxV1alpha1().RESTClient().(*rest.RESTClient).Client.Get(req.URL().String())
	if err != nil {
		return "", "", "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", "", "", fmt.Errorf("log: %s %s", resp.Status, data)
	}
	return string(data), resp.Header.Get(execdapi.ProcessLogOffsetHeader), resp.Header.Get(execdapi.ProcessLogNextOffsetHeader), err
}

// attach joins process id of replica with the WebSocket or the SPDY executor, until the
// process's output ends.
func attach(ctx context.Context, cfg *rest.Config, protocol, ns, name string, opts sandboxv1alpha1.SandboxAttachOptions, streams remotecommand.StreamOptions) error {
	c, err := sandboxclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	u := c.SandboxV1alpha1().RESTClient().Post().Namespace(ns).Resource("sandboxes").Name(name).SubResource("attach").
		VersionedParams(&opts, scheme.ParameterCodec).URL()
	var exec remotecommand.Executor
	if protocol == "spdy" {
		exec, err = remotecommand.NewSPDYExecutor(cfg, "POST", u)
	} else {
		exec, err = remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	}
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, streams)
}

// attachRequest is an attach as the admin that asks for no upgrade: what the server answers
// before one, as an error.
func attachRequest(ctx context.Context, ns, name string, opts sandboxv1alpha1.SandboxAttachOptions) error {
	return sandboxes.SandboxV1alpha1().RESTClient().Post().Namespace(ns).Resource("sandboxes").Name(name).SubResource("attach").
		VersionedParams(&opts, scheme.ParameterCodec).Do(ctx).Error()
}

// awaitedBuffer collects what is written to it, and closes seen once it holds want.
type awaitedBuffer struct {
	want string
	seen chan struct{}

	mu   sync.Mutex
	buf  bytes.Buffer
	once sync.Once
}

func newAwaitedBuffer(want string) *awaitedBuffer {
	return &awaitedBuffer{want: want, seen: make(chan struct{})}
}

func (b *awaitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if strings.Contains(b.buf.String(), b.want) {
		b.once.Do(func() { close(b.seen) })
	}
	return n, err
}

func (b *awaitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// processTable GETs the processes of a sandbox as a Table, as `kubectl sandbox ps` does.
func processTable(ctx context.Context, ns, name string) (*metav1.Table, error) {
	result := processes(sandboxes, ns, name, "GET").SetHeader("Accept", tasksTableAccept).Do(ctx)
	if err := result.Error(); err != nil {
		return nil, err
	}
	data, err := result.Raw()
	if err != nil {
		return nil, err
	}
	table := &metav1.Table{}
	if err := utiljson.Unmarshal(data, table); err != nil || table.Kind != "Table" {
		return nil, fmt.Errorf("not a Table (%v): %s", err, data)
	}
	return table, nil
}

// TestProcesses: through the aggregator to the real execd of each replica's pod, a process
// starts and answers at once, is listed (every replica's, or one's, as a table too) and got,
// its log is read from an offset with the offsets in the headers, clients attach to it over
// WebSocket and SPDY, it is signalled, and its end is seen; unknown and ended processes are
// 404 and 410, invalid starts 422 with field paths.
func TestProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(suiteCtx, 2*time.Minute)
	defer cancel()
	ns := newNamespace(t)
	nodeCtx, stopNode := context.WithCancel(suiteCtx)
	t.Cleanup(stopNode)
	if _, err := framework.StartSimulatedNode(nodeCtx, cp, ns, true, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	s := sandbox("ps")
	s.Spec.Replicas = ptr.To[int32](2)
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSandboxPhase(t, ns, "ps", sandboxv1alpha1.PhaseRunning)
	admin := userConfig(framework.AdminToken)

	// Discovery: processes are read (get) and started or signalled (create); attach is a
	// create, and a get to upgrade.
	resources, err := sandboxes.Discovery().ServerResourcesForGroupVersion(sandboxv1alpha1.SchemeGroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	verbs := map[string][]string{}
	for _, r := range resources.APIResources {
		if r.Name == "sandboxes/processes" || r.Name == "sandboxes/attach" {
			verbs[r.Name+" "+r.Kind] = r.Verbs
		}
	}
	if diff := cmp.Diff(map[string][]string{
		"sandboxes/processes SandboxProcess":    {"create", "get"},
		"sandboxes/attach SandboxAttachOptions": {"create", "get"},
	}, verbs); diff != "" {
		t.Errorf("discovery (-want +got):\n%s", diff)
	}

	// p1, in replica 0: reads its input until it ends (stdinOnce: the attached client's).
	p1, err := startProcess(ctx, sandboxes, ns, "ps", sandboxv1alpha1.SandboxProcessSpec{
		Command: []string{"sh", "-c"}, Args: []string{`echo start; while read l; do echo "got:$l"; done; echo end; exit 7`},
		Stdin: true, StdinOnce: true,
	})
	if err != nil {
		t.Fatalf("start p1: %v", err)
	}
	if p1.Name == "" || p1.Namespace != ns || p1.Status.Phase != sandboxv1alpha1.ProcessPhaseRunning || p1.Status.PID == 0 ||
		p1.Status.Pod != "ps-0" || p1.Spec.Replica != 0 || !cmp.Equal(p1.Spec.Command, []string{"sh", "-c", `echo start; while read l; do echo "got:$l"; done; echo end; exit 7`}) {
		t.Errorf("p1 as started: %+v", p1)
	}
	// p2, in replica 1, on a terminal: a screen to replay, then nothing until a signal.
	p2, err := startProcess(ctx, sandboxes, ns, "ps", sandboxv1alpha1.SandboxProcessSpec{
		Replica: 1, Command: []string{"sh", "-c", "echo up; exec sleep 300"}, TTY: true,
		Env: []sandboxv1alpha1.SandboxProcessEnvVar{{Name: "TOKEN", Value: "s3cret"}},
	})
	if err != nil {
		t.Fatalf("start p2: %v", err)
	}
	if p2.Status.Pod != "ps-1" || p2.Spec.Replica != 1 || !p2.Spec.TTY || len(p2.Spec.Env) != 0 {
		t.Errorf("p2 as started (env is never returned): %+v", p2)
	}

	all, err := listProcesses(ctx, sandboxes, ns, "ps", nil)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var ids []string
	for _, p := range all.Items {
		ids = append(ids, fmt.Sprintf("%s/%d/%s", p.Name, p.Spec.Replica, p.Status.Phase))
	}
	if diff := cmp.Diff([]string{p1.Name + "/0/Running", p2.Name + "/1/Running"}, ids); diff != "" {
		t.Errorf("processes of every replica (-want +got):\n%s", diff)
	}
	one, err := listProcesses(ctx, sandboxes, ns, "ps", map[string]string{"replica": "1"})
	if err != nil || len(one.Items) != 1 || one.Items[0].Name != p2.Name {
		t.Errorf("processes of replica 1: %+v %v", one.Items, err)
	}
	if got, err := getProcess(ctx, sandboxes, ns, "ps", p2.Name, 1); err != nil || got.Status.PID != p2.Status.PID {
		t.Errorf("get p2: %+v %v", got, err)
	}

	// The log waits for p1's first line: a follow of 6 bytes ends when they are there.
	if body, offset, _, err := processLog(ctx, ns, "ps", p1.Name, map[string]string{"follow": "true", "limitBytes": "6"}); err != nil || body != "start\n" || offset != "0" {
		t.Fatalf("p1's first line: %q at %q (%v)", body, offset, err)
	}

	// Attach to p1 over WebSocket: its input is ours, it answers, and its stdin closes with
	// ours, so it ends, and so does the stream.
	out := newAwaitedBuffer("end\n")
	err = attach(ctx, admin, "websocket", ns, "ps", sandboxv1alpha1.SandboxAttachOptions{Process: p1.Name, Stdin: true, Stdout: true, Stderr: true},
		remotecommand.StreamOptions{Stdin: strings.NewReader("hello\n"), Stdout: out, Stderr: io.Discard})
	if err != nil || out.String() != "got:hello\nend\n" {
		t.Fatalf("attach to p1: %q (%v)", out.String(), err)
	}
	if got, err := getProcess(ctx, sandboxes, ns, "ps", p1.Name, 0); err != nil || got.Status.Phase != sandboxv1alpha1.ProcessPhaseExited ||
		!cmp.Equal(got.Status.ExitCode, ptr.To[int32](7)) || got.Status.Reason != sandboxv1alpha1.ProcessReasonError || got.Status.EndTime == nil {
		t.Errorf("p1 after its end: %+v %v", got.Status, err)
	}
	// Its whole log from byte 6: complete at once, so the next offset is known.
	body, offset, next, err := processLog(ctx, ns, "ps", p1.Name, map[string]string{"offsetBytes": "6"})
	if err != nil || body != "got:hello\nend\n" || offset != "6" || next != "20" {
		t.Errorf("p1's log from 6: %q at %q, next %q (%v)", body, offset, next, err)
	}

	// Attach to p2 over SPDY with its terminal: the screen comes back first, then the stream
	// lasts until the process ends, which a signal makes it do.
	screen := newAwaitedBuffer("up")
	attached := make(chan error, 1)
	go func() {
		attached <- attach(ctx, admin, "spdy", ns, "ps", sandboxv1alpha1.SandboxAttachOptions{Process: p2.Name, Replica: 1, Stdout: true, TTY: true},
			remotecommand.StreamOptions{Stdout: screen, Tty: true})
	}()
	select {
	case <-screen.seen:
	case err := <-attached:
		t.Fatalf("attach to p2 ended before its screen came: %v (%q)", err, screen.String())
	case <-ctx.Done():
		t.Fatalf("no screen from p2: %q", screen.String())
	}
	if _, err := signalProcess(ctx, sandboxes, ns, "ps", p2.Name, 1, sandboxv1alpha1.SandboxProcessSignal{Signal: "TERM"}); err != nil {
		t.Fatalf("signal p2: %v", err)
	}
	select {
	case err := <-attached:
		if err != nil {
			t.Errorf("attach to p2: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the attach to p2 did not end with the process")
	}
	if got, err := getProcess(ctx, sandboxes, ns, "ps", p2.Name, 1); err != nil || got.Status.Phase != sandboxv1alpha1.ProcessPhaseExited ||
		got.Status.Signal != "TERM" || got.Status.ExitCode != nil {
		t.Errorf("p2 after the signal: %+v %v", got.Status, err)
	}

	// The table, as kubectl prints it.
	table, err := processTable(ctx, ns, "ps")
	if err != nil {
		t.Fatalf("table: %v", err)
	}
	var columns []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			columns = append(columns, c.Name)
		}
	}
	if diff := cmp.Diff([]string{"ID", "Replica", "Phase", "Exit", "PID", "Duration", "Command", "TTY"}, columns); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
	var rows [][]any
	for _, r := range table.Rows {
		rows = append(rows, []any{r.Cells[0], r.Cells[1], r.Cells[2], r.Cells[3], r.Cells[7]})
		m := &metav1.PartialObjectMetadata{}
		if err := utiljson.Unmarshal(r.Object.Raw, m); err != nil || m.Name != r.Cells[0] || m.Namespace != ns {
			t.Errorf("row %v: object %s, want the process's metadata", r.Cells, r.Object.Raw)
		}
	}
	want := [][]any{{p1.Name, int64(0), "Exited", "7", false}, {p2.Name, int64(1), "Exited", "SIGTERM", true}}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}

	// Ended, unknown, invalid.
	if _, err := signalProcess(ctx, sandboxes, ns, "ps", p2.Name, 1, sandboxv1alpha1.SandboxProcessSignal{}); !apierrors.IsGone(err) {
		t.Errorf("signal of an ended process: %v, want 410", err)
	}
	// An attach is refused before the upgrade: a plain request gets the Status with its
	// code; the executors, which keep only the message of a refused upgrade, get that.
	if err := attachRequest(ctx, ns, "ps", sandboxv1alpha1.SandboxAttachOptions{Process: p1.Name, Stdout: true}); !apierrors.IsGone(err) {
		t.Errorf("attach to an ended process: %v, want 410", err)
	}
	for _, protocol := range []string{"spdy", "websocket"} {
		err = attach(ctx, admin, protocol, ns, "ps", sandboxv1alpha1.SandboxAttachOptions{Process: p1.Name, Stdout: true}, remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "process "+p1.Name+" has ended (Exited): there is nothing to attach to") {
			t.Errorf("%s attach to an ended process: %v, want the 410's message", protocol, err)
		}
	}
	if _, err := getProcess(ctx, sandboxes, ns, "ps", "p-aaaaaaaa", 0); !apierrors.IsNotFound(err) ||
		err.(apierrors.APIStatus).Status().Details.Kind != "processes" {
		t.Errorf("get of an unknown process: %v, want 404 of a process", err)
	}
	if _, err := getProcess(ctx, sandboxes, ns, "ps", p2.Name, 0); !apierrors.IsNotFound(err) {
		t.Errorf("get of p2 in replica 0: %v, want 404", err)
	}
	if err := attachRequest(ctx, ns, "ps", sandboxv1alpha1.SandboxAttachOptions{Process: "p-aaaaaaaa", Stdout: true}); !apierrors.IsNotFound(err) {
		t.Errorf("attach to an unknown process: %v, want 404", err)
	}
	if err := attachRequest(ctx, ns, "ps", sandboxv1alpha1.SandboxAttachOptions{Stdout: true}); !apierrors.IsInvalid(err) {
		t.Errorf("attach without a process: %v, want 422", err)
	}
	if _, _, _, err := processLog(ctx, ns, "ps", "p-aaaaaaaa", nil); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("log of an unknown process: %v, want 404", err)
	}
	_, err = startProcess(ctx, sandboxes, ns, "ps", sandboxv1alpha1.SandboxProcessSpec{Command: []string{""}, Env: []sandboxv1alpha1.SandboxProcessEnvVar{{Name: "A=B"}}})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("an invalid start: %v, want 422", err)
	}
	var fields []string
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		fields = append(fields, c.Field)
	}
	if diff := cmp.Diff([]string{"spec.command[0]", "spec.env[0].name"}, fields); diff != "" {
		t.Errorf("fields of an invalid start (-want +got):\n%s", diff)
	}
	if _, err := startProcess(ctx, sandboxes, ns, "ps", sandboxv1alpha1.SandboxProcessSpec{Command: []string{"/nonexistent/tool"}}); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), "/nonexistent/tool") {
		t.Errorf("a start of a missing executable: %v, want 422", err)
	}
}

// bind binds user to a Role or ClusterRole in ns. The kube-apiserver sees it a moment later:
// callers wait for a request it allows.
func bind(t *testing.T, ns, user, kind, role string) {
	t.Helper()
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-" + role, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	if err := kube.Create(context.Background(), binding); err != nil {
		t.Fatal(err)
	}
}

// TestProcessesRBAC: processes are authorized by subresource and verb. get on sandboxes
// alone reads none; the view role of artifacts/ lists and reads processes and their logs but
// starts, signals and attaches to none; the edit role does all of it.
func TestProcessesRBAC(t *testing.T) {
	ctx, cancel := context.WithTimeout(suiteCtx, 2*time.Minute)
	defer cancel()
	ns := newNamespace(t)
	runningSandbox(t, ns, "rbac")
	// On a terminal, so that an attach gets its screen at once.
	p, err := startProcess(ctx, sandboxes, ns, "rbac", sandboxv1alpha1.SandboxProcessSpec{Command: []string{"sh", "-c", "echo hi; exec sleep 300"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.ApplyManifest(ctx, kube, "artifacts/base/rbac-users.yaml"); err != nil {
		t.Fatal(err)
	}

	// Alice may get sandboxes, and nothing of their processes.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "get-sandboxes", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{sandboxv1alpha1.GroupName}, Resources: []string{"sandboxes"}, Verbs: []string{"get"}}}}
	if err := kube.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	bind(t, ns, "alice", "Role", role.Name)
	alice := sandboxClientFor(t, framework.AliceToken)
	waitFor(t, "alice's get of sandboxes", 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := alice.SandboxV1alpha1().Sandboxes(ns).Get(ctx, "rbac", metav1.GetOptions{})
		return err == nil, nil
	})
	if _, err := listProcesses(ctx, alice, ns, "rbac", nil); !apierrors.IsForbidden(err) {
		t.Errorf("alice lists processes: %v, want 403", err)
	}
	if _, err := getProcess(ctx, alice, ns, "rbac", p.Name, 0); !apierrors.IsForbidden(err) {
		t.Errorf("alice gets a process: %v, want 403", err)
	}
	if _, err := startProcess(ctx, alice, ns, "rbac", sandboxv1alpha1.SandboxProcessSpec{Command: []string{"true"}}); !apierrors.IsForbidden(err) {
		t.Errorf("alice starts a process: %v, want 403", err)
	}

	// Bob views.
	bind(t, ns, "bob", "ClusterRole", "kube-sandbox-view")
	bob := sandboxClientFor(t, framework.BobToken)
	waitFor(t, "bob's view role", 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := listProcesses(ctx, bob, ns, "rbac", nil)
		return err == nil, nil
	})
	if got, err := getProcess(ctx, bob, ns, "rbac", p.Name, 0); err != nil || got.Name != p.Name {
		t.Errorf("bob gets the process: %v", err)
	}
	logReq := bob.SandboxV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxes").Name("rbac").SubResource("log").
		Param("process", p.Name).Param("follow", "true").Param("limitBytes", "2")
	if data, err := logReq.DoRaw(ctx); err != nil || string(data) != "hi" {
		t.Errorf("bob reads the log: %q %v", data, err)
	}
	if _, err := startProcess(ctx, bob, ns, "rbac", sandboxv1alpha1.SandboxProcessSpec{Command: []string{"true"}}); !apierrors.IsForbidden(err) {
		t.Errorf("bob starts a process: %v, want 403", err)
	}
	if _, err := signalProcess(ctx, bob, ns, "rbac", p.Name, 0, sandboxv1alpha1.SandboxProcessSignal{Signal: "KILL"}); !apierrors.IsForbidden(err) {
		t.Errorf("bob signals a process: %v, want 403", err)
	}
	for _, protocol := range []string{"spdy", "websocket"} {
		err := attach(ctx, userConfig(framework.BobToken), protocol, ns, "rbac", sandboxv1alpha1.SandboxAttachOptions{Process: p.Name, Stdout: true},
			remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !(apierrors.IsForbidden(err) || strings.Contains(err.Error(), "forbidden")) {
			t.Errorf("bob attaches over %s: %v, want 403", protocol, err)
		}
	}

	// Carol edits: she signals it, and sees it end in the stream she attached.
	bind(t, ns, "carol", "ClusterRole", "kube-sandbox-view")
	bind(t, ns, "carol", "ClusterRole", "kube-sandbox-edit")
	carol := sandboxClientFor(t, framework.CarolToken)
	var started *sandboxv1alpha1.SandboxProcess
	waitFor(t, "carol's edit role", 30*time.Second, func(ctx context.Context) (bool, error) {
		started, err = startProcess(ctx, carol, ns, "rbac", sandboxv1alpha1.SandboxProcessSpec{Command: []string{"true"}})
		return err == nil, nil
	})
	if started.Name == "" {
		t.Errorf("carol's process: %+v", started)
	}
	screen := newAwaitedBuffer("hi")
	attached := make(chan error, 1)
	go func() {
		attached <- attach(ctx, userConfig(framework.CarolToken), "websocket", ns, "rbac", sandboxv1alpha1.SandboxAttachOptions{Process: p.Name, Stdout: true, TTY: true},
			remotecommand.StreamOptions{Stdout: screen, Tty: true})
	}()
	// The replayed screen says the attach is in: the signal must not end the process before.
	select {
	case <-screen.seen:
	case err := <-attached:
		t.Fatalf("carol's attach ended before the screen came: %v (%q)", err, screen.String())
	case <-ctx.Done():
		t.Fatalf("no screen for carol: %q", screen.String())
	}
	if _, err := signalProcess(ctx, carol, ns, "rbac", p.Name, 0, sandboxv1alpha1.SandboxProcessSignal{Signal: "KILL"}); err != nil {
		t.Fatalf("carol signals the process: %v", err)
	}
	select {
	case err := <-attached:
		if err != nil {
			t.Errorf("carol's attach: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("carol's attach did not end with the process")
	}
}
