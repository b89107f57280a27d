"""``Browser`` / ``AsyncBrowser``: the ``anthropic`` SDK's browser toolset
(``anthropic.tools.browser.BetaAbstractBrowserToolset20260801`` and its
async twin, ``browser_toolset_20260801``) over the daemon's browser
endpoints (the guest's own Firefox).

Each member maps onto one daemon member (``POST /v1/browser/call``) where
the semantics match; the differences are listed in docs/contract.md
("Claude"). ``_browser_state`` reports the tabs the call's reply carried
(or ``POST /v1/browser/state`` when the call made none). A refusal by the daemon reaches the model in
our words, chosen by the error code (``sandtop.browser.error_text``), never
the guest's message. ``url_policy``, ``confirm`` and ``configs`` are the
SDK's own options; ``origins=[...]`` is a convenience that builds the SDK's
``url_policy`` (a ``navigate`` outside them is refused before any
``confirm``) and also sends the origins to the daemon with every call, so
a page that wanders off them (a redirect, its own navigation) is refused
there too.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence, Union
from urllib.parse import urlsplit

from anthropic.tools import ToolError
from anthropic.tools.browser import (
    BetaAbstractBrowserToolset20260801,
    BetaAsyncAbstractBrowserToolset20260801,
    BetaBrowserNavigateResult,
    BetaBrowserState,
    BetaScreenshotResult,
    BetaToolsetCallContext,
    BetaURLContext,
)

from .._channel import Cancelled, ChannelError, DaemonClient, DaemonError
from .._image import bad, checked_png_b64
from ..browser import _tabs, error_text
from ._computer import MAX_IMAGE_BASE64_BYTES, MAX_WAIT_SECONDS, chords

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["Browser", "AsyncBrowser", "origin_policy", "normalize_url", "render_read"]

Cancel = Optional[Callable[[], bool]]

#: Pixels one scroll-wheel notch moves the page (the daemon scrolls by pixels).
NOTCH_PIXELS = 100
#: The longest a ``javascript_exec`` may run before the daemon stops waiting.
SCRIPT_TIMEOUT_MS = 10_000
#: ``hold_key``'s longest hold in the daemon's browser (``MAX_HOLD_MS``).
MAX_HOLD_SECONDS = 3


def normalize_url(url: str) -> str:
    """The URL the daemon is given: the protocol defaults to ``https://``,
    as the toolset's ``navigate`` states."""
    u = url.strip()
    if "://" not in u and not u.startswith("about:"):
        u = "https://" + u
    return u


def _origin(url: str) -> Optional[str]:
    try:
        p = urlsplit(url)
        port = p.port
    except ValueError:
        return None
    if p.scheme not in ("http", "https") or not p.hostname:
        return None
    default = {"http": 80, "https": 443}[p.scheme]
    host = p.hostname if ":" not in p.hostname else f"[{p.hostname}]"
    return f"{p.scheme}://{host}" + ("" if port in (None, default) else f":{port}")


def origin_policy(origins: Iterable[str]) -> Callable[[BetaURLContext, str], None]:
    """The SDK's ``url_policy`` allowing exactly these origins
    (``scheme://host[:port]``): anything else raises ``ToolError``."""
    allowed = set()
    for o in origins:
        norm = _origin(o)
        if norm is None or norm.rstrip("/") != o.rstrip("/"):
            raise ValueError(f"{o[:80]!r} is not an origin (scheme://host[:port], http or https)")
        allowed.add(norm)

    def policy(context: BetaURLContext, url: str) -> None:
        if url.strip().lower() == "about:blank":
            return
        if _origin(normalize_url(url)) not in allowed:
            raise ToolError("The URL is outside this application's URL policy; it was not opened.")

    return policy


