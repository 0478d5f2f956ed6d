"""Background processes of a sandbox: ``sb.processes``.

A process outlives the call that started it (a web server, a long build): the ``processes``
subresource starts it and answers at once with its ID; its output is kept (the last 256 KiB)
and served by the ``log`` subresource; a signal stops it. ::

    server = sb.processes.start("python3 -m http.server 8080")
    print(server.id, server.phase)           # p-..., Running
    print(server.log())                      # what it printed so far
    server.kill()                            # TERM
    server.wait(timeout=10)                  # until it has ended
    print(server.signal, server.exit_code)   # TERM None

A pause or resume of the sandbox keeps no processes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Literal, Mapping, Optional, Union, overload

import requests

from .commands import Command, argv
from .errors import SandboxError, WaitTimeoutError
from ._util import API_VERSION, Duration, parse_time, sandbox_path, seconds, whole_seconds

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = ["Process", "Processes", "process_body"]

RUNNING = "Running"
EXITED = "Exited"
LOST = "Lost"


def process_body(
    command: Command,
    *,
    env: Optional[Mapping[str, str]] = None,
    workdir: Optional[str] = None,
    tty: bool = False,
    stdin: bool = False,
    timeout: Optional[Duration] = None,
    replica: int = 0,
) -> Dict[str, Any]:
    """The ``SandboxProcess`` that starts ``command`` (a string runs under ``sh -c``)."""
    spec: Dict[str, Any] = {"command": argv(command)}
    if replica:
        spec["replica"] = int(replica)
    if env:
        spec["env"] = [{"name": str(k), "value": str(v)} for k, v in env.items()]
    if workdir:
        spec["workingDir"] = workdir
    if tty:
        spec["tty"] = True
    if stdin:
        spec["stdin"] = True
    t = whole_seconds(timeout)
    if t:
        spec["timeoutSeconds"] = t
    return {"apiVersion": API_VERSION, "kind": "SandboxProcess", "spec": spec}


@dataclass
class Process:
    """A process of a sandbox (the API's ``SandboxProcess``), as last read.

    Attributes:
        id: Its ID (``p-...``), unique in its replica.
        replica: The replica it runs in.
        command: Its whole argv.
        phase: ``Running``, ``Exited``, or ``Lost`` (its container restarted).
        exit_code: Its exit code once it exited by itself; None otherwise.
        signal: The signal that killed it (``TERM``, ``KILL``...), if one did.
        reason: ``Completed``, ``Error``, ``DeadlineExceeded`` or ``ContainerRestarted``.
        message: Says how it ended.
        pid: Its process ID in the sandbox's container.
        start_time, end_time: When it started and ended.
        raw: The object as the server sent it.
    """

    id: str
    replica: int = 0
    command: List[str] = field(default_factory=list)
    phase: str = ""
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    reason: Optional[str] = None
    message: Optional[str] = None
    pid: Optional[int] = None
    start_time: Optional[datetime] = None
    end_time: Optional[datetime] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)
    _processes: Optional["Processes"] = field(default=None, repr=False, compare=False)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any], processes: Optional["Processes"] = None, replica: Optional[int] = None) -> "Process":
        """A Process from the server's ``SandboxProcess`` dict."""
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        rep = spec.get("replica")
        return cls(
            id=str(meta.get("name") or ""),
            replica=int(rep) if rep is not None else (replica or 0),
            command=list(spec.get("command") or []) + list(spec.get("args") or []),
            phase=str(status.get("phase") or ""),
            exit_code=status.get("exitCode"),
            signal=status.get("signal") or None,
            reason=status.get("reason") or None,
            message=status.get("message") or None,
            pid=status.get("pid"),
            start_time=parse_time(status.get("startTime")),
            end_time=parse_time(status.get("endTime")),
            raw=dict(obj),
            _processes=processes,
        )

    @property
    def running(self) -> bool:
        """Whether it was running when last read."""
        return self.phase == RUNNING

    def _owner(self) -> "Processes":
        if self._processes is None:
            raise SandboxError("this Process is not tied to a sandbox")
        return self._processes

    def _update(self, other: "Process") -> "Process":
        for name in ("replica", "command", "phase", "exit_code", "signal", "reason", "message", "pid",
                     "start_time", "end_time", "raw"):
            setattr(self, name, getattr(other, name))
        return self

    def refresh(self) -> "Process":
        """Reads the process anew; returns it."""
        return self._update(self._owner().get(self.id, replica=self.replica))

    def log(self) -> str:
        """Its output so far (stdout and stderr interleaved, as kept: the last 256 KiB)."""
        return self._owner().log(self.id, replica=self.replica)

    def kill(self, signal: str = "TERM", grace_period: Optional[Duration] = None) -> "Process":
        """Sends ``signal`` (``TERM``, ``INT``, ``KILL``...) to its process group; with
        ``grace_period``, KILL follows that long after if it still runs. Returns it."""
        return self._update(self._owner().kill(self.id, signal, grace_period=grace_period, replica=self.replica))

    def wait(self, timeout: Optional[Duration] = None) -> "Process":
        """Waits until it has ended (Exited or Lost); returns it, updated.

        Raises:
            WaitTimeoutError: it still runs after ``timeout`` seconds.
        """
        return self._update(self._owner().wait(self.id, timeout=timeout, replica=self.replica))


class Processes:
    """The processes of a sandbox (``sb.processes``)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _path(self, *parts: str) -> str:
        return sandbox_path(self._sb.namespace, self._sb.name, "processes", *parts)

    def start(
        self,
        cmd: Command,
        background: bool = True,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
        tty: bool = False,
        stdin: bool = False,
        timeout: Optional[Duration] = None,
        *,
        replica: int = 0,
    ) -> Process:
        """Starts ``cmd`` (a string runs under ``sh -c``; a list is the argv).

        Args:
            background: True (the default) returns at once, the process Running; False waits
                until it has ended and returns it Exited (use :meth:`Sandbox.exec` to get the
                output of a short command directly).
            env: Variables added to the sandbox's environment.
            workdir: The absolute directory it starts in.
            tty: Runs it on a terminal of its own (one output stream).
            stdin: Keeps its standard input open for clients that attach.
            timeout: Stops it (TERM, then KILL) after that long.
            replica: The replica to run it in.

        Raises:
            ConflictError: the sandbox is paused.
            SandboxError: 429 when the replica runs 64 processes already.
        """
        body = process_body(cmd, env=env, workdir=workdir, tty=tty, stdin=stdin, timeout=timeout, replica=replica)
        obj = self._sb.client.call("POST", self._path(), body=body)
        p = Process.from_api(obj, self, replica)
        if not background:
            p.wait()
        return p

    def list(self, *, replica: Optional[int] = None) -> List[Process]:
        """The processes of every replica (or of ``replica``), each replica's oldest first;
        ended ones stay listed until the sandbox is deleted (the newest 256)."""
        obj = self._sb.client.call("GET", self._path(), query={"replica": replica})
        return [Process.from_api(item, self, replica) for item in obj.get("items") or []]

    def get(self, id: str, *, replica: Optional[int] = None) -> Process:
        """The process ``id`` (of replica 0 unless ``replica`` says otherwise).

        Raises:
            NotFoundError: there is no such process (or it was dropped from the records).
        """
        obj = self._sb.client.call("GET", self._path(id), query={"replica": replica})
        return Process.from_api(obj, self, replica)

    def kill(self, id: str, signal: str = "TERM", *, grace_period: Optional[Duration] = None,
             replica: Optional[int] = None) -> Process:
        """Sends ``signal`` to the process group of ``id``; returns the process."""
        body: Dict[str, Any] = {"apiVersion": API_VERSION, "kind": "SandboxProcessSignal", "signal": signal}
        g = whole_seconds(grace_period, "grace_period")
        if g is not None:
            body["gracePeriodSeconds"] = g
        obj = self._sb.client.call("POST", self._path(id, "signal"), query={"replica": replica}, body=body)
        return Process.from_api(obj, self, replica)

    @overload
    def log(self, id: str, follow: Literal[False] = False, *, replica: Optional[int] = None,
            offset: Optional[int] = None, tail: Optional[int] = None) -> str: ...

    @overload
    def log(self, id: str, follow: Literal[True], *, replica: Optional[int] = None,
            offset: Optional[int] = None, tail: Optional[int] = None) -> Iterator[str]: ...

    def log(self, id: str, follow: bool = False, *, replica: Optional[int] = None,
            offset: Optional[int] = None, tail: Optional[int] = None) -> Union[str, Iterator[str]]:
        """The output of process ``id``.

        Args:
            follow: False returns what it printed so far, as one string. True returns an
                iterator of its lines (with their newline) as they come, which ends when the
                process ends.
            offset: Starts at that byte of its output (counted from its first).
            tail: Only that many lines from the end.
        """
        query = {"process": id, "replica": replica, "follow": True if follow else None,
                 "offsetBytes": offset, "tailLines": tail}
        path = sandbox_path(self._sb.namespace, self._sb.name, "log")
        if not follow:
            resp = self._sb.client.request("GET", path, query=query)
            try:
                return resp.content.decode("utf-8", errors="replace")
            finally:
                resp.close()
        resp = self._sb.client.request("GET", path, query=query, stream=True)
        return _lines(resp)

    def wait(self, id: str, *, timeout: Optional[Duration] = None, replica: Optional[int] = None) -> Process:
        """Waits until process ``id`` has ended; returns it.

        Processes have no watch: the wait follows the process's log (from its end, so that
        none of it is read), which the server ends when the process ends, then reads the
        process. A log that ends early (a follow that fell behind) is followed again.

        Raises:
            WaitTimeoutError: it still runs after ``timeout`` seconds.
        """
        limit = seconds(timeout)
        deadline = time.monotonic() + limit if limit is not None else None
        path = sandbox_path(self._sb.namespace, self._sb.name, "log")
        backoff, quick = 0.05, False
        while True:
            p = self.get(id, replica=replica)
            if p.phase != RUNNING:
                return p
            # A follow that ended at once while the process still runs (it fell behind, or
            # a connection was dropped) is not retried in a tight loop.
            if quick:
                backoff = min(backoff * 2, 2.0)
                time.sleep(backoff if deadline is None else min(backoff, max(0.0, deadline - time.monotonic())))
            else:
                backoff = 0.05
            remaining = None
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WaitTimeoutError(f"process {id} of sandbox {self._sb.name} still runs after {limit:g}s")
            try:
                resp = self._sb.client.request(
                    "GET", path, query={"process": id, "replica": replica, "follow": True, "tailLines": 0},
                    stream=True, timeout=(30.0, remaining))
            except SandboxError as e:
                if isinstance(e.__cause__, requests.Timeout):
                    continue  # the deadline: the top of the loop decides
                raise
            started = time.monotonic()
            try:
                for _ in resp.iter_content(chunk_size=64 << 10):
                    if deadline is not None and time.monotonic() >= deadline:
                        break
            except (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError):
                # A read timeout (the deadline) or a dropped stream: the top of the loop decides.
                pass
            finally:
                resp.close()
            quick = time.monotonic() - started < 1.0


def _lines(resp: requests.Response) -> Iterator[str]:
    """The lines of a streamed answer, decoded, until it ends; closes it."""
    try:
        pending = b""
        for chunk in resp.iter_content(chunk_size=None):
            if not chunk:
                continue
            pending += chunk
            while True:
                i = pending.find(b"\n")
                if i < 0:
                    break
                line, pending = pending[:i + 1], pending[i + 1:]
                yield line.decode("utf-8", errors="replace")
        if pending:
            yield pending.decode("utf-8", errors="replace")
    finally:
        resp.close()
