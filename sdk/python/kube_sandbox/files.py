"""A sandbox's filesystem: ``sb.files``.

The ``files`` subresource (``/sandboxes/NAME/files/PATH``) reads, writes, lists and removes
files in the sandbox's container, its paths relative to the container's root ``/`` (so
``/tmp/x`` and ``tmp/x`` are the same file). Nothing leaves that root: the server refuses
``..`` and symbolic links that point out.

::

    sb.files.write("/work/main.py", "print('hi')\\n")
    sb.files.read("/work/main.py")          # b"print('hi')\\n"
    [f.name for f in sb.files.list("/work")]
    sb.files.remove("/work", recursive=True)
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Union

from .errors import NotFoundError, SandboxError
from ._util import file_path, parse_time, sandbox_path

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = ["FileInfo", "Files"]

#: The header a download carries its file's permission bits in.
FILE_MODE_HEADER = "X-Sandbox-File-Mode"

Data = Union[bytes, bytearray, memoryview, str, IO[bytes]]


@dataclass(frozen=True)
class FileInfo:
    """One entry of a sandbox's filesystem (the API's ``SandboxFile``).

    Attributes:
        name: The base name (``""`` for the root).
        path: The absolute path in the sandbox, like ``/work/main.py``. (The API gives list
            items relative to the listed directory; they are made absolute here.)
        type: ``file``, ``dir``, ``symlink`` or ``other`` (devices, FIFOs, sockets).
        size: The size in bytes.
        mode: The permission bits (with setuid, setgid and sticky), like ``0o644``.
        mtime: The last modification, timezone-aware.
        link_target: A symbolic link's target as stored (not resolved); None otherwise.
    """

    name: str
    path: str
    type: str
    size: int
    mode: int
    mtime: Optional[datetime]
    link_target: Optional[str] = None

    def __repr__(self) -> str:
        mtime = self.mtime.isoformat() if self.mtime else None
        link = f", link_target={self.link_target!r}" if self.link_target else ""
        return (f"FileInfo(name={self.name!r}, path={self.path!r}, type={self.type!r}, size={self.size}, "
                f"mode=0o{self.mode:o}, mtime={mtime!r}{link})")

    @property
    def is_dir(self) -> bool:
        """Whether it is a directory."""
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        """Whether it is a regular file."""
        return self.type == "file"

    @property
    def is_symlink(self) -> bool:
        """Whether it is a symbolic link."""
        return self.type == "symlink"

    @classmethod
    def from_api(cls, obj: Mapping[str, Any], directory: Optional[str] = None) -> "FileInfo":
        """A FileInfo from a ``SandboxFile`` dict. ``directory`` is the listed directory for a
        list item, whose path is relative to it; None for a path relative to the root."""
        rel = str(obj.get("path") or obj.get("name") or "")
        base = "/" if directory is None else "/" + directory.strip("/")
        path = posixpath.normpath(posixpath.join(base, rel)) if rel else base
        try:
            mode = int(str(obj.get("mode") or "0"), 8)
        except ValueError:
            mode = 0
        return cls(
            name=str(obj.get("name") or ""),
            path=path,
            type=str(obj.get("type") or ""),
            size=int(obj.get("size") or 0),
            mode=mode,
            mtime=parse_time(obj.get("modTime")),
            link_target=obj.get("linkTarget") or None,
        )


def _is_listing(content: bytes) -> bool:
    """Whether an answer's body is a directory listing (a SandboxFileList)."""
    try:
        obj = json.loads(content)
    except ValueError:
        return False
    return isinstance(obj, dict) and obj.get("kind") == "SandboxFileList"


def mode_param(mode: Union[int, str, None]) -> Optional[str]:
    """A permission mode as the ``mode`` parameter takes it: octal digits (``0644``)."""
    if mode is None:
        return None
    if isinstance(mode, bool):
        raise TypeError("mode must be an int like 0o644 or an octal string like '0644'")
    if isinstance(mode, int):
        if not 0 <= mode <= 0o7777:
            raise ValueError(f"mode {oct(mode)} is out of range")
        return format(mode, "04o")
    s = str(mode).strip()
    if s.startswith("0o"):
        s = s[2:]
    if not s or any(c not in "01234567" for c in s) or int(s, 8) > 0o7777:
        raise ValueError(f"mode {mode!r} is not octal permission bits like '0644'")
    return s.rjust(4, "0")


