"""``Browser`` / ``AsyncBrowser``: the OpenAI SDK's browser driver protocol
(``openai.lib.browser``: ``state()`` plus one method per member, each
taking the member's validated arguments) over the daemon's browser
endpoints.

- ``state()`` is ``POST /v1/browser/state``; the tabs (id, title, URL,
  active) are returned as a model may see them, by host-cli's rules
  (docs/contract.md rule 31): URLs reduced to their origin
  (``scheme://host[:port]``: no user info, path, query or fragment;
  ``about:blank`` kept, other schemes to the scheme alone, anything
  unparsable ``invalid:``), titles with control and invisible formatting
  characters made visible, credential-like parts redacted and cut at
  1024 bytes. ``tab_url`` and ``tab_title`` are those rules, held to the
  same vectors as the host's.
- each member is one ``POST /v1/browser/call`` ``{"member": name, ...arguments}``;
  the outcome becomes what the SDK expects: ``None`` for an action, the
  ``BrowserReadV1`` report for reads, the text for ``wait_for`` and
  ``run_script``, an ``input_image`` (PNG data URL, ``detail: original``)
  for ``screenshot`` and ``zoom``.
- a refusal by the daemon raises ``BrowserCallError``, a subclass of the
  SDK's ``BrowserError`` (when the SDK is installed) whose text is ours,
  chosen by the error code: the daemon's message (the guest's text) never
  reaches the model.
- ``upload_file`` and ``download_file`` take a grant id the application
  issued (``Browser(session, grants=sandtop.Grants(upload=..., download=...))``,
  see ``sandtop.files``): the file's basename and bytes go to the daemon's
  host-only ``set_file``; a download comes back through ``take_download``,
  is written as a new 0600 file in the granted folder, then
  ``remove_download`` deletes the guest's copy. Each returns the SDK's
  ``BrowserFileOutcome``; without a usable grant, ``refused``.
"""

from __future__ import annotations

import asyncio
import base64
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from . import files
from ._channel import Cancelled, ChannelError, DaemonClient, DaemonError
from ._image import bad, checked_png_b64

if TYPE_CHECKING:
    from .session import Session

try:  # the SDK is optional: without it the driver still works on its own
    from openai.lib.browser import BrowserError as _BrowserErrorBase
except ImportError:  # pragma: no cover - exercised when openai is absent

    class _BrowserErrorBase(Exception):  # type: ignore[no-redef]
        pass


__all__ = ["Browser", "AsyncBrowser", "BrowserCallError", "MEMBERS", "error_text", "tab_url", "tab_title"]

Cancel = Optional[Callable[[], bool]]

#: Every member the daemon implements (the SDK's list_tabs is its state).
MEMBERS = (
    "navigate", "read_page", "get_page_text", "find", "click", "type", "key", "scroll",
    "select_option", "hover", "screenshot", "zoom", "new_tab", "switch_tab", "close_tab",
    "scroll_to", "wait_for", "hover_at", "set_checked", "click_at", "drag_path", "hold_keys",
    "read_page_scoped", "read_diagnostics", "run_script", "upload_file", "download_file",
)
_FILES = frozenset({"upload_file", "download_file"})
_READS = frozenset({"read_page", "get_page_text", "find", "read_page_scoped", "read_diagnostics"})
_TEXTS = frozenset({"wait_for", "run_script"})
_IMAGES = frozenset({"screenshot", "zoom"})
_MAX_SCRIPT_RESULT = 32 * 1024


def error_text(code: str) -> str:
    """The model-facing text of a refused call, from its code only (host-cli's words)."""
    return {
        "stale_target": "The target is stale: it is not on the tab's current page (or is hidden). Read the page again.",
        "not_actionable": "The target cannot take this action.",
        "no_such_tab": "No open tab has this id.",
        "out_of_policy": "The tab's page is not on an origin of the URL policy (a redirect or the page's own navigation can take it there); nothing was done on it. Navigate to an allowed origin first.",
        "wait_timed_out": "The text did not appear within the timeout.",
        "invalid_action": "Browser argument has an invalid value.",
        "bad_request": "Browser argument has an invalid value.",
        "unknown_key": "A key name is not known.",
        "out_of_bounds": "The region lies outside the viewport.",
        "limit_exceeded": "A browser limit was reached.",
        "busy": "The browser was busy.",
        "timeout": "The browser did not answer in time; the outcome is unknown.",
    }.get(code, "Browser action failed.")


