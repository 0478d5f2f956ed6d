"""The :class:`Sandbox`: create, find, use and delete sandboxes.

A sandbox is an isolated environment in the cluster, one pod (or several replicas) that takes
commands, files and HTTP through the Kubernetes API, as the resource ``sandboxes`` of the API
group ``sandbox.kube-sandbox.io/v1alpha1``. It comes from a warm pool (``pool=``: ready in
milliseconds) or from an image (``image=``: a pod made for it)::

    from kube_sandbox import Sandbox

    with Sandbox.create(pool="python", timeout=600) as sb:
        sb.files.write("/work/main.py", "print(6 * 7)")
        result = sb.exec("python3 /work/main.py")
        print(result.stdout, result.exit_code)          # 42\\n 0
    # the sandbox is deleted here

Waiting (for Ready, for a pause, for the deletion) watches the sandbox; nothing polls.
"""

from __future__ import annotations

import math
import posixpath
import time
from datetime import datetime
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union
from urllib.parse import urljoin, urlparse

import requests
from kubernetes import client as k8s_client
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

from .client import Client, configure_session, resolve_client
from .code import Contexts, DEFAULT_CONTEXT, Execution
from .commands import Command, ExecResult, Stdin, run_exec
from .errors import (ExpiredError, NotFoundError, SandboxError, WaitTimeoutError, error_from_api_exception)
from .files import Files
from .network import ALLOW, DENY, NetworkPolicy, Network, parse_rules
from .processes import Processes
from .stats import SandboxStats, list_stats, sandbox_stats
from ._util import (API_VERSION, GROUP, PLURAL, VERSION, Duration, condition, condition_text, format_time,
                    parse_time, sandbox_path, sandboxes_path, seconds, whole_seconds)

__all__ = ["Sandbox", "ProxySession", "create_body"]

ClientLike = Union[Client, k8s_client.ApiClient, None]
#: The container name the API gives the sandbox container of an image sandbox.
CONTAINER_NAME = "sandbox"
GENERATE_NAME = "sbx-"


def create_body(
    pool: Optional[str] = None,
    image: Optional[str] = None,
    *,
    namespace: Optional[str] = None,
    name: Optional[str] = None,
    timeout: Optional[Duration] = None,
    env: Optional[Mapping[str, str]] = None,
    allow: Optional[Sequence[str]] = None,
    labels: Optional[Mapping[str, str]] = None,
    annotations: Optional[Mapping[str, str]] = None,
    runtime_class: Optional[str] = None,
    auto_renew: Optional[Duration] = None,
) -> Dict[str, Any]:
    """The Sandbox object :meth:`Sandbox.create` sends (pure; see there for the arguments).

    Raises:
        ValueError: not exactly one of ``pool`` and ``image``; ``runtime_class`` with a pool;
            a target of ``allow`` that does not parse.
    """
    if bool(pool) == bool(image):
        raise ValueError("give exactly one of pool (a warm pool's name) and image (a container image)")
    if runtime_class and pool:
        raise ValueError("runtime_class goes with image only: a pool's template names its runtime class")
    meta: Dict[str, Any] = {}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = GENERATE_NAME
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = {str(k): str(v) for k, v in labels.items()}
    if annotations:
        meta["annotations"] = {str(k): str(v) for k, v in annotations.items()}
    spec: Dict[str, Any] = {}
    if pool:
        spec["poolRef"] = {"name": pool}
    else:
        pod_spec: Dict[str, Any] = {"containers": [{"name": CONTAINER_NAME, "image": image}]}
        if runtime_class:
            pod_spec["runtimeClassName"] = runtime_class
        spec["template"] = {"spec": pod_spec}
    t = whole_seconds(timeout, "timeout")
    if t is not None:
        spec["timeoutSeconds"] = t
    if env:
        for k in env:
            if not k or "=" in k:
                raise ValueError(f"invalid environment variable name {k!r}")
        spec["env"] = [{"name": str(k), "value": str(v)} for k, v in env.items()]
    if allow is not None:
        if isinstance(allow, str):
            allow = [allow]
        spec["networkPolicy"] = NetworkPolicy(DENY, parse_rules(list(allow), ALLOW)).to_api()
    r = whole_seconds(auto_renew, "auto_renew")
    if r:
        spec["autoRenew"] = {"extendSeconds": r}
    return {"apiVersion": API_VERSION, "kind": "Sandbox", "metadata": meta, "spec": spec}


