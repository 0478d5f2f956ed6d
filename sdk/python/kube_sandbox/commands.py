"""Running commands in a sandbox: ``Sandbox.exec`` and its result.

A command runs through the ``exec`` subresource, with the WebSocket channel protocol of
:mod:`kube_sandbox.channel`: its standard input goes out on channel 0 (and is closed when all
of it was sent, so that the command reads end of file), its output comes back on channels 1
and 2, and its exit code in the Status of channel 3.

One thread does it all with ``select``: input is sent only when the socket can take it and
output is read as it comes, so a command that writes much while it reads much never blocks on
a full buffer.
"""

from __future__ import annotations

import select
import time
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .channel import ERROR, STDERR, STDIN, STDOUT, Channel, exit_code_from_status, open_channel, parse_status
from .errors import SandboxError, WaitTimeoutError
from ._util import Duration, sandbox_path, whole_seconds
from ._version import __version__

__all__ = ["ExecResult", "Command", "exec_query", "run_exec"]

#: A command: a string runs under ``sh -c``; a list is the argv itself.
Command = Union[str, Sequence[str]]
#: What stdin takes: bytes, text (sent as UTF-8) or a binary file-like object.
Stdin = Union[bytes, bytearray, memoryview, str, IO[bytes], None]

_CHUNK = 32 << 10
#: How long past its own timeout a command's answer may take before the client gives up.
_TIMEOUT_SLACK = 30.0


@dataclass
class ExecResult:
    """What a command did.

    Attributes:
        exit_code: Its exit code (0 is success; a command killed by a signal has the code
            the shell reports, like 137 for KILL).
        stdout_bytes: Its standard output, as it wrote it.
        stderr_bytes: Its standard error.
        status: The Status the server ended the exec with (a dict).
    """

    exit_code: int
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    status: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def stdout(self) -> str:
        """The standard output as text (UTF-8; undecodable bytes become U+FFFD)."""
        return self.stdout_bytes.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        """The standard error as text (UTF-8; undecodable bytes become U+FFFD)."""
        return self.stderr_bytes.decode("utf-8", errors="replace")

    @property
    def ok(self) -> bool:
        """Whether the command exited with 0."""
        return self.exit_code == 0


def argv(command: Command) -> List[str]:
    """The argv of a command: a string runs as ``sh -c COMMAND``."""
    if isinstance(command, str):
        if not command.strip():
            raise ValueError("the command is empty")
        return ["sh", "-c", command]
    out = [str(a) for a in command]
    if not out:
        raise ValueError("the command is empty")
    return out


def exec_query(
    command: Command,
    *,
    stdin: bool = False,
    env: Optional[Mapping[str, str]] = None,
    workdir: Optional[str] = None,
    timeout: Optional[Duration] = None,
    replica: int = 0,
) -> List[Tuple[str, str]]:
    """The query parameters of an exec request (unit-tested without a server)."""
    q: List[Tuple[str, str]] = [("command", a) for a in argv(command)]
    q += [("stdout", "true"), ("stderr", "true")]
    if stdin:
        q.append(("stdin", "true"))
    for k, v in (env or {}).items():
        if not k or "=" in k:
            raise ValueError(f"invalid environment variable name {k!r}")
        q.append(("env", f"{k}={v}"))
    if workdir:
        q.append(("workingDir", workdir))
    t = whole_seconds(timeout)
    if t:
        q.append(("timeoutSeconds", str(t)))
    if replica:
        if replica < 0:
            raise ValueError("replica must not be negative")
        q.append(("replica", str(int(replica))))
    return q


def _chunks(stdin: Stdin) -> Iterator[bytes]:
    """The input in pieces of at most 32 KiB."""
    if stdin is None:
        return
    if isinstance(stdin, str):
        stdin = stdin.encode("utf-8")
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        view = memoryview(stdin)
        for i in range(0, len(view), _CHUNK):
            yield bytes(view[i:i + _CHUNK])
        return
    read = getattr(stdin, "read", None)
    if read is None:
        raise TypeError(f"stdin must be bytes, str or a file-like object, not {type(stdin).__name__}")
    while True:
        data = read(_CHUNK)
        if not data:
            return
        if isinstance(data, str):
            data = data.encode("utf-8")
        yield data


