"""``Computer`` / ``AsyncComputer``: the OpenAI SDK's ``ComputerDriver`` /
``AsyncComputerDriver`` (``openai.lib.computer``) over a Sandtop daemon.

Every action method is one ``POST /v1/actions`` carrying that one action
(``final_screenshot: false``), in the coordinate space of the last
screenshot (``expect_scale_map``: if the screen changed size since, nothing
runs and ``stale_scale_map`` is raised). ``screenshot()`` is one empty batch,
so it is taken after the screen settled, and returns a
``computer_screenshot`` with a PNG data URL at the session's size (or the
``size`` given, fitted). Every failure raises; an action field the
Responses schema does not define is refused by name, never dropped.
Methods take the SDK's ``cancelled`` callback: it is checked before
anything is sent and polled while the daemon works; a cancelled request's
connection is closed, which makes the daemon stop and release its input.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from ._channel import ChannelError, DaemonClient
from ._image import check_screenshot

if TYPE_CHECKING:
    from .session import Session

__all__ = ["Computer", "AsyncComputer", "action_body"]

Cancel = Optional[Callable[[], bool]]

# The fields of each action in the Responses API's ComputerAction (and the
# daemon's Action): anything else is refused by name.
_FIELDS: dict[str, frozenset[str]] = {
    "click": frozenset({"type", "button", "x", "y", "keys"}),
    "double_click": frozenset({"type", "x", "y", "keys"}),
    "drag": frozenset({"type", "path", "keys"}),
    "keypress": frozenset({"type", "keys"}),
    "move": frozenset({"type", "x", "y", "keys"}),
    "scroll": frozenset({"type", "x", "y", "scroll_x", "scroll_y", "keys"}),
    "type": frozenset({"type", "text"}),
    "wait": frozenset({"type"}),
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "click": ("button", "x", "y"),
    "double_click": ("x", "y"),
    "drag": ("path",),
    "keypress": ("keys",),
    "move": ("x", "y"),
    "scroll": ("x", "y", "scroll_x", "scroll_y"),
    "type": ("text",),
    "wait": (),
}
_BUTTONS = ("left", "right", "wheel", "back", "forward")


def _plain(action: object) -> dict[str, Any]:
    if isinstance(action, Mapping):
        return dict(action)
    to_dict = getattr(action, "to_dict", None)
    if callable(to_dict):  # an SDK model: only the fields that were set
        value = to_dict(mode="python")
    else:
        dump = getattr(action, "model_dump", None)
        if not callable(dump):
            raise TypeError("a computer action must be a mapping or an SDK action model")
        value = dump(exclude_unset=True)
    if not isinstance(value, dict):
        raise TypeError("a computer action must be a mapping or an SDK action model")
    return value


def _int(v: object) -> bool:
    return type(v) is int


def action_body(action: object, kind: str) -> dict[str, Any]:
    """The daemon's Action for an SDK action of type ``kind``, checked."""
    d = _plain(action)
    if d.get("type") != kind:
        raise ValueError(f"expected a {kind} action, got type {str(d.get('type'))[:32]!r}")
    for name in d:
        if name not in _FIELDS[kind]:
            raise ValueError(f"unknown field {str(name)[:64]!r} in a {kind} action")
    for name in _REQUIRED[kind]:
        if name not in d or d[name] is None:
            raise ValueError(f"the {kind} action has no {name}")
    out: dict[str, Any] = {"type": kind}
    for name in ("x", "y", "scroll_x", "scroll_y"):
        if name in d:
            if not _int(d[name]):
                raise ValueError(f"{name} of a {kind} action must be an integer")
            out[name] = d[name]
    if kind == "click":
        if d["button"] not in _BUTTONS:
            raise ValueError(f"button of a click must be one of {', '.join(_BUTTONS)}")
        out["button"] = d["button"]
    if kind == "drag":
        path = d["path"]
        if not isinstance(path, list):
            raise ValueError("path of a drag must be a list of points")
        points = []
        for i, p in enumerate(path):
            p = _plain(p)
            extra = set(p) - {"x", "y"}
            if extra:
                raise ValueError(f"unknown field {str(sorted(extra)[0])[:64]!r} in point {i} of a drag")
            if not (_int(p.get("x")) and _int(p.get("y"))):
                raise ValueError(f"point {i} of a drag needs integer x and y")
            points.append({"x": p["x"], "y": p["y"]})
        out["path"] = points
    if kind == "type":
        if not isinstance(d["text"], str):
            raise ValueError("text of a type action must be a string")
        out["text"] = d["text"]
    if "keys" in d and d["keys"] is not None:
        keys = d["keys"]
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"keys of a {kind} action must be a list of strings")
        out["keys"] = list(keys)
    return out


