package snapshot

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/kube-sandbox/kube-sandbox/controller/pkg/jsonclient"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// Agent takes a snapshot through the sandbox-node of a node.
type Agent interface {
	// Snapshot asks the agent at nodeIP for req and calls progress with every Progress event
	// until the end. An error of type *Failed is the agent's answer (a reason for the
	// sandbox's condition); others are a failure to reach it.
	Snapshot(ctx context.Context, nodeIP string, req *nodeapi.SnapshotRequest, progress func(nodeapi.Event)) (*nodeapi.Result, error)
}

// Failed is a snapshot the agent refused or could not take.
type Failed struct {
	Reason  string
	Message string
}

func (f *Failed) Error() string { return f.Reason + ": " + f.Message }

// HTTPAgent reaches sandbox-node over mutual TLS: the controller's client certificate
// of the kube-sandbox CA, and a server that must show a certificate of that CA for
// nodeapi.ServerName (the agent listens on the node's address, which is no name).
type HTTPAgent struct {
	Creds execdclient.Credentials
	// Port overrides nodeapi.Port (tests).
	Port int
	// Client overrides the HTTP client (tests).
	Client *http.Client
}

var _ Agent = &HTTPAgent{}

// idleTimeout: the agent writes a heartbeat every nodeapi.Heartbeat; a stream quiet for
// three of them is a lost agent.
const idleTimeout = 3 * nodeapi.Heartbeat

// dialTimeout: the agent is on a node of the cluster.
const dialTimeout = 5 * time.Second

func (a *HTTPAgent) client() *http.Client {
	if a.Client != nil {
		return a.Client
	}
	return &http.Client{Transport: &http.Transport{
		// The CA can rotate: every connection takes the trust and the certificate of now.
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			roots := a.Creds.RootCAs()
			if roots == nil {
				return nil, errors.New("the kube-sandbox CA is not loaded yet")
			}
			d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: dialTimeout}, Config: &tls.Config{
				MinVersion:           tls.VersionTLS13,
				ServerName:           nodeapi.ServerName,
				RootCAs:              roots,
				GetClientCertificate: a.Creds.GetClientCertificate,
			}}
			return d.DialContext(ctx, network, addr)
		},
		ResponseHeaderTimeout: 30 * time.Second,
		// One snapshot per pod, rarely: nothing to keep open.
		DisableKeepAlives: true,
	}}
}

// Snapshot implements Agent.
func (a *HTTPAgent) Snapshot(ctx context.Context, nodeIP string, req *nodeapi.SnapshotRequest, progress func(nodeapi.Event)) (*nodeapi.Result, error) {
	if nodeIP == "" {
		return nil, errors.New("the pod's node has no address yet")
	}
	port := a.Port
	if port == 0 {
		port = nodeapi.Port
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	url := "https://" + net.JoinHostPort(nodeIP, strconv.Itoa(port)) + nodeapi.SnapshotPath
	httpReq, err := jsonclient.NewRequest(ctx, http.MethodPost, url, req)
	if err != nil {
		return nil, err
	}
	resp, err := a.client().Do(httpReq)
	if err != nil {
		return nil, fmt.Errorf("sandbox-node on node %s: %w", nodeIP, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var se *jsonclient.StatusError
	if err := jsonclient.Check(resp); errors.As(err, &se) {
		if se.Code >= 500 {
			return nil, fmt.Errorf("sandbox-node on node %s: %w", nodeIP, se)
		}
		reason := nodeapi.ReasonSnapshotFailed
		if se.Code == http.StatusNotFound {
			reason = nodeapi.ReasonContainerNotFound
		}
		return nil, &Failed{Reason: reason, Message: fmt.Sprintf("sandbox-node on node %s: %v", nodeIP, se)}
	}

	idle := time.AfterFunc(idleTimeout, func() {
		cancel(fmt.Errorf("sandbox-node on node %s sent nothing for %s", nodeIP, idleTimeout))
	})
	defer idle.Stop()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		idle.Reset(idleTimeout)
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue // a heartbeat
		}
		var ev nodeapi.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("sandbox-node on node %s: a malformed event: %w", nodeIP, err)
		}
		switch ev.Type {
		case nodeapi.EventProgress:
			if progress != nil {
				progress(ev)
			}
		case nodeapi.EventDone:
			if ev.Result == nil || ev.Result.Digest == "" {
				return nil, fmt.Errorf("sandbox-node on node %s: Done without a result", nodeIP)
			}
			return ev.Result, nil
		case nodeapi.EventFailed:
			return nil, &Failed{Reason: ev.Reason, Message: ev.Message}
		}
	}
	if cause := context.Cause(ctx); cause != nil {
		return nil, cause
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sandbox-node on node %s: %w", nodeIP, err)
	}
	return nil, fmt.Errorf("sandbox-node on node %s ended the stream without an outcome", nodeIP)
}
