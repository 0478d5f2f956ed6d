"""Exceptions of the kube-sandbox SDK.

Every failure the API server reports becomes a :class:`SandboxError` (or one of its
subclasses), carrying the Kubernetes ``Status`` object the server sent. The subclass says what
kind of failure it was, so that callers can catch just what they can handle::

    try:
        sb = Sandbox.get("demo")
    except NotFoundError:
        sb = Sandbox.create(pool="python", name="demo")

=================== ==========================================================================
Exception           Raised when
=================== ==========================================================================
NotFoundError       404: the sandbox (or file, process, context) does not exist.
UnauthorizedError   401: the credentials were not accepted.
ForbiddenError      403: RBAC does not allow the call.
ConflictError       409: the sandbox changed meanwhile, already exists, or its state refuses
                    the call (a paused sandbox, a sandbox without expiry for a renewal).
ExpiredError        the sandbox has expired (a 409 that says so, or phase Expired).
InvalidError        422: the request is invalid; ``causes`` name the fields.
WaitTimeoutError    a wait (for Ready, Paused, a process's end...) ran out of time.
SandboxError        everything else: the base class, with ``code``, ``reason`` and ``status``.
=================== ==========================================================================

The functions at the bottom turn what the transports raise (``kubernetes.client.ApiException``,
``requests`` responses, WebSocket handshake answers, Status objects) into these exceptions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Union

__all__ = [
    "Cause",
    "SandboxError",
    "NotFoundError",
    "UnauthorizedError",
    "ForbiddenError",
    "ConflictError",
    "ExpiredError",
    "InvalidError",
    "WaitTimeoutError",
    "error_from_status",
    "error_from_http",
    "error_from_api_exception",
]


@dataclass(frozen=True)
class Cause:
    """One cause of a failure, from ``status.details.causes``.

    ``field`` is the path of the offending field of an invalid request (for example
    ``spec.networkPolicy.egress[0].to``), ``reason`` a machine-readable word (like
    ``FieldValueInvalid``) and ``message`` what a person reads.
    """

    reason: str = ""
    message: str = ""
    field: str = ""


class SandboxError(Exception):
    """A call to the sandbox API failed.

    Attributes:
        message: What went wrong, as the server said it.
        code: The HTTP status code (404, 409...), or ``None`` when the failure did not come
            from an HTTP answer (a lost connection, a wait that found the sandbox failed).
        reason: The Status reason (``NotFound``, ``Conflict``, ``Invalid``...) or, for a
            sandbox that failed, the reason of its Ready condition (``PodFailed``...).
        status: The Kubernetes ``Status`` object as a dict (``kind: Status``); one is
            made up from the code and message when the server sent none.
    """

    def __init__(
        self,
        message: str,
        *,
        code: Optional[int] = None,
        reason: Optional[str] = None,
        status: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message: str = message
        self.code: Optional[int] = code
        self.reason: Optional[str] = reason
        if status is None:
            status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message}
            if code is not None:
                status["code"] = code
            if reason:
                status["reason"] = reason
        self.status: Dict[str, Any] = dict(status)

    @property
    def causes(self) -> List[Cause]:
        """The causes listed in ``status.details.causes`` (empty when there are none)."""
        details = self.status.get("details") or {}
        out = []
        for c in details.get("causes") or []:
            if isinstance(c, Mapping):
                out.append(Cause(reason=str(c.get("reason") or ""), message=str(c.get("message") or ""),
                                 field=str(c.get("field") or "")))
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r}, reason={self.reason!r})"


class NotFoundError(SandboxError):
    """404: what the call names does not exist (a sandbox, a file, a process...)."""


class UnauthorizedError(SandboxError):
    """401: the API server did not accept the credentials (an expired token, a wrong cert)."""


class ForbiddenError(SandboxError):
    """403: the caller may not do this (RBAC), or the platform refuses it."""


class ConflictError(SandboxError):
    """409: the sandbox's state refuses the call, it changed meanwhile, or it already exists."""


class ExpiredError(ConflictError):
    """The sandbox has expired: it cannot be renewed or used, and is being deleted."""


class InvalidError(SandboxError):
    """422: the request is invalid. :attr:`causes` says which fields and why."""

    @property
    def fields(self) -> List[str]:
        """The paths of the invalid fields, like ``spec.timeoutSeconds``."""
        return [c.field for c in self.causes if c.field]


class WaitTimeoutError(SandboxError, TimeoutError):
    """A wait ran out of time. It is also a built-in :class:`TimeoutError`.

    The message says what was awaited and the state last seen.
    """


_BY_CODE = {
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    422: InvalidError,
}


def error_from_status(status: Mapping[str, Any], code: Optional[int] = None) -> SandboxError:
    """The exception for a Kubernetes ``Status`` object (a dict).

    ``code`` is the HTTP status code of the answer; the Status's own ``code`` wins when it has
    one. A 409 whose message says the sandbox expired is an :class:`ExpiredError`.
    """
    st_code = status.get("code")
    if isinstance(st_code, int) and st_code > 0:
        code = st_code
    message = str(status.get("message") or "") or (f"the server answered {code}" if code else "the request failed")
    reason = status.get("reason") or None
    cls = _BY_CODE.get(code or 0, SandboxError)
    if cls is ConflictError and ("expired" in message.lower() or reason == "Expired"):
        cls = ExpiredError
    full = dict(status)
    full.setdefault("kind", "Status")
    if code is not None:
        full.setdefault("code", code)
    return cls(message, code=code, reason=reason, status=full)


def _decode_status(body: Union[bytes, str, None]) -> Optional[Dict[str, Any]]:
    """The Status object in an error answer's body, or None when it holds none."""
    if not body:
        return None
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if isinstance(obj, dict) and obj.get("kind") == "Status":
        return obj
    return None


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Gone",
    413: "RequestEntityTooLarge",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def error_from_http(code: int, body: Union[bytes, str, None], what: str = "") -> SandboxError:
    """The exception for an HTTP error answer: its Status when the body is one, else a Status
    made from the code and the body's text. ``what`` (like ``GET files/tmp/x``) prefixes a
    message that has to be made up."""
    status = _decode_status(body)
    if status is not None:
        return error_from_status(status, code)
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else (body or "")
    text = text.strip()
    if len(text) > 500:
        text = text[:500] + "..."
    message = text or f"the server answered {code}"
    if what:
        message = f"{what}: {message}"
    return error_from_status({"status": "Failure", "message": message, "reason": _REASONS.get(code, "Unknown"),
                              "code": code}, code)


def error_from_api_exception(exc: Any) -> SandboxError:
    """The exception for a ``kubernetes.client.ApiException``: the Status in its body, else
    one made from its status code and reason."""
    code = getattr(exc, "status", None) or 0
    body = getattr(exc, "body", None)
    status = _decode_status(body)
    if status is not None:
        return error_from_status(status, code or None)
    reason = getattr(exc, "reason", None) or ""
    message = str(body or reason or exc).strip() or f"the server answered {code}"
    if not code:
        return SandboxError(message)
    return error_from_status({"status": "Failure", "message": message, "reason": _REASONS.get(code, "Unknown"),
                              "code": code}, code)
