"""The ``anthropic`` SDK's own ``tool_runner`` driving a real guest through
``sandtop.anthropic.Computer`` and ``.Browser``, against the mock Messages
server (every request validated with the SDK's types, every response built
with its models): the typing corpus arrives byte-exact in an xterm; a call
``confirm`` declines types nothing; a zoom at 1x is the crop of a full
screenshot; the demo form is filled through ``read_page`` refs and checked
on the app's own record; a URL outside the policy is refused before anyone
is asked. Needs Docker and the guest image (SKIP otherwise;
SANDTOP_REQUIRE=docker makes that a failure)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Iterator

import pytest

pytest.importorskip("anthropic")

import anthropic  # noqa: E402

import sandtop  # noqa: E402
import sandtop.anthropic as sa  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from guest import IMAGE, decode_png, demo_form_calls, guest_file, guest_session, kill, running, skip, until  # noqa: E402
from mock_messages import MockMessages, result_image, result_text, tool_results, tool_use  # noqa: E402

# testkit/src/corpus.rs TYPING, byte for byte.
CORPUS = (
    "-rf --no-preserve-root\nHello, World! éüß€中ж✓ 日本語の文字列と한국어 🙂🚀\n"
    "$(touch /tmp/sandtop-pwned-MARK) `touch /tmp/sandtop-pwned-MARK` 'single' \"double\" \\back\\slash\n"
    "\ttab\tseparated\tcolumns\nÀÉÎÕÜ àéîõü ñ ç ø å æ œ ĳ ŀ ł ő ű ș ț ğ ı İ ş\n"
)
DEMO = "http://127.0.0.1:8080"
KEY = "sk-ant-mock-" + os.urandom(8).hex()


class Guest:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.container = session.container_name
        with open(os.path.join(session.folder, "token")) as f:
            self.token = f.read().strip()

    def running(self, proc: str) -> bool:
        return running(self.container, proc)

    def kill(self, proc: str) -> None:
        kill(self.container, proc)


@pytest.fixture(scope="module")
def guest() -> Iterator[Guest]:
    with guest_session("sandtop-claude-") as (host_cli, session):
        yield Guest(session)


class Steps:
    """A scripted model: each step returns the next turn's calls (or the
    final text) from the request, which carries the last results."""

    def __init__(self, family: str, steps: list[Callable[[dict[str, Any]], Any]]) -> None:
        self.family = family
        self.steps = steps
        self.results: list[list[dict[str, Any]]] = []

    def __call__(self, body: dict[str, Any]) -> Any:
        self.results.append(tool_results(body))
        step = self.steps.pop(0)
        out = step(body)
        if isinstance(out, str):
            return out
        return [tool_use(name, args, self.family) for name, args in out]


def run(toolset: Any, steps: Steps) -> list[dict[str, Any]]:
    mock = MockMessages(KEY, steps)
    try:
        client = anthropic.Anthropic(api_key=KEY, base_url=mock.base_url, max_retries=0)
        runner = client.beta.messages.tool_runner(
            model="claude-mock", max_tokens=1024, messages=[{"role": "user", "content": "work in the guest"}],
            tools=[toolset], max_iterations=40,
        )
        final = runner.until_done()
    finally:
        requests = mock.close()
    assert mock.error is None, mock.error
    assert final.content[0].text == "done"  # type: ignore[union-attr]
    for r in requests:
        assert r["authorized"] and r["problems"] == [], (r["problems"], json.dumps(r["body"])[:400])
    return requests


def xterm_with_cat(g: Guest, path: str) -> list[Callable[[dict[str, Any]], Any]]:
    """Steps that open an xterm (Super+T) running ``cat > path``."""

    def open_terminal(body: dict[str, Any]) -> Any:
        return [("key", {"text": "super+t"}), ("wait", {"duration": 2})]

    def start_cat(body: dict[str, Any]) -> Any:
        until("a shell in the xterm", lambda: g.running("bash"))
        time.sleep(0.5)
        return [("mouse_move", {"coordinate": [640, 400]}), ("type", {"text": f"cat > {path}\n"})]

    def cat_runs(body: dict[str, Any]) -> Any:
        until("cat", lambda: g.running("cat"))
        return []

    return [open_terminal, start_cat, cat_runs]


def test_the_corpus_is_typed_byte_exact_and_a_declined_call_types_nothing(guest: Guest) -> None:
    mark = f"claude{os.getpid()}"
    text = CORPUS.replace("MARK", mark)
    out, declined_out = "/tmp/claude-typed.txt", "/tmp/claude-declined.txt"
    asked: list[tuple[str, str]] = []

    def confirm(ctx: Any) -> bool:
        shown = getattr(ctx.input, "text", "")
        asked.append((ctx.member, shown))
        return "SHOULD-NOT-APPEAR" not in shown

    computer = sa.Computer(guest.session, confirm=confirm)
    first = xterm_with_cat(guest, out)
    first[-1] = lambda body, f=first[-1]: (f(body), [("type", {"text": text})])[1]  # type: ignore[misc]
    steps = first + [
        lambda body: [("key", {"text": "ctrl+d"})],
        lambda body: (until("cat to end", lambda: not guest.running("cat")), [("type", {"text": f"cat > {declined_out}\n"})])[1],
        lambda body: (until("the second cat", lambda: guest.running("cat")), [("type", {"text": "SHOULD-NOT-APPEAR\n"})])[1],
        lambda body: [("key", {"text": "ctrl+d"})],
        lambda body: (until("cat to end", lambda: not guest.running("cat")), "done")[1],
    ]
    script = Steps("computer", steps)
    try:
        requests = run(computer, script)
    finally:
        guest.kill("xterm")
    assert guest_file(guest.container, out) == text.encode(), "the corpus did not arrive byte for byte"
    assert guest_file(guest.container, declined_out) == b""
    pwned = subprocess.run(
        ["docker", "exec", guest.container, "sh", "-c", "ls /tmp | grep -c sandtop-pwned || true"],
        capture_output=True, text=True, timeout=30,
    )
    assert pwned.stdout.strip() == "0", "a command in the typed text ran"
    # The declined call was answered with the SDK's refusal, and confirm saw
    # every typing call with its text.
    declined = [b for turn in script.results for b in turn if "did not grant permission" in result_text(b)]
    assert len(declined) == 1 and declined[0]["is_error"] is True
    assert ("type", text) in asked and ("type", "SHOULD-NOT-APPEAR\n") in asked
    assert all(guest.token not in json.dumps(r) for r in requests)


def test_a_zoom_at_1x_is_the_crop_of_a_full_screenshot(guest: Guest) -> None:
    region = [40, 600, 200, 700]  # the desktop's background, away from any window
    computer = sa.Computer(guest.session, confirm=lambda ctx: True, zoom_size=(region[2] - region[0], region[3] - region[1]))
    bigger = sa.Computer(guest.session, confirm=lambda ctx: True, size=(640, 400))
    script = Steps("computer", [lambda body: [("screenshot", {}), ("zoom", {"region": region})], lambda body: "done"])
    run(computer, script)
    shot_b64, zoom_b64 = (result_image(b) for b in script.results[1])
    assert shot_b64 and zoom_b64
    (fw, fh, full) = decode_png(base64.b64decode(shot_b64))
    (zw, zh, zoom) = decode_png(base64.b64decode(zoom_b64))
    assert (fw, fh) == (1280, 800) and (zw, zh) == (160, 100)
    crop = b"".join(full[(y * fw + region[0]) * 3 : (y * fw + region[2]) * 3] for y in range(region[1], region[3]))
    assert zoom == crop, "the zoom is not the crop of the screenshot, pixel for pixel"
    # In a scaled screenshot's space (640x400), the same region is half the
    # coordinates; the zoom is still at full resolution (160x100 screen pixels
    # fitted into 640x400: 4x), and its map names the screen region.
    data, m = bigger.desktop.zoom_png([20, 300, 100, 350], None)
    assert m["region"] == {"x": 40, "y": 600, "width": 160, "height": 100}
    assert m["image"] == {"width": 640, "height": 400}
    assert decode_png(base64.b64decode(data))[:2] == (640, 400)


def test_the_demo_form_is_filled_through_read_page_refs_and_the_policy_refuses_first(guest: Guest) -> None:
    stamp = f"claude-form-{os.getpid()}"
    asked: list[str] = []

    def confirm(ctx: Any) -> bool:
        asked.append(f"{ctx.member}:{getattr(ctx.input, 'url', '')}")
        return True

    browser = sa.Browser(guest.session, origins=[DEMO], confirm=confirm)
    read: dict[str, str] = {}

    def after_read(body: dict[str, Any]) -> Any:
        [nav, page] = tool_results(body)
        assert not nav.get("is_error"), result_text(nav)
        read["text"] = result_text(page)
        t = read["text"]
        return demo_form_calls(t, stamp, "claude@example.test", "über Claude ✓")

    steps = [
        lambda body: [("navigate", {"url": "https://example.com/"})],
        lambda body: [("navigate", {"url": DEMO + "/?from=claude"}), ("read_page", {"filter": "interactive"})],
        after_read,
        lambda body: "done",
    ]
    script = Steps("browser", steps)
    try:
        requests = run(browser, script)
    finally:
        guest.kill("firefox-esr")
    [outside] = script.results[1]
    assert outside["is_error"] is True and "outside" in result_text(outside)
    # Refused before anyone was asked: the first question is the allowed navigate.
    assert asked[0] == f"navigate:{DEMO}/?from=claude" and not any("example.com" in a for a in asked)
    filled = script.results[3]
    assert not any(b.get("is_error") for b in filled), [result_text(b) for b in filled]
    record = until(
        "the app's record", lambda: (lambda r: r if r and stamp.encode() in r else None)(guest_file(guest.container, "/home/user/demo/submissions.jsonl"))
    )
    rows = [json.loads(x) for x in record.decode().splitlines() if stamp in x]
    assert len(rows) == 1, record
    assert (rows[0]["name"], rows[0]["email"], rows[0]["message"]) == (stamp, "claude@example.test", "über Claude ✓")
    assert all(guest.token not in json.dumps(r) for r in requests)


def test_the_claude_examples_run_as_a_user_runs_them(guest: Guest) -> None:
    """ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL in the environment (the
    mock's); without a terminal nobody approves typing, so the example's
    `type` is refused and its move and screenshot run."""
    examples = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
    script = Steps("computer", [
        lambda body: [("mouse_move", {"coordinate": [10, 10]}), ("screenshot", {})],
        lambda body: [("type", {"text": "nobody approved this"})],
        lambda body: "done",
    ])
    mock = MockMessages(KEY, script)
    try:
        p = subprocess.run(
            [sys.executable, os.path.join(examples, "claude_computer.py"), guest.session.name, "the task"],
            env={**os.environ, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": mock.base_url},
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180, start_new_session=True,
        )
    finally:
        requests = mock.close()
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines() == ["member: mouse_move", "member: screenshot", "member: type", "done"]
    assert mock.error is None and all(r["problems"] == [] for r in requests)
    [refused] = script.results[2]
    assert refused["is_error"] is True and "did not grant permission" in result_text(refused)


def test_cursor_position_and_a_held_button_through_the_runner(guest: Guest) -> None:
    """cursor_position answers where mouse_move put the pointer, in the
    screenshot's space (here scaled to 640x400); left_mouse_down /
    left_mouse_up hold and release the button across calls; a click without
    a coordinate lands where the pointer is."""
    try:
        guest.session.client.request("POST", "/v1/cursor", {})
    except sandtop.DaemonError as e:
        if e.code in ("not_found", "method_not_allowed"):
            skip("docker", f"the guest image {IMAGE} has a daemon without /v1/cursor; rebuild it (make guest-image)")
        raise
    computer = sa.Computer(guest.session, confirm=lambda ctx: True, size=(640, 400))
    script = Steps("computer", [
        lambda body: [("screenshot", {}), ("mouse_move", {"coordinate": [321, 123]}), ("cursor_position", {})],
        lambda body: [("left_mouse_down", {}), ("mouse_move", {"coordinate": [300, 150]}), ("left_mouse_up", {}),
                      ("cursor_position", {}), ("left_click", {})],
        lambda body: "done",
    ])
    run(computer, script)
    first, second = script.results[1], script.results[2]
    assert [result_text(b) for b in first[1:]] == ["Moved the mouse.", "X=321,Y=123"]
    assert [result_text(b) for b in second] == [
        "Left mouse button pressed.", "Moved the mouse.", "Left mouse button released.", "X=300,Y=150", "Clicked.",
    ]
    # In screen pixels (the screenshot is scaled by a half): the centre of
    # model pixel (300, 150), ScaleMap::to_screen's (2x + 1) * 1280 / 1280.
    held = guest.session.client.request("POST", "/v1/cursor", {})
    assert (held["x"], held["y"]) == (601, 301)
