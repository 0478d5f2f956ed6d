package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/retry"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
)

var (
	pauseRuns  = flag.Int("pause-runs", 3, "pauses and resumes per size of changes")
	pauseSizes = flag.String("pause-sizes", "1,100", "sizes of a sandbox's changes, in MiB of random data, to pause and resume")
)

// pause measures pause and resume against the size of a sandbox's changes: create a
// direct-mode sandbox (its create → first exec is the baseline of the same run), write SIZE
// MiB of random data into it, then the time from setting spec.paused to Paused (snapshot,
// push, pod gone), and from clearing it to the first successful exec in the new pod.
func (pb *poolBench) pause(ctx context.Context) error {
	fmt.Printf("\n## Pause and resume\n\nDirect-mode sandboxes (%s) with SIZE MiB of random data written into them (it does not compress), %d runs per size. Pause: spec.paused set → phase Paused (snapshot committed and pushed to the registry, pod deleted). Resume: spec.paused cleared → first successful exec in the pod made from the snapshot. The baseline is the create → first exec of the same sandboxes.\n\n", *image, *pauseRuns)
	fmt.Println("| changes | create → first exec (baseline) p50 | pause p50 | pause / baseline | resume → first exec p50 | resume / baseline | snapshot layer |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, size := range strings.Split(*pauseSizes, ",") {
		var mib int
		if _, err := fmt.Sscan(size, &mib); err != nil || mib < 0 {
			return fmt.Errorf("-pause-sizes: %q is no number of MiB", size)
		}
		var created, paused, resumed []time.Duration
		var layer int64
		for i := range *pauseRuns {
			name := fmt.Sprintf("pause-%d-%d", mib, i)
			d, _, err := pb.createToExec(ctx, direct(name))
			if err != nil {
				return err
			}
			created = append(created, d)
			if err := pb.execIn(ctx, name, "sh", "-c", fmt.Sprintf("head -c %d /dev/urandom > /root/changes", mib<<20)); err != nil {
				return err
			}
			p, err := pb.setPaused(ctx, name, true, sandboxv1alpha1.PhasePaused)
			if err != nil {
				return err
			}
			paused = append(paused, p)
			s, err := pb.sandboxes.SandboxV1alpha1().Sandboxes(pb.ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil && len(s.Status.Snapshots) > 0 {
				layer = s.Status.Snapshots[0].LayerSize
			}
			start := time.Now()
			if _, err := pb.setPaused(ctx, name, false, sandboxv1alpha1.PhaseRunning); err != nil {
				return err
			}
			if err := pb.execIn(ctx, name, "true"); err != nil {
				return err
			}
			resumed = append(resumed, time.Since(start))
			if err := pb.deleteAll(ctx, []string{name}); err != nil {
				return err
			}
		}
		base, p, r := quantile(created, 0.5), quantile(paused, 0.5), quantile(resumed, 0.5)
		fmt.Printf("| %d MiB | %s | %s | %.2f | %s | %.2f | %.1f MiB |\n", mib, ms(base), ms(p), float64(p)/float64(base), ms(r), float64(r)/float64(base), float64(layer)/(1<<20))
	}
	return nil
}

// setPaused sets spec.paused and waits for phase want; it returns the time from the update.
func (pb *poolBench) setPaused(ctx context.Context, name string, paused bool, want sandboxv1alpha1.SandboxPhase) (time.Duration, error) {
	c := pb.sandboxes.SandboxV1alpha1().Sandboxes(pb.ns)
	start := time.Now()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := c.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Paused = paused
		_, err = c.Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	last, err := sandboxclient.WaitForSandbox(wctx, pb.sandboxes, pb.ns, name, func(s *sandboxv1alpha1.Sandbox) (bool, error) {
		return s != nil && s.Status.Phase == want, nil
	})
	if err != nil {
		return 0, fmt.Errorf("sandbox %s to be %s: %w (last seen: %+v)", name, want, err, last)
	}
	return time.Since(start), nil
}

// execIn runs a command in the sandbox and waits for it.
func (pb *poolBench) execIn(ctx context.Context, name string, command ...string) error {
	u := pb.sandboxes.SandboxV1alpha1().RESTClient().Post().Namespace(pb.ns).Resource("sandboxes").Name(name).
		SubResource("exec").VersionedParams(&sandboxv1alpha1.SandboxExecOptions{Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	exec, err := remotecommand.NewWebSocketExecutor(pb.cfg, "GET", u.String())
	if err != nil {
		return err
	}
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
		return fmt.Errorf("exec %v in %s: %w", command, name, err)
	}
	return nil
}
