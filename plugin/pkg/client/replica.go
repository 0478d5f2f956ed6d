package client

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
)

// ReplicaReady reports whether replica of sb can be used (its pod is listed ready), and an
// error if it cannot become ready: the sandbox failed, is being deleted, is paused, or has no
// such replica. use names what the caller does, for the error ("exec into", "read the log
// of").
func ReplicaReady(sb *sandboxv1alpha1.Sandbox, replica int32, use string) (bool, error) {
	// The server reports a sandbox being deleted as Terminating (Phase).
	if Phase(sb) == sandboxv1alpha1.PhaseTerminating {
		return false, fmt.Errorf("cannot %s sandbox %q: it is being deleted", use, sb.Name)
	}
	replicas := int32(1)
	if sb.Spec.Replicas != nil {
		replicas = *sb.Spec.Replicas
	}
	if replica >= replicas {
		return false, fmt.Errorf("sandbox %q has %d replica(s); --replica must be between 0 and %d", sb.Name, replicas, replicas-1)
	}
	for _, p := range sb.Status.Pods {
		if p.Replica == replica {
			if p.Ready {
				return true, nil
			}
			break
		}
	}
	if sb.Spec.Paused {
		// Its pods are gone or going; only a resume brings one back.
		return false, fmt.Errorf("cannot %s sandbox %q: it is paused (phase %s); 'kubectl sandbox resume %s' brings it back", use, sb.Name, Phase(sb), sb.Name)
	}
	switch Phase(sb) {
	case sandboxv1alpha1.PhaseFailed:
		return false, fmt.Errorf("cannot %s sandbox %q: %s", use, sb.Name, DescribeNotReady(sb))
	case sandboxv1alpha1.PhaseRunning:
		// A running sandbox whose status does not list its pods is trusted as a whole.
		return len(sb.Status.Pods) == 0, nil
	}
	return false, nil
}

// DescribeNotReady is the phase and, if there is one, the Ready condition's reason and message.
func DescribeNotReady(sb *sandboxv1alpha1.Sandbox) string {
	s := "phase " + string(Phase(sb))
	for _, c := range sb.Status.Conditions {
		if c.Type == "Ready" && c.Status != metav1.ConditionTrue {
			s += fmt.Sprintf(", %s", c.Reason)
			if c.Message != "" {
				s += ": " + c.Message
			}
		}
	}
	return s
}

// WaitForReplica returns once replica of sandbox namespace/name is ready (ReplicaReady), and
// fails early, with the reason, if it never will, or after timeout with what the sandbox last
// showed. It reads the sandbox, which answers at once for a sandbox in use, then watches it
// (WaitForSandbox) until the replica is ready.
func WaitForReplica(ctx context.Context, client clientset.Interface, namespace, name string, replica int32, timeout time.Duration, use string) error {
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sb, err := client.SandboxV1alpha1().Sandboxes(namespace).Get(waitCtx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if ready, err := ReplicaReady(sb, replica, use); ready || err != nil {
		return err
	}
	last, err := WaitForSandbox(waitCtx, client, namespace, name, func(sb *sandboxv1alpha1.Sandbox) (bool, error) {
		if sb == nil {
			return false, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), name)
		}
		return ReplicaReady(sb, replica, use)
	})
	if last == nil {
		last = sb
	}
	if err != nil && waitCtx.Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("sandbox %q replica %d is not ready after %s: %s", name, replica, timeout, DescribeNotReady(last))
	}
	return err
}
