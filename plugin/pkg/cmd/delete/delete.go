// Package delete implements `kubectl sandbox delete`.
package delete

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/cobra"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// defaultTimeout bounds --wait: time for the controller to release the sandbox's pods.
const defaultTimeout = 60 * time.Second

var (
	deleteLong = cmdutil.LongDesc(`
		Delete sandboxes by name.

		Deleting a sandbox stops its pods and discards everything in them. By default the
		command waits until the sandboxes are gone (see --wait and --timeout).`)

	deleteExample = cmdutil.Examples(`
		# Delete sandbox my-sandbox and wait until it is gone
		kubectl sandbox delete my-sandbox

		# Delete two sandboxes without waiting
		kubectl sandbox delete a b --wait=false

		# Delete a sandbox if it exists
		kubectl sandbox delete my-sandbox --ignore-not-found`)
)

// DeleteOptions are the inputs of `kubectl sandbox delete`.
type DeleteOptions struct {
	Names          []string
	Wait           bool
	Timeout        time.Duration
	IgnoreNotFound bool

	Namespace string
	Client    clientset.Interface

	genericiooptions.IOStreams
}

// NewDeleteOptions returns DeleteOptions with kubectl's defaults.
func NewDeleteOptions(streams genericiooptions.IOStreams) *DeleteOptions {
	return &DeleteOptions{Wait: true, Timeout: defaultTimeout, IOStreams: streams}
}

// NewCmdDelete returns the `delete` command.
func NewCmdDelete(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewDeleteOptions(streams)
	cmd := &cobra.Command{
		Use:                   "delete NAME... [--wait=false] [--timeout=DURATION]",
		DisableFlagsInUseLine: true,
		Short:                 "Delete sandboxes",
		Long:                  deleteLong,
		Example:               deleteExample,
		ValidArgsFunction:     cmdutil.SandboxNameCompletion(f, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, cmd, args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.Wait, "wait", o.Wait, "Wait until the sandboxes are gone before returning.")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "How long to wait with --wait (like 30s or 5m); 0 waits forever.")
	cmd.Flags().BoolVar(&o.IgnoreNotFound, "ignore-not-found", o.IgnoreNotFound, "Treat a sandbox that does not exist as deleted.")
	return cmd
}

// Complete takes the names, namespace and client.
func (o *DeleteOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmdutil.UsageErrorf(cmd, "at least one sandbox NAME is required")
	}
	o.Names = args
	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	if o.Client, err = f.SandboxClient(); err != nil {
		return err
	}
	return nil
}

// Validate checks the options.
func (o *DeleteOptions) Validate() error {
	if o.Timeout < 0 {
		return fmt.Errorf("--timeout must not be negative, got %s", o.Timeout)
	}
	return nil
}

// Run deletes every named sandbox, then waits for those it deleted. A failure to delete one does
// not stop the others; all failures are returned together, as kubectl does.
func (o *DeleteOptions) Run(ctx context.Context) error {
	sandboxes := o.Client.SandboxV1alpha1().Sandboxes(o.Namespace)
	var errs []error
	deleted := map[string]types.UID{}
	var order []string
	for _, name := range o.Names {
		if _, seen := deleted[name]; seen {
			continue
		}
		// The UID tells the wait below the deleted sandbox from a new one of the same name.
		sb, err := sandboxes.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			err = sandboxes.Delete(ctx, name, metav1.DeleteOptions{})
		}
		if err != nil {
			if !(o.IgnoreNotFound && apierrors.IsNotFound(err)) {
				errs = append(errs, err)
			}
			continue
		}
		deleted[name] = sb.UID
		order = append(order, name)
		fmt.Fprintf(o.Out, "%s %q deleted from %s namespace\n", cmdutil.SandboxKind, name, o.Namespace)
	}
	if o.Wait && len(order) > 0 {
		if err := o.waitForDeletion(ctx, order, deleted); err != nil {
			errs = append(errs, err)
		}
	}
	return utilerrors.NewAggregate(errs)
}

// waitForDeletion returns once every sandbox is gone or has been replaced by a new one of the
// same name, or fails when the timeout passes. It watches the sandboxes all at once, each on its
// own watch, so that the timeout names every sandbox still there.
func (o *DeleteOptions) waitForDeletion(ctx context.Context, names []string, uids map[string]types.UID) error {
	waitCtx := ctx
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			_, errs[i] = sandboxclient.WaitForSandbox(waitCtx, o.Client, o.Namespace, name, func(sb *sandboxv1alpha1.Sandbox) (bool, error) {
				return sb == nil || sb.UID != uids[name], nil
			})
		})
	}
	wg.Wait()
	var pending []string
	var failed []error
	for i, err := range errs {
		if err != nil {
			pending = append(pending, names[i])
			failed = append(failed, err)
		}
	}
	switch {
	case len(failed) == 0:
		return nil
	case errors.Is(waitCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		return fmt.Errorf("timed out after %s waiting for the deletion of %s %q", o.Timeout, cmdutil.SandboxKind, pending)
	}
	return fmt.Errorf("wait for deletion: %w", utilerrors.NewAggregate(failed))
}
