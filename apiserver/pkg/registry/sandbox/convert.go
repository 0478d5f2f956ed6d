package sandbox

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// toBatchSandbox turns a Sandbox into the BatchSandbox that stores it. Only what a user may
// set travels, and the expiry the server computed (status.expiresAt is spec.expireTime of the
// BatchSandbox): system fields of the metadata are the backend's to fill.
func toBatchSandbox(sbx *sandboxv1alpha1.Sandbox) *controlv1alpha1.BatchSandbox {
	bs := &controlv1alpha1.BatchSandbox{
		ObjectMeta: metav1.ObjectMeta{
			Name:            sbx.Name,
			GenerateName:    sbx.GenerateName,
			Namespace:       sbx.Namespace,
			Labels:          sbx.Labels,
			Annotations:     sbx.Annotations,
			OwnerReferences: sbx.OwnerReferences,
			Finalizers:      sbx.Finalizers,
			ResourceVersion: sbx.ResourceVersion,
		},
		Spec: controlv1alpha1.BatchSandboxSpec{
			Replicas:       sbx.Spec.Replicas,
			Template:       sbx.Spec.Template,
			Entrypoint:     sbx.Spec.Entrypoint,
			Env:            sbx.Spec.Env,
			TimeoutSeconds: sbx.Spec.TimeoutSeconds,
			ExpireTime:     sbx.Status.ExpiresAt,
			NetworkPolicy:  toControlNetworkPolicy(sbx.Spec.NetworkPolicy),

			ShardPatches:                    sbx.Spec.ShardPatches,
			TaskTemplate:                    toControlTaskTemplate(sbx.Spec.TaskTemplate),
			ShardTaskPatches:                sbx.Spec.ShardTaskPatches,
			TaskResourcePolicyWhenCompleted: controlv1alpha1.TaskResourcePolicy(sbx.Spec.TaskResourcePolicyWhenCompleted),
			Paused:                          sbx.Spec.Paused,
		},
	}
	if sbx.Spec.AutoRenew != nil {
		bs.Spec.AutoRenew = &controlv1alpha1.AutoRenew{ExtendSeconds: sbx.Spec.AutoRenew.ExtendSeconds}
	}
	if sbx.Spec.PoolRef != nil {
		bs.Spec.PoolRef = &controlv1alpha1.PoolReference{Name: sbx.Spec.PoolRef.Name}
	}
	bs = bs.DeepCopy()
	storeManagedFields(bs, sbx.ManagedFields)
	return bs
}

// fromBatchSandbox presents a stored BatchSandbox as a Sandbox. The metadata is the
// BatchSandbox's (same UID, resourceVersion and timestamps), except managedFields: the
// Sandbox's own (AnnotationManagedFields) and the status managers.
func fromBatchSandbox(bs *controlv1alpha1.BatchSandbox) *sandboxv1alpha1.Sandbox {
	return presentShared(bs.DeepCopy())
}

// presentShared is fromBatchSandbox without the copy: the Sandbox shares bs's maps, slices
// and pointers, so neither may be written afterwards. The watch cache presents the
// informer's objects so, which nothing writes: a copy of each would double what the cache
// holds (at 10,000 sandboxes, sandbox-apiserver went from 290 to 332 MiB).
func presentShared(bs *controlv1alpha1.BatchSandbox) *sandboxv1alpha1.Sandbox {
	meta := bs.ObjectMeta
	meta.ManagedFields, meta.Annotations = loadManagedFields(bs)
	sbx := &sandboxv1alpha1.Sandbox{
		TypeMeta: metav1.TypeMeta{
			APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(),
			Kind:       "Sandbox",
		},
		ObjectMeta: meta,
		Spec: sandboxv1alpha1.SandboxSpec{
			Replicas:       bs.Spec.Replicas,
			Template:       bs.Spec.Template,
			Entrypoint:     bs.Spec.Entrypoint,
			Env:            bs.Spec.Env,
			TimeoutSeconds: bs.Spec.TimeoutSeconds,
			NetworkPolicy:  fromControlNetworkPolicy(bs.Spec.NetworkPolicy),

			ShardPatches:                    bs.Spec.ShardPatches,
			TaskTemplate:                    fromControlTaskTemplate(bs.Spec.TaskTemplate),
			ShardTaskPatches:                bs.Spec.ShardTaskPatches,
			TaskResourcePolicyWhenCompleted: string(bs.Spec.TaskResourcePolicyWhenCompleted),
			Paused:                          bs.Spec.Paused,
		},
		Status: sandboxv1alpha1.SandboxStatus{
			ObservedGeneration: bs.Status.ObservedGeneration,
			Phase:              sandboxv1alpha1.SandboxPhase(bs.Status.Phase),
			ExpiresAt:          bs.Spec.ExpireTime,
			Replicas:           bs.Status.Replicas,
			Ready:              bs.Status.Ready,
			Conditions:         bs.Status.Conditions,
			TaskPending:        bs.Status.TaskPending,
			TaskRunning:        bs.Status.TaskRunning,
			TaskSucceeded:      bs.Status.TaskSucceeded,
			TaskFailed:         bs.Status.TaskFailed,
			TaskUnknown:        bs.Status.TaskUnknown,
		},
	}
	if bs.Spec.AutoRenew != nil {
		sbx.Spec.AutoRenew = &sandboxv1alpha1.SandboxAutoRenew{ExtendSeconds: bs.Spec.AutoRenew.ExtendSeconds}
	}
	if bs.Spec.PoolRef != nil {
		sbx.Spec.PoolRef = &sandboxv1alpha1.SandboxPoolReference{Name: bs.Spec.PoolRef.Name}
	}
	if bs.DeletionTimestamp != nil && bs.Status.Phase != controlv1alpha1.PhaseExpired {
		sbx.Status.Phase = sandboxv1alpha1.PhaseTerminating
	}
	for _, p := range bs.Status.Pods {
		sbx.Status.Pods = append(sbx.Status.Pods, sandboxv1alpha1.SandboxPodStatus{
			Replica:   p.Replica,
			Name:      p.Name,
			IP:        p.IP,
			NodeName:  p.NodeName,
			RuntimeID: p.RuntimeID,
			Ready:     p.Ready,
		})
	}
	for _, t := range bs.Status.Tasks {
		sbx.Status.Tasks = append(sbx.Status.Tasks, sandboxv1alpha1.SandboxTaskStatus{
			Replica:    t.Replica,
			Phase:      string(t.Phase),
			Pod:        t.Pod,
			Attempts:   t.Attempts,
			ExitCode:   t.ExitCode,
			StartTime:  t.StartTime,
			FinishTime: t.FinishTime,
			Reason:     t.Reason,
			Message:    t.Message,
		})
	}
	for _, sn := range bs.Status.Snapshots {
		sbx.Status.Snapshots = append(sbx.Status.Snapshots, sandboxv1alpha1.SandboxSnapshotStatus{
			Replica:      sn.Replica,
			Image:        sn.Image,
			Digest:       sn.Digest,
			Size:         sn.Size,
			LayerSize:    sn.LayerSize,
			BaseImage:    sn.BaseImage,
			CreationTime: sn.CreationTime,
			Pod:          sn.Pod,
		})
	}
	return sbx
}