def describe(obj: Optional[Mapping[str, Any]]) -> str:
    """A sandbox's state in a few words, for messages: ``Pending (Ready False: PoolExhausted:
    ...)``."""
    if not obj:
        return "gone"
    phase = (obj.get("status") or {}).get("phase") or "without a phase"
    out = str(phase)
    for t in ("Paused", "Ready"):
        c = condition(obj, t)
        if c and c.get("status") != "True" and condition_text(c):
            out += f" ({t} {c.get('status')}: {condition_text(c)})"
            break
    return out


def _check_alive(obj: Optional[Mapping[str, Any]], name: str, what: str) -> None:
    """Raises when a sandbox cannot reach ``what`` any more: deleted, expired, failed."""
    if obj is None:
        raise NotFoundError(f"sandbox {name} was deleted while waiting for {what}", code=404, reason="NotFound")
    phase = (obj.get("status") or {}).get("phase")
    if phase == "Expired":
        raise ExpiredError(f"sandbox {name} has expired", code=409, reason="Expired")
    if phase == "Failed":
        c = condition(obj, "TasksFailed") if (condition(obj, "TasksFailed") or {}).get("status") == "True" \
            else condition(obj, "Ready")
        text = condition_text(c)
        raise SandboxError(f"sandbox {name} failed" + (f": {text}" if text else ""),
                           reason=(c or {}).get("reason") or "Failed")
    if phase == "Terminating" or (obj.get("metadata") or {}).get("deletionTimestamp"):
        raise SandboxError(f"sandbox {name} is being deleted", reason="Terminating")


