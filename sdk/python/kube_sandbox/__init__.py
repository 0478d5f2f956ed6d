"""kube-sandbox: a Python SDK for sandboxes for AI agents on Kubernetes.

Sandboxes are isolated environments (pods) served by the kube-sandbox aggregated API
(``sandbox.kube-sandbox.io/v1alpha1``, resource ``sandboxes``). This package creates them and
uses them: commands, files, HTTP servers, background processes and stateful Python, and reads
what they use (:meth:`Sandbox.stats`, :func:`list_stats`)::

    from kube_sandbox import Sandbox

    with Sandbox.create(pool="python") as sb:
        sb.files.write("/work/hello.py", "print('hello')")
        print(sb.exec("python3 /work/hello.py").stdout)

It is built on the official ``kubernetes`` client and loads the kubeconfig as kubectl does;
see :class:`Client` for other ways to connect. Failures are :class:`SandboxError` and its
subclasses (:mod:`kube_sandbox.errors`).
"""

from ._version import __version__
from .client import Client
from .code import CodeContext, CodeError, Contexts, Execution
from .commands import ExecResult
from .errors import (
    Cause,
    ConflictError,
    ExpiredError,
    ForbiddenError,
    InvalidError,
    NotFoundError,
    SandboxError,
    UnauthorizedError,
    WaitTimeoutError,
)
from .files import FileInfo, Files
from .network import EgressPort, EgressRule, Network, NetworkPolicy, parse_rules
from .processes import Process, Processes
from .sandbox import ProxySession, Sandbox
from .stats import ReplicaStats, SandboxStats, list_stats

__all__ = [
    "__version__",
    "Sandbox",
    "Client",
    "ExecResult",
    "Execution",
    "CodeError",
    "CodeContext",
    "Contexts",
    "FileInfo",
    "Files",
    "Network",
    "NetworkPolicy",
    "EgressRule",
    "EgressPort",
    "parse_rules",
    "Process",
    "Processes",
    "ProxySession",
    "SandboxStats",
    "ReplicaStats",
    "list_stats",
    "SandboxError",
    "NotFoundError",
    "UnauthorizedError",
    "ForbiddenError",
    "ConflictError",
    "ExpiredError",
    "InvalidError",
    "WaitTimeoutError",
    "Cause",
]