def render_read(report: dict[str, Any]) -> str:
    """A daemon read report (BrowserReadV1) as the text the model reads:
    the page text, then one line per element with its ref in brackets."""
    lines: list[str] = []
    text = report.get("text")
    if isinstance(text, str) and text:
        lines.append(text)
    for e in report.get("elements") or []:
        if not isinstance(e, dict):
            raise bad("a read element has the wrong shape")
        line = f"[{e.get('ref')}] {e.get('role')} {json.dumps(e.get('label'), ensure_ascii=False)}"
        if "value" in e:
            line += f" value={json.dumps(e['value'], ensure_ascii=False)}"
        if "checked" in e:
            line += f" checked={'true' if e['checked'] else 'false'}"
        if e.get("options"):
            opts = ", ".join(
                json.dumps(o.get("value"), ensure_ascii=False) + (" (selected)" if o.get("selected") else "")
                for o in e["options"]
                if isinstance(o, dict)
            )
            line += f" options=[{opts}]"
        lines.append(line)
    for s in report.get("scopes") or []:
        if isinstance(s, dict):
            lines.append(f"[{s.get('ref')}] section {json.dumps(s.get('label'), ensure_ascii=False)}")
    omitted = report.get("omitted") or []
    if omitted:
        lines.append("(omitted: " + ", ".join(str(o) for o in omitted) + ")")
    return "\n".join(lines) if lines else "(nothing to read)"


def _tool_error(e: Exception, member: str) -> ToolError:
    if isinstance(e, DaemonError):
        return ToolError(error_text(e.code))
    if isinstance(e, Cancelled):
        return ToolError(f"{member}: cancelled" + (" after it was sent; the outcome is unknown" if e.sent else ""))
    if isinstance(e, ChannelError):
        if e.outcome_unknown:
            return ToolError("The browser did not answer properly; the outcome is unknown.")
        return ToolError("The browser could not be reached; nothing was done.")
    return ToolError("Browser action failed.")


def _coord(target: Any, member: str) -> tuple[int, int]:
    if getattr(target, "type", None) != "coordinate":
        raise ToolError(f"{member}: this browser needs a coordinate target here, not an element reference")
    if target.x < 0 or target.y < 0:
        raise ToolError(f"{member}: coordinates must not be negative")
    return target.x, target.y


_MODIFIERS = {
    "ctrl": "Control", "control": "Control", "alt": "Alt", "option": "Alt", "shift": "Shift",
    "meta": "Meta", "cmd": "Meta", "command": "Meta", "super": "Meta", "win": "Meta",
}


def _modifiers(text: Optional[str], member: str) -> list[str]:
    if text is None or not text.strip():
        return []
    found = chords(text)
    if len(found) != 1:
        raise ToolError(f"{member}: modifiers are one chord (e.g. 'ctrl+shift')")
    out: list[str] = []
    for k in found[0]:
        m = _MODIFIERS.get(k.lower())
        if m is None:
            raise ToolError(f"{member}: {k[:32]!r} is not a modifier (ctrl, alt, shift, meta)")
        if m not in out:
            out.append(m)
    return out


