"""Running Python code in a stateful interpreter: ``sb.run_code`` and ``sb.contexts``.

A code context is a Jupyter kernel (ipykernel) in the sandbox: variables, imports and the
working directory persist between runs, as in a notebook. The context ``default`` is made by
the first run that names it, so one call runs code::

    sb.run_code("x = 41")
    ex = sb.run_code("print('hello'); x + 1")
    ex.stdout   # "hello\\n"
    ex.text     # "42"  (the last expression's value, as text/plain)

A run's answer streams one JSON event a line (``SandboxCodeRunEvent``): ``stdout``,
``stderr``, ``result``, ``display`` (rich outputs, like a plot's base64 ``image/png``),
``error`` and last ``end``. :func:`collect` folds them into an :class:`Execution`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, Union

from .errors import SandboxError
from ._util import API_VERSION, Duration, parse_time, sandbox_path, whole_seconds

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = ["CodeError", "Execution", "CodeContext", "Contexts", "collect", "DEFAULT_CONTEXT"]

DEFAULT_CONTEXT = "default"
#: How long past its own timeout a run's answer may stay silent before the client gives up.
_TIMEOUT_SLACK = 30.0


@dataclass(frozen=True)
class CodeError:
    """An exception a run raised: ``name`` (``ZeroDivisionError``), ``value`` (its message)
    and the interpreter's ``traceback`` lines (without terminal colours)."""

    name: str
    value: str
    traceback: List[str] = field(default_factory=list)

    def __str__(self) -> str:
        if self.traceback:
            return "\n".join(self.traceback)
        return f"{self.name}: {self.value}"


