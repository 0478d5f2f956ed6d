package framework

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd"
)

// SimulatedNode stands in for the kubelet of one namespace: every pod created there is marked
// Running and Ready at once, with an address of its own on loopback (127.1.x.y) and a
// container ID. With execd, a real execd handler serves each pod on that address and execd's
// port, with the token the pod's env names, as the sandbox image would: the controller's
// claims and the apiserver's exec reach it over the network as in a cluster.
//
// It counts the pods created and deleted in the namespace, from the watch, so that a test can
// tell a steady pool from a create/delete storm.
type SimulatedNode struct {
	Created, Deleted atomic.Int64

	kube      kubernetes.Interface
	namespace string
	execd     bool

	mu      sync.Mutex
	nextIP  int
	servers map[types.UID]*execdServer
}

type execdServer struct {
	srv *http.Server
	h   *execd.Handler
}

func (s *execdServer) close() {
	_ = s.srv.Close()
	s.h.StopSessions()
	s.h.StopClaimedEntrypoint()
}

// StartSimulatedNode runs until ctx ends.
func StartSimulatedNode(ctx context.Context, cp *ControlPlane, namespace string, withExecd bool) (*SimulatedNode, error) {
	kube, err := kubernetes.NewForConfig(cp.Config(AdminToken))
	if err != nil {
		return nil, err
	}
	n := &SimulatedNode{kube: kube, namespace: namespace, execd: withExecd, servers: map[types.UID]*execdServer{}}
	w, err := kube.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	go func() {
		defer w.Stop()
		defer n.stopAll()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				pod, isPod := ev.Object.(*corev1.Pod)
				if !isPod {
					continue
				}
				switch ev.Type {
				case watch.Added:
					n.Created.Add(1)
					go n.start(ctx, pod)
				case watch.Deleted:
					n.Deleted.Add(1)
					n.stop(pod.UID)
				}
			}
		}
	}()
	return n, nil
}

// address gives each pod a loopback address of its own.
func (n *SimulatedNode) address() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nextIP++
	return fmt.Sprintf("127.1.%d.%d", n.nextIP/250, n.nextIP%250+1)
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

// serveExecd starts a real execd handler for the pod, with the token of the Secret its env
// names (the pool's, for a pool pod).
func (n *SimulatedNode) serveExecd(ctx context.Context, pod *corev1.Pod, ip string) error {
	var secretName string
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == controlv1alpha1.ExecdTokenEnv && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secretName = e.ValueFrom.SecretKeyRef.Name
		}
	}
	secret, err := n.kube.CoreV1().Secrets(n.namespace).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("token secret %q: %w", secretName, err)
	}
	h, err := execd.NewHandler(execd.HandlerConfig{
		Token:    string(secret.Data[controlv1alpha1.ExecdTokenKey]),
		Executor: execd.NewExecutor(nil),
	})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(controlv1alpha1.ExecdPort)))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h}
	n.mu.Lock()
	n.servers[pod.UID] = &execdServer{srv: srv, h: h}
	n.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
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