class BrowserCallError(_BrowserErrorBase):
    """The daemon refused a browser call. ``str()`` is model-safe;
    ``daemon_error`` keeps the details (code, the guest's message)."""

    def __init__(self, error: DaemonError) -> None:
        super().__init__(error_text(error.code))
        self.code = error.code
        self.daemon_error = error


_MAX_TITLE_BYTES = 1024
_MAX_URL_BYTES = 2048
_SECRET_KEYS = ("password", "passwd", "pwd", "secret", "token", "apikey", "api_key", "authorization", "cookie", "session")
_REDACTED = "[redacted]"
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.+/=")


def _host(host: str) -> Optional[str]:
    """A URL's host as the egress proxy parses it (sandtop_egress::policy::Host), or None."""
    import ipaddress

    if host.startswith("[") and host.endswith("]"):
        try:
            return "[" + str(ipaddress.IPv6Address(host[1:-1])) + "]"
        except ValueError:
            return None
    parts = host.split(".")
    if len(parts) == 4 and all(p.isascii() and p.isdigit() for p in parts):
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            pass
    name = host.rstrip(".").lower()

    def label_ok(label: str) -> bool:
        return (
            0 < len(label) <= 63
            and label.isascii()
            and all(c.isalnum() or c == "-" for c in label)
            and not label.startswith("-")
            and not label.endswith("-")
        )

    if not name or len(name) > 253 or not all(label_ok(label) for label in name.split(".")):
        return None
    last = name.rsplit(".", 1)[-1]
    hexa = last.startswith("0x") and all(c in "0123456789abcdef" for c in last[2:])
    if hexa or last.isdigit():
        return None
    return name


def _origin(url: str) -> Optional[str]:
    """The origin of an absolute http(s) URL (host-cli's ``url_origin``), or None."""
    if len(url) < 8:
        return None
    lower = url[:8].lower()
    if lower.startswith("https://"):
        scheme, rest, default = "https", url[8:], 443
    elif lower.startswith("http://"):
        scheme, rest, default = "http", url[7:], 80
    else:
        return None
    end = min([i for i in (rest.find(c) for c in "/?#\\") if i >= 0], default=len(rest))
    host_port = rest[:end].rsplit("@", 1)[-1]
    if not host_port or "%" in host_port or any(c.isspace() or ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in host_port):
        return None
    if host_port.startswith("["):
        close = host_port.find("]")
        if close < 0:
            return None
        host, tail = host_port[: close + 1], host_port[close + 1 :]
        if tail and not tail.startswith(":"):
            return None
        port_text = tail[1:] if tail else None
    elif ":" in host_port:
        host, port_text = host_port.rsplit(":", 1)
    else:
        host, port_text = host_port, None
    port = default
    if port_text is not None:
        digits = port_text[1:] if port_text.startswith("+") else port_text
        if not (digits.isascii() and digits.isdigit()) or not 0 < int(digits) < 65536:
            return None
        port = int(digits)
    shown = _host(host)
    if shown is None:
        return None
    return f"{scheme}://{shown}" if port == default else f"{scheme}://{shown}:{port}"


def tab_url(url: str) -> str:
    """What a model may see of a tab's URL (host-cli's ``state_url``)."""
    if url == "about:blank":
        return url
    origin = _origin(url)
    if origin is not None:
        shown = origin
    else:
        scheme, sep, _ = url.partition(":")
        ok = sep and scheme and scheme.isascii() and all(c.isalnum() or c in "+-." for c in scheme)
        shown = scheme.lower() + ":" if ok else "invalid:"
    return shown if len(shown.encode()) <= _MAX_URL_BYTES else "invalid:"