class Computer:
    """A Sandtop session's desktop as the SDK's ``ComputerDriver``.

    ``Computer(session)`` (or a ``DaemonClient``); ``size=(w, h)`` scales
    screenshots to fit that size (coordinates are then in that space; the
    daemon maps them back with the same ScaleMap). The driver never stops
    the session.
    """

    def __init__(
        self,
        session: Union["Session", DaemonClient],
        *,
        size: Optional[tuple[int, int]] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self._client = session if isinstance(session, DaemonClient) else session.client
        if size is not None:
            w, h = size
            if not all(_int(v) and 1 <= v <= 8192 for v in (w, h)):
                raise ValueError("size must be two integers within 1..8192")
            size = (w, h)
        self.size = size
        self.timeout = timeout
        self._lock = threading.Lock()
        self._scale_map: Optional[dict[str, Any]] = None

    @property
    def scale_map(self) -> Optional[dict[str, Any]]:
        """The ScaleMap of the last screenshot (coordinates refer to it)."""
        return self._scale_map

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"format": "png"}
        if self.size is not None:
            opts["size"] = {"width": self.size[0], "height": self.size[1]}
        return opts

    def _act(self, action: object, kind: str, cancelled: Cancel) -> None:
        self._batch([(action, kind)], cancelled)

    def _batch(self, items: list[tuple[object, str]], cancelled: Cancel) -> None:
        """Runs ``(action, kind)`` pairs as one batch, in order, without a
        final screenshot (each checked by ``action_body`` first)."""
        self._send([action_body(action, kind) for action, kind in items], cancelled)

    def _send(self, actions: list[dict[str, Any]], cancelled: Cancel) -> None:
        """Sends daemon actions already built and checked by the caller."""
        body: dict[str, Any] = {
            "actions": actions,
            "screenshot": self._options(),
            "final_screenshot": False,
        }
        with self._lock:
            if self._scale_map is not None:
                body["expect_scale_map"] = self._scale_map
        # Not held during the request: a concurrent call reaches the daemon,
        # which answers `busy` at once (one owner per desktop).
        reply = self._client.request("POST", "/v1/actions", body, cancelled=cancelled, timeout=self.timeout)
        if reply.get("executed") != len(actions):
            raise ChannelError(
                f"the daemon's reply is invalid: {len(actions)} action(s) sent, the reply says otherwise", outcome_unknown=True
            )
        if reply.get("screenshot") is not None:
            raise ChannelError("the daemon's reply is invalid: a screenshot came back though none was asked for", outcome_unknown=True)

    def click(self, action: Any, *, cancelled: Cancel = None) -> None:
        self._act(action, "click", cancelled)

    def double_click(self, action: Any, *, cancelled: Cancel = None) -> None:
        self._act(action, "double_click", cancelled)

    def drag(self, action: Any, *, cancelled: Cancel = None) -> None:
        self._act(action, "drag", cancelled)

    def keypress(self, action: Any, *, cancelled: Cancel = None) -> None:
        self._act(action, "keypress", cancelled)

    def move(self, action: Any, *, cancelled: Cancel = None) -> None:
        self._act(action, "move", cancelled)

    def scroll(self, action: Any, *, cancelled: Cancel = None) -> None:
        self._act(action, "scroll", cancelled)

    def type(self, action: Any, *, cancelled: Cancel = None) -> None:
        self._act(action, "type", cancelled)

    def wait(self, action: Any, *, cancelled: Cancel = None) -> None:
        self._act(action, "wait", cancelled)

    def screenshot(self, *, cancelled: Cancel = None) -> dict[str, str]:
        """The settled screen as ``{"type": "computer_screenshot", "image_url": data URL}``."""
        body = {"actions": [], "screenshot": self._options()}
        reply = self._client.request("POST", "/v1/actions", body, cancelled=cancelled, timeout=self.timeout)
        if reply.get("executed") != 0:
            raise ChannelError("the daemon's reply is invalid: no action sent, the reply says some ran", outcome_unknown=True)
        data, scale_map = check_screenshot(reply.get("screenshot"), self.size)
        with self._lock:
            self._scale_map = scale_map
        return {"type": "computer_screenshot", "image_url": "data:image/png;base64," + data}


class AsyncComputer:
    """``Computer`` as the SDK's ``AsyncComputerDriver``: each call runs in a
    worker thread; cancelling the awaiting task (or the SDK's ``cancelled``)
    closes the request's connection, so the daemon stops it."""

    def __init__(
        self,
        session: Union["Session", DaemonClient],
        *,
        size: Optional[tuple[int, int]] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.sync = Computer(session, size=size, timeout=timeout)

    async def _run(self, method: Callable[..., Any], *args: Any, cancelled: Cancel) -> Any:
        stop = threading.Event()

        def is_cancelled() -> bool:
            return stop.is_set() or (cancelled is not None and bool(cancelled()))

        try:
            return await asyncio.to_thread(method, *args, cancelled=is_cancelled)
        except asyncio.CancelledError:
            stop.set()
            raise

    async def click(self, action: Any, *, cancelled: Cancel = None) -> None:
        await self._run(self.sync.click, action, cancelled=cancelled)

    async def double_click(self, action: Any, *, cancelled: Cancel = None) -> None:
        await self._run(self.sync.double_click, action, cancelled=cancelled)

    async def drag(self, action: Any, *, cancelled: Cancel = None) -> None:
        await self._run(self.sync.drag, action, cancelled=cancelled)

    async def keypress(self, action: Any, *, cancelled: Cancel = None) -> None:
        await self._run(self.sync.keypress, action, cancelled=cancelled)

    async def move(self, action: Any, *, cancelled: Cancel = None) -> None:
        await self._run(self.sync.move, action, cancelled=cancelled)

    async def scroll(self, action: Any, *, cancelled: Cancel = None) -> None:
        await self._run(self.sync.scroll, action, cancelled=cancelled)

    async def type(self, action: Any, *, cancelled: Cancel = None) -> None:
        await self._run(self.sync.type, action, cancelled=cancelled)

    async def wait(self, action: Any, *, cancelled: Cancel = None) -> None:
        await self._run(self.sync.wait, action, cancelled=cancelled)

    async def screenshot(self, *, cancelled: Cancel = None) -> dict[str, str]:
        result: dict[str, str] = await self._run(self.sync.screenshot, cancelled=cancelled)
        return result
