"""File grants for ``Browser.upload_file`` / ``Browser.download_file``
(the SDK's ``BrowserFileInput {grant_id}``), with host-cli's rules
(docs/contract.md rule 48):

- a grant is issued by the application, never the model: ``Grants(upload=
  {"cv": "/home/me/cv.pdf"}, download={"invoice": "/home/me/in"})``; ids are
  1..256 bytes, not a path or URL; an upload is a regular file you own
  (links refused), at most 512 KiB; a download folder is a directory you own
  that group and others cannot write. Checked when the grants are made.
- each grant works once (spent when used, whatever follows) and is checked
  again at use (same file: device and inode; same limits);
- only the file's basename and bytes reach the guest; a download becomes a
  new 0600 file in the folder, never overwriting (``name-1.ext`` ..
  ``name-99.ext``), its name reduced to letters, digits and ``.-_ ``.

The outcome is the SDK's ``BrowserFileOutcome``: exactly ``{version: 1,
status, effect, cleanup}``.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Optional

__all__ = ["Grants", "GrantError", "MAX_UPLOAD_BYTES", "MAX_DOWNLOAD_BYTES", "safe_file_name"]

#: The daemon's request limit (1 MiB) holds the upload's base64.
MAX_UPLOAD_BYTES = 512 * 1024
MAX_DOWNLOAD_BYTES = 16 * 1024 * 1024
MAX_GRANT_ID_BYTES = 256


class GrantError(ValueError):
    """A grant that cannot be issued (the message names the problem)."""


def check_id(grant_id: object) -> str:
    if not isinstance(grant_id, str) or not grant_id:
        raise GrantError("the grant id is empty")
    if len(grant_id.encode("utf-8", "surrogatepass")) > MAX_GRANT_ID_BYTES:
        raise GrantError(f"the grant id is more than {MAX_GRANT_ID_BYTES} bytes")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in grant_id):
        raise GrantError("the grant id has a control character")
    if "/" in grant_id or "\\" in grant_id or grant_id in (".", "..") or grant_id.startswith("~"):
        raise GrantError("the grant id looks like a path")
    if ":" in grant_id:
        raise GrantError("the grant id looks like a URL (it has a ':')")
    return grant_id


def _open_upload(path: str) -> tuple[int, os.stat_result]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == 40:  # ELOOP
            raise GrantError(f"{path!r} is a symlink (give the file itself)") from None
        raise GrantError(f"{path!r} cannot be opened: {e.strerror}") from None
    st = os.fstat(fd)
    try:
        if not stat.S_ISREG(st.st_mode):
            raise GrantError(f"{path!r} is not a regular file")
        if st.st_uid != os.geteuid():
            raise GrantError(f"{path!r} is owned by uid {st.st_uid}, not by you")
        if st.st_size > MAX_UPLOAD_BYTES:
            raise GrantError(f"{path!r} is {st.st_size} bytes, more than the upload limit of {MAX_UPLOAD_BYTES}")
        name = os.path.basename(path)
        if not name or name.startswith(".") or name != safe_file_name(name):
            raise GrantError(f"{path!r}: give a file with a plain, non-hidden name")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _check_dir(path: str) -> os.stat_result:
    try:
        st = os.lstat(path)
    except OSError as e:
        raise GrantError(f"{path!r} cannot be read: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise GrantError(f"{path!r} is a symlink (give the directory itself)")
    if not stat.S_ISDIR(st.st_mode):
        raise GrantError(f"{path!r} is not a directory")
    if st.st_uid != os.geteuid():
        raise GrantError(f"{path!r} is owned by uid {st.st_uid}, not by you")
    if st.st_mode & 0o022:
        raise GrantError(f"{path!r} is writable by group or others (mode {st.st_mode & 0o7777:o})")
    return st


@dataclass(frozen=True)
class _Grant:
    kind: str
    path: str
    dev: int
    ino: int


class Grants:
    """The files an application lets the model move, each once."""

    def __init__(self, upload: Optional[Mapping[str, str]] = None, download: Optional[Mapping[str, str]] = None) -> None:
        self._lock = threading.Lock()
        self._grants: dict[str, _Grant] = {}
        self._used: set[str] = set()
        for kind, table in (("upload", upload or {}), ("download", download or {})):
            for grant_id, path in table.items():
                check_id(grant_id)
                if grant_id in self._grants:
                    raise GrantError(f"the grant id {grant_id!r} is given twice")
                path = os.path.abspath(path)
                if kind == "upload":
                    fd, st = _open_upload(path)
                    os.close(fd)
                else:
                    st = _check_dir(path)
                self._grants[grant_id] = _Grant(kind, path, st.st_dev, st.st_ino)

    def __repr__(self) -> str:
        return f"Grants({len(self._grants)} grants, {len(self._used)} used)"

    def take(self, kind: str, grant_id: object) -> Optional[_Grant]:
        """The grant, spent now; ``None`` when unknown, used or of the
        other kind (nothing is spent then)."""
        if not isinstance(grant_id, str):
            return None
        with self._lock:
            g = self._grants.get(grant_id)
            if g is None or g.kind != kind or grant_id in self._used:
                return None
            self._used.add(grant_id)
            return g


def read_upload(g: _Grant) -> tuple[str, bytes]:
    """The granted file's name and bytes, if it is still the same file."""
    fd, st = _open_upload(g.path)
    try:
        if (st.st_dev, st.st_ino) != (g.dev, g.ino):
            raise GrantError("the granted file was replaced since the grant")
        data = b""
        while len(data) <= MAX_UPLOAD_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
        if len(data) > MAX_UPLOAD_BYTES:
            raise GrantError("the granted file grew past the upload limit")
        return os.path.basename(g.path), data
    finally:
        os.close(fd)


def safe_file_name(name: str) -> str:
    """A basename for a file named by the guest (its text is data)."""
    out = "".join(c if (c.isalnum() or c in ".-_ ") else "_" for c in name)
    while out.startswith((".", " ")):
        out = "_" + out[1:]
    out = out.rstrip()
    out = out.encode("utf-8")[:128].decode("utf-8", "ignore")
    return out or "download"


def write_download(g: _Grant, name: str, data: bytes) -> str:
    """Writes a download into the granted folder as a new 0600 file, never
    overwriting; returns its path."""
    if len(data) > MAX_DOWNLOAD_BYTES:
        raise GrantError(f"the download is {len(data)} bytes, more than {MAX_DOWNLOAD_BYTES}")
    st = _check_dir(g.path)
    if (st.st_dev, st.st_ino) != (g.dev, g.ino):
        raise GrantError("the granted folder was replaced since the grant")
    name = safe_file_name(name)
    stem, ext = (name[: name.rindex(".")], name[name.rindex(".") :]) if name.rfind(".") > 0 else (name, "")
    for n in range(100):
        candidate = os.path.join(g.path, name if n == 0 else f"{stem}-{n}{ext}")
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(candidate)
            raise
        os.close(fd)
        return candidate
    raise GrantError("100 files of that name are in the folder already")


def outcome(status: str, effect: str, cleanup: str) -> dict[str, Any]:
    return {"version": 1, "status": status, "effect": effect, "cleanup": cleanup}


REFUSED = outcome("refused", "none", "not_started")
