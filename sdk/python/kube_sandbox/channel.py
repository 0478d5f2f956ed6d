"""The Kubernetes WebSocket channel protocol, as exec speaks it.

``kubectl exec`` and client-go talk to ``pods/exec`` (and to the ``exec`` subresource of a
sandbox, which speaks the same protocol) over a WebSocket whose subprotocol is
``v5.channel.k8s.io`` (or the older ``v4.channel.k8s.io``). Every binary message starts with
one byte, the channel, followed by that channel's data:

====== ========= ===============================================================
Byte   Channel   Direction and content
====== ========= ===============================================================
0      stdin     client to server: the command's standard input
1      stdout    server to client: its standard output
2      stderr    server to client: its standard error
3      error     server to client: a ``metav1.Status`` JSON once the command ends:
                 ``Success``, or ``Failure`` with ``details.causes`` holding
                 ``{"reason": "ExitCode", "message": "3"}`` for a non-zero exit
4      resize    client to server: a terminal size (TTY only; unused here)
255    close     v5 only: ``[255, channel]`` closes that channel (end of stdin)
====== ========= ===============================================================

This module has the pure parts (frames, the Status to exit code rule), which the unit tests
cover, and :func:`open_channel`, which makes the WebSocket handshake itself over a TLS socket
with the client's credentials. Doing the handshake here, rather than in the ``websocket``
module, lets a refused request (403, 404, 503...) raise the error the server's Status body
describes; the ``websocket`` module frames the messages once the connection is up.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import ssl
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import urlparse

import websocket

from .errors import SandboxError, error_from_http, error_from_status

__all__ = [
    "STDIN", "STDOUT", "STDERR", "ERROR", "RESIZE", "CLOSE",
    "PROTOCOL_V5", "PROTOCOL_V4", "PROTOCOLS",
    "encode_frame", "decode_frame", "close_frame", "exit_code_from_status", "parse_status",
    "accept_key", "Channel", "open_channel",
]

STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
#: v5's channel to close a stream: ``[CLOSE, channel]``.
CLOSE = 255

PROTOCOL_V5 = "v5.channel.k8s.io"
PROTOCOL_V4 = "v4.channel.k8s.io"
#: The subprotocols offered, preferred first.
PROTOCOLS: Tuple[str, ...] = (PROTOCOL_V5, PROTOCOL_V4)

_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_MAX_HEAD_BYTES = 64 << 10
_MAX_ERROR_BODY_BYTES = 1 << 20


def encode_frame(channel: int, data: bytes) -> bytes:
    """A message for ``channel`` carrying ``data``."""
    if not 0 <= channel <= 255:
        raise ValueError(f"channel {channel} is not a byte")
    return bytes((channel,)) + bytes(data)


def decode_frame(message: Union[bytes, bytearray, str]) -> Tuple[int, bytes]:
    """The channel and data of a received message. An empty message has no channel and is
    refused (servers never send one)."""
    if isinstance(message, str):
        message = message.encode("utf-8")
    if not message:
        raise ValueError("an empty message has no channel")
    return message[0], bytes(message[1:])


def close_frame(channel: int) -> bytes:
    """The v5 message that closes ``channel`` (for stdin: the end of the input)."""
    return bytes((CLOSE, channel))


def parse_status(data: Union[bytes, str]) -> Dict[str, Any]:
    """The ``metav1.Status`` the error channel carried. Older servers sent a bare error text
    there; that becomes a Failure Status with it as the message."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, (bytes, bytearray)) else data
    text = text.strip()
    if not text:
        return {"kind": "Status", "status": "Success"}
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        return obj
    return {"kind": "Status", "status": "Failure", "message": text}


def exit_code_from_status(status: Mapping[str, Any]) -> int:
    """The command's exit code from the Status of the error channel.

    ``Success`` is 0. ``Failure`` with a cause of reason ``ExitCode`` is the number in its
    message (the reason of the Status is then ``NonZeroExitCode``). Any other Failure means
    the command could not run or was cut off, and raises the :class:`SandboxError` the Status
    describes.
    """
    if status.get("status") == "Success":
        return 0
    details = status.get("details") or {}
    for cause in details.get("causes") or []:
        if isinstance(cause, Mapping) and cause.get("reason") == "ExitCode":
            try:
                return int(str(cause.get("message", "")).strip())
            except ValueError:
                break
    raise error_from_status(status, _int_or_none(status.get("code")))