def pump(
    channel: Channel,
    stdin: Stdin = None,
    *,
    deadline: Optional[float] = None,
    on_stdout: Optional[Callable[[bytes], None]] = None,
    on_stderr: Optional[Callable[[bytes], None]] = None,
) -> ExecResult:
    """Sends ``stdin`` and collects the output and the Status until the server closes.

    ``deadline`` is a ``time.monotonic()`` value past which :class:`WaitTimeoutError` is
    raised.
    """
    stdout, stderr, error = bytearray(), bytearray(), bytearray()
    got_status = False
    chunks = _chunks(stdin) if stdin is not None else None
    writing = chunks is not None
    if writing and not channel.can_close_streams:
        raise SandboxError(f"the server speaks {channel.protocol}, which cannot end a command's input; "
                           "stdin needs v5.channel.k8s.io")
    sock = channel.sock
    while True:
        wait: Optional[float] = None
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0:
                raise WaitTimeoutError("the command did not end in time")
        if channel.pending():
            readable, writable = True, False
        else:
            r, w, _ = select.select([sock], [sock] if writing else [], [], wait)
            readable, writable = bool(r), bool(w)
        if readable:
            got = channel.receive()
            if got is None:
                break
            ch, data = got
            if ch is None or not data:
                continue
            if ch == STDOUT:
                stdout += data
                if on_stdout is not None:
                    on_stdout(data)
            elif ch == STDERR:
                stderr += data
                if on_stderr is not None:
                    on_stderr(data)
            elif ch == ERROR:
                error += data
                got_status = True
            # CLOSE ([255, channel]) from the server, and unknown channels, need nothing.
            continue
        if writable and chunks is not None:
            piece = next(chunks, None)
            try:
                if piece is None:
                    channel.close_stream(STDIN)
                    writing = False
                elif piece:
                    channel.send(STDIN, piece)
            except OSError:
                # The server closed its side (the command ended without reading all of it);
                # what it answered is still to be read.
                writing = False
    if not got_status:
        raise SandboxError("the connection ended before the command's exit status arrived")
    status = parse_status(bytes(error))
    code = exit_code_from_status(status)
    return ExecResult(exit_code=code, stdout_bytes=bytes(stdout), stderr_bytes=bytes(stderr), status=status)


def run_exec(
    client: Any,
    namespace: str,
    name: str,
    command: Command,
    *,
    stdin: Stdin = None,
    env: Optional[Mapping[str, str]] = None,
    workdir: Optional[str] = None,
    timeout: Optional[Duration] = None,
    replica: int = 0,
    on_stdout: Optional[Callable[[bytes], None]] = None,
    on_stderr: Optional[Callable[[bytes], None]] = None,
) -> ExecResult:
    """Runs ``command`` in sandbox ``namespace/name`` through ``client`` (a
    :class:`kube_sandbox.Client`); see :meth:`kube_sandbox.Sandbox.exec`."""
    query = exec_query(command, stdin=stdin is not None, env=env, workdir=workdir, timeout=timeout, replica=replica)
    url = client.url(sandbox_path(namespace, name, "exec"), query)
    cfg = client.configuration
    channel = open_channel(
        url,
        ssl_context=client.ssl_context() if url.startswith("https") else None,
        authorization=client.authorization_header(),
        headers={"User-Agent": f"kube-sandbox-python/{__version__}"},
        proxy=cfg.proxy,
        proxy_headers=cfg.proxy_headers,
    )
    t = whole_seconds(timeout)
    deadline = time.monotonic() + t + _TIMEOUT_SLACK if t else None
    try:
        return pump(channel, stdin, deadline=deadline, on_stdout=on_stdout, on_stderr=on_stderr)
    finally:
        channel.close()