class Engine:
    """What both toolsets run: one method per member, on the daemon."""

    def __init__(
        self,
        session: Union["Session", DaemonClient],
        *,
        origins: Optional[Sequence[str]],
        timeout: Optional[float],
    ) -> None:
        self.client: DaemonClient = session if isinstance(session, DaemonClient) else session.client
        self.origins = list(origins) if origins is not None else None
        self.timeout = timeout
        self._state: Optional[list[dict[str, Any]]] = None
        # ref -> role, from the reads this toolset made (form_input's choice).
        self._roles: dict[str, str] = {}

    def run(self, member: str, input: Any, cancelled: Cancel) -> Any:
        try:
            return getattr(self, "m_" + member)(input, cancelled)
        except ToolError:
            raise
        except Exception as e:
            raise _tool_error(e, member) from None

    def call(self, body: dict[str, Any], cancelled: Cancel) -> dict[str, Any]:
        if self.origins is not None:
            body = {**body, "url_policy": self.origins}
        try:
            reply = self.client.request("POST", "/v1/browser/call", body, cancelled=cancelled, timeout=self.timeout)
        except DaemonError:
            self._state = None  # read again: the failed call may have changed it
            raise
        self._state = _tabs(reply.get("state"))
        outcome = reply.get("outcome")
        if not isinstance(outcome, dict) or not isinstance(outcome.get("kind"), str):
            raise bad("the browser outcome has the wrong shape")
        return outcome

    def _expect(self, outcome: dict[str, Any], kind: str, member: str) -> dict[str, Any]:
        if outcome["kind"] != kind:
            raise ChannelError(f"the daemon's reply is invalid: a {outcome['kind'][:16]!r} outcome for {member}", outcome_unknown=True)
        return outcome

    def done(self, body: dict[str, Any], cancelled: Cancel) -> None:
        self._expect(self.call(body, cancelled), "done", body["member"])

    def read(self, body: dict[str, Any], cancelled: Cancel) -> str:
        report = self._expect(self.call(body, cancelled), "read", body["member"])
        for e in report.get("elements") or []:
            if isinstance(e, dict) and isinstance(e.get("ref"), str) and isinstance(e.get("role"), str):
                self._roles[e["ref"]] = e["role"]
        return render_read(report)

    def image(self, body: dict[str, Any], cancelled: Cancel) -> BetaScreenshotResult:
        out = self._expect(self.call(body, cancelled), "image", body["member"])
        data = checked_png_b64(out.get("png_base64"), out.get("width"), out.get("height"))
        if len(data) > MAX_IMAGE_BASE64_BYTES:
            raise ToolError("The image is larger than the API's per-image limit.")
        return BetaScreenshotResult(data=data, media_type="image/png")

    def tabs(self, cancelled: Cancel) -> list[dict[str, Any]]:
        if self._state is None:
            reply = self.client.request("POST", "/v1/browser/state", {}, cancelled=cancelled, timeout=self.timeout)
            self._state = _tabs(reply)
        return self._state

    def state(self, cancelled: Cancel) -> BetaBrowserState:
        """The report after a call: the tabs the call's own reply carried
        (used once), else read now. A state that cannot be read raises: the
        SDK then stops the run (as host-cli's loop does, rule 31)."""
        tabs = self.tabs(cancelled)
        self._state = None  # the next report reads the browser again unless a call refreshes it
        return BetaBrowserState(tabs=[_entry(t) for t in tabs])

    def _active(self, tab_id: Optional[str], cancelled: Cancel) -> dict[str, Any]:
        for t in self.tabs(cancelled):
            if (t["id"] == tab_id) if tab_id is not None else t["active"]:
                return t
        raise ToolError(error_text("no_such_tab"))

    # -- members -------------------------------------------------------------

    def m_navigate(self, input: Any, cancelled: Cancel) -> BetaBrowserNavigateResult:
        if input.url in ("back", "forward", "reload"):
            raise ToolError(f"navigate: '{input.url}' is not available in this browser; navigate to a URL instead")
        self.done({"member": "navigate", "tab_id": input.tab_id, "url": normalize_url(input.url)}, cancelled)
        tab = self._active(input.tab_id, cancelled)
        return BetaBrowserNavigateResult(url=tab["url"], title=tab["title"] or None)

    def m_screenshot(self, input: Any, cancelled: Cancel) -> BetaScreenshotResult:
        return self.image({"member": "screenshot", "tab_id": input.tab_id}, cancelled)

    def m_zoom(self, input: Any, cancelled: Cancel) -> BetaScreenshotResult:
        if any(v < 0 for v in input.region):
            raise ToolError("zoom: region coordinates must not be negative")
        return self.image({"member": "zoom", "tab_id": input.tab_id, "region": list(input.region)}, cancelled)

    def _click(self, input: Any, member: str, button: str, count: int, cancelled: Cancel) -> None:
        keys = _modifiers(getattr(input, "modifiers", None), member)
        target = input.target
        if target.type == "ref" and button == "left" and count == 1 and not keys:
            self.done({"member": "click", "tab_id": input.tab_id, "target": target.ref}, cancelled)
            return
        x, y = _coord(target, member)
        body = {"member": "click_at", "tab_id": input.tab_id, "x": x, "y": y, "button": button,
                "click_count": count, "keys": keys}
        self.done(body, cancelled)

    def m_left_click(self, input: Any, cancelled: Cancel) -> None:
        self._click(input, "left_click", "left", 1, cancelled)

    def m_right_click(self, input: Any, cancelled: Cancel) -> None:
        self._click(input, "right_click", "right", 1, cancelled)

    def m_middle_click(self, input: Any, cancelled: Cancel) -> None:
        self._click(input, "middle_click", "middle", 1, cancelled)

    def m_double_click(self, input: Any, cancelled: Cancel) -> None:
        self._click(input, "double_click", "left", 2, cancelled)

    def m_triple_click(self, input: Any, cancelled: Cancel) -> None:
        self._click(input, "triple_click", "left", 3, cancelled)

    def m_hover(self, input: Any, cancelled: Cancel) -> None:
        if input.target.type == "ref":
            self.done({"member": "hover", "tab_id": input.tab_id, "target": input.target.ref}, cancelled)
            return
        x, y = _coord(input.target, "hover")
        self.done({"member": "hover_at", "tab_id": input.tab_id, "x": x, "y": y}, cancelled)

    def m_mouse_move(self, input: Any, cancelled: Cancel) -> None:
        x, y = _coord(input.target, "mouse_move")
        self.done({"member": "hover_at", "tab_id": input.tab_id, "x": x, "y": y}, cancelled)

    def m_left_click_drag(self, input: Any, cancelled: Cancel) -> None:
        x0, y0 = _coord(input.from_, "left_click_drag")
        x1, y1 = _coord(input.target, "left_click_drag")
        path = [{"x": x0, "y": y0}, {"x": x1, "y": y1}]
        self.done({"member": "drag_path", "tab_id": input.tab_id, "path": path, "keys": []}, cancelled)

    def m_scroll(self, input: Any, cancelled: Cancel) -> None:
        _coord(input.target, "scroll")
        notches = 3 if input.scroll_amount is None else input.scroll_amount
        if not 1 <= notches <= 10:
            raise ToolError("scroll: scroll_amount must be 1 to 10")
        body = {"member": "scroll", "tab_id": input.tab_id, "direction": input.scroll_direction,
                "amount": notches * NOTCH_PIXELS}
        self.done(body, cancelled)

    def m_scroll_to(self, input: Any, cancelled: Cancel) -> None:
        self.done({"member": "scroll_to", "tab_id": input.tab_id, "target": input.target.ref}, cancelled)

    def m_type(self, input: Any, cancelled: Cancel) -> None:
        self.done({"member": "type", "tab_id": input.tab_id, "text": input.text, "target": None}, cancelled)

    def m_key(self, input: Any, cancelled: Cancel) -> None:
        repeat = 1 if input.repeat is None else input.repeat
        presses = chords(input.text)
        if repeat < 1 or repeat * len(presses) > 100:
            raise ToolError("key: repeat must be at least 1, and at most 100 presses in all")
        for _ in range(repeat):
            for keys in presses:
                self.done({"member": "key", "tab_id": input.tab_id, "keys": keys}, cancelled)

    def m_hold_key(self, input: Any, cancelled: Cancel) -> None:
        if not 0 < input.duration <= MAX_HOLD_SECONDS:
            raise ToolError(f"hold_key: this browser holds keys for 1 to {MAX_HOLD_SECONDS} seconds")
        found = chords(input.text)
        if len(found) != 1:
            raise ToolError("hold_key: one key combination")
        body = {"member": "hold_keys", "tab_id": input.tab_id, "keys": found[0], "duration_ms": input.duration * 1000}
        self.done(body, cancelled)

    def m_form_input(self, input: Any, cancelled: Cancel) -> None:
        ref, value = input.target.ref, input.value
        role = self._roles.get(ref)
        if isinstance(value, bool):
            self.done({"member": "set_checked", "tab_id": input.tab_id, "target": ref, "checked": value}, cancelled)
            return
        text = value if isinstance(value, str) else (str(int(value)) if float(value).is_integer() else repr(value))
        if role in ("combobox", "listbox"):
            self.done({"member": "select_option", "tab_id": input.tab_id, "target": ref, "values": [text]}, cancelled)
            return
        # A text field: focused, its content selected, then replaced by typing.
        self.done({"member": "type", "tab_id": input.tab_id, "text": text, "target": ref}, cancelled)

    def m_read_page(self, input: Any, cancelled: Cancel) -> str:
        filt = input.filter or "all"
        if input.ref is None and input.depth is None:
            return self.read({"member": "read_page", "tab_id": input.tab_id, "filter": filt}, cancelled)
        depth = 15 if input.depth is None else input.depth
        if not 1 <= depth <= 32:
            raise ToolError("read_page: depth must be 1 to 32 here")
        body = {"member": "read_page_scoped", "tab_id": input.tab_id, "root": input.ref, "depth": depth, "filter": filt}
        return self.read(body, cancelled)

    def m_find(self, input: Any, cancelled: Cancel) -> str:
        return self.read({"member": "find", "tab_id": input.tab_id, "query": input.query}, cancelled)

    def m_get_page_text(self, input: Any, cancelled: Cancel) -> str:
        return self.read({"member": "get_page_text", "tab_id": input.tab_id}, cancelled)

    def m_wait(self, input: Any, cancelled: Cancel) -> None:
        if not 0 <= input.duration <= MAX_WAIT_SECONDS:
            raise ToolError(f"wait: duration must be 0 to {MAX_WAIT_SECONDS} seconds")
        end = time.monotonic() + input.duration
        while (left := end - time.monotonic()) > 0:
            if cancelled is not None and cancelled():
                raise ToolError("wait: cancelled")
            time.sleep(min(0.05, left))

    def _diagnostics(self, input: Any, source: str, cancelled: Cancel) -> str:
        body = {"member": "read_diagnostics", "tab_id": input.tab_id, "source": source, "limit": 100}
        report = self._expect(self.call(body, cancelled), "read", "read_diagnostics")
        text = report.get("text")
        return text if isinstance(text, str) and text else "(no entries)"

    def m_read_console(self, input: Any, cancelled: Cancel) -> str:
        return self._diagnostics(input, "console", cancelled)

    def m_read_network(self, input: Any, cancelled: Cancel) -> str:
        return self._diagnostics(input, "network", cancelled)

    def m_javascript_exec(self, input: Any, cancelled: Cancel) -> str:
        # The daemon returns a string result; the toolset returns the last
        # expression's value: evaluated as a script in the page, awaited,
        # and turned into text here in the page.
        source = (
            "(async () => { const v = await (0, eval)(" + json.dumps(input.text) + ");"
            " if (typeof v === 'string') return v; if (v === undefined) return 'undefined';"
            " try { const j = JSON.stringify(v); return j === undefined ? String(v) : j; }"
            " catch (e) { return String(v); } })()"
        )
        body = {"member": "run_script", "tab_id": input.tab_id, "source": source, "timeout_ms": SCRIPT_TIMEOUT_MS}
        out = self._expect(self.call(body, cancelled), "text", "run_script")
        text = out.get("text")
        if not isinstance(text, str):
            raise bad("the browser outcome has the wrong shape")
        return text

    def m_new_tab(self, input: Any, cancelled: Cancel) -> dict[str, Any]:
        self.done({"member": "new_tab", "url": None}, cancelled)
        return _entry(self._active(None, cancelled))

    def m_list_tabs(self, input: Any, cancelled: Cancel) -> list[dict[str, Any]]:
        self._state = None
        return [_entry(t) for t in self.tabs(cancelled)]

    def m_switch_tab(self, input: Any, cancelled: Cancel) -> dict[str, Any]:
        self.done({"member": "switch_tab", "tab_id": input.tab_id}, cancelled)
        return _entry(self._active(input.tab_id, cancelled))

    def m_close_tab(self, input: Any, cancelled: Cancel) -> None:
        self.done({"member": "close_tab", "tab_id": input.tab_id}, cancelled)


