// Package nodeapi is the wire contract of sandbox-node, kube-sandbox's node agent (a DaemonSet,
// on the node's network): its ports, its serving name, the snapshot protocol of pause and
// resume, and the usage figures (stats.go). It is shared by the agent and its two clients,
// sandbox-controller and sandbox-apiserver. The egress endpoints it serves on the same port
// are egressapi's (the policy's contract).
//
// The agent listens with TLS on the node's address (host network), port Port, with a serving
// certificate for ServerName from the kube-sandbox CA; it accepts only clients whose
// certificate the kube-sandbox CA issued to ControllerIdentity (execdapi.ControllerIdentity),
// and, for the usage figures alone, to execdapi.APIServerIdentity.
// On WaitPort it serves, with the same certificate but to any client, the one question a
// sandbox pod's first init container asks before anything of the sandbox runs: is this pod's
// egress filter in force (egressapi.WaitPath)?
//
//	POST SnapshotPath   SnapshotRequest → a stream of Event, one JSON document per line
//	                    (application/x-ndjson): Progress events, then one Done or Failed,
//	                    the last line; a bare newline every Heartbeat keeps it alive
//
// Answers before the stream (errors are a text/plain message):
//
//	400 a malformed body, or a request that fails Validate
//	403 a client identity other than the controller's
//	404 no running container of that pod and name on this node
//	503 the agent is shutting down, or containerd does not answer, or no registry is configured
//
// The agent finds the container itself, from containerd's labels of CRI containers
// (io.kubernetes.pod.uid and io.kubernetes.container.name): the request names a pod and a
// container, never a containerd ID, so it can commit nothing but a container of that pod.
package nodeapi

import (
	"fmt"
	"strings"
	"time"
)

const (
	// Port the agent listens on, on the node's address (mutual TLS, sandbox-controller).
	Port = 9446
	// HealthPort serves HealthzPath in plain HTTP, for the kubelet's probes, which have no
	// client certificate for Port.
	HealthPort = 9447
	// ServerName is the name in the agent's serving certificate, which the controller
	// verifies (it dials the node's address).
	ServerName = "sandbox-node.kube-sandbox.internal"
	// WaitPort serves egressapi.WaitPath over TLS to clients without a certificate: the init
	// container of every sandbox pod, which the pod's filter always lets reach it.
	WaitPort = 9448
	// ProbePort is where the agent's proof probe goes (a node address; nothing listens): the
	// filter rejects it, and the agent reads the rejection off the pod's probe counter.
	ProbePort = 9449
	// SnapshotPath commits and pushes one container.
	SnapshotPath = "/v1/snapshots"
	// HealthzPath answers 200 while the agent can reach containerd.
	HealthzPath = "/healthz"
	// ReadyzPath answers 200 once the DNS proxy serves too.
	ReadyzPath = "/readyz"
	// MetricsPath serves Prometheus metrics, per sandbox, on MetricsPort (TLS, a bearer token
	// the kube-apiserver authenticates and authorizes for get on this path).
	MetricsPath = "/metrics"
	// Heartbeat: a bare newline on a quiet stream this often.
	Heartbeat = 10 * time.Second
)

// SnapshotRequest asks for the writable layer of a pod's container, on top of its image, as a
// new image pushed to Image.
type SnapshotRequest struct {
	// PodUID, Namespace and Pod name the pod (all three must match containerd's labels).
	PodUID    string `json:"podUID"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// Container is the container's name in the pod ("sandbox").
	Container string `json:"container"`
	// Image is the repository and tag to push to: REGISTRY/REPOSITORY:TAG, in the registry
	// the agent is configured with (anything else is refused).
	Image string `json:"image"`
	// MaxBytes refuses (SnapshotTooLarge) a layer larger than this, compressed; 0: the
	// agent's own limit.
	MaxBytes int64 `json:"maxBytes,omitempty"`
}

// Validate tells what is missing or malformed.
func (r *SnapshotRequest) Validate() error {
	switch {
	case r.PodUID == "" || r.Namespace == "" || r.Pod == "" || r.Container == "":
		return fmt.Errorf("podUID, namespace, pod and container are required")
	case r.Image == "" || !strings.Contains(r.Image, "/") || strings.Contains(r.Image, "@"):
		return fmt.Errorf("image %q: want REGISTRY/REPOSITORY:TAG", r.Image)
	case r.MaxBytes < 0:
		return fmt.Errorf("maxBytes must not be negative")
	}
	return nil
}

// EventType of an Event.
type EventType string

const (
	// EventProgress: Stage and the bytes so far.
	EventProgress EventType = "Progress"
	// EventDone: the image is in the registry; Result says where.
	EventDone EventType = "Done"
	// EventFailed: nothing was pushed under Image; Reason and Message say why. The
	// container is untouched either way.
	EventFailed EventType = "Failed"
)

// Stages of a snapshot, in order.
const (
	StageCommitting = "Committing" // diffing the writable layer into a compressed layer
	StagePushing    = "Pushing"    // uploading the layers, config and manifest
)

// Reasons of a Failed event, which the controller puts into the sandbox's condition.
const (
	ReasonContainerNotFound    = "ContainerNotFound"
	ReasonSnapshotFailed       = "SnapshotFailed"
	ReasonSnapshotTooLarge     = "SnapshotTooLarge"
	ReasonRegistryUnavailable  = "RegistryUnavailable"
	ReasonRegistryUnauthorized = "RegistryUnauthorized"
)

// Event is one line of the stream.
type Event struct {
	Type EventType `json:"type"`
	// Stage and Bytes (of Total, when known) for Progress.
	Stage string `json:"stage,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
	Total int64  `json:"total,omitempty"`
	// Result, for Done.
	Result *Result `json:"result,omitempty"`
	// Reason and Message, for Failed.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Result of a snapshot pushed.
type Result struct {
	// Image as asked, and Digest of its manifest: Image's repository @ Digest pulls it.
	Image  string `json:"image"`
	Digest string `json:"digest"`
	// Size of the new layer (compressed), and of the image's manifest, config and layers.
	LayerSize int64 `json:"layerSize"`
	Size      int64 `json:"size"`
	// BaseImage is the container's image, which the snapshot is on top of.
	BaseImage string    `json:"baseImage"`
	Created   time.Time `json:"created"`
}