class Sandbox:
    """A sandbox of the cluster, as last read (:attr:`raw`), with the client to reach it.

    Make one with :meth:`create`, :meth:`get` or :meth:`list`. It is a context manager that
    deletes the sandbox on exit.

    Attributes:
        client: The :class:`Client` it uses.
        raw: The Sandbox object as last read (a dict): ``metadata``, ``spec``, ``status``.
        files: Its filesystem (:class:`~kube_sandbox.files.Files`).
        network: Its outbound policy (:class:`~kube_sandbox.network.Network`).
        processes: Its background processes (:class:`~kube_sandbox.processes.Processes`).
        contexts: Its code contexts (:class:`~kube_sandbox.code.Contexts`).
    """

    def __init__(self, client: Client, obj: Dict[str, Any]) -> None:
        self.client: Client = client
        self.raw: Dict[str, Any] = obj
        self.files = Files(self)
        self.network = Network(self)
        self.processes = Processes(self)
        self.contexts = Contexts(self)

    # --- finding and making sandboxes -----------------------------------------------------

    @classmethod
    def create(
        cls,
        pool: Optional[str] = None,
        image: Optional[str] = None,
        *,
        namespace: Optional[str] = None,
        name: Optional[str] = None,
        timeout: Optional[Duration] = None,
        env: Optional[Mapping[str, str]] = None,
        allow: Optional[Sequence[str]] = None,
        labels: Optional[Mapping[str, str]] = None,
        annotations: Optional[Mapping[str, str]] = None,
        runtime_class: Optional[str] = None,
        auto_renew: Optional[Duration] = None,
        wait: bool = True,
        wait_timeout: Duration = 120,
        client: ClientLike = None,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
    ) -> "Sandbox":
        """Creates a sandbox and (with ``wait``) waits until it is Ready.

        Args:
            pool: The warm Pool (of the namespace) to take a pod from: fast.
            image: A container image to make the sandbox's pod of. Exactly one of pool and
                image.
            namespace: Where (default: the client's namespace).
            name: Its name; default a generated one (``sbx-xxxxx``).
            timeout: Its lifetime (seconds or a timedelta; at least 60): it is deleted that
                long after its creation unless renewed. Default: it does not expire.
            env: Variables for its container (and every exec).
            allow: Egress targets it may reach (``"example.com:443"``, see
                :mod:`kube_sandbox.network`); given, everything else is denied. Default: the
                pool's policy, else the platform's (which denies everything).
            labels, annotations: Its metadata.
            runtime_class: With ``image``: the RuntimeClass of its pod (like ``gvisor``).
            auto_renew: Keep it alive while used: every exec, files or proxy access moves its
                expiry to at least that far ahead.
            wait: Wait until it is Ready (condition Ready True).
            wait_timeout: How long to wait (seconds or a timedelta).
            client: A :class:`Client` (or a Kubernetes ``ApiClient``) to use; default: one
                from ``kubeconfig`` and ``context``, else the default kubeconfig.

        Raises:
            ValueError: the arguments do not make a sandbox (see :func:`create_body`).
            InvalidError: the server refused the sandbox (``causes`` name the fields).
            ForbiddenError: RBAC does not let the caller create sandboxes (or its pool).
            SandboxError: the sandbox failed (reason of its Ready condition, like
                ``PodFailed``) while waiting.
            WaitTimeoutError: it was not Ready within ``wait_timeout``.

            When the wait fails, the sandbox is deleted (the error names it).
        """
        c = resolve_client(client, kubeconfig, context)
        ns = namespace or c.namespace
        body = create_body(pool, image, namespace=ns, name=name, timeout=timeout, env=env, allow=allow,
                           labels=labels, annotations=annotations, runtime_class=runtime_class, auto_renew=auto_renew)
        query = {"fieldValidation": "Strict"}
        obj = c.call("POST", sandboxes_path(ns), query=query, body=body)
        sb = cls(c, obj)
        if wait:
            try:
                sb.wait_ready(timeout=wait_timeout)
            except BaseException:
                try:
                    sb.delete()
                except SandboxError:
                    pass
                raise
        return sb

    @classmethod
    def get(
        cls,
        name: str,
        namespace: Optional[str] = None,
        *,
        client: ClientLike = None,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
    ) -> "Sandbox":
        """The sandbox ``name`` of ``namespace`` (default: the client's namespace).

        Raises:
            NotFoundError: there is no such sandbox.
        """
        c = resolve_client(client, kubeconfig, context)
        ns = namespace or c.namespace
        return cls(c, c.call("GET", sandbox_path(ns, name)))

    @classmethod
    def list(
        cls,
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        *,
        field_selector: Optional[str] = None,
        client: ClientLike = None,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
    ) -> List["Sandbox"]:
        """The sandboxes of ``namespace`` (default: the client's namespace), optionally those
        that match a label selector (``"team=a,env!=prod"``) or a field selector
        (``metadata.name``, ``status.phase``: ``"status.phase=Running"``)."""
        c = resolve_client(client, kubeconfig, context)
        ns = namespace or c.namespace
        out: List[Sandbox] = []
        cont: Optional[str] = None
        while True:
            obj = c.call("GET", sandboxes_path(ns), query={"labelSelector": label_selector,
                                                           "fieldSelector": field_selector,
                                                           "limit": 500, "continue": cont})
            for item in obj.get("items") or []:
                item.setdefault("apiVersion", API_VERSION)
                item.setdefault("kind", "Sandbox")
                out.append(cls(c, item))
            cont = (obj.get("metadata") or {}).get("continue") or None
            if not cont:
                return out

    @classmethod
    def list_stats(
        cls,
        namespace: Optional[str] = None,
        all_namespaces: bool = False,
        label_selector: Optional[str] = None,
        *,
        client: ClientLike = None,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
    ) -> List[SandboxStats]:
        """What the sandboxes of ``namespace`` (or, with ``all_namespaces``, of every
        namespace) use, those that match ``label_selector`` if given: the same as
        :func:`kube_sandbox.list_stats`. Needs ``list`` on ``sandboxstats``."""
        return list_stats(namespace, all_namespaces, label_selector, client=client, kubeconfig=kubeconfig,
                          context=context)

    # --- what it is -----------------------------------------------------------------------

    @property
    def metadata(self) -> Dict[str, Any]:
        """Its ``metadata``."""
        return self.raw.setdefault("metadata", {})

    @property
    def spec(self) -> Dict[str, Any]:
        """Its ``spec``."""
        return self.raw.setdefault("spec", {})

    @property
    def status(self) -> Dict[str, Any]:
        """Its ``status``."""
        return self.raw.get("status") or {}

    @property
    def name(self) -> str:
        """Its name."""
        return str(self.metadata.get("name") or "")

    @property
    def namespace(self) -> str:
        """Its namespace."""
        return str(self.metadata.get("namespace") or self.client.namespace)

    @property
    def uid(self) -> str:
        """Its UID: a sandbox made again under the same name has another."""
        return str(self.metadata.get("uid") or "")

    @property
    def resource_version(self) -> Optional[str]:
        """The version of the object as last read."""
        return self.metadata.get("resourceVersion")

    @property
    def labels(self) -> Dict[str, str]:
        """Its labels."""
        return dict(self.metadata.get("labels") or {})

    @property
    def phase(self) -> str:
        """Its phase: Pending, Running, Pausing, Paused, Resuming, Succeeded, Failed, Expired
        or Terminating (as last read: see :meth:`refresh`)."""
        return str(self.status.get("phase") or "")

    @property
    def ready(self) -> bool:
        """Whether its condition Ready was True when last read."""
        return (condition(self.raw, "Ready") or {}).get("status") == "True"

    @property
    def conditions(self) -> List[Dict[str, Any]]:
        """Its conditions (``Ready``, ``EgressReady``, ``Paused``...), as dicts."""
        return list(self.status.get("conditions") or [])

    @property
    def expires_at(self) -> Optional[datetime]:
        """When it will be deleted unless renewed (timezone-aware); None: never."""
        return parse_time(self.status.get("expiresAt"))

    @property
    def timeout_seconds(self) -> Optional[int]:
        """Its lifetime, as created (``spec.timeoutSeconds``)."""
        t = self.spec.get("timeoutSeconds")
        return int(t) if t is not None else None

    @property
    def paused(self) -> bool:
        """Whether it is asked to be paused (``spec.paused``)."""
        return bool(self.spec.get("paused"))

    @property
    def pool(self) -> Optional[str]:
        """The pool it came from, if any."""
        return (self.spec.get("poolRef") or {}).get("name")

    @property
    def pods(self) -> List[Dict[str, Any]]:
        """Its replicas' pods (``status.pods``): replica, name, ip, nodeName, ready."""
        return list(self.status.get("pods") or [])

    def __repr__(self) -> str:
        return f"Sandbox({self.namespace}/{self.name}, phase={self.phase or '?'})"

    def stats(self) -> SandboxStats:
        """What its replicas use now: CPU, memory, disk, network and processes, as their nodes
        read them (at most about 10 s ago; see :mod:`kube_sandbox.stats`). A replica without
        figures (no pod now, a node that did not answer) has ``reason`` and ``message``
        instead; that is not an error.

        Raises:
            NotFoundError: there is no such sandbox.
            ForbiddenError: RBAC does not allow ``get`` on ``sandboxes/stats``.
        """
        return sandbox_stats(self.client, self.namespace, self.name)

    # --- its life -------------------------------------------------------------------------

    def refresh(self) -> "Sandbox":
        """Reads the sandbox anew; returns it.

        Raises:
            NotFoundError: it was deleted.
        """
        self.raw = self.client.call("GET", sandbox_path(self.namespace, self.name))
        return self

    def _patch(self, patch: Mapping[str, Any]) -> "Sandbox":
        """Sends a JSON merge patch; keeps the answer."""
        self.raw = self.client.call("PATCH", sandbox_path(self.namespace, self.name), body=dict(patch),
                                    content_type="application/merge-patch+json",
                                    query={"fieldValidation": "Strict"})
        return self

    def wait_for(
        self,
        predicate: Callable[[Optional[Dict[str, Any]]], bool],
        *,
        timeout: Optional[Duration] = 120,
        what: str = "the condition",
    ) -> "Sandbox":
        """Waits until ``predicate(obj)`` is true for the sandbox object (a dict; None once
        it is deleted), watching it; returns the sandbox, updated.

        ``predicate`` may raise to end the wait early (a sandbox that failed). A sandbox
        deleted and made again under the same name does not count.

        Raises:
            WaitTimeoutError: not within ``timeout`` seconds (None: no limit); the message
                says what it last was.
            NotFoundError: it is gone and ``predicate(None)`` is false.
        """
        limit = seconds(timeout)
        deadline = time.monotonic() + limit if limit is not None else None
        uid = self.uid
        path = sandbox_path(self.namespace, self.name)
        last: Optional[Dict[str, Any]] = self.raw
        backoff = 0.05
        while True:
            try:
                obj: Optional[Dict[str, Any]] = self.client.call("GET", path)
            except NotFoundError:
                obj = None
            if obj is not None and uid and (obj.get("metadata") or {}).get("uid") != uid:
                obj = None
            if obj is not None:
                self.raw = last = obj
            if predicate(obj):
                return self
            if obj is None:
                raise NotFoundError(f"sandbox {self.name} is gone (while waiting for {what})", code=404,
                                    reason="NotFound")
            remaining: Optional[float] = None
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WaitTimeoutError(f"timed out after {limit:g}s waiting for sandbox {self.name} to reach "
                                           f"{what}; it is {describe(last)}", reason="Timeout")
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            started = time.monotonic()
            if self._watch(predicate, rv, remaining):
                return self
            # A watch ends when its window does. One that ended at once (a connection an
            # intermediary dropped, a version too old) is not retried at once, so that a
            # misbehaving path is not hammered.
            if time.monotonic() - started < 1.0:
                backoff = min(backoff * 2, 2.0)
                pause = backoff if deadline is None else min(backoff, max(0.0, deadline - time.monotonic()))
                time.sleep(pause)
            else:
                backoff = 0.05

    def _watch(self, predicate: Callable[[Optional[Dict[str, Any]]], bool], resource_version: Optional[str],
               remaining: Optional[float]) -> bool:
        """Watches the sandbox from ``resource_version`` for at most ``remaining`` seconds;
        True once ``predicate`` holds. False when the watch ended first (the caller reads
        the sandbox again and decides)."""
        w = k8s_watch.Watch()
        kwargs: Dict[str, Any] = {"field_selector": f"metadata.name={self.name}"}
        if resource_version:
            kwargs["resource_version"] = resource_version
        # The server ends the watch after timeout_seconds; the client's read timeout is a
        # little longer, for a server that does not.
        window = 300.0 if remaining is None else max(1.0, remaining)
        kwargs["timeout_seconds"] = int(math.ceil(window))
        kwargs["_request_timeout"] = (30.0, window + 15.0)
        uid = self.uid
        try:
            for ev in w.stream(self.client.custom_objects.list_namespaced_custom_object,
                               GROUP, VERSION, self.namespace, PLURAL, **kwargs):
                typ = ev.get("type")
                obj = ev.get("raw_object")
                if typ in ("BOOKMARK", "ERROR") or not isinstance(obj, dict):
                    continue
                if uid and (obj.get("metadata") or {}).get("uid") != uid:
                    continue
                if typ == "DELETED":
                    if predicate(None):
                        return True
                    raise NotFoundError(f"sandbox {self.name} was deleted", code=404, reason="NotFound")
                self.raw = obj
                if predicate(obj):
                    return True
        except SandboxError:
            raise
        except ApiException as e:
            if e.status == 410:  # the version is too old to watch from: read again
                return False
            raise error_from_api_exception(e) from None
        except Exception as e:
            # A read timeout (the window ended) or a stream the server dropped: read again.
            if type(e).__name__ in ("ReadTimeoutError", "ProtocolError", "IncompleteRead", "timeout",
                                    "TimeoutError", "ConnectionResetError"):
                return False
            if type(e).__module__.startswith(("urllib3", "http.client")) or isinstance(e, OSError):
                raise SandboxError(f"watching sandbox {self.name}: cannot reach the API server: {e}") from e
            raise
        finally:
            w.stop()
        return False

    def wait_ready(self, timeout: Optional[Duration] = 120) -> "Sandbox":
        """Waits until the sandbox is Ready (condition Ready True); returns it.

        Raises:
            SandboxError: it failed (the reason of its Ready condition); ExpiredError: it
                expired; NotFoundError: it was deleted; WaitTimeoutError: not in time.
        """
        name = self.name

        def ready(obj: Optional[Dict[str, Any]]) -> bool:
            _check_alive(obj, name, "it to be Ready")
            return (condition(obj, "Ready") or {}).get("status") == "True"

        return self.wait_for(ready, timeout=timeout, what="Ready")

    def delete(self, wait: bool = False, timeout: Optional[Duration] = 120) -> None:
        """Deletes the sandbox (its pods, files, processes and snapshots go with it).

        Args:
            wait: Wait until it is gone (its pods deleted).
            timeout: How long to wait.

        Raises:
            NotFoundError: it was gone already.
        """
        self.client.call("DELETE", sandbox_path(self.namespace, self.name))
        if wait:
            try:
                self.wait_for(lambda obj: obj is None, timeout=timeout, what="its deletion")
            except NotFoundError:
                pass

    def renew(self, seconds: Optional[Duration] = None, expires_at: Optional[datetime] = None) -> "Sandbox":
        """Moves its expiry further out: to ``seconds`` from now, or to ``expires_at`` (an aware
        datetime); with neither, its lifetime (``timeout_seconds``) from now. The expiry only
        moves forward. Returns the sandbox with its new :attr:`expires_at`.

        Raises:
            ExpiredError: it has expired already.
            ConflictError: it has no expiry (it was made without a timeout).
            InvalidError: a time in the past, or past the server's maximum.
        """
        if seconds is not None and expires_at is not None:
            raise ValueError("give seconds or expires_at, not both")
        body: Dict[str, Any] = {"apiVersion": API_VERSION, "kind": "SandboxRenewal"}
        if expires_at is not None:
            body["expiresAt"] = format_time(expires_at)
        else:
            s = whole_seconds(seconds, "seconds") if seconds is not None else self.timeout_seconds
            if s is None:
                raise ValueError(f"sandbox {self.name} has no timeout to renew by: give seconds or expires_at")
            body["extendSeconds"] = s
        self.raw = self.client.call("POST", sandbox_path(self.namespace, self.name, "renew"), body=body)
        return self

    def pause(self, wait: bool = True, timeout: Optional[Duration] = 300) -> "Sandbox":
        """Pauses it: each replica's filesystem is snapshotted and its pod deleted, so that an
        idle sandbox holds no node. Processes, code contexts and memory are not kept. With
        ``wait``, returns once it is Paused.

        Raises:
            SandboxError: it cannot pause (reason ``PauseNotSupported``), or failed.
        """
        self._patch({"spec": {"paused": True}})
        if wait:
            self._wait_phase("Paused", timeout)
        return self

    def resume(self, wait: bool = True, timeout: Optional[Duration] = 300) -> "Sandbox":
        """Resumes a paused sandbox from its snapshots (its files as they were; processes
        start anew). With ``wait``, returns once it is Running."""
        self._patch({"spec": {"paused": False}})
        if wait:
            self._wait_phase("Running", timeout)
        return self

    def _wait_phase(self, want: str, timeout: Optional[Duration]) -> None:
        name = self.name

        def reached(obj: Optional[Dict[str, Any]]) -> bool:
            if obj is not None and (obj.get("status") or {}).get("phase") == want:
                return True
            _check_alive(obj, name, want)
            c = condition(obj, "Paused")
            if c and c.get("reason") == "PauseNotSupported" and \
                    c.get("observedGeneration") == (obj or {}).get("metadata", {}).get("generation"):
                raise SandboxError(f"sandbox {name} cannot pause: {c.get('message') or ''}", reason="PauseNotSupported")
            return False

        self.wait_for(reached, timeout=timeout, what=want)

    # --- using it -------------------------------------------------------------------------

    def exec(
        self,
        cmd: Command,
        *,
        stdin: Stdin = None,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
        timeout: Optional[Duration] = None,
        replica: int = 0,
        on_stdout: Optional[Callable[[bytes], None]] = None,
        on_stderr: Optional[Callable[[bytes], None]] = None,
    ) -> ExecResult:
        """Runs a command and returns its output and exit code. A non-zero exit code is not
        an exception: look at ``result.exit_code`` (or ``result.ok``).

        Args:
            cmd: A string, run with ``sh -c``; or a list, the argv itself.
            stdin: Its standard input: bytes, text (UTF-8) or a binary file-like object
                (streamed). Default: none (it reads end of file).
            env: Variables added to its environment.
            workdir: The absolute directory it starts in.
            timeout: Kill it (and all it started) after that long; it then exits with the
                code of the kill, usually 137.
            replica: The replica to run it in.
            on_stdout, on_stderr: Called with each piece of output as it comes, for
                progress; the result has it all anyway.

        Raises:
            NotFoundError: there is no such sandbox.
            ForbiddenError: RBAC does not allow ``create sandboxes/exec``.
            SandboxError: the command could not run (503 while the sandbox is not ready,
                or a failure the server's Status describes).
        """
        return run_exec(self.client, self.namespace, self.name, cmd, stdin=stdin, env=env, workdir=workdir,
                        timeout=timeout, replica=replica, on_stdout=on_stdout, on_stderr=on_stderr)

    def run_code(
        self,
        code: str,
        context: str = DEFAULT_CONTEXT,
        timeout: Optional[Duration] = None,
        *,
        on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
        replica: Optional[int] = None,
    ) -> Execution:
        """Runs Python ``code`` in the code context ``context`` (a Jupyter kernel whose
        variables and imports persist between runs; ``default`` is made on first use).

        An exception in the code is not raised: it is ``execution.error`` (and
        ``execution.status`` is ``error``).

        Args:
            timeout: Interrupt the run after that long (``reason`` DeadlineExceeded); the
                context keeps its state.
            on_event: Called with each event (a dict: ``type`` stdout, stderr, result,
                display, error or end) as it comes.

        Raises:
            NotFoundError: no such sandbox, or (for another context than ``default``) no
                such context.
            SandboxError: the image has no Python kernel, or the connection was lost.
        """
        return self.contexts.run(code, context, timeout, on_event=on_event, replica=replica)

    def proxy_url(self, port: int, path: str = "/", *, replica: Optional[int] = None) -> str:
        """The URL of ``path`` on the HTTP server at ``port`` in the sandbox, through the
        kube-apiserver (the ``proxy`` subresource). Requests to it need the client's
        credentials: see :meth:`http_session`.

        ``path`` is a URL path (percent-encoded as in a URL), with its query if any.
        """
        return proxy_base(self.client, self.namespace, self.name, port, replica) + path.lstrip("/")

    def http_session(self, port: int, *, replica: Optional[int] = None) -> "ProxySession":
        """A ``requests.Session`` for the HTTP server at ``port`` in the sandbox: relative
        URLs (``session.get("/healthz")``) go to it through the proxy subresource, with the
        client's credentials. Close it when done (it is a context manager).

        The proxy passes no credentials to the sandbox and removes the Cookie header, so
        cookie sessions of the sandbox's server do not work through it; and the
        kube-apiserver answers the server's redirects with 502 (see :class:`ProxySession`).
        """
        return ProxySession(proxy_base(self.client, self.namespace, self.name, port, replica),
                            self.client.configuration)

    # --- a context manager that deletes it ---------------------------------------------------

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.delete()
        except NotFoundError:
            pass


