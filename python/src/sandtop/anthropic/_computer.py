"""``Computer`` / ``AsyncComputer``: the ``anthropic`` SDK's computer toolset
(``anthropic.tools.computer.BetaAbstractComputerToolset20260801`` and its
async twin, ``computer_toolset_20260801``) over a Sandtop daemon.

Each member is one ``POST /v1/actions`` (without a final screenshot) in the
coordinate space of the last screenshot (``expect_scale_map``: if the screen
changed size since, nothing runs and the model reads ``stale_scale_map``);
``screenshot`` is one empty batch (taken once the screen settled); ``zoom``
is one ``POST /v1/screenshot`` of a screen region, mapped from the
screenshot's space through its ScaleMap and fitted into the screenshot's own
size. Images are checked as ``sandtop.Computer`` checks them and must stay
under the API's per-image limit. The members the daemon cannot honour
are not overridden, so the SDK offers them as disabled and answers a call
with its own refusal; this daemon honours all 17. ``cursor_position`` is
``POST /v1/cursor`` in the screenshot's space; ``left_mouse_down`` /
``left_mouse_up`` are the daemon's ``mouse_down`` / ``mouse_up`` (the button
stays held between calls, released by the daemon on a failed batch, its stop
or a minute without input); ``hold_key`` is ``hold_key`` (at most 10 s).
A click or scroll without a coordinate acts where the pointer is.

Every failure reaches the model as a ``ToolError`` whose text is ours,
built from the daemon's error code (never the guest's message, never the
token). ``confirm`` is the SDK's: it is required while ``type`` or ``key``
is enabled and is called before every member call the SDK runs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from anthropic.tools import ToolError
from anthropic.tools.computer import (
    BetaAbstractComputerToolset20260801,
    BetaAsyncAbstractComputerToolset20260801,
    BetaComputerCursorPositionResult,
    BetaScreenshotResult,
    BetaToolsetCallContext,
)

from .._channel import Cancelled, ChannelError, DaemonClient, DaemonError
from .._image import check_region_shot
from ..computer import Computer as _OpenAIComputer

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["Computer", "AsyncComputer", "MAX_IMAGE_BASE64_BYTES", "chords", "MAX_WAIT_SECONDS"]

Cancel = Optional[Callable[[], bool]]

#: The API's per-image limit on the base64 form (the SDK's own figure,
#: ``anthropic.lib.tools.agent_toolset.DEFAULT_MAX_IMAGE_BASE64_BYTES``).
MAX_IMAGE_BASE64_BYTES = 5 * 1024 * 1024
#: The longest ``wait`` (seconds), as the browser toolset's ``wait`` states.
MAX_WAIT_SECONDS = 30
#: The most key presses one ``key`` call may make (chords times ``repeat``).
MAX_KEY_PRESSES = 100
#: ``hold_key``'s longest hold (the daemon's ``MAX_HOLD_KEY_MS``).
MAX_HOLD_SECONDS = 10


def chords(text: str) -> list[list[str]]:
    """``"ctrl+s"`` -> ``[["ctrl", "s"]]``; whitespace separates presses
    (``"Tab Tab"``); ``"ctrl++"`` holds ctrl and presses ``+``. Each name
    goes to the daemon's key table as written (case-insensitive there)."""
    out: list[list[str]] = []
    for chord in text.split():
        keys: list[str] = []
        rest = chord
        while rest:
            if rest.startswith("+"):
                # a '+' where a name is expected is the plus key itself
                keys.append("+")
                rest = rest[1:]
                if rest.startswith("+"):
                    rest = rest[1:]
                continue
            name, sep, rest = rest.partition("+")
            keys.append(name)
            if sep and not rest:
                raise ToolError(f"key: {chord[:40]!r} ends with '+' and no key after it")
        out.append(keys)
    if not out:
        raise ToolError("key: no key given")
    return out


