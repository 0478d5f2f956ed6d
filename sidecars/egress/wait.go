package egress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// waitPoll is how often wait-ready asks: the filter is usually in within tens of
// milliseconds of the start, and every sandbox container waits for this answer.
const waitPoll = 20 * time.Millisecond

// newWaitReadyCommand is the sidecar's postStart hook. The kubelet starts a pod's next
// container only once a native sidecar's postStart hook has returned: waiting here for the
// filter and the DNS proxy makes the sandbox container start the moment they are in, not at
// the next tick of a startup probe. A hook that fails (the timeout) makes the kubelet restart
// the sidecar, and nothing else of the pod starts meanwhile.
func newWaitReadyCommand() *cobra.Command {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(egressapi.HealthPort))
	timeout := 60 * time.Second
	cmd := &cobra.Command{
		Use:   "wait-ready",
		Short: "Wait until sandbox-egress serve enforces its policy (a postStart hook)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return waitReady(ctx, "http://"+addr+egressapi.ReadyzPath)
		},
	}
	cmd.Flags().StringVar(&addr, "health-addr", addr, "Address of sandbox-egress serve's health endpoint.")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "How long to wait.")
	return cmd
}

func waitReady(ctx context.Context, url string) error {
	client := &http.Client{Timeout: time.Second}
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox-egress is not ready: %s", last)
		case <-time.After(waitPoll):
		}
	}
}