func toControlTaskTemplate(t *sandboxv1alpha1.SandboxTaskTemplate) *controlv1alpha1.TaskTemplate {
	if t == nil {
		return nil
	}
	out := &controlv1alpha1.TaskTemplate{
		Command:        t.Command,
		Args:           t.Args,
		WorkingDir:     t.WorkingDir,
		TimeoutSeconds: t.TimeoutSeconds,
		RestartPolicy:  controlv1alpha1.TaskRestartPolicy(t.RestartPolicy),
		BackoffLimit:   t.BackoffLimit,
	}
	for _, e := range t.Env {
		out.Env = append(out.Env, controlv1alpha1.TaskEnvVar{Name: e.Name, Value: e.Value})
	}
	if l := t.Lifecycle; l != nil {
		out.Lifecycle = &controlv1alpha1.TaskLifecycle{}
		if l.PreStart != nil {
			out.Lifecycle.PreStart = &controlv1alpha1.TaskHook{Command: l.PreStart.Command, TimeoutSeconds: l.PreStart.TimeoutSeconds}
		}
		if l.PostStop != nil {
			out.Lifecycle.PostStop = &controlv1alpha1.TaskHook{Command: l.PostStop.Command, TimeoutSeconds: l.PostStop.TimeoutSeconds}
		}
	}
	return out
}

func fromControlTaskTemplate(t *controlv1alpha1.TaskTemplate) *sandboxv1alpha1.SandboxTaskTemplate {
	if t == nil {
		return nil
	}
	out := &sandboxv1alpha1.SandboxTaskTemplate{
		Command:        t.Command,
		Args:           t.Args,
		WorkingDir:     t.WorkingDir,
		TimeoutSeconds: t.TimeoutSeconds,
		RestartPolicy:  string(t.RestartPolicy),
		BackoffLimit:   t.BackoffLimit,
	}
	for _, e := range t.Env {
		out.Env = append(out.Env, sandboxv1alpha1.SandboxTaskEnvVar{Name: e.Name, Value: e.Value})
	}
	if l := t.Lifecycle; l != nil {
		out.Lifecycle = &sandboxv1alpha1.SandboxTaskLifecycle{}
		if l.PreStart != nil {
			out.Lifecycle.PreStart = &sandboxv1alpha1.SandboxTaskHook{Command: l.PreStart.Command, TimeoutSeconds: l.PreStart.TimeoutSeconds}
		}
		if l.PostStop != nil {
			out.Lifecycle.PostStop = &sandboxv1alpha1.SandboxTaskHook{Command: l.PostStop.Command, TimeoutSeconds: l.PostStop.TimeoutSeconds}
		}
	}
	return out
}

func toControlNetworkPolicy(p *sandboxv1alpha1.SandboxNetworkPolicy) *controlv1alpha1.NetworkPolicy {
	if p == nil {
		return nil
	}
	out := &controlv1alpha1.NetworkPolicy{DefaultAction: controlv1alpha1.EgressAction(p.DefaultAction)}
	for _, r := range p.Egress {
		cr := controlv1alpha1.EgressRule{Action: controlv1alpha1.EgressAction(r.Action), To: r.To}
		for _, port := range r.Ports {
			cr.Ports = append(cr.Ports, controlv1alpha1.EgressPort{Port: port.Port, EndPort: port.EndPort, Protocol: port.Protocol})
		}
		out.Egress = append(out.Egress, cr)
	}
	return out
}

func fromControlNetworkPolicy(p *controlv1alpha1.NetworkPolicy) *sandboxv1alpha1.SandboxNetworkPolicy {
	if p == nil {
		return nil
	}
	out := &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: string(p.DefaultAction)}
	for _, r := range p.Egress {
		sr := sandboxv1alpha1.SandboxEgressRule{Action: string(r.Action), To: r.To}
		for _, port := range r.Ports {
			sr.Ports = append(sr.Ports, sandboxv1alpha1.SandboxEgressPort{Port: port.Port, EndPort: port.EndPort, Protocol: port.Protocol})
		}
		out.Egress = append(out.Egress, sr)
	}
	return out
}