def _int_or_none(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def accept_key(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` a server must answer to ``Sec-WebSocket-Key: key``."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + _WS_GUID).digest()).decode("ascii")


class Channel:
    """An open channel-protocol WebSocket.

    Attributes:
        protocol: The subprotocol the server chose (``v5.channel.k8s.io``...).
        sock: The underlying (TLS) socket, for ``select``.
        ws: The ``websocket.WebSocket`` that frames messages on it.
    """

    def __init__(self, sock: socket.socket, protocol: str) -> None:
        self.sock = sock
        self.protocol = protocol
        self.ws = websocket.WebSocket(skip_utf8_validation=True)
        # The handshake was made here; the websocket module frames messages from now on.
        self.ws.sock = sock
        self.ws.connected = True
        self._fragments: Optional[bytearray] = None

    @property
    def can_close_streams(self) -> bool:
        """Whether the protocol can close a stream (end stdin): v5 and later."""
        return self.protocol != PROTOCOL_V4

    def pending(self) -> bool:
        """Whether received bytes wait in the TLS layer, where ``select`` does not see them."""
        pending = getattr(self.sock, "pending", None)
        return bool(pending and pending() > 0)

    def send(self, channel: int, data: bytes) -> None:
        """Sends ``data`` on ``channel``."""
        self.ws.send_binary(encode_frame(channel, data))

    def close_stream(self, channel: int) -> None:
        """Closes ``channel`` (v5): for stdin, the command reads end of file."""
        self.ws.send_binary(close_frame(channel))

    def receive(self) -> Optional[Tuple[Optional[int], bytes]]:
        """Reads one WebSocket frame. Answers ``(channel, data)`` for a complete message,
        ``(None, b"")`` when the frame completed none (a ping, a fragment), and None when the
        server closed the connection."""
        try:
            frame = self.ws.recv_frame()
        except (websocket.WebSocketConnectionClosedException, OSError):
            return None
        op = frame.opcode
        if op == websocket.ABNF.OPCODE_CLOSE:
            try:
                self.ws.send_close()
            except (websocket.WebSocketException, OSError):
                pass
            return None
        if op == websocket.ABNF.OPCODE_PING:
            try:
                self.ws.pong(frame.data)
            except (websocket.WebSocketException, OSError):
                # The server may have sent its last frames and closed already: they are
                # still to be read, so a pong that cannot go out ends nothing.
                pass
            return None, b""
        if op == websocket.ABNF.OPCODE_PONG:
            return None, b""
        data = frame.data if isinstance(frame.data, (bytes, bytearray)) else str(frame.data).encode("utf-8")
        if op in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY):
            if not frame.fin:
                self._fragments = bytearray(data)
                return None, b""
            message = bytes(data)
        elif op == websocket.ABNF.OPCODE_CONT:
            if self._fragments is None:
                raise SandboxError("the server sent a continuation frame without a message")
            self._fragments += data
            if not frame.fin:
                return None, b""
            message, self._fragments = bytes(self._fragments), None
        else:
            return None, b""
        if not message:
            return None, b""
        return decode_frame(message)

    def close(self) -> None:
        """Closes the connection (without waiting for the server)."""
        try:
            self.ws.shutdown()
        except Exception:  # closing what may be closed already
            pass


def _read_head(sock: socket.socket) -> Tuple[int, str, Dict[str, str]]:
    """Reads an HTTP response's status line and headers, one byte at a time so that nothing
    of what follows (the first WebSocket frames) is consumed."""
    buf = bytearray()
    while not buf.endswith(b"\r\n\r\n"):
        b = sock.recv(1)
        if not b:
            raise SandboxError("the API server closed the connection during the WebSocket handshake")
        buf += b
        if len(buf) > _MAX_HEAD_BYTES:
            raise SandboxError("the API server's answer to the WebSocket handshake has too long a head")
    lines = buf.decode("iso-8859-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise SandboxError(f"the API server answered the WebSocket handshake with {lines[0]!r}")
    headers: Dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        k, _, v = line.partition(":")
        k, v = k.strip().lower(), v.strip()
        headers[k] = f"{headers[k]}, {v}" if k in headers else v
    return int(parts[1]), (parts[2] if len(parts) > 2 else ""), headers


def _read_body(sock: socket.socket, headers: Mapping[str, str]) -> bytes:
    """Reads the body of a refused handshake (a Status, usually), within a limit."""
    f = sock.makefile("rb")
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            out = bytearray()
            while len(out) < _MAX_ERROR_BODY_BYTES:
                size_line = f.readline(1024)
                if not size_line:
                    break
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    break
                out += f.read(size)
                f.readline(16)
            return bytes(out)
        length = headers.get("content-length")
        if length is not None and length.isdigit():
            return f.read(min(int(length), _MAX_ERROR_BODY_BYTES))
        return f.read(_MAX_ERROR_BODY_BYTES)
    except (OSError, ValueError):
        return b""
    finally:
        f.close()


def _connect(host: str, port: int, timeout: float, proxy: Optional[str],
             proxy_headers: Optional[Mapping[str, str]]) -> socket.socket:
    """A TCP connection to host:port, through an HTTP proxy's CONNECT when one is given."""
    if not proxy:
        return socket.create_connection((host, port), timeout=timeout)
    p = urlparse(proxy if "://" in proxy else "http://" + proxy)
    if p.scheme not in ("http", ""):
        raise SandboxError(f"exec supports HTTP proxies only, not {proxy!r}")
    sock = socket.create_connection((p.hostname or "", p.port or 80), timeout=timeout)
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
    for k, v in (proxy_headers or {}).items():
        lines.append(f"{k}: {v}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    code, text, _ = _read_head(sock)
    if code != 200:
        sock.close()
        raise SandboxError(f"the proxy {proxy} refused to connect to {target}: {code} {text}")
    return sock


def open_channel(
    url: str,
    *,
    ssl_context: Optional[ssl.SSLContext],
    authorization: Optional[str] = None,
    headers: Optional[Mapping[str, str]] = None,
    protocols: Sequence[str] = PROTOCOLS,
    connect_timeout: float = 30.0,
    proxy: Optional[str] = None,
    proxy_headers: Optional[Mapping[str, str]] = None,
) -> Channel:
    """Opens a channel-protocol WebSocket to ``url`` (``https://...``; the scheme is that of
    the API server, not ``wss``).

    The handshake offers ``protocols``; an answer other than 101 raises the
    :class:`SandboxError` its Status body describes (403 becomes a ForbiddenError...).
    """
    u = urlparse(url)
    secure = u.scheme in ("https", "wss")
    host = u.hostname or ""
    port = u.port or (443 if secure else 80)
    target = u.path + ("?" + u.query if u.query else "")
    sock = _connect(host, port, connect_timeout, proxy, proxy_headers)
    try:
        if secure:
            ctx = ssl_context or ssl.create_default_context()
            sock = ctx.wrap_socket(sock, server_hostname=host)
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        host_header = f"[{host}]" if ":" in host else host
        if u.port:
            host_header += f":{u.port}"
        lines: List[str] = [
            f"GET {target} HTTP/1.1",
            f"Host: {host_header}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            f"Sec-WebSocket-Protocol: {', '.join(protocols)}",
        ]
        if authorization:
            lines.append(f"Authorization: {authorization}")
        for k, v in (headers or {}).items():
            lines.append(f"{k}: {v}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        code, text, resp_headers = _read_head(sock)
        if code != 101:
            body = _read_body(sock, resp_headers)
            raise error_from_http(code, body, f"exec handshake ({code} {text})")
        if resp_headers.get("sec-websocket-accept", "") != accept_key(key):
            raise SandboxError("the API server's WebSocket handshake answer has a wrong Sec-WebSocket-Accept")
        protocol = resp_headers.get("sec-websocket-protocol", "").strip()
        if protocol.lower() not in [p.lower() for p in protocols]:
            raise SandboxError(f"the API server chose the WebSocket subprotocol {protocol!r}, "
                               f"none of {', '.join(protocols)}")
        sock.settimeout(None)
        return Channel(sock, protocol.lower())
    except BaseException:
        try:
            sock.close()
        except OSError:
            pass
        raise
