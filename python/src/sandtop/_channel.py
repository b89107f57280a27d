"""The authenticated link to a session's daemon, as host-cli's channel.

- HTTP/1.1 over the daemon's Unix socket (``http.client`` on an AF_UNIX
  socket), ``Host: sandtopd``, ``Authorization: Bearer <token>``. The token
  is read from the session's token file; it is never put in argv, the
  environment, an exception message or a log.
- The socket is opened without following links (``O_PATH | O_NOFOLLOW``),
  checked to be a socket and connected through ``/proc/self/fd/N``: a
  Docker guest can write the folder that holds it, so a link or FIFO it
  planted cannot redirect the token to another socket (and a deep state
  directory does not hit the 108-byte ``sun_path`` limit).
- Every reply is untrusted: JSON only, at most ``MAX_REPLY_BYTES``, parsed
  strictly; an error body is described from its code, never from the
  guest's message.
- A request is sent at most once, on a fresh connection (so a dead
  keep-alive connection can never make us resend an action).
- ``cancelled`` is polled while the reply is awaited: when it answers true
  the connection is closed, which the daemon treats as a cancellation
  (it stops between two input primitives and releases every key and
  button).
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import stat
import time
from typing import Any, Callable, Mapping, Optional

__all__ = [
    "MAX_REPLY_BYTES",
    "PROTOCOL_MAJOR",
    "SandtopError",
    "ChannelError",
    "DaemonError",
    "Cancelled",
    "DaemonClient",
    "code_meaning",
]

#: The largest reply body read from the daemon (``limits::MAX_REPLY_BYTES``).
MAX_REPLY_BYTES = 64 * 1024 * 1024
#: The protocol major this package speaks (``/v1/``).
PROTOCOL_MAJOR = 1
SOCKET_NAME = "sandtopd.sock"

_MEANINGS = {
    "invalid_action": "the action is invalid, or its text cannot be typed",
    "out_of_bounds": "a coordinate lies outside the screenshot",
    "unknown_key": "a key name is not known",
    "limit_exceeded": "it exceeds a limit (actions per call, path points, scroll distance, text length or keys)",
    "stale_scale_map": "the screen changed size since the screenshot",
    "busy": "another input was running on the desktop",
    "timeout": "it did not finish in time and was stopped",
    "cancelled": "it was cancelled",
    "display_unavailable": "the display was not available",
    "input_blocked": "another client kept the pointer or keyboard frozen, so the input was not delivered",
    "shutting_down": "the desktop is shutting down",
}

_CODES = frozenset(
    {
        "bad_request", "invalid_action", "out_of_bounds", "unknown_key", "limit_exceeded",
        "stale_scale_map", "unauthorized", "forbidden", "not_found", "method_not_allowed",
        "payload_too_large", "unsupported_media_type", "busy", "overloaded", "timeout",
        "cancelled", "display_unavailable", "input_blocked", "stale_target", "not_actionable",
        "no_such_tab", "wait_timed_out", "browser_unavailable", "browser_failed",
        "shutting_down", "version_mismatch", "internal",
    }
)


def code_meaning(code: str) -> str:
    """What an error code means, in our words (a closed set of sentences)."""
    return _MEANINGS.get(code, "the desktop could not carry it out")


class SandtopError(Exception):
    """Base class of every error this package raises."""


class ChannelError(SandtopError):
    """Talking to the daemon failed, or its reply broke the contract.

    ``outcome_unknown`` is true when the request was sent and no answer
    says what it did (it may have had effects in the guest).
    """

    def __init__(self, message: str, *, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class Cancelled(SandtopError):
    """The caller's ``cancelled`` answered true; the request was abandoned
    (``sent`` says whether it had reached the daemon)."""

    def __init__(self, sent: bool) -> None:
        super().__init__("cancelled" + (" after the request was sent" if sent else " before anything was sent"))
        self.sent = sent


class DaemonError(SandtopError):
    """The daemon refused or failed a request (an ``ErrorBody``).

    ``str()`` is built from the code and numbers only; the guest's own
    text is kept in ``guest_message`` (token redacted) and never shown.
    """

    def __init__(
        self,
        status: int,
        code: str,
        guest_message: str = "",
        index: Optional[int] = None,
        executed: Optional[int] = None,
        partial: Optional[bool] = None,
    ) -> None:
        self.status = status
        self.code = code
        self.guest_message = guest_message
        self.index = index
        self.executed = executed
        self.partial = partial
        text = f"the daemon refused: {code} ({code_meaning(code)})"
        if index is not None:
            text += f" at action {index}"
        if executed is not None:
            text += f", {executed} action(s) completed before it"
        if partial:
            text += ", the failing action had started"
        super().__init__(text)


def _open_socket_node(directory: str) -> int:
    """``directory/sandtopd.sock`` as an O_PATH descriptor, refusing links
    and anything that is not a socket."""
    flags = getattr(os, "O_PATH", None)
    if flags is None:
        raise ChannelError("connecting to a session's socket needs Linux (O_PATH)")
    d = os.open(directory, flags | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fd = os.open(SOCKET_NAME, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=d)
    finally:
        os.close(d)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISSOCK(mode):
            raise ChannelError(f"{SOCKET_NAME} in the session folder is not a socket; refusing it")
    except BaseException:
        os.close(fd)
        raise
    return fd


def socket_connector(directory: str) -> Callable[[float], socket.socket]:
    """Opens connections to the daemon socket in ``directory`` (see the module doc)."""

    def connect(timeout: float) -> socket.socket:
        try:
            fd = _open_socket_node(directory)
        except ChannelError:
            raise
        except OSError as e:
            raise ChannelError(f"cannot reach the daemon: {os.path.join(directory, SOCKET_NAME)}: {e.strerror}") from None
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout)
            # The descriptor stays open until connect returns: the path
            # names that very inode, whatever happens to the folder.
            s.connect(f"/proc/self/fd/{fd}")
        except OSError as e:
            s.close()
            raise ChannelError(f"cannot reach the daemon: {os.path.join(directory, SOCKET_NAME)}: {e}") from None
        finally:
            os.close(fd)
        return s

    return connect


class _Connection(http.client.HTTPConnection):
    def __init__(self, connect: Callable[[float], socket.socket], timeout: float) -> None:
        super().__init__("sandtopd", timeout=timeout)
        self._open = connect

    def connect(self) -> None:
        self.sock = self._open(self.timeout if isinstance(self.timeout, (int, float)) else 30.0)


def _read_token(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise SandtopError(f"cannot read the token file {path}: {e.strerror}") from None
    with os.fdopen(fd, "r", encoding="ascii", errors="strict") as f:
        try:
            token = f.read(4096).strip()
        except UnicodeDecodeError:
            raise SandtopError(f"the token file {path} is not a session token") from None
    if len(token) != 64 or any(c not in "0123456789abcdefABCDEF" for c in token):
        raise SandtopError(f"the token file {path} is not a session token")
    return token


class DaemonClient:
    """One session's daemon. Thread-safe (one connection per request)."""

    def __init__(
        self,
        connect: Callable[[float], socket.socket],
        token: str,
        *,
        timeout: float = 60.0,
        check_version: bool = True,
    ) -> None:
        self._connect = connect
        self.__token = token
        self.timeout = timeout
        self.info: dict[str, Any] = {}
        if check_version:
            info = self.request("GET", "/v1/info")
            protocol = info.get("protocol")
            if not isinstance(protocol, str) or protocol.split(".")[0] != str(PROTOCOL_MAJOR):
                raise ChannelError(
                    f"the daemon speaks protocol {str(protocol)[:16]!r}; this package speaks {PROTOCOL_MAJOR}.x"
                )
            self.info = info

    @classmethod
    def from_folder(cls, socket_dir: str, token_path: str, **kw: Any) -> "DaemonClient":
        """The daemon whose socket is ``socket_dir/sandtopd.sock``, with the
        token read from ``token_path``."""
        return cls(socket_connector(socket_dir), _read_token(token_path), **kw)

    def __repr__(self) -> str:  # never the token
        return "DaemonClient(<token hidden>)"

    def request(
        self,
        method: str,
        path: str,
        body: Optional[Mapping[str, Any]] = None,
        *,
        cancelled: Optional[Callable[[], bool]] = None,
        timeout: Optional[float] = None,
    ) -> dict[str, Any]:
        """Sends one request (once) and returns the JSON object of a 2xx
        reply; raises DaemonError for an error body, ChannelError for
        anything else, Cancelled when ``cancelled`` answered true."""
        limit = self.timeout if timeout is None else timeout
        if cancelled is not None and cancelled():
            raise Cancelled(sent=False)
        payload = None if body is None else json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
        headers = {"Authorization": "Bearer " + self.__token}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        conn = _Connection(self._connect, limit)
        sent = False
        try:
            try:
                conn.request(method, path, body=payload, headers=headers)
            except ChannelError:
                raise
            except OSError as e:
                raise ChannelError(f"HTTP exchange with the daemon failed: {e}", outcome_unknown=True) from None
            sent = True
            deadline = time.monotonic() + limit
            sock = conn.sock
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChannelError("the daemon did not answer in time", outcome_unknown=True)
                readable, _, _ = select.select([sock], [], [], min(0.05, left))
                if readable:
                    break
                if cancelled is not None and cancelled():
                    raise Cancelled(sent=True)
            try:
                resp = conn.getresponse()
                status = resp.status
                ctype = resp.getheader("Content-Type", "") or ""
                length = resp.getheader("Content-Length")
                if length is not None and (not length.isdigit() or int(length) > MAX_REPLY_BYTES):
                    raise ChannelError("the daemon's reply is invalid: larger than the reply limit", outcome_unknown=True)
                raw = resp.read(MAX_REPLY_BYTES + 1)
            except ChannelError:
                raise
            except (OSError, http.client.HTTPException) as e:
                raise ChannelError(f"HTTP exchange with the daemon failed: {type(e).__name__}", outcome_unknown=True) from None
        finally:
            conn.close()
        if len(raw) > MAX_REPLY_BYTES:
            raise ChannelError("the daemon's reply is invalid: larger than the reply limit", outcome_unknown=True)
        if not ctype.startswith("application/json"):
            raise ChannelError(f"the daemon's reply is invalid: status {status} without a JSON body", outcome_unknown=True)
        try:
            value = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        except (UnicodeDecodeError, ValueError):
            raise ChannelError(f"the daemon's reply is invalid: status {status} with malformed JSON", outcome_unknown=True) from None
        if not isinstance(value, dict):
            raise ChannelError("the daemon's reply is invalid: not a JSON object", outcome_unknown=True)
        if not 200 <= status < 300:
            raise self._error(status, value)
        return value

    def _error(self, status: int, body: dict[str, Any]) -> SandtopError:
        code = body.get("code")
        message = body.get("message")
        if not isinstance(code, str) or not isinstance(message, str):
            return ChannelError(f"the daemon's reply is invalid: status {status} with an unreadable error", outcome_unknown=True)
        if code not in _CODES:
            code = "internal"

        def opt_int(name: str) -> Optional[int]:
            v = body.get(name)
            return v if type(v) is int and v >= 0 else None

        partial = body.get("partial")
        return DaemonError(
            status,
            code,
            # The guest is untrusted: it must not make us show the token.
            message.replace(self.__token, "[token]"),
            opt_int("index"),
            opt_int("executed"),
            partial if type(partial) is bool else None,
        )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
