// Package podnet is what a node agent needs to know about a sandbox pod's network: where
// its network namespace is (through containerd's CRI sandbox container), which interface of
// the node is the host side of the pod's veth, and a probe that proves the node's packet
// filter sees the pod's traffic.
//
// The agent runs in the node's root network namespace (a hostNetwork DaemonSet with
// containerd's socket). Before it reports a pod's policy as in force it proves that its
// filter, in the node's namespace, sees the pod's packets at all: some CNI datapaths (Cilium
// with BPF host routing, for one) take a pod's packets past the node's netfilter, and gVisor
// takes them past the pod's own. SendProbe writes one hand-built frame, a TCP SYN from the
// pod's address to a node address, into the pod's interface from inside the pod's namespace,
// so that it enters the node exactly as the pod's own traffic does; the agent then reads its
// filter's counter for the probe. The frame is built by hand because a gVisor pod's interface
// has no address in the kernel (gVisor's netstack holds it), so no kernel socket could send
// it. The node answers it with a RST (no one listens on the probe's port, or the filter
// rejects it), which the pod's kernel ignores; nothing leaves the machine, since the
// destination is the node itself.
//
// Namespaces are entered only on locked OS threads that are either switched back or thrown
// away; netlink requests go through handles made in the namespace, which work from any
// thread.
package podnet
