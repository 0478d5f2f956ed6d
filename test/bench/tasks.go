package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// openSandboxRestReconcilesPer1000 is the design figure of OpenSandbox's BatchSandbox: task
// state lives in the controller's memory, so it requeues every task sandbox every 3 s.
const openSandboxRestReconcilesPer1000 = 1000.0 / 3

// tasks runs a pooled batch of *batchReplicas replicas whose task is `sleep 1`: the time until
// all have Succeeded, and what the controller does during the batch and for *idleSeconds
// after it, when every task has ended (from its metrics: reconciles, and API writes with its
// lease renewals).
func (pb *poolBench) tasks(ctx context.Context) error {
	n := *batchReplicas
	sbx := pb.pooled("tasks")
	sbx.Spec.Replicas = ptr.To(int32(n))
	sbx.Spec.TaskTemplate = &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"sleep", "1"}}
	c := pb.sandboxes.SandboxV1alpha1().Sandboxes(pb.ns)
	before, err := controllerMetrics(ctx)
	if err != nil {
		return fmt.Errorf("controller metrics at %s: %w", *metricsURL, err)
	}
	start := time.Now()
	created, err := c.Create(ctx, sbx, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	defer func() { _ = pb.deleteAll(context.Background(), []string{"tasks"}) }()
	w, err := c.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "tasks").String(), ResourceVersion: created.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	var ready, done time.Duration
	timeout := time.After(5 * time.Minute)
	writes := 0
	for done == 0 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch closed")
			}
			s, ok := ev.Object.(*sandboxv1alpha1.Sandbox)
			if !ok {
				continue
			}
			writes++
			if ready == 0 && s.Status.Ready == int32(n) {
				ready = time.Since(start)
			}
			if meta.IsStatusConditionTrue(s.Status.Conditions, controlv1alpha1.ConditionTasksComplete) {
				if s.Status.TaskSucceeded != int32(n) {
					return fmt.Errorf("tasks ended with %d succeeded, %d failed", s.Status.TaskSucceeded, s.Status.TaskFailed)
				}
				done = time.Since(start)
			}
		case <-timeout:
			return fmt.Errorf("tasks not complete after 5m")
		}
	}
	during, err := controllerMetrics(ctx)
	if err != nil {
		return err
	}
	// At rest: once the pool has made up for the 100 pods it gave (its own work, not the
	// tasks'), nothing should happen but lease renewals.
	if err := pb.waitPoolFull(ctx); err != nil {
		return err
	}
	rest, err := controllerMetrics(ctx)
	if err != nil {
		return err
	}
	restWrites := 0
	restCtx, cancel := context.WithTimeout(ctx, time.Duration(*idleSeconds)*time.Second)
	defer cancel()
	for restCtx.Err() == nil {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				cancel()
				break
			}
			if _, ok := ev.Object.(*sandboxv1alpha1.Sandbox); ok {
				restWrites++
			}
		case <-restCtx.Done():
		}
	}
	after, err := controllerMetrics(ctx)
	if err != nil {
		return err
	}
	batchSecs, restSecs := done.Seconds(), float64(*idleSeconds)
	rate := func(a, b map[string]float64, k string, secs float64) float64 { return (b[k] - a[k]) / secs }
	fmt.Printf("\n## Tasks\n\nOne pooled Sandbox of %d replicas, task `sleep 1` (taskResourcePolicyWhenCompleted Retain).\n\n", n)
	fmt.Println("| measurement | value |")
	fmt.Println("|---|---|")
	fmt.Printf("| create → all replicas Ready | %s |\n", ms(ready))
	fmt.Printf("| create → all tasks Succeeded | %s |\n", ms(done))
	fmt.Printf("| overhead: (all Succeeded − all Ready − 1 s task) / 1 s task | %.2f |\n", (done - ready - time.Second).Seconds())
	fmt.Printf("| writes of the Sandbox seen by a watch, create → complete (%d tasks) | %d |\n", n, writes)
	fmt.Printf("| sandbox reconciles/s during the batch | %.2f |\n", rate(before, during, "reconcile batchsandbox", batchSecs))
	fmt.Printf("| API writes/s by the controller during the batch (the pool's refill of 100 pods included) | %.2f |\n", rate(before, during, "writes", batchSecs))
	restReconciles := rate(rest, after, "reconcile batchsandbox", restSecs)
	fmt.Printf("| sandbox reconciles/s for %d s at rest (all tasks ended, the pool full again) | %.3f |\n", *idleSeconds, restReconciles)
	fmt.Printf("| API writes/s by the controller at rest (lease renewals included) | %.3f |\n", rate(rest, after, "writes", restSecs))
	fmt.Printf("| writes of the Sandbox at rest | %d |\n", restWrites)
	fmt.Printf("\nOpenSandbox's design requeues every task sandbox every 3 s: %.1f reconciles/s for %d task sandboxes (%.0f per 1000), against %.3f here.\n",
		openSandboxRestReconcilesPer1000*float64(n)/1000, n, openSandboxRestReconcilesPer1000, restReconciles)
	return nil
}