@dataclass
class Execution:
    """What a run did.

    Attributes:
        stdout: What it printed to standard output.
        stderr: What it printed to standard error.
        results: Its rich outputs in order: the last expression's value (``result``) and
            what it displayed (``display``, like plots), each a dict of MIME type to data
            (``text/plain``, ``image/png`` in base64, ``text/html``...).
        text: The ``text/plain`` of the last expression's value; None when the run ended
            with a statement.
        error: The exception it raised, or None.
        status: How it ended: ``ok``, ``error`` (an exception, also the KeyboardInterrupt of
            an interrupted run) or ``aborted``.
        reason: Why it did not end by itself: ``Interrupted``, ``DeadlineExceeded`` (its
            timeout) or ``KernelDied`` (the interpreter died; the context is Dead).
        message: Says more about ``reason``.
        execution_count: The run's number in its context, as a notebook's ``In[N]``.
        truncated: Some output was too large and was dropped.
        events: Every event as the server sent it.
    """

    stdout: str = ""
    stderr: str = ""
    results: List[Dict[str, str]] = field(default_factory=list)
    text: Optional[str] = None
    error: Optional[CodeError] = None
    status: str = ""
    reason: Optional[str] = None
    message: Optional[str] = None
    execution_count: Optional[int] = None
    truncated: bool = False
    events: List[Dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        """Whether the run ended by itself without an exception."""
        return self.status == "ok"


def _data(event: Mapping[str, Any]) -> Dict[str, str]:
    data = {str(k): str(v) for k, v in (event.get("data") or {}).items()}
    if event.get("text") and "text/plain" not in data:
        data["text/plain"] = str(event["text"])
    return data


def _code_error(obj: Optional[Mapping[str, Any]]) -> Optional[CodeError]:
    if not obj:
        return None
    return CodeError(name=str(obj.get("name") or ""), value=str(obj.get("value") or ""),
                     traceback=[str(t) for t in obj.get("traceback") or []])


def collect(lines: Iterable[Union[bytes, str]], on_event: Optional[Callable[[Dict[str, Any]], None]] = None) -> Execution:
    """Folds a run's JSON lines into an :class:`Execution`, calling ``on_event`` with each
    event as it comes.

    Raises:
        SandboxError: a line is not an event, or the answer ended before its ``end`` event
            (the connection was lost).
    """
    ex = Execution()
    out: List[str] = []
    err: List[str] = []
    for line in lines:
        if isinstance(line, bytes):
            line = line.decode("utf-8", errors="replace")
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            raise SandboxError(f"the server sent what is not a run event: {line[:200]!r}") from None
        if not isinstance(ev, dict):
            raise SandboxError(f"the server sent what is not a run event: {line[:200]!r}")
        if ev.get("kind") == "Status":
            from .errors import error_from_status
            raise error_from_status(ev)
        ex.events.append(ev)
        if on_event is not None:
            on_event(ev)
        typ = ev.get("type")
        if typ == "stdout":
            out.append(str(ev.get("text") or ""))
        elif typ == "stderr":
            err.append(str(ev.get("text") or ""))
        elif typ == "result":
            ex.results.append(_data(ev))
            ex.text = str(ev.get("text")) if ev.get("text") is not None else _data(ev).get("text/plain")
            if ev.get("executionCount"):
                ex.execution_count = int(ev["executionCount"])
        elif typ == "display":
            ex.results.append(_data(ev))
        elif typ == "error":
            ex.error = _code_error(ev.get("error"))
        elif typ == "end":
            ex.stdout, ex.stderr = "".join(out), "".join(err)
            ex.status = str(ev.get("status") or "")
            ex.reason = ev.get("reason") or None
            ex.message = ev.get("message") or None
            ex.truncated = bool(ev.get("truncated"))
            if ev.get("executionCount"):
                ex.execution_count = int(ev["executionCount"])
            if ex.error is None:
                ex.error = _code_error(ev.get("error"))
            return ex
    raise SandboxError("the run's output ended before its end: the connection to the sandbox was lost")


@dataclass
class CodeContext:
    """A code context (the API's ``SandboxCodeContext``), as last read.

    Attributes:
        id: Its ID (``default``, or the one asked for, or a random one).
        replica: The replica it runs in.
        phase: ``Idle``, ``Busy`` or ``Dead`` (its interpreter ended; ``message`` says how).
        language_version: The interpreter's version, like ``3.11.2``.
        execution_count: How many runs it had.
        last_run_time: When its latest run began.
        message: Why a Dead context ended.
        raw: The object as the server sent it.
    """

    id: str
    replica: int = 0
    phase: str = ""
    language_version: str = ""
    execution_count: int = 0
    last_run_time: Optional[datetime] = None
    message: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> "CodeContext":
        """A CodeContext from the server's dict."""
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        return cls(
            id=str(meta.get("name") or ""),
            replica=int(spec.get("replica") or 0),
            phase=str(status.get("phase") or ""),
            language_version=str(status.get("languageVersion") or ""),
            execution_count=int(status.get("executionCount") or 0),
            last_run_time=parse_time(status.get("lastRunTime")),
            message=status.get("message") or None,
            raw=dict(obj),
        )


class Contexts:
    """The code contexts of a sandbox (``sb.contexts``). A context lives as long as its
    container: a pause, a resume or a restart ends it (then its ID is 404)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _path(self, *parts: str) -> str:
        return sandbox_path(self._sb.namespace, self._sb.name, "contexts", *parts)

    def run(
        self,
        code: str,
        context: str = DEFAULT_CONTEXT,
        timeout: Optional[Duration] = None,
        *,
        on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
        replica: Optional[int] = None,
    ) -> Execution:
        """Runs ``code`` in ``context``; see :meth:`kube_sandbox.Sandbox.run_code`."""
        body: Dict[str, Any] = {"apiVersion": API_VERSION, "kind": "SandboxCodeRun", "code": code}
        t = whole_seconds(timeout)
        if t:
            body["timeoutSeconds"] = t
        read_timeout = t + _TIMEOUT_SLACK if t else None
        resp = self._sb.client.request("POST", self._path(context, "run"), query={"replica": replica}, json=body,
                                       headers={"Accept": "application/jsonl, application/json"},
                                       stream=True, timeout=(30.0, read_timeout))
        try:
            return collect(resp.iter_lines(), on_event)
        finally:
            resp.close()

    def create(
        self,
        id: Optional[str] = None,
        *,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
        replica: int = 0,
    ) -> CodeContext:
        """Makes a context (``id``, or a random one); returns once its interpreter is up.

        Raises:
            ConflictError: a context of that ID exists.
            SandboxError: 429 when the replica has 16 contexts already.
        """
        spec: Dict[str, Any] = {}
        if replica:
            spec["replica"] = int(replica)
        if env:
            spec["env"] = [{"name": str(k), "value": str(v)} for k, v in env.items()]
        if workdir:
            spec["workingDir"] = workdir
        body: Dict[str, Any] = {"apiVersion": API_VERSION, "kind": "SandboxCodeContext", "spec": spec}
        if id:
            body["metadata"] = {"name": id}
        return CodeContext.from_api(self._sb.client.call("POST", self._path(), body=body))

    def list(self, *, replica: Optional[int] = None) -> List[CodeContext]:
        """The contexts of every replica (or of ``replica``)."""
        obj = self._sb.client.call("GET", self._path(), query={"replica": replica})
        return [CodeContext.from_api(i) for i in obj.get("items") or []]

    def get(self, id: str, *, replica: Optional[int] = None) -> CodeContext:
        """The context ``id``.

        Raises:
            NotFoundError: there is no such context.
        """
        return CodeContext.from_api(self._sb.client.call("GET", self._path(id), query={"replica": replica}))

    def delete(self, id: str, *, replica: Optional[int] = None) -> None:
        """Ends the context ``id`` (its interpreter, and its state)."""
        self._sb.client.call("DELETE", self._path(id), query={"replica": replica})

    def interrupt(self, id: str = DEFAULT_CONTEXT, *, replica: Optional[int] = None) -> CodeContext:
        """Interrupts the run in context ``id`` (a KeyboardInterrupt); the context keeps its
        state."""
        return CodeContext.from_api(self._sb.client.call("POST", self._path(id, "interrupt"), query={"replica": replica},
                                                         body={}))