def _visible(c: str) -> str:
    n = ord(c)
    if n <= 0x1F:
        return chr(0x2400 + n)
    if n == 0x7F:
        return "\u2421"
    if 0x80 <= n <= 0x9F or 0x200B <= n <= 0x200F or 0x2028 <= n <= 0x202E or 0x2060 <= n <= 0x2064 or 0x2066 <= n <= 0x2069 or n == 0xFEFF:
        return f"<U+{n:04X}>"
    return c


def _key_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "_")


def _trim_key(k: str) -> str:
    start, end = 0, len(k)
    while start < end and not _key_char(k[start]):
        start += 1
    while end > start and not _key_char(k[end - 1]):
        end -= 1
    return k[start:end]


def _redact_word(w: str, state: list[bool]) -> str:
    lower = w.lower() if w.isascii() else "".join(c.lower() if c.isascii() else c for c in w)
    if lower in ("bearer", "basic"):
        state[0] = True
        return w
    for sep in "=:":
        if sep in w:
            k, v = w.split(sep, 1)
            key = _trim_key(k)
            if any(s in key.lower() for s in _SECRET_KEYS):
                if not v:
                    state[0] = True
                    return w
                return f"{k}{sep}{_REDACTED}"
    tokenish = len(w.encode()) >= 32 and all(c in _TOKEN_CHARS for c in w)
    if (lower.startswith("eyj") and w.count(".") == 2) or tokenish:
        return _REDACTED
    return w


def _secrets(text: str) -> str:
    state = [False]
    out = []
    for w in text.split():
        scheme = w.lower() in ("bearer", "basic")
        if state[0] and not scheme:
            state[0] = False
            out.append(_REDACTED)
        else:
            out.append(_redact_word(w, state))
    return " ".join(out)


def tab_title(title: str) -> str:
    """What a model may see of a tab's title (host-cli's rules: controls
    made visible, credential-like parts redacted, at most 1024 bytes)."""
    shown = _secrets("".join(_visible(c) for c in title))
    data = shown.encode("utf-8", "surrogatepass")
    if len(data) <= _MAX_TITLE_BYTES:
        return shown
    return data[:_MAX_TITLE_BYTES].decode("utf-8", "ignore")


def _tabs(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, dict) or not isinstance(value.get("tabs"), list):
        raise bad("the browser state has the wrong shape")
    tabs = []
    for t in value["tabs"]:
        if not isinstance(t, dict):
            raise bad("a browser tab has the wrong shape")
        tid, title, url, active = t.get("id"), t.get("title"), t.get("url"), t.get("active")
        if not (isinstance(tid, str) and isinstance(title, str) and isinstance(url, str) and type(active) is bool):
            raise bad("a browser tab has the wrong shape")
        tabs.append({"id": tid, "title": tab_title(title), "url": tab_url(url), "active": active})
    return tabs


