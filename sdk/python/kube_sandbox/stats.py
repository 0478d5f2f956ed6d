"""What sandboxes use: ``sb.stats()`` and :func:`list_stats`.

The figures come from each replica's node, never from inside the sandbox, whose code could
forge them: kube-sandbox's node agent reads the pod's cgroup (CPU, memory, processes), its
writable layer and emptyDir volumes (disk), its network interface and the egress filter's
verdicts, about every 10 seconds. Under gVisor they include the sandbox's sentry and gofer
(the user-space kernel that runs its code): what the sandbox costs its node. ::

    for r in sb.stats().replicas:
        if r.reason:
            print(r.replica, "no figures:", r.reason, r.message)   # NoPod, NodeUnavailable...
        else:
            print(r.replica, r.cpu_cores, r.memory_bytes, r.memory_limit_bytes, r.oom_kills)

    busy = [s for s in list_stats(label_selector="team=ml")
            if any((r.cpu_cores or 0) > 1 for r in s.replicas)]

RBAC: ``sb.stats()`` needs ``get`` on ``sandboxes/stats``; :func:`list_stats` needs ``list``
on ``sandboxstats`` in the namespace (with ``all_namespaces``, in every namespace).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Mapping, Optional, Union

from kubernetes import client as k8s_client

from .client import Client, resolve_client
from ._util import GROUP, VERSION, parse_time, sandbox_path

__all__ = ["ReplicaStats", "SandboxStats", "list_stats", "sandbox_stats", "stats_path", "parse_duration"]

#: Reasons of a replica without (all its) figures (``ReplicaStats.reason``).
NO_POD = "NoPod"
NODE_UNAVAILABLE = "NodeUnavailable"
NOT_SAMPLED = "NotSampled"
PARTIAL = "Partial"

STATS_PLURAL = "sandboxstats"

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Optional[str]) -> Optional[float]:
    """A duration as the API writes one (Go's ``time.Duration``: ``10s``, ``1m30s``,
    ``500ms``, ``0s``) in seconds; None for None or an empty string.

    Raises:
        ValueError: it is no duration.
    """
    if value is None or value == "":
        return None
    v = value.strip()
    sign = -1.0 if v.startswith("-") else 1.0
    v = v.lstrip("+-")
    if v == "0":
        return 0.0
    total, pos = 0.0, 0
    for m in _DURATION_PART.finditer(v):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(v) or pos == 0:
        raise ValueError(f"not a duration: {value!r}")
    return sign * total


def stats_path(namespace: Optional[str] = None) -> str:
    """The API path of the sandboxstats of a namespace, or of all namespaces for None."""
    from urllib.parse import quote

    if namespace is None:
        return f"/apis/{GROUP}/{VERSION}/{STATS_PLURAL}"
    return f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace, safe='')}/{STATS_PLURAL}"


def _int(obj: Mapping[str, Any], key: str) -> Optional[int]:
    v = obj.get(key)
    return int(v) if v is not None else None


@dataclass(frozen=True)
class ReplicaStats:
    """What one replica's pod uses, as its node last read it.

    A figure the node could not give is None, and :attr:`reason` and :attr:`message` say
    why (``NoPod``: the replica has no pod now; ``NodeUnavailable``: its node's agent did
    not answer; ``NotSampled``: the pod was not read yet; ``Partial``: some figures are
    missing).

    Attributes:
        replica: The replica's index.
        pod, node: Where it runs.
        timestamp: When the figures were read (at most about 10 s ago).
        window: The seconds the CPU rate is over.
        cpu_cores: The cores used over the window (0.5 is half a core); None without a window
            (a pod read once so far).
        cpu_seconds: The CPU time used since the pod started.
        memory_bytes: The working set: what the kernel OOM-kills and the kubelet evicts by.
        memory_rss_bytes, memory_usage_bytes: Anonymous and shared memory; everything charged
            to the pod, page cache included.
        memory_limit_bytes: The pod's memory limit; None without one.
        memory_peak_bytes: The most it used since it started.
        oom_kills: The processes the kernel's OOM killer ended in it.
        disk_bytes: What it wrote to its root filesystem and its disk-backed emptyDir
            volumes (``disk_writable_layer_bytes`` and ``disk_empty_dir_bytes``).
        net_rx_bytes, net_tx_bytes, net_rx_packets, net_tx_packets: Its pod interface's
            traffic, in (received) and out (sent).
        connections_allowed, connections_denied: New outbound connections its egress policy
            let through and refused.
        processes: The tasks in its pod's cgroup; under gVisor, the sentry's and gofer's
            threads on the node, not the processes in the sandbox.
        raw: The replica's figures as the server sent them.
    """

    replica: int
    pod: Optional[str] = None
    node: Optional[str] = None
    timestamp: Optional[datetime] = None
    window: Optional[float] = None
    reason: Optional[str] = None
    message: Optional[str] = None
    cpu_cores: Optional[float] = None
    cpu_seconds: Optional[float] = None
    memory_bytes: Optional[int] = None
    memory_rss_bytes: Optional[int] = None
    memory_usage_bytes: Optional[int] = None
    memory_limit_bytes: Optional[int] = None
    memory_peak_bytes: Optional[int] = None
    oom_kills: Optional[int] = None
    disk_bytes: Optional[int] = None
    disk_writable_layer_bytes: Optional[int] = None
    disk_empty_dir_bytes: Optional[int] = None
    net_rx_bytes: Optional[int] = None
    net_tx_bytes: Optional[int] = None
    net_rx_packets: Optional[int] = None
    net_tx_packets: Optional[int] = None
    connections_allowed: Optional[int] = None
    connections_denied: Optional[int] = None
    processes: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> "ReplicaStats":
        """The figures of a replica from the server's ``SandboxReplicaStats`` dict."""
        cpu = obj.get("cpu")
        memory = obj.get("memory")
        disk = obj.get("disk")
        net = obj.get("network")
        window = parse_duration(obj.get("window"))
        out: Dict[str, Any] = {}
        if isinstance(cpu, Mapping):
            # Without a window there is no rate yet: usageNanoCores means nothing.
            if window:
                out["cpu_cores"] = int(cpu.get("usageNanoCores") or 0) / 1e9
            out["cpu_seconds"] = int(cpu.get("usageCoreNanoSeconds") or 0) / 1e9
        if isinstance(memory, Mapping):
            limit = _int(memory, "limitBytes")
            peak = _int(memory, "peakBytes")
            out.update(memory_bytes=_int(memory, "workingSetBytes") or 0, memory_rss_bytes=_int(memory, "rssBytes") or 0,
                       memory_usage_bytes=_int(memory, "usageBytes") or 0, memory_limit_bytes=limit or None,
                       memory_peak_bytes=peak or None, oom_kills=_int(memory, "oomKills") or 0)
        if isinstance(disk, Mapping):
            layer, empty_dir = _int(disk, "writableLayerBytes") or 0, _int(disk, "emptyDirBytes") or 0
            out.update(disk_bytes=layer + empty_dir, disk_writable_layer_bytes=layer, disk_empty_dir_bytes=empty_dir)
        if isinstance(net, Mapping):
            out.update(net_rx_bytes=_int(net, "rxBytes") or 0, net_tx_bytes=_int(net, "txBytes") or 0,
                       net_rx_packets=_int(net, "rxPackets") or 0, net_tx_packets=_int(net, "txPackets") or 0,
                       connections_allowed=_int(net, "connectionsAllowed") or 0,
                       connections_denied=_int(net, "connectionsDenied") or 0)
        return cls(
            replica=int(obj.get("replica") or 0),
            pod=obj.get("pod") or None,
            node=obj.get("node") or None,
            timestamp=parse_time(obj.get("timestamp")),
            window=window,
            reason=obj.get("reason") or None,
            message=obj.get("message") or None,
            processes=_int(obj, "processes"),
            raw=dict(obj),
            **out,
        )