def proxy_base(client: Client, namespace: str, name: str, port: int, replica: Optional[int] = None) -> str:
    """The URL of the proxy subresource for ``port`` (and ``replica``), ending in ``/``."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port must be a number from 1 to 65535, not {port!r}")
    target = str(port) if replica is None else f"{int(replica)}:{port}"
    return client.host + sandbox_path(namespace, name, "proxy") + "/" + target + "/"


def _normalized(url: str) -> str:
    """``url`` with its path's dot segments resolved, as HTTP clients send it."""
    u = urlparse(url)
    path = u.path
    if "/." in path:
        trailing = path.endswith("/") or path.endswith("/.") or path.endswith("/..")
        path = posixpath.normpath(path)
        if trailing and not path.endswith("/"):
            path += "/"
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
    return u._replace(path=path).geturl()


class ProxySession(requests.Session):
    """A ``requests.Session`` bound to one port of a sandbox, through the proxy subresource.

    ``session.get("/api/items?x=1")`` requests ``/api/items?x=1`` of the sandbox's server;
    absolute URLs must be under :attr:`base_url`, and a path that would climb out of it
    (``/../..``) is refused. Redirects would be followed within the sandbox's server only (a
    ``Location: /login`` stays in the sandbox; one that leads elsewhere is returned, not
    followed), but a kube-apiserver that rejects redirects from aggregated API servers (its
    default, ``--aggregator-reject-forwarding-redirect``) answers them 502 before they arrive.

    Attributes:
        base_url: The proxy URL of the port, ending in ``/``.
    """

    def __init__(self, base_url: str, configuration: k8s_client.Configuration) -> None:
        super().__init__()
        configure_session(self, configuration)
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"

    def resolve(self, url: Union[str, bytes]) -> str:
        """The full URL of ``url``: a path of the sandbox's server, or a URL under
        :attr:`base_url`.

        Raises:
            ValueError: the URL leads out of the sandbox's server.
        """
        if isinstance(url, bytes):
            url = url.decode("utf-8")
        url = str(url)
        if "://" in url.split("?", 1)[0] or url.startswith("//"):
            full = url
        else:
            full = self.base_url + url.lstrip("/")
        full = _normalized(full)
        if not (full.startswith(self.base_url) or full + "/" == self.base_url):
            raise ValueError(f"{url!r} is not a URL of this sandbox's server (under {self.base_url})")
        return full

    def request(self, method: Union[str, bytes], url: Union[str, bytes], *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        """Sends a request to the sandbox's server; ``url`` is a path of it (see
        :meth:`resolve`)."""
        return super().request(method, self.resolve(url), *args, **kwargs)

    def get_redirect_target(self, resp: requests.Response) -> Optional[str]:  # type: ignore[override]
        """The redirect's target mapped into the sandbox's server, or None (not followed) when
        it leads elsewhere."""
        location = super().get_redirect_target(resp)
        if not location:
            return None
        parsed = urlparse(location)
        if parsed.scheme or parsed.netloc:
            target = location
        elif location.startswith("/"):
            target = self.base_url + location.lstrip("/")
        else:
            target = urljoin(resp.url, location)
        target = _normalized(target)
        if target.startswith(self.base_url):
            return target
        return None