def _entry(tab: dict[str, Any]) -> dict[str, Any]:
    return {"tab_id": tab["id"], "title": tab["title"], "url": tab["url"], "active": tab["active"]}


_MEMBERS = (
    "navigate", "screenshot", "zoom", "left_click", "right_click", "middle_click", "double_click",
    "triple_click", "hover", "left_click_drag", "mouse_move", "scroll", "scroll_to", "type", "key",
    "hold_key", "form_input", "read_page", "find", "get_page_text", "wait", "read_console",
    "read_network", "javascript_exec", "new_tab", "list_tabs", "switch_tab", "close_tab",
)


def _options(origins: Optional[Sequence[str]], url_policy: Any) -> dict[str, Any]:
    if origins is not None:
        if url_policy is not None:
            raise ValueError("give origins or url_policy, not both")
        return {"url_policy": origin_policy(origins)}
    return {} if url_policy is None else {"url_policy": url_policy}


class Browser(BetaAbstractBrowserToolset20260801):
    """The session's browser as the SDK's synchronous browser toolset.

    ``Browser(session, origins=["http://127.0.0.1:8080"], confirm=...)``.
    ``read_console``, ``read_network`` and ``javascript_exec`` are
    implemented and stay off unless ``configs`` enables them (the SDK's
    default); ``file_upload`` and ``left_mouse_down``/``left_mouse_up`` are
    not implemented (the SDK offers them as disabled)."""

    def __init__(
        self,
        session: Union["Session", DaemonClient],
        *,
        confirm: Any = None,
        configs: Any = None,
        origins: Optional[Sequence[str]] = None,
        url_policy: Any = None,
        tool_configs: Any = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.engine = Engine(session, origins=origins, timeout=timeout)
        super().__init__(configs=configs, confirm=confirm, tool_configs=tool_configs, **_options(origins, url_policy))

    def _browser_state(self, context: BetaToolsetCallContext) -> BetaBrowserState:
        return self.engine.state(None)


class AsyncBrowser(BetaAsyncAbstractBrowserToolset20260801):
    """``Browser`` as the SDK's asynchronous browser toolset (worker
    threads; cancelling the awaiting task closes the request's connection)."""

    def __init__(
        self,
        session: Union["Session", DaemonClient],
        *,
        confirm: Any = None,
        configs: Any = None,
        origins: Optional[Sequence[str]] = None,
        url_policy: Any = None,
        tool_configs: Any = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.engine = Engine(session, origins=origins, timeout=timeout)
        super().__init__(configs=configs, confirm=confirm, tool_configs=tool_configs, **_options(origins, url_policy))

    async def _run(self, method: Callable[..., Any], *args: Any) -> Any:
        stop = threading.Event()
        try:
            return await asyncio.to_thread(method, *args, stop.is_set)
        except asyncio.CancelledError:
            stop.set()
            raise

    async def _browser_state(self, context: BetaToolsetCallContext) -> BetaBrowserState:
        return await self._run(self.engine.state)  # type: ignore[no-any-return]


def _sync_member(name: str) -> Callable[..., Any]:
    def member(self: Browser, context: BetaToolsetCallContext, input: Any) -> Any:
        return self.engine.run(name, input, None)

    member.__name__ = member.__qualname__ = name
    return member


def _async_member(name: str) -> Callable[..., Any]:
    async def member(self: AsyncBrowser, context: BetaToolsetCallContext, input: Any) -> Any:
        return await self._run(self.engine.run, name, input)

    member.__name__ = member.__qualname__ = name
    return member


for _name in _MEMBERS:
    setattr(Browser, _name, _sync_member(_name))
    setattr(AsyncBrowser, _name, _async_member(_name))
del _name