@dataclass(frozen=True)
class SandboxStats:
    """What the replicas of a sandbox use (the API's ``SandboxStats``).

    Attributes:
        name, namespace: The sandbox's.
        replicas: Each replica's :class:`ReplicaStats`, by index.
        raw: The object as the server sent it.
    """

    name: str
    namespace: str
    replicas: List[ReplicaStats] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> "SandboxStats":
        """The figures of a sandbox from the server's ``SandboxStats`` dict."""
        meta = obj.get("metadata") or {}
        return cls(name=str(meta.get("name") or ""), namespace=str(meta.get("namespace") or ""),
                   replicas=[ReplicaStats.from_api(r) for r in obj.get("replicas") or [] if isinstance(r, Mapping)],
                   raw=dict(obj))


def sandbox_stats(client: Client, namespace: str, name: str) -> SandboxStats:
    """The figures of sandbox ``name`` (what :meth:`Sandbox.stats` returns).

    Raises:
        NotFoundError: there is no such sandbox.
        ForbiddenError: RBAC does not allow ``get`` on ``sandboxes/stats``.
    """
    obj = client.call("GET", sandbox_path(namespace, name, "stats"))
    stats = SandboxStats.from_api(obj)
    if not stats.namespace:
        stats = SandboxStats(name=stats.name or name, namespace=namespace, replicas=stats.replicas, raw=stats.raw)
    return stats


def list_stats(
    namespace: Optional[str] = None,
    all_namespaces: bool = False,
    label_selector: Optional[str] = None,
    *,
    client: Union[Client, k8s_client.ApiClient, None] = None,
    kubeconfig: Optional[str] = None,
    context: Optional[str] = None,
) -> List[SandboxStats]:
    """What the sandboxes of ``namespace`` (default: the client's namespace) use, or those of
    every namespace with ``all_namespaces``, optionally those whose labels match
    ``label_selector`` (``"team=ml"``); ordered by namespace and name.

    Raises:
        ValueError: both ``namespace`` and ``all_namespaces``.
        ForbiddenError: RBAC does not allow ``list`` on ``sandboxstats`` there.
    """
    if namespace is not None and all_namespaces:
        raise ValueError("give a namespace or all_namespaces, not both")
    c = resolve_client(client, kubeconfig, context)
    path = stats_path(None if all_namespaces else (namespace or c.namespace))
    obj = c.call("GET", path, query={"labelSelector": label_selector or None})
    return [SandboxStats.from_api(item) for item in obj.get("items") or [] if isinstance(item, Mapping)]
