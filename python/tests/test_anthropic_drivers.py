"""``sandtop.anthropic`` against a fake daemon, run by the ``anthropic``
SDK's own ``tool_runner`` against the mock Messages server (every request
validated with the SDK's types, every response built with its models)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import sys
import tempfile
from typing import Any, Iterator

import pytest

pytest.importorskip("anthropic")

import anthropic  # noqa: E402

import sandtop  # noqa: E402
import sandtop.anthropic as sa  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from fakes import INFO, TOKEN, FakeDaemon, Reply, make_session, png, screenshot  # noqa: E402
from mock_messages import MockMessages, result_image, result_text, tool_results, tool_use  # noqa: E402

KEY = "sk-ant-mock-" + "0" * 16


@pytest.fixture
def daemon() -> Iterator[FakeDaemon]:
    d = tempfile.mkdtemp(prefix="st", dir="/tmp")
    old = os.environ.get("SANDTOP_STATE_DIR")
    os.environ["SANDTOP_STATE_DIR"] = d
    fake = FakeDaemon(make_session(d, screen=(64, 32)), screen=(64, 32))
    base = fake.default

    def handler(method: str, path: str, body: Any) -> Reply:
        if path == "/v1/info":
            return Reply(200, {**INFO, "limits": {"scroll_pixels_per_click": 50}})
        if path == "/v1/screenshot":
            r, size = body["region"], body["size"]
            # contain: the region scaled to touch the asked size
            k = min(size["width"] / r["width"], size["height"] / r["height"])
            image = (max(1, int(r["width"] * k)), max(1, int(r["height"] * k)))
            shot = screenshot(fake.screen, image)
            shot["scale_map"]["region"] = r
            return Reply(200, {"screenshot": shot, "timings": {}})
        if path == "/v1/cursor":
            size = body.get("size") or {"width": fake.screen[0], "height": fake.screen[1]}
            m = screenshot(fake.screen, (size["width"], size["height"]))["scale_map"]
            return Reply(200, {"x": 7, "y": 8, "scale_map": m})
        return base(method, path, body)

    fake.handler = handler
    yield fake
    fake.close()
    if old is None:
        os.environ.pop("SANDTOP_STATE_DIR", None)
    else:
        os.environ["SANDTOP_STATE_DIR"] = old
    shutil.rmtree(d, ignore_errors=True)


class Scripted:
    """A scripted model: one list of calls per turn, then the final text."""

    def __init__(self, turns: list[list[dict[str, Any]]], toolset: str) -> None:
        self.turns = [[tool_use(n, i, toolset) for n, i in t] for t in turns]  # type: ignore[misc]
        self.seen: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> Any:
        self.seen.append(body)
        if self.turns:
            return self.turns.pop(0)
        return "done"


def run(toolset: Any, turns: list[list[tuple[str, dict[str, Any]]]], family: str) -> tuple[list[dict[str, Any]], Scripted]:
    script = Scripted(turns, family)  # type: ignore[arg-type]
    mock = MockMessages(KEY, script)
    try:
        client = anthropic.Anthropic(api_key=KEY, base_url=mock.base_url, max_retries=0)
        runner = client.beta.messages.tool_runner(
            model="claude-mock", max_tokens=1024, messages=[{"role": "user", "content": "go"}], tools=[toolset]
        )
        final = runner.until_done()
        assert final.content[0].text == "done"  # type: ignore[union-attr]
    finally:
        requests = mock.close()
    assert mock.error is None, mock.error
    for r in requests:
        assert r["authorized"] and r["problems"] == [], (r["problems"], r["body"])
        assert TOKEN not in json.dumps(r)
    return requests, script


def results(requests: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    return tool_results(requests[n]["body"])


def test_the_tools_entry_disables_exactly_the_members_the_daemon_cannot_honour(daemon: FakeDaemon) -> None:
    s = sandtop.Session.attach("t1")
    c = sa.Computer(s, confirm=lambda ctx: True)
    # all 17 computer members are served
    assert c.to_dict() == {"type": "computer_toolset_20260801"}
    b = sa.Browser(s)
    assert b.to_dict() == {
        "type": "browser_toolset_20260801",
        "configs": {m: {"enabled": False} for m in ("file_upload", "left_mouse_down", "left_mouse_up")},
    }
    # type and key need a confirm (the SDK's rule)
    with pytest.raises(anthropic.AnthropicError):
        sa.Computer(s)
    assert "ab" * 32 not in repr(c.desktop.client)


def test_computer_members_become_daemon_batches_through_the_sdks_runner(daemon: FakeDaemon) -> None:
    s = sandtop.Session.attach("t1")
    asked: list[str] = []

    def confirm(ctx: Any) -> bool:
        asked.append(ctx.member)
        return ctx.member != "type" or ctx.input.text != "NO"

    c = sa.Computer(s, confirm=confirm, size=(32, 16))
    turns = [
        [("screenshot", {})],
        [
            ("left_click", {"coordinate": [3, 4], "text": "ctrl"}),
            ("triple_click", {"coordinate": [5, 6]}),
            ("key", {"text": "ctrl+s Tab", "repeat": 2}),
            ("type", {"text": "héllo\n"}),
            ("scroll", {"coordinate": [1, 1], "scroll_direction": "up", "scroll_amount": 3}),
            ("left_click_drag", {"start_coordinate": [0, 0], "coordinate": [10, 10]}),
            ("zoom", {"region": [8, 4, 16, 12]}),
            ("wait", {"duration": 0}),
        ],
        # The SDK's runner answers a turn's later computer calls "Not
        # executed" once one failed: each refusal gets a turn of its own.
        [
            ("cursor_position", {}),
            ("left_click", {}),
            ("left_mouse_down", {}),
            ("mouse_move", {"coordinate": [9, 9]}),
            ("left_mouse_up", {}),
            ("hold_key", {"text": "shift", "duration": 1}),
        ],
        [("type", {"text": "NO"})],
        [("hold_key", {"text": "a", "duration": 11})],
    ]
    requests, _ = run(c, turns, "computer")
    assert requests[0]["body"]["tools"] == [c.to_dict()]
    work = daemon.work()
    shot = work[0]
    assert shot["path"] == "/v1/actions" and shot["body"]["actions"] == [] and shot["body"]["screenshot"]["size"] == {"width": 32, "height": 16}
    assert base64.b64decode(result_image(results(requests, 1)[0]) or "") == png(32, 16)
    batches = [w["body"] for w in work[1:] if w["path"] == "/v1/actions"]
    expect = {"screen": {"width": 64, "height": 32}, "region": {"x": 0, "y": 0, "width": 64, "height": 32}, "image": {"width": 32, "height": 16}}
    assert all(b["expect_scale_map"] == expect and b["final_screenshot"] is False for b in batches)
    assert [b["actions"] for b in batches] == [
        [{"type": "click", "button": "left", "x": 3, "y": 4, "keys": ["ctrl"]}],
        [{"type": "double_click", "x": 5, "y": 6}, {"type": "click", "button": "left", "x": 5, "y": 6}],
        [{"type": "keypress", "keys": k} for k in (["ctrl", "s"], ["Tab"], ["ctrl", "s"], ["Tab"])],
        [{"type": "type", "text": "héllo\n"}],
        [{"type": "scroll", "x": 1, "y": 1, "scroll_x": 0, "scroll_y": -150}],
        [{"type": "drag", "path": [{"x": 0, "y": 0}, {"x": 10, "y": 10}]}],
        # a click without a coordinate: where the cursor is (7, 8)
        [{"type": "click", "button": "left", "x": 7, "y": 8}],
        [{"type": "mouse_down", "button": "left"}],
        [{"type": "move", "x": 9, "y": 9}],
        [{"type": "mouse_up", "button": "left"}],
        [{"type": "hold_key", "keys": ["shift"], "duration_ms": 1000}],
    ]
    cursor = [w["body"] for w in work if w["path"] == "/v1/cursor"]
    assert cursor == [{"format": "png", "size": {"width": 32, "height": 16}}] * 2
    # the zoom: the region mapped to screen pixels (x2), fitted into the screenshot's size
    zoom = [w["body"] for w in work if w["path"] == "/v1/screenshot"]
    assert zoom == [{"region": {"x": 16, "y": 8, "width": 16, "height": 16}, "size": {"width": 32, "height": 16}, "fit": "contain", "format": "png"}]
    out = results(requests, 2)
    texts = [result_text(b) for b in out]
    assert not any(b.get("is_error", False) for b in out), texts
    assert texts[:3] == ["Clicked.", "Triple-clicked.", "Pressed ctrl+s Tab."] and texts[4] == "Scrolled up."
    assert result_image(out[6]) is not None
    pointer = results(requests, 3)
    assert [result_text(b) for b in pointer] == [
        "X=7,Y=8", "Clicked.", "Left mouse button pressed.", "Moved the mouse.", "Left mouse button released.",
        "Held shift for 1s.",
    ], pointer
    [declined], [too_long] = results(requests, 4), results(requests, 5)
    assert declined["is_error"] and "did not grant permission" in result_text(declined)
    assert too_long["is_error"] and "0 to 10 seconds" in result_text(too_long)
    # confirm saw every call the SDK ran
    assert asked == [
        "screenshot", "left_click", "triple_click", "key", "type", "scroll", "left_click_drag", "zoom", "wait",
        "cursor_position", "left_click", "left_mouse_down", "mouse_move", "left_mouse_up", "hold_key", "type", "hold_key",
    ]


def test_a_daemon_refusal_reaches_the_model_in_our_words_only(daemon: FakeDaemon) -> None:
    secret = "guest-says-" + "x" * 10

    def refuse(method: str, path: str, body: Any) -> Reply:
        if path == "/v1/info":
            return Reply(200, INFO)
        return Reply(400, {"code": "unknown_key", "message": secret + "ab" * 32, "index": 0, "executed": 0})

    daemon.handler = refuse
    c = sa.Computer(sandtop.Session.attach("t1"), confirm=lambda ctx: True)
    requests, _ = run(c, [[("key", {"text": "hyperdrive"})]], "computer")
    [out] = results(requests, 1)
    assert out["is_error"] is True
    text = result_text(out)
    assert "unknown_key" in text and secret not in text and "ab" * 32 not in text


def test_browser_members_map_onto_the_daemons_and_the_policy_refuses_before_confirm(daemon: FakeDaemon) -> None:
    asked: list[str] = []

    def confirm(ctx: Any) -> bool:
        asked.append(ctx.member)
        return True

    b = sa.Browser(sandtop.Session.attach("t1"), origins=["http://demo.test:8080"], confirm=confirm)
    turns = [
        [("navigate", {"url": "https://example.com/"})],
        [("navigate", {"url": "http://demo.test:8080/?x=1"}), ("read_page", {"filter": "interactive"})],
        [
            ("form_input", {"target": {"type": "ref", "ref": "e1"}, "value": "Zoë"}),
            ("form_input", {"target": {"type": "ref", "ref": "e1"}, "value": True}),
            ("left_click", {"target": {"type": "ref", "ref": "e1"}}),
            ("double_click", {"target": {"type": "coordinate", "x": 4, "y": 5}, "modifiers": "shift"}),
            ("scroll", {"target": {"type": "coordinate", "x": 1, "y": 1}, "scroll_direction": "down"}),
            ("list_tabs", {}),
        ],
    ]
    requests, _ = run(b, turns, "browser")
    calls = [w["body"] for w in daemon.work() if w["path"] == "/v1/browser/call"]
    assert all(c.pop("url_policy") == ["http://demo.test:8080"] for c in calls)
    assert calls == [
        {"member": "navigate", "tab_id": None, "url": "http://demo.test:8080/?x=1"},
        {"member": "read_page", "tab_id": None, "filter": "interactive"},
        {"member": "type", "tab_id": None, "text": "Zoë", "target": "e1"},
        {"member": "set_checked", "tab_id": None, "target": "e1", "checked": True},
        {"member": "click", "tab_id": None, "target": "e1"},
        {"member": "click_at", "tab_id": None, "x": 4, "y": 5, "button": "left", "click_count": 2, "keys": ["Shift"]},
        {"member": "scroll", "tab_id": None, "direction": "down", "amount": 300},
    ]
    # the URL outside the policy: refused, nothing sent, nobody asked
    [refused] = results(requests, 1)
    assert refused["is_error"] is True and "outside" in result_text(refused)
    assert asked[0] == "navigate" and asked.count("navigate") == 1
    read = results(requests, 2)[1]
    assert '[e1] button "Send"' in result_text(read)
    # every result carries the browser_state the SDK built from our tabs
    body = json.dumps(requests[-1]["body"])
    assert "browser_state" in body and "demo.test" in body


def test_the_async_toolsets_run_through_the_async_runner(daemon: FakeDaemon) -> None:
    s = sandtop.Session.attach("t1")
    c = sa.AsyncComputer(s, confirm=lambda ctx: True)
    script = Scripted([[("screenshot", {}), ("left_click", {"coordinate": [1, 2]})]], "computer")  # type: ignore[list-item]
    mock = MockMessages(KEY, script)

    async def go() -> Any:
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=mock.base_url, max_retries=0)
        runner = client.beta.messages.tool_runner(
            model="claude-mock", max_tokens=1024, messages=[{"role": "user", "content": "go"}], tools=[c]
        )
        return await runner.until_done()

    try:
        final = asyncio.run(go())
    finally:
        requests = mock.close()
    assert final.content[0].text == "done"
    assert all(r["problems"] == [] for r in requests)
    batches = [w["body"]["actions"] for w in daemon.work() if w["path"] == "/v1/actions"]
    assert batches == [[], [{"type": "click", "button": "left", "x": 1, "y": 2}]]


def test_key_chords_parse_as_the_toolset_writes_them() -> None:
    assert sa.chords("ctrl+s") == [["ctrl", "s"]]
    assert sa.chords("ctrl+shift+Escape") == [["ctrl", "shift", "Escape"]]
    assert sa.chords("Backspace Backspace Delete") == [["Backspace"], ["Backspace"], ["Delete"]]
    assert sa.chords("ctrl++") == [["ctrl", "+"]]
    assert sa.chords("+") == [["+"]]
    with pytest.raises(anthropic.tools.ToolError):
        sa.chords("ctrl+")
    with pytest.raises(anthropic.tools.ToolError):
        sa.chords("   ")


def test_the_origin_policy_allows_exactly_its_origins() -> None:
    p = sa.origin_policy(["http://127.0.0.1:8080"])
    ctx = anthropic.tools.browser.BetaURLContext()
    p(ctx, "http://127.0.0.1:8080/form?x=1")
    p(ctx, "about:blank")
    for bad_url in ("https://127.0.0.1:8080/", "http://127.0.0.1:8081/", "127.0.0.1:8080", "http://127.0.0.1:8080@evil.test/", "javascript:alert(1)"):
        with pytest.raises(anthropic.tools.ToolError):
            p(ctx, bad_url)
    with pytest.raises(ValueError):
        sa.origin_policy(["http://127.0.0.1:8080/path"])


def test_the_async_browser_runs_through_the_async_runner(daemon: FakeDaemon) -> None:
    b = sa.AsyncBrowser(sandtop.Session.attach("t1"), confirm=lambda ctx: True)
    script = Scripted([[("read_page", {}), ("left_click", {"target": {"type": "ref", "ref": "e1"}}), ("list_tabs", {})]], "browser")  # type: ignore[list-item]
    mock = MockMessages(KEY, script)

    async def go() -> Any:
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=mock.base_url, max_retries=0)
        runner = client.beta.messages.tool_runner(
            model="claude-mock", max_tokens=1024, messages=[{"role": "user", "content": "go"}], tools=[b]
        )
        return await runner.until_done()

    try:
        final = asyncio.run(go())
    finally:
        requests = mock.close()
    assert final.content[0].text == "done"
    assert all(r["problems"] == [] for r in requests)
    calls = [w["body"] for w in daemon.work() if w["path"] == "/v1/browser/call"]
    assert calls == [
        {"member": "read_page", "tab_id": None, "filter": "all"},
        {"member": "click", "tab_id": None, "target": "e1"},
    ]
    out = tool_results(requests[1]["body"])
    assert '[e1] button "Send"' in result_text(out[0]) and result_text(out[1]).startswith("Clicked.")
    assert not any(o.get("is_error") for o in out)


def test_a_browser_state_that_cannot_be_read_stops_the_run(daemon: FakeDaemon) -> None:
    base = daemon.handler

    def no_state(method: str, path: str, body: Any) -> Reply:
        if path == "/v1/browser/state":
            return Reply(200, {"tabs": "not a list"})
        return base(method, path, body)

    daemon.handler = no_state
    b = sa.Browser(sandtop.Session.attach("t1"), confirm=lambda ctx: True)
    # `wait` makes no daemon call, so the report must read the state.
    script = Scripted([[("wait", {"duration": 0})]], "browser")  # type: ignore[list-item]
    mock = MockMessages(KEY, script)
    try:
        client = anthropic.Anthropic(api_key=KEY, base_url=mock.base_url, max_retries=0)
        runner = client.beta.messages.tool_runner(
            model="claude-mock", max_tokens=1024, messages=[{"role": "user", "content": "go"}], tools=[b]
        )
        with pytest.raises(anthropic.AnthropicError) as e:
            runner.until_done()
    finally:
        mock.close()
    assert "ab" * 32 not in str(e.value)
