// Package nodeclient calls sandbox-node, the node agent, at a node's address: the mutual-TLS
// transport that presents a kube-sandbox identity (sandbox-apiserver's or
// sandbox-controller's) and verifies that what answers is sandbox-node, and the usage calls
// of nodeapi (StatsPath, PodStatsPath, and the stream of OOM kills, OOMsPath).
package nodeclient

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

const (
	// DialTimeout: the node agent is on a node of the cluster.
	DialTimeout = 5 * time.Second
	// maxStatsBytes bounds a StatsList: a node's few hundred sandbox pods at well under 1 KiB
	// each.
	maxStatsBytes = 8 << 20
	// maxOOMLineBytes bounds a line of the OOM stream: one report, a few hundred bytes.
	maxOOMLineBytes = 64 << 10
	// oomSilence is how long an OOM stream may say nothing, not even a heartbeat, before it
	// is taken for dead (a node gone without a FIN): three heartbeats.
	oomSilence = 3 * nodeapi.Heartbeat
)

// NewTransport dials sandbox-node at the address of the request (a node's), presents creds'
// client certificate, and verifies that the server holds a certificate of the kube-sandbox CA
// for nodeapi.ServerName (the agent listens on the node's address, which is no name), against
// the CA of now: the CA can rotate. responseTimeout bounds the wait for an answer's headers.
func NewTransport(creds execdclient.Credentials, responseTimeout time.Duration, maxIdlePerHost int) *http.Transport {
	return &http.Transport{
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			roots := creds.RootCAs()
			if roots == nil {
				return nil, errors.New("the kube-sandbox CA is not loaded yet")
			}
			d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: DialTimeout}, Config: &tls.Config{
				MinVersion:           tls.VersionTLS13,
				ServerName:           nodeapi.ServerName,
				RootCAs:              roots,
				GetClientCertificate: creds.GetClientCertificate,
				NextProtos:           []string{"http/1.1"},
			}}
			return d.DialContext(ctx, network, addr)
		},
		ResponseHeaderTimeout: responseTimeout,
		MaxIdleConnsPerHost:   maxIdlePerHost,
		IdleConnTimeout:       90 * time.Second,
	}
}

// URL is the URL of path on the node agent at hostIP; port 0 is nodeapi.Port.
func URL(hostIP string, port int, path string) (string, error) {
	if hostIP == "" {
		return "", errors.New("no node address")
	}
	if port == 0 {
		port = nodeapi.Port
	}
	return "https://" + net.JoinHostPort(hostIP, strconv.Itoa(port)) + path, nil
}

// StatusError is an answer of the agent outside 2xx.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("sandbox-node answered %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// IsNotFound reports whether err is the agent's 404: it knows no such sandbox pod.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// Stats reads the usage of the node's sandbox pods.
type Stats struct {
	Client *http.Client
	// Port overrides nodeapi.Port (tests).
	Port int
}

// List reads the StatsList of the node at hostIP.
func (s *Stats) List(ctx context.Context, hostIP string) (*nodeapi.StatsList, error) {
	out := &nodeapi.StatsList{}
	if err := s.get(ctx, hostIP, nodeapi.StatsPath, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Pod reads the PodStats of the pod uid on the node at hostIP.
func (s *Stats) Pod(ctx context.Context, hostIP, uid string) (*nodeapi.PodStats, error) {
	out := &nodeapi.PodStats{}
	if err := s.get(ctx, hostIP, nodeapi.PodStatsPath(uid), out); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Stats) get(ctx context.Context, hostIP, path string, out any) error {
	url, err := URL(hostIP, s.Port, path)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body := io.LimitReader(resp.Body, maxStatsBytes+1)
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(body, 4<<10))
		return &StatusError{Code: resp.StatusCode, Message: string(bytesTrim(msg))}
	}
	if err := json.NewDecoder(body).Decode(out); err != nil {
		return fmt.Errorf("decode the answer of sandbox-node on %s: %w", hostIP, err)
	}
	return nil
}

func bytesTrim(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// OOMs watches the OOM kills of the sandbox pods of nodes (nodeapi.OOMsPath).
type OOMs struct {
	// Client has no timeout: the stream lasts. Its transport's response timeout bounds the
	// wait for the stream's start.
	Client *http.Client
	// Port overrides nodeapi.Port (tests).
	Port int
	// Silence overrides how long the stream may be silent before it is taken for dead
	// (tests); 0: three heartbeats.
	Silence time.Duration
}

// Watch reads the OOM stream of the node at hostIP, calling fn with each line but heartbeats,
// until ctx ends (nil) or the stream breaks, ends or goes silent (an error: connect again,
// the stream starts with the whole state again).
func (o *OOMs) Watch(parent context.Context, hostIP string, fn func(nodeapi.OOMLine)) error {
	url, err := URL(hostIP, o.Port, nodeapi.OOMsPath)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		if parent.Err() != nil {
			return nil
		}
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return &StatusError{Code: resp.StatusCode, Message: string(bytesTrim(msg))}
	}
	silence := o.Silence
	if silence <= 0 {
		silence = oomSilence
	}
	// A silent stream is cut by cancelling its request, which ends the read below.
	silent := time.AfterFunc(silence, cancel)
	defer silent.Stop()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4<<10), maxOOMLineBytes)
	for sc.Scan() {
		silent.Reset(silence)
		line := sc.Bytes()
		if len(line) == 0 {
			continue // a heartbeat
		}
		var l nodeapi.OOMLine
		if err := json.Unmarshal(line, &l); err != nil {
			return fmt.Errorf("decode a line of the OOM stream of sandbox-node on %s: %w", hostIP, err)
		}
		fn(l)
	}
	switch {
	case parent.Err() != nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("the OOM stream of sandbox-node on %s said nothing for %s", hostIP, silence)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read the OOM stream of sandbox-node on %s: %w", hostIP, err)
	}
	return fmt.Errorf("sandbox-node on %s ended the OOM stream", hostIP)
}
