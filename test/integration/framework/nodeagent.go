package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// NodeAgent stands in for the usage endpoints of sandbox-node, the node agent, on one node:
// it serves what a test sets (Set) on nodeapi.StatsPath and nodeapi.PodStatsPath, at the
// node's address (NodeAddress) and NodeAgentPort (nodeapi.Port on a real node), as the agent does on the host network. It
// holds the agent's own serving certificate, the Secret sandbox-controller issues for it
// (pki.DefaultNodeSecret), and, as the agent does, accepts only clients whose certificate
// the kube-sandbox CA issued to sandbox-apiserver or sandbox-controller: the mutual TLS of
// the real path. A test's pods name the address as their status.hostIP.
type NodeAgent struct {
	// Addr is the node's address: its pods' status.hostIP.
	Addr string
	// Requests counts the requests answered (403s included).
	Requests atomic.Int64

	node string
	srv  *httptest.Server

	mu   sync.Mutex
	pods map[string]nodeapi.PodStats
}

// NodeAgentPort is the port of the stand-in node agents on every node's address, and the
// --node-agent-port of the suite's sandbox-apiserver: one free on every address of the
// machine when the suite starts (not nodeapi.Port, which a local cluster's sandbox-node holds
// on every address while it runs).
var NodeAgentPort = sync.OnceValue(func() int {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		panic(fmt.Sprintf("a free port for the node agents: %v", err))
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
})

// lastNodeIP numbers the nodes of the process, above the pods' addresses of SimulatedNode.
var lastNodeIP atomic.Int64

// NodeAddress is a loopback address of a node of its own, 127.252.0.1 on: a NodeAgent's, or
// one where nothing listens (a node whose agent is down).
func NodeAddress() string {
	i := lastNodeIP.Add(1)
	return fmt.Sprintf("127.252.%d.%d", (i/250)%250, i%250+1)
}

// StartNodeAgent serves the usage of the pods Set for node at addr until ctx ends or Close
// is called. The controller must have issued sandbox-node's Secret (it does at start).
func StartNodeAgent(ctx context.Context, c client.Reader, addr, node string) (*NodeAgent, error) {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: SystemNamespace, Name: pki.DefaultNodeSecret}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return c.Get(ctx, key, secret) == nil && len(secret.Data[pki.SecretCertKey]) > 0, nil
	}); err != nil {
		return nil, fmt.Errorf("sandbox-node's Secret %s: %w", key, err)
	}
	cert, err := tls.X509KeyPair(secret.Data[pki.SecretCertKey], secret.Data[pki.SecretKeyKey])
	if err != nil {
		return nil, fmt.Errorf("sandbox-node's certificate: %w", err)
	}
	clientCAs := x509.NewCertPool()
	if !clientCAs.AppendCertsFromPEM(secret.Data[pki.SecretCAKey]) {
		return nil, fmt.Errorf("sandbox-node's Secret %s has no CA", key)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(NodeAgentPort())))
	if err != nil {
		return nil, fmt.Errorf("sandbox-node's port on %s: %w", addr, err)
	}
	a := &NodeAgent{Addr: addr, node: node, pods: map[string]nodeapi.PodStats{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+nodeapi.StatsPath, a.list)
	mux.HandleFunc(nodeapi.PodStatsPattern, a.pod)
	a.srv = httptest.NewUnstartedServer(a.authorized(mux))
	_ = a.srv.Listener.Close()
	a.srv.Listener = l
	a.srv.TLS = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
	}
	a.srv.StartTLS()
	go func() {
		<-ctx.Done()
		a.Close()
	}()
	return a, nil
}

// Close stops serving; the node's address then refuses connections, as a node whose agent
// is down does.
func (a *NodeAgent) Close() { a.srv.Close() }

// Set makes the agent answer ps for its pod (ps.PodUID).
func (a *NodeAgent) Set(ps nodeapi.PodStats) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods[ps.PodUID] = ps
}

// authorized lets through only sandbox-apiserver and sandbox-controller, as the agent does.
func (a *NodeAgent) authorized(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.Requests.Add(1)
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 ||
			!slices.Contains([]string{execdapi.APIServerIdentity, execdapi.ControllerIdentity}, r.TLS.PeerCertificates[0].Subject.CommonName) {
			http.Error(w, "client identity not allowed", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *NodeAgent) list(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	out := nodeapi.StatsList{Node: a.node, Items: []nodeapi.PodStats{}}
	for _, ps := range a.pods {
		out.Items = append(out.Items, ps)
	}
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&out)
}

func (a *NodeAgent) pod(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	ps, ok := a.pods[r.PathValue("uid")]
	a.mu.Unlock()
	if !ok {
		http.Error(w, "no sandbox pod "+r.PathValue("uid")+" on this node", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&ps)
}
