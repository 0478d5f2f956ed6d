// Package usage is the node agent's usage figures: what each sandbox pod of the node uses of
// it (CPU, memory, disk, network, processes), read on the node and never from inside the
// sandbox, whose code could forge anything it reports. The wire contract is nodeapi's
// (PodStats, StatsList), served by the agent to sandbox-apiserver (the stats subresource) and
// sandbox-controller, and the same figures are Prometheus series (Collector).
//
// Where each figure comes from:
//
//   - CPU, memory and processes: the pod's cgroup (Cgroups, cgroup v2 or v1), which holds all
//     the pod costs the node; under gVisor, the sentry and the gofers, which runsc puts in the
//     pod's cgroup, so that the sandbox's programs show as the sentry's use. The agent finds the
//     cgroup once per pod through containerd: the cgroupsPath of the pod's CRI sandbox
//     container (Containerd.PodCgroup), whichever cgroup driver the kubelet has.
//   - disk: the writable layers of the pod's containers, as containerd's snapshotter measures
//     them (Containerd.WritableLayers), and a bounded walk of the pod's disk-backed emptyDir
//     directories in the kubelet's root directory, which follows no symbolic link.
//   - network: the egress enforcer's (Network, egress.Node.Traffic): the counters of the host
//     side of the pod's veth, which every packet of the pod crosses whatever its runtime, and
//     the filter's verdicts.
//
// The Sampler reads every pod that serves a sandbox (its labels name the BatchSandbox and the
// replica; an idle pool pod is not read) every nodeapi.SampleInterval, a few pods at once,
// and keeps the last sample, from which the CPU rate over the window since the one before
// is made; the endpoints and the collector answer from it. It learns of the pods from the
// egress enforcer's watch of the node's sandbox pods (PodHandler). A figure that cannot be
// read is left out of the sample, with the reason in its Errors; the others stand.
//
// OOM kills are events as well as a figure: SubscribeOOMs gives the pods with kills, then a
// report at each sample whose count grew, which the agent streams to sandbox-controller
// (nodeapi.OOMsPath) to tell of each kill on the Sandbox. Sending never waits: a subscriber
// that falls behind is dropped, and subscribes again for the whole state.
package usage