class Browser:
    """The session's browser (the daemon's own Firefox) as the SDK's browser driver.

    Give it to ``BrowserToolset(sandtop.Browser(session), confirm=...,
    url_policy=...)``: the toolset owns approvals and the URL policy; the
    daemon binds refs at execution and opens only http(s) and about:blank.
    """

    def __init__(
        self,
        session: Union["Session", DaemonClient],
        *,
        timeout: Optional[float] = None,
        grants: Optional[files.Grants] = None,
    ) -> None:
        self._client = session if isinstance(session, DaemonClient) else session.client
        self.timeout = timeout
        self.grants = grants if grants is not None else files.Grants()

    def state(self, *, cancelled: Cancel = None) -> dict[str, Any]:
        reply = self._client.request("POST", "/v1/browser/state", {}, cancelled=cancelled, timeout=self.timeout)
        return {"tabs": _tabs(reply)}

    def call(self, member: str, arguments: dict[str, Any], *, cancelled: Cancel = None) -> Any:
        """One member with its arguments; the SDK-shaped result."""
        if member not in MEMBERS:
            raise ValueError(f"{member[:32]!r} is not a browser member the daemon implements")
        if member in _FILES:
            return self._file(member, arguments, cancelled)
        if not isinstance(arguments, dict) or "member" in arguments:
            raise ValueError("browser arguments must be an object without a 'member' field")
        body = {"member": member, **arguments}
        try:
            reply = self._client.request("POST", "/v1/browser/call", body, cancelled=cancelled, timeout=self.timeout)
        except DaemonError as e:
            raise BrowserCallError(e) from None
        _tabs(reply.get("state"))
        return _result(member, reply.get("outcome"))

    # One method per member, as the SDK looks them up by name.
    def navigate(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("navigate", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def read_page(self, action: dict[str, Any], *, cancelled: Cancel = None) -> dict[str, Any]:
        return self.call("read_page", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def get_page_text(self, action: dict[str, Any], *, cancelled: Cancel = None) -> dict[str, Any]:
        return self.call("get_page_text", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def find(self, action: dict[str, Any], *, cancelled: Cancel = None) -> dict[str, Any]:
        return self.call("find", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def click(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("click", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def type(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("type", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def key(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("key", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def scroll(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("scroll", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def select_option(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("select_option", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def hover(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("hover", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def screenshot(self, action: dict[str, Any], *, cancelled: Cancel = None) -> dict[str, Any]:
        return self.call("screenshot", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def zoom(self, action: dict[str, Any], *, cancelled: Cancel = None) -> dict[str, Any]:
        return self.call("zoom", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def new_tab(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("new_tab", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def switch_tab(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("switch_tab", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def close_tab(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("close_tab", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def scroll_to(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("scroll_to", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def wait_for(self, action: dict[str, Any], *, cancelled: Cancel = None) -> str:
        return self.call("wait_for", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def hover_at(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("hover_at", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def set_checked(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("set_checked", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def click_at(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("click_at", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def drag_path(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("drag_path", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def hold_keys(self, action: dict[str, Any], *, cancelled: Cancel = None) -> None:
        return self.call("hold_keys", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def read_page_scoped(self, action: dict[str, Any], *, cancelled: Cancel = None) -> dict[str, Any]:
        return self.call("read_page_scoped", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def read_diagnostics(self, action: dict[str, Any], *, cancelled: Cancel = None) -> dict[str, Any]:
        return self.call("read_diagnostics", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def run_script(self, action: dict[str, Any], *, cancelled: Cancel = None) -> str:
        return self.call("run_script", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def upload_file(self, action: dict[str, Any], *, cancelled: Cancel = None) -> dict[str, Any]:
        return self.call("upload_file", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def download_file(self, action: dict[str, Any], *, cancelled: Cancel = None) -> dict[str, Any]:
        return self.call("download_file", action, cancelled=cancelled)  # type: ignore[no-any-return]

    def _daemon(self, body: dict[str, Any], cancelled: Cancel) -> Any:
        reply = self._client.request("POST", "/v1/browser/call", body, cancelled=cancelled, timeout=self.timeout)
        _tabs(reply.get("state"))
        return reply.get("outcome")

    def _file(self, member: str, arguments: dict[str, Any], cancelled: Cancel) -> dict[str, Any]:
        """One file transfer by grant; always a ``BrowserFileOutcome``."""
        if not isinstance(arguments, dict) or set(arguments) != {"grant_id"}:
            raise ValueError("file arguments must be exactly {grant_id}")
        kind = "upload" if member == "upload_file" else "download"
        grant = self.grants.take(kind, arguments["grant_id"])
        if grant is None:
            return dict(files.REFUSED)
        if kind == "upload":
            try:
                name, data = files.read_upload(grant)
            except files.GrantError:
                return dict(files.REFUSED)
            body = {"member": "set_file", "tab_id": None, "name": name, "content_base64": base64.b64encode(data).decode()}
            try:
                outcome = self._daemon(body, cancelled)
            except Cancelled as e:
                return files.outcome("interrupted", "unknown" if e.sent else "none", "pending" if e.sent else "not_started")
            except DaemonError as e:
                if e.code == "timeout":
                    return files.outcome("unknown", "unknown", "pending")
                return dict(files.REFUSED)
            except ChannelError as e:
                if e.outcome_unknown:
                    return files.outcome("unknown", "unknown", "pending")
                return dict(files.REFUSED)
            if not isinstance(outcome, dict) or outcome.get("kind") != "done":
                return files.outcome("unknown", "unknown", "pending")
            # The guest's copy stays while the page may read it.
            return files.outcome("completed", "completed", "pending")
        try:
            outcome = self._daemon({"member": "take_download"}, cancelled)
        except Cancelled:
            return files.outcome("interrupted", "none", "not_started")
        except (DaemonError, ChannelError):
            # Taking only reads in the guest: nothing changed.
            return dict(files.REFUSED)
        if not isinstance(outcome, dict) or outcome.get("kind") != "file":
            return dict(files.REFUSED)
        got_name, data64 = outcome.get("name"), outcome.get("content_base64")
        if not isinstance(got_name, str) or not isinstance(data64, str) or len(data64) > 4 * files.MAX_DOWNLOAD_BYTES // 3 + 4:
            return dict(files.REFUSED)
        try:
            files.write_download(grant, got_name, base64.b64decode(data64, validate=True))
        except (ValueError, OSError):
            return dict(files.REFUSED)
        try:
            self._daemon({"member": "remove_download", "name": got_name}, cancelled)
            cleanup = "completed"
        except (Cancelled, DaemonError, ChannelError):
            cleanup = "pending"
        return files.outcome("completed", "completed", cleanup)


def _result(member: str, outcome: object) -> Any:
    if not isinstance(outcome, dict) or not isinstance(outcome.get("kind"), str):
        raise bad("the browser outcome has the wrong shape")
    kind = outcome["kind"]
    if member in _READS and kind == "read":
        report = {k: v for k, v in outcome.items() if k != "kind"}
        if member != "read_page_scoped" and "scopes" in report:
            raise bad("scopes came back from a read that is not scoped")
        return report
    if member in _IMAGES and kind == "image":
        data = checked_png_b64(outcome.get("png_base64"), outcome.get("width"), outcome.get("height"))
        return {"type": "input_image", "image_url": "data:image/png;base64," + data, "detail": "original"}
    if member in _TEXTS and kind == "text":
        text = outcome.get("text")
        if not isinstance(text, str):
            raise bad("the browser outcome has the wrong shape")
        if member == "run_script":
            # Bounded here too: the daemon is not trusted to cut it.
            text = text.encode("utf-8")[:_MAX_SCRIPT_RESULT].decode("utf-8", errors="ignore")
        return text
    if member not in _READS | _IMAGES | _TEXTS and kind == "done":
        return None
    raise ChannelError(f"the daemon's reply is invalid: a {kind[:16]!r} outcome for {member}", outcome_unknown=True)


def _async_member(name: str) -> Callable[..., Any]:
    async def member(self: "AsyncBrowser", action: dict[str, Any], *, cancelled: Cancel = None) -> Any:
        return await self._run(getattr(self.sync, name), action, cancelled=cancelled)

    member.__name__ = name
    member.__qualname__ = f"AsyncBrowser.{name}"
    return member


class AsyncBrowser:
    """``Browser`` as the SDK's async browser driver (worker threads;
    cancelling the awaiting task closes the request's connection)."""

    def __init__(
        self,
        session: Union["Session", DaemonClient],
        *,
        timeout: Optional[float] = None,
        grants: Optional[files.Grants] = None,
    ) -> None:
        self.sync = Browser(session, timeout=timeout, grants=grants)

    async def _run(self, method: Callable[..., Any], *args: Any, cancelled: Cancel) -> Any:
        stop = threading.Event()

        def is_cancelled() -> bool:
            return stop.is_set() or (cancelled is not None and bool(cancelled()))

        try:
            return await asyncio.to_thread(method, *args, cancelled=is_cancelled)
        except asyncio.CancelledError:
            stop.set()
            raise

    async def state(self, *, cancelled: Cancel = None) -> dict[str, Any]:
        result: dict[str, Any] = await self._run(self.sync.state, cancelled=cancelled)
        return result


for _name in MEMBERS:
    setattr(AsyncBrowser, _name, _async_member(_name))
del _name