class Files:
    """The filesystem of a sandbox (``sb.files``). Paths are absolute or relative to ``/``.

    Every method takes ``replica`` for a sandbox of several replicas (default 0).
    """

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _path(self, path: str) -> str:
        rel = file_path(path)
        # The root is files/ (with the slash); anything else files/PATH.
        return sandbox_path(self._sb.namespace, self._sb.name, "files") + "/" + rel

    def read(self, path: str, *, replica: int = 0) -> bytes:
        """The contents of the file at ``path``.

        Raises:
            NotFoundError: there is no such file.
            SandboxError: ``path`` is a directory (reason ``IsADirectory``), or another
                failure.
        """
        resp = self._sb.client.request("GET", self._path(path), query={"replica": replica or None})
        try:
            content = resp.content
            # A file's download carries its mode; a directory's answer is its listing.
            if FILE_MODE_HEADER not in resp.headers and \
                    resp.headers.get("Content-Type", "").startswith("application/json") and _is_listing(content):
                raise SandboxError(f"{path} is a directory", code=400, reason="IsADirectory")
            return content
        finally:
            resp.close()

    def read_text(self, path: str, encoding: str = "utf-8", *, replica: int = 0) -> str:
        """The contents of the file at ``path``, decoded (undecodable bytes become U+FFFD)."""
        return self.read(path, replica=replica).decode(encoding, errors="replace")

    def write(
        self,
        path: str,
        data: Data,
        mode: Union[int, str, None] = None,
        mkdirs: bool = True,
        *,
        replica: int = 0,
    ) -> FileInfo:
        """Writes ``data`` to the file at ``path``, replacing it whole (the upload goes to a
        temporary file that is renamed into place, so readers never see half of it).

        Args:
            path: Where, like ``/work/main.py``.
            data: bytes, text (written as UTF-8) or a binary file-like object, which is
                streamed.
            mode: The permission bits, like ``0o755`` or ``"0755"`` (default: the server's,
                0644 for a new file).
            mkdirs: Create the missing parent directories.

        Returns:
            The written file's description.
        """
        if isinstance(data, str):
            data = data.encode("utf-8")
        elif isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        elif not isinstance(data, bytes) and not hasattr(data, "read"):
            raise TypeError(f"data must be bytes, str or a file-like object, not {type(data).__name__}")
        query = {"mode": mode_param(mode), "mkdirs": True if mkdirs else None, "replica": replica or None}
        resp = self._sb.client.request("PUT", self._path(path), query=query, data=data,
                                       headers={"Content-Type": "application/octet-stream"})
        try:
            return self._describe(resp, path)
        finally:
            resp.close()

    def mkdir(self, path: str, mode: Union[int, str, None] = None, parents: bool = True, *, replica: int = 0) -> FileInfo:
        """Creates the directory ``path`` (and, with ``parents``, the missing ones above)."""
        query = {"type": "dir", "mode": mode_param(mode), "mkdirs": True if parents else None,
                 "replica": replica or None}
        resp = self._sb.client.request("PUT", self._path(path), query=query, data=b"")
        try:
            return self._describe(resp, path)
        finally:
            resp.close()

    def stat(self, path: str, *, replica: int = 0) -> FileInfo:
        """The description of ``path`` (a symbolic link is described, not followed).

        Raises:
            NotFoundError: there is nothing at ``path``.
        """
        resp = self._sb.client.request("GET", self._path(path), query={"stat": True, "replica": replica or None})
        try:
            return self._describe(resp, path)
        finally:
            resp.close()

    def exists(self, path: str, *, replica: int = 0) -> bool:
        """Whether something is at ``path``."""
        try:
            self.stat(path, replica=replica)
        except NotFoundError:
            return False
        return True

    def list(self, path: str = "/", *, depth: Optional[int] = None, replica: int = 0) -> List[FileInfo]:
        """The entries of the directory ``path``, sorted by name (with ``depth`` > 1, those of
        its subdirectories too, depth first). Every page of a long listing is read.

        Raises:
            NotFoundError: there is no such directory.
        """
        out: List[FileInfo] = []
        cont: Optional[str] = None
        directory = "/" + file_path(path)
        while True:
            query: Dict[str, Any] = {"depth": depth, "continue": cont, "replica": replica or None}
            resp = self._sb.client.request("GET", self._path(path), query=query)
            try:
                body = resp.json()
            except ValueError:
                raise SandboxError(f"{path} is not a directory", code=400, reason="NotADirectory") from None
            finally:
                resp.close()
            if not isinstance(body, dict) or body.get("kind") != "SandboxFileList":
                raise SandboxError(f"{path} is not a directory", code=400, reason="NotADirectory")
            for item in body.get("items") or []:
                out.append(FileInfo.from_api(item, directory))
            cont = (body.get("metadata") or {}).get("continue") or None
            if not cont:
                return out

    def remove(self, path: str, recursive: bool = False, *, replica: int = 0) -> None:
        """Removes the file or directory at ``path``; a directory that is not empty only with
        ``recursive``.

        Raises:
            NotFoundError: there is nothing at ``path``.
            ConflictError: a directory is not empty and ``recursive`` is not set.
        """
        self._sb.client.request("DELETE", self._path(path),
                                query={"recursive": True if recursive else None, "replica": replica or None}).close()

    def move(self, source: str, destination: str, overwrite: bool = False, *, replica: int = 0) -> FileInfo:
        """Renames ``source`` to ``destination`` (within the sandbox).

        Raises:
            ConflictError: ``destination`` exists and ``overwrite`` is not set.
        """
        query = {"moveTo": "/" + file_path(destination), "overwrite": True if overwrite else None,
                 "replica": replica or None}
        resp = self._sb.client.request("POST", self._path(source), query=query, data=b"")
        try:
            return self._describe(resp, destination)
        finally:
            resp.close()

    @staticmethod
    def _describe(resp: Any, path: str) -> FileInfo:
        try:
            body = resp.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("kind") == "SandboxFile":
            return FileInfo.from_api(body)
        # A server that answers nothing: describe what is known.
        return FileInfo(name=posixpath.basename(path.rstrip("/")), path="/" + file_path(path), type="",
                        size=0, mode=0, mtime=None)