def _held(text: Optional[str]) -> Optional[list[str]]:
    """The modifiers a pointer action holds (``"ctrl+shift"``)."""
    if text is None or not text.strip():
        return None
    found = chords(text)
    if len(found) != 1:
        raise ToolError("text: one key combination to hold (e.g. 'ctrl+shift'), not a sequence")
    return found[0]




def _tool_error(e: Exception, member: str) -> ToolError:
    """Our words for a failure, never the guest's."""
    if isinstance(e, DaemonError):
        return ToolError(f"{member}: {e}")
    if isinstance(e, Cancelled):
        return ToolError(f"{member}: cancelled" + (" after it was sent; the outcome is unknown" if e.sent else ""))
    if isinstance(e, ChannelError):
        if e.outcome_unknown:
            return ToolError(f"{member}: the desktop did not answer properly; the outcome is unknown")
        return ToolError(f"{member}: the desktop could not be reached; nothing was done")
    if isinstance(e, ValueError):
        return ToolError(f"{member}: {e}")
    return ToolError(f"{member}: failed")


class Desktop:
    """What both toolsets run: one method per member the daemon honours,
    taking the SDK's parsed input, raising ``ToolError``."""

    def __init__(
        self,
        session: Union["Session", DaemonClient],
        *,
        size: Optional[tuple[int, int]],
        zoom_size: Optional[tuple[int, int]],
        timeout: Optional[float],
    ) -> None:
        self.computer = _OpenAIComputer(session, size=size, timeout=timeout)
        self.client: DaemonClient = self.computer._client
        if zoom_size is not None:
            w, h = zoom_size
            if not all(type(v) is int and 1 <= v <= 8192 for v in (w, h)):
                raise ValueError("zoom_size must be two integers within 1..8192")
        self.zoom_size = zoom_size
        self.timeout = timeout

    def run(self, member: str, input: Any, cancelled: Cancel) -> Any:
        try:
            return getattr(self, "m_" + member)(input, cancelled)
        except ToolError:
            raise
        except Exception as e:
            raise _tool_error(e, member) from None

    # -- pointer and keyboard ------------------------------------------------

    def _point(self, value: Optional[list[int]], cancelled: Cancel) -> tuple[int, int]:
        """The coordinate given, or where the pointer is (the toolset's
        "the current cursor position if `coordinate` is omitted")."""
        if value is not None:
            return value[0], value[1]
        here = self.m_cursor_position(None, cancelled)
        return here.x, here.y

    def m_cursor_position(self, input: Any, cancelled: Cancel) -> BetaComputerCursorPositionResult:
        options = self.computer._options()  # noqa: SLF001 - the same package
        reply = self.client.request("POST", "/v1/cursor", options, cancelled=cancelled, timeout=self.timeout)
        x, y, m = reply.get("x"), reply.get("y"), reply.get("scale_map")
        if type(x) is not int or type(y) is not int or not isinstance(m, dict):
            raise ChannelError("the daemon's reply is invalid: a cursor position has the wrong shape", outcome_unknown=True)
        last = self.computer.scale_map
        if last is not None and m != last:
            raise ToolError("cursor_position: the screen changed size since the screenshot; take a new screenshot")
        image = m.get("image") or {}
        if not (0 <= x < image.get("width", 0) and 0 <= y < image.get("height", 0)):
            raise ChannelError("the daemon's reply is invalid: the cursor lies outside its own map", outcome_unknown=True)
        return BetaComputerCursorPositionResult(x=x, y=y)

    def m_left_mouse_down(self, input: Any, cancelled: Cancel) -> None:
        self.computer._send([{"type": "mouse_down", "button": "left"}], cancelled)  # noqa: SLF001

    def m_left_mouse_up(self, input: Any, cancelled: Cancel) -> None:
        self.computer._send([{"type": "mouse_up", "button": "left"}], cancelled)  # noqa: SLF001

    def m_hold_key(self, input: Any, cancelled: Cancel) -> None:
        if not 0 <= input.duration <= MAX_HOLD_SECONDS:
            raise ToolError(f"hold_key: duration must be 0 to {MAX_HOLD_SECONDS} seconds")
        found = chords(input.text)
        if len(found) != 1:
            raise ToolError("hold_key: one key combination (e.g. 'shift' or 'ctrl+a')")
        action = {"type": "hold_key", "keys": found[0], "duration_ms": input.duration * 1000}
        self.computer._send([action], cancelled)  # noqa: SLF001

    def _batch(self, items: list[tuple[dict[str, Any], str]], cancelled: Cancel) -> None:
        self.computer._batch(items, cancelled)  # noqa: SLF001 - the same package

    def _click(self, input: Any, member: str, button: str, count: int, cancelled: Cancel) -> None:
        keys = _held(input.text)
        x, y = self._point(input.coordinate, cancelled)
        if count == 1:
            self._batch([({"type": "click", "button": button, "x": x, "y": y, "keys": keys}, "click")], cancelled)
            return
        double = ({"type": "double_click", "x": x, "y": y, "keys": keys}, "double_click")
        if count == 2:
            self._batch([double], cancelled)
            return
        # A triple click: the double click and a third click back to back in
        # one batch (no settle between them), well inside any client's
        # multi-click interval.
        third = ({"type": "click", "button": "left", "x": x, "y": y, "keys": keys}, "click")
        self._batch([double, third], cancelled)

    def m_left_click(self, input: Any, cancelled: Cancel) -> None:
        self._click(input, "left_click", "left", 1, cancelled)

    def m_right_click(self, input: Any, cancelled: Cancel) -> None:
        self._click(input, "right_click", "right", 1, cancelled)

    def m_middle_click(self, input: Any, cancelled: Cancel) -> None:
        self._click(input, "middle_click", "wheel", 1, cancelled)

    def m_double_click(self, input: Any, cancelled: Cancel) -> None:
        self._click(input, "double_click", "left", 2, cancelled)

    def m_triple_click(self, input: Any, cancelled: Cancel) -> None:
        self._click(input, "triple_click", "left", 3, cancelled)

    def m_mouse_move(self, input: Any, cancelled: Cancel) -> None:
        x, y = input.coordinate
        self._batch([({"type": "move", "x": x, "y": y}, "move")], cancelled)

    def m_left_click_drag(self, input: Any, cancelled: Cancel) -> None:
        (x0, y0), (x1, y1) = input.start_coordinate, input.coordinate
        path = [{"x": x0, "y": y0}, {"x": x1, "y": y1}]
        self._batch([({"type": "drag", "path": path, "keys": _held(input.text)}, "drag")], cancelled)

    def m_scroll(self, input: Any, cancelled: Cancel) -> None:
        x, y = self._point(input.coordinate, cancelled)
        if input.scroll_amount < 0:
            raise ToolError("scroll: scroll_amount must not be negative")
        limits = self.client.info.get("limits") or {}
        per = limits.get("scroll_pixels_per_click")
        if type(per) is not int or per <= 0:
            raise ToolError("scroll: the desktop did not say how far one wheel click scrolls")
        # The daemon turns a distance into wheel clicks (one per `per`).
        distance = input.scroll_amount * per
        dx, dy = {"up": (0, -distance), "down": (0, distance), "left": (-distance, 0), "right": (distance, 0)}[
            input.scroll_direction
        ]
        action = {"type": "scroll", "x": x, "y": y, "scroll_x": dx, "scroll_y": dy, "keys": _held(input.text)}
        self._batch([(action, "scroll")], cancelled)

    def m_type(self, input: Any, cancelled: Cancel) -> None:
        self._batch([({"type": "type", "text": input.text}, "type")], cancelled)

    def m_key(self, input: Any, cancelled: Cancel) -> None:
        repeat = 1 if input.repeat is None else input.repeat
        presses = chords(input.text)
        if repeat < 1 or repeat * len(presses) > MAX_KEY_PRESSES:
            raise ToolError(f"key: repeat must be at least 1, and at most {MAX_KEY_PRESSES} presses in all")
        items = [({"type": "keypress", "keys": keys}, "keypress") for _ in range(repeat) for keys in presses]
        self._batch(items, cancelled)

    def m_wait(self, input: Any, cancelled: Cancel) -> None:
        if not 0 <= input.duration <= MAX_WAIT_SECONDS:
            raise ToolError(f"wait: duration must be 0 to {MAX_WAIT_SECONDS} seconds")
        end = time.monotonic() + input.duration
        while (left := end - time.monotonic()) > 0:
            if cancelled is not None and cancelled():
                raise ToolError("wait: cancelled")
            time.sleep(min(0.05, left))

    # -- images ----------------------------------------------------------------

    def m_screenshot(self, input: Any, cancelled: Cancel) -> BetaScreenshotResult:
        shot = self.computer.screenshot(cancelled=cancelled)
        data = shot["image_url"].split(",", 1)[1]
        return _image(data, "screenshot")

    def zoom_png(self, region: list[int], cancelled: Cancel) -> tuple[str, dict[str, Any]]:
        """The base64 PNG of ``region`` (``[x0, y0, x1, y1]`` in the last
        screenshot's space, x1/y1 exclusive) at full screen resolution,
        fitted into the zoom size, and its own ScaleMap."""
        m = self.computer.scale_map
        if m is None:
            # Region coordinates refer to a screenshot; take one to know its space.
            self.computer.screenshot(cancelled=cancelled)
            m = self.computer.scale_map
            assert m is not None
        iw, ih = m["image"]["width"], m["image"]["height"]
        x0, y0, x1, y1 = region
        if not (0 <= x0 < x1 <= iw and 0 <= y0 < y1 <= ih):
            raise ToolError(f"zoom: region must satisfy 0 <= x0 < x1 <= {iw} and 0 <= y0 < y1 <= {ih}")
        r = m["region"]

        def lo(v: int, n: int, size: int) -> int:
            return (v * size) // n

        def hi(v: int, n: int, size: int) -> int:
            return -((-v * size) // n)

        sx0, sx1 = lo(x0, iw, r["width"]), hi(x1, iw, r["width"])
        sy0, sy1 = lo(y0, ih, r["height"]), hi(y1, ih, r["height"])
        screen_region = {"x": r["x"] + sx0, "y": r["y"] + sy0, "width": sx1 - sx0, "height": sy1 - sy0}
        within = self.zoom_size or (iw, ih)
        body = {
            "region": screen_region,
            "size": {"width": within[0], "height": within[1]},
            "fit": "contain",
            "format": "png",
        }
        reply = self.client.request("POST", "/v1/screenshot", body, cancelled=cancelled, timeout=self.timeout)
        return check_region_shot(reply.get("screenshot"), screen_region, within)

    def m_zoom(self, input: Any, cancelled: Cancel) -> BetaScreenshotResult:
        data, _map = self.zoom_png(input.region, cancelled)
        return _image(data, "zoom")


def _image(data: str, member: str) -> BetaScreenshotResult:
    if len(data) > MAX_IMAGE_BASE64_BYTES:
        raise ToolError(f"{member}: the image is larger than the API's per-image limit; use a smaller screenshot size")
    return BetaScreenshotResult(data=data, media_type="image/png")


class Computer(BetaAbstractComputerToolset20260801):
    """A Sandtop session's desktop as the SDK's synchronous computer toolset.

    ``Computer(session, confirm=...)`` (or a ``DaemonClient``); ``size=(w, h)``
    scales screenshots to fit that size (coordinates are then in that space,
    mapped back by the daemon with the same ScaleMap); ``zoom_size`` is the
    size a zoom is fitted into (default: the screenshot's). ``configs``,
    ``confirm`` and ``tool_configs`` are the SDK's own options. The toolset
    never stops the session.
    """

    def __init__(
        self,
        session: Union["Session", DaemonClient],
        *,
        confirm: Any = None,
        configs: Any = None,
        tool_configs: Any = None,
        size: Optional[tuple[int, int]] = None,
        zoom_size: Optional[tuple[int, int]] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.desktop = Desktop(session, size=size, zoom_size=zoom_size, timeout=timeout)
        super().__init__(configs=configs, confirm=confirm, tool_configs=tool_configs)

    @property
    def scale_map(self) -> Optional[dict[str, Any]]:
        """The ScaleMap of the last screenshot (coordinates refer to it)."""
        return self.desktop.computer.scale_map

    def key(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("key", input, None)

    def hold_key(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("hold_key", input, None)

    def cursor_position(self, context: BetaToolsetCallContext, input: Any) -> BetaComputerCursorPositionResult:
        return self.desktop.run("cursor_position", input, None)  # type: ignore[no-any-return]

    def left_mouse_down(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("left_mouse_down", input, None)

    def left_mouse_up(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("left_mouse_up", input, None)

    def type(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("type", input, None)

    def mouse_move(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("mouse_move", input, None)

    def left_click(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("left_click", input, None)

    def left_click_drag(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("left_click_drag", input, None)

    def right_click(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("right_click", input, None)

    def middle_click(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("middle_click", input, None)

    def double_click(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("double_click", input, None)

    def triple_click(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("triple_click", input, None)

    def scroll(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("scroll", input, None)

    def wait(self, context: BetaToolsetCallContext, input: Any) -> None:
        self.desktop.run("wait", input, None)

    def screenshot(self, context: BetaToolsetCallContext, input: Any) -> BetaScreenshotResult:
        return self.desktop.run("screenshot", input, None)  # type: ignore[no-any-return]

    def zoom(self, context: BetaToolsetCallContext, input: Any) -> BetaScreenshotResult:
        return self.desktop.run("zoom", input, None)  # type: ignore[no-any-return]


class AsyncComputer(BetaAsyncAbstractComputerToolset20260801):
    """``Computer`` as the SDK's asynchronous computer toolset: each call
    runs in a worker thread; cancelling the awaiting task closes the
    request's connection, so the daemon stops it and releases its input."""

    def __init__(
        self,
        session: Union["Session", DaemonClient],
        *,
        confirm: Any = None,
        configs: Any = None,
        tool_configs: Any = None,
        size: Optional[tuple[int, int]] = None,
        zoom_size: Optional[tuple[int, int]] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.desktop = Desktop(session, size=size, zoom_size=zoom_size, timeout=timeout)
        super().__init__(configs=configs, confirm=confirm, tool_configs=tool_configs)

    @property
    def scale_map(self) -> Optional[dict[str, Any]]:
        return self.desktop.computer.scale_map

    async def _run(self, member: str, input: Any) -> Any:
        stop = threading.Event()
        try:
            return await asyncio.to_thread(self.desktop.run, member, input, stop.is_set)
        except asyncio.CancelledError:
            stop.set()
            raise

    async def key(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("key", input)

    async def hold_key(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("hold_key", input)

    async def cursor_position(self, context: BetaToolsetCallContext, input: Any) -> BetaComputerCursorPositionResult:
        return await self._run("cursor_position", input)  # type: ignore[no-any-return]

    async def left_mouse_down(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("left_mouse_down", input)

    async def left_mouse_up(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("left_mouse_up", input)

    async def type(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("type", input)

    async def mouse_move(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("mouse_move", input)

    async def left_click(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("left_click", input)

    async def left_click_drag(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("left_click_drag", input)

    async def right_click(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("right_click", input)

    async def middle_click(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("middle_click", input)

    async def double_click(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("double_click", input)

    async def triple_click(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("triple_click", input)

    async def scroll(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("scroll", input)

    async def wait(self, context: BetaToolsetCallContext, input: Any) -> None:
        await self._run("wait", input)

    async def screenshot(self, context: BetaToolsetCallContext, input: Any) -> BetaScreenshotResult:
        return await self._run("screenshot", input)  # type: ignore[no-any-return]

    async def zoom(self, context: BetaToolsetCallContext, input: Any) -> BetaScreenshotResult:
        return await self._run("zoom", input)  # type: ignore[no-any-return]
