"""Small helpers shared by the SDK's modules: durations, timestamps, API paths.

Nothing here talks to a cluster; the unit tests exercise these directly.
"""

from __future__ import annotations

import math
import posixpath
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List, Mapping, Optional, Union
from urllib.parse import quote

#: The API group and version of sandboxes.
GROUP = "sandbox.kube-sandbox.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "sandboxes"

#: A duration as the SDK takes it: seconds (int or float) or a timedelta.
Duration = Union[int, float, timedelta]


def seconds(value: Optional[Duration], what: str = "timeout") -> Optional[float]:
    """``value`` in seconds (None stays None); negative durations are refused."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        s = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds or a timedelta, not {type(value).__name__}")
    else:
        s = float(value)
    if s < 0 or math.isnan(s):
        raise ValueError(f"{what} must not be negative: {value!r}")
    return s


def whole_seconds(value: Optional[Duration], what: str = "timeout") -> Optional[int]:
    """``value`` rounded up to whole seconds, as the API's ``...Seconds`` fields take it."""
    s = seconds(value, what)
    if s is None:
        return None
    return int(math.ceil(s))


def parse_time(value: Optional[str]) -> Optional[datetime]:
    """An RFC 3339 timestamp of the API (``2026-12-01T10:00:00Z``) as an aware datetime."""
    if not value:
        return None
    v = value.strip()
    if v.endswith("Z") or v.endswith("z"):
        v = v[:-1] + "+00:00"
    # fromisoformat before Python 3.11 takes at most 6 fractional digits.
    if "." in v:
        head, _, rest = v.partition(".")
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        v = head + ("." + digits[:6].ljust(6, "0") if digits else "") + rest
    dt = datetime.fromisoformat(v)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt


def format_time(value: datetime) -> str:
    """An RFC 3339 timestamp in UTC with second precision, as the API writes them."""
    if value.tzinfo is None:
        raise ValueError("the time must be timezone-aware (like datetime.now(timezone.utc))")
    return value.astimezone(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def sandboxes_path(namespace: str) -> str:
    """The API path of the sandboxes of a namespace."""
    return f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace, safe='')}/{PLURAL}"


def sandbox_path(namespace: str, name: str, *subresource: str) -> str:
    """The API path of a sandbox, or of one of its subresources. Each part of ``subresource``
    is one path segment, percent-encoded."""
    path = f"{sandboxes_path(namespace)}/{quote(name, safe='')}"
    for part in subresource:
        path += "/" + quote(part, safe="")
    return path


def file_path(path: str) -> str:
    """A sandbox file path as the files subresource takes it: relative to the sandbox's root
    ``/``, each segment percent-encoded, ``.`` segments and repeated slashes dropped.

    ``..`` is refused here rather than sent: HTTP clients resolve it before the request
    leaves, so that it would name another URL of the API instead of a file.
    """
    if not isinstance(path, str):
        raise TypeError(f"a file path must be a str, not {type(path).__name__}")
    if "\x00" in path:
        raise ValueError(f"a file path must not contain NUL: {path!r}")
    parts: List[str] = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            raise ValueError(f"a file path must not contain '..': {path!r}")
        parts.append(quote(seg, safe=""))
    return "/".join(parts)


def join_sandbox_path(directory: str, name: str) -> str:
    """``directory``/``name`` as an absolute sandbox path."""
    return posixpath.join("/" + directory.strip("/"), name)


def condition(obj: Optional[Mapping[str, Any]], type_: str) -> Optional[Dict[str, Any]]:
    """The condition of type ``type_`` in ``obj.status.conditions``, or None."""
    if not obj:
        return None
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == type_:
            return c
    return None


def condition_text(c: Optional[Mapping[str, Any]]) -> str:
    """``REASON: MESSAGE`` of a condition, for error messages; empty without one."""
    if not c:
        return ""
    reason, message = c.get("reason") or "", c.get("message") or ""
    if reason and message:
        return f"{reason}: {message}"
    return reason or message
