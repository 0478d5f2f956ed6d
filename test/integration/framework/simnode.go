package framework

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// SimulatedNode stands in for the kubelet of one namespace: every pod created there is marked
// Running and Ready at once, with an address of its own on loopback (127.1.x.y) and a
// container ID. With execd, a real execd serves each pod on that address and execd's port, as
// the sandbox image would: over TLS, trusting the client CA of the pod's env, belonging to the
// sandbox its env names (none for a pool pod), with a projected token the node requests for
// the pod as the kubelet does. The controller certifies and claims it, and the apiserver
// reaches it, over the network as in a cluster.
//
// It counts the pods created and deleted in the namespace, from the watch, so that a test can
// tell a steady pool from a create/delete storm.
type SimulatedNode struct {
	Created, Deleted atomic.Int64

	kube      kubernetes.Interface
	namespace string
	execd     bool
	filesRoot string

	mu      sync.Mutex
	servers map[types.UID]*execdServer
}

type execdServer struct {
	srv       *http.Server
	h         *execd.Handler
	tokenFile string
	// taskDir holds the pod's task state and logs, as its state and log volumes would.
	taskDir string
}

func (s *execdServer) close() {
	_ = s.srv.Close()
	// Also kills the pod's task, as the end of its container would.
	s.h.StopSessions()
	s.h.StopClaimedEntrypoint()
	_ = os.Remove(s.tokenFile)
	_ = os.RemoveAll(s.taskDir)
}

// StartSimulatedNode runs until ctx ends. filesRoot, when given, is the files root of every
// execd (none: no files API).
func StartSimulatedNode(ctx context.Context, cp *ControlPlane, namespace string, withExecd bool, filesRoot ...string) (*SimulatedNode, error) {
	// It stands for the kubelets of many nodes: the client is not what limits how fast pods start.
	cfg := cp.Config(AdminToken)
	cfg.QPS, cfg.Burst = 2000, 4000
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	n := &SimulatedNode{kube: kube, namespace: namespace, execd: withExecd, servers: map[types.UID]*execdServer{}}
	if len(filesRoot) > 0 {
		n.filesRoot = filesRoot[0]
	}
	// An informer, not a bare watch: the kube-apiserver ends watches (after its request
	// timeout, or when a watcher falls behind), and a node that stopped seeing pods would
	// leave thousands Pending.
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(namespace))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				n.Created.Add(1)
				go n.start(ctx, pod)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				n.Deleted.Add(1)
				n.stop(pod.UID)
			}
		},
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("simulated node of %s: the pod informer did not sync", namespace)
	}
	go func() {
		<-ctx.Done()
		factory.Shutdown()
		n.stopAll()
	}()
	return n, nil
}

// lastIP numbers the pods of every simulated node of the process: a node's pods keep their
// addresses until it has closed their servers, which may be after the next node started.
var lastIP atomic.Int64

// address gives each pod a loopback address of its own, 127.1.0.1 to 127.250.249.250.
func (n *SimulatedNode) address() string {
	i := lastIP.Add(1)
	return fmt.Sprintf("127.%d.%d.%d", 1+i/(250*250), (i/250)%250, i%250+1)
}

func (n *SimulatedNode) start(ctx context.Context, pod *corev1.Pod) {
	ip := n.address()
	if n.execd {
		if err := n.serveExecd(ctx, pod, ip); err != nil {
			fmt.Printf("simulated node: execd for pod %s: %v\n", pod.Name, err)
			return
		}
	}
	pod = pod.DeepCopy()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: pod.Spec.Containers[0].Name, Ready: true, ContainerID: "sim://" + string(pod.UID),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
	}}
	if _, err := n.kube.CoreV1().Pods(n.namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil &&
		!apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		fmt.Printf("simulated node: mark pod %s ready: %v\n", pod.Name, err)
	}
}

// ContextPython is the interpreter of the simulated pods' code contexts.
const ContextPython = "/usr/bin/python3"

// serveExecd starts a real execd for the pod.
func (n *SimulatedNode) serveExecd(ctx context.Context, pod *corev1.Pod, ip string) error {
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	clientCAs, err := execd.ParseClientCAs([]byte(env[execdapi.EnvClientCA]))
	if err != nil {
		return fmt.Errorf("client CA of the pod: %w", err)
	}
	id, err := execd.NewServerIdentity("", clientCAs)
	if err != nil {
		return err
	}
	// What the kubelet projects into the pod: a token for execd's audience, bound to the pod.
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := n.kube.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{execdapi.IdentityAudience},
			ExpirationSeconds: ptr.To(int64(3600)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token request: %w", err)
	}
	tokenFile, err := os.CreateTemp("", "simnode-token-")
	if err != nil {
		return err
	}
	_, _ = tokenFile.WriteString(tr.Status.Token)
	_ = tokenFile.Close()
	// What the pod's state and log volumes hold for its task.
	taskDir, err := os.MkdirTemp("", "simnode-task-")
	if err != nil {
		_ = os.Remove(tokenFile.Name())
		return err
	}
	cleanup := func() {
		_ = os.Remove(tokenFile.Name())
		_ = os.RemoveAll(taskDir)
	}
	h, err := execd.NewHandler(execd.HandlerConfig{
		Executor:          execd.NewExecutor(nil),
		Sandbox:           execd.SandboxFromEnv(func(k string) string { return env[k] }),
		IdentityTokenFile: tokenFile.Name(),
		FilesRoot:         n.filesRoot,
		TaskStateDir:      filepath.Join(taskDir, "state"),
		TaskLogDir:        filepath.Join(taskDir, "log"),
		// Code contexts run real kernels: Debian's python3 with ipykernel (TEST_PACKAGES),
		// not whichever python3 is first on PATH.
		ContextDir:    filepath.Join(taskDir, "contexts"),
		ContextPython: ContextPython,
	}, id)
	if err != nil {
		cleanup()
		return err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(execdapi.Port)))
	if err != nil {
		h.StopSessions()
		cleanup()
		return err
	}
	srv := execd.NewServer(h, id)
	n.mu.Lock()
	n.servers[pod.UID] = &execdServer{srv: srv, h: h, tokenFile: tokenFile.Name(), taskDir: taskDir}
	n.mu.Unlock()
	go func() { _ = srv.ServeTLS(l, "", "") }()
	return nil
}

func (n *SimulatedNode) stop(uid types.UID) {
	n.mu.Lock()
	srv := n.servers[uid]
	delete(n.servers, uid)
	n.mu.Unlock()
	if srv != nil {
		srv.close()
	}
}

func (n *SimulatedNode) stopAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for uid, srv := range n.servers {
		srv.close()
		delete(n.servers, uid)
	}
}
