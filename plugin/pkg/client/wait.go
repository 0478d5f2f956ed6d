package client

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
)

// SandboxCondition tells whether a wait is over: done, or failed for good. sb is the sandbox as
// it now is, nil once it is gone.
type SandboxCondition func(sb *sandboxv1alpha1.Sandbox) (done bool, err error)

// WaitForSandbox waits until cond is done with the sandbox namespace/name or fails, or ctx
// ends. It lists and watches that one sandbox (a field selector on metadata.name) with
// client-go's UntilWithSync, which lists again and watches anew by itself whenever a watch
// breaks or its resourceVersion is too old, so that a long wait misses no change and costs no
// requests while nothing changes. cond sees the sandbox as listed first, then at each change.
//
// It returns the sandbox last seen (nil if it never was), for messages about a wait that timed
// out, with cond's error or, once ctx ends, ctx's.
func WaitForSandbox(ctx context.Context, client clientset.Interface, namespace, name string, cond SandboxCondition) (*sandboxv1alpha1.Sandbox, error) {
	sandboxes := client.SandboxV1alpha1().Sandboxes(namespace)
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.FieldSelector = selector
			return sandboxes.List(ctx, options)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.FieldSelector = selector
			return sandboxes.Watch(ctx, options)
		},
	}
	var last *sandboxv1alpha1.Sandbox
	check := func(sb *sandboxv1alpha1.Sandbox) (bool, error) {
		if sb != nil {
			last = sb
		}
		return cond(sb)
	}
	precondition := func(store cache.Store) (bool, error) {
		obj, exists, err := store.GetByKey(namespace + "/" + name)
		switch {
		case err != nil:
			return false, err
		case !exists:
			return check(nil)
		}
		sb, ok := obj.(*sandboxv1alpha1.Sandbox)
		if !ok {
			return false, fmt.Errorf("unexpected object %T in the watch of sandbox %q", obj, name)
		}
		return check(sb)
	}
	// A client that cannot stream a watch's initial list (the fake clientset of tests) says so
	// here, and gets a list, then a watch.
	_, err := watchtools.UntilWithSync(ctx, cache.ToListWatcherWithWatchListSemantics(lw, client), &sandboxv1alpha1.Sandbox{}, precondition,
		func(event watch.Event) (bool, error) {
			sb, ok := event.Object.(*sandboxv1alpha1.Sandbox)
			if !ok || sb.Name != name {
				// Other sandboxes, from a server that ignores the field selector.
				return false, nil
			}
			if event.Type == watch.Deleted {
				return check(nil)
			}
			return check(sb)
		})
	if err != nil && ctx.Err() != nil {
		// UntilWithSync says "timed out" or "unable to sync caches" whatever ended ctx.
		return last, ctx.Err()
	}
	return last, err
}
