"""``host-cli run --provider anthropic`` (docs/contract.md rule 69): the loop
driving a real guest through the Messages API's computer toolset, against
the mock Messages server (``mock_messages.py``: every request host-cli
sends validated with the SDK's own request type, every reply built and
validated with its ``BetaMessage``). Checked on the guest, never on the
model's words: the typing corpus arrives byte-exact in an xterm; a
click on the xterm's close button where a half-size screenshot shows it
closes it (in a screenshot scaled to half size, so the coordinates go through
the ScaleMap); a pointer member without a coordinate is refused before
anything of its response runs; the step budget holds; the key is never in
host-cli's output or the run folder. Needs Docker and the guest image
(SKIP otherwise; SANDTOP_REQUIRE=docker makes that a failure)."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterator, Optional

import pytest

pytest.importorskip("anthropic")

sys.path.insert(0, os.path.dirname(__file__))
from guest import decode_png, demo_form_calls, guest_file, guest_session, kill, running, until  # noqa: E402
from mock_messages import MockMessages, result_image, result_text, tool_results, tool_use  # noqa: E402

# testkit/src/corpus.rs TYPING, byte for byte (as test_anthropic_guest.py).
CORPUS = (
    "-rf --no-preserve-root\nHello, World! éüß€中ж✓ 日本語の文字列と한국어 🙂🚀\n"
    "$(touch /tmp/sandtop-pwned-MARK) `touch /tmp/sandtop-pwned-MARK` 'single' \"double\" \\back\\slash\n"
    "\ttab\tseparated\tcolumns\nÀÉÎÕÜ àéîõü ñ ç ø å æ œ ĳ ŀ ł ő ű ș ț ğ ı İ ş\n"
)
KEY = "sk-ant-mock-" + os.urandom(8).hex()


class Guest:
    def __init__(self, host_cli: str, session: Any) -> None:
        self.host_cli = host_cli
        self.session = session
        self.container = session.container_name

    def running(self, proc: str) -> bool:
        return running(self.container, proc)

    def kill(self, proc: str) -> None:
        kill(self.container, proc)


@pytest.fixture(scope="module")
def guest() -> Iterator[Guest]:
    with guest_session("sandtop-claude-loop-") as (host_cli, session):
        yield Guest(host_cli, session)


Step = Callable[[dict[str, Any]], Any]


class Steps:
    """A scripted Claude: each step returns the next turn's member calls
    (``[(name, input)]``) or the final text, from the request (which
    carries the last results)."""

    def __init__(self, steps: list[Step], family: str = "computer") -> None:
        self.steps = steps
        self.family = family
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> Any:
        self.bodies.append(body)
        if not self.steps:
            raise AssertionError("the script has no more steps")
        out = self.steps.pop(0)(body)
        if isinstance(out, str):
            return out
        return [tool_use(name, args, self.family) for name, args in out]


class Run:
    def __init__(self, requests: list[dict[str, Any]], proc: subprocess.CompletedProcess[str], folder: str) -> None:
        self.requests = requests
        self.proc = proc
        self.folder = folder

    def trajectory(self) -> list[dict[str, Any]]:
        with open(os.path.join(self.folder, "trajectory.jsonl")) as f:
            return [json.loads(line) for line in f if line.strip()]


def run(g: Guest, steps: Steps, *extra: str, task: str = "work in the guest", resume: Optional[str] = None) -> Run:
    """host-cli run against the mock; ``resume``: continue that run folder
    instead of starting one (no task)."""
    mock = MockMessages(KEY, steps)
    work = tempfile.mkdtemp(prefix="claude-loop-")
    folder = resume or os.path.join(work, "run")
    start = ["--resume", folder] if resume else ["--record", folder, task]
    # host-cli takes the model key from the environment only; this is the
    # mock's throwaway key, not a credential.
    env = {**os.environ, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": mock.base_url}
    env.pop("OPENAI_API_KEY", None)
    try:
        proc = subprocess.run(
            [g.host_cli, "run", "--provider", "anthropic", "--session", g.session.name, "--no-ask-user",
             "--model", "claude-mock", *extra, *start],
            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
        )
    finally:
        requests = mock.close()
    assert mock.error is None, (mock.error, proc.stderr[-2000:])
    for r in requests:
        assert r["path"] == "/v1/messages", r["path"]
        assert r["authorized"], "the key did not reach the API as the SDK sends it"
        assert r["problems"] == [], (r["problems"], json.dumps(r["body"])[:600])
    # The key never leaves the environment: not in host-cli's output, not in the record.
    assert KEY not in proc.stdout and KEY not in proc.stderr
    for root, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                assert KEY.encode() not in f.read(), name
    return Run(requests, proc, folder)


def check_pairing(requests: list[dict[str, Any]]) -> None:
    """Every tool_use of a reply is answered, in order, by the next request's
    tool_result blocks; a computer member's result carries the screenshot."""
    for before, after in zip(requests, requests[1:]):
        asked = [b for m in after["body"]["messages"] if m["role"] == "assistant" for b in m["content"]]
        # the last assistant message of `after` is the reply to `before`
        last_assistant = [m for m in after["body"]["messages"] if m["role"] == "assistant"][-1]
        uses = [b for b in last_assistant["content"] if b["type"] == "tool_use"]
        results = tool_results(after["body"])
        assert [r["tool_use_id"] for r in results] == [u["id"] for u in uses], asked
        for u, r in zip(uses, results):
            assert r.get("toolset_name") == "computer"
            if u["name"] == "cursor_position":
                # The toolset's rendering of a position: its text alone.
                assert re.fullmatch(r"X=\d+,Y=\d+", result_text(r)) and not result_image(r), r
            else:
                assert result_image(r), f"{u['name']}: no screenshot in its result"


def xterm_close_button(png_b64: str) -> tuple[int, int]:
    """The close button of the xterm in a screenshot: the top right of its
    title bar, just above the right end of the window's white body."""
    w, h, rgb = decode_png(base64.b64decode(png_b64))
    with open(os.path.join(tempfile.gettempdir(), "claude-loop-close.png"), "wb") as f:
        f.write(base64.b64decode(png_b64))  # for a failure's post-mortem

    def px(x: int, y: int) -> bytes:
        i = (y * w + x) * 3
        return rgb[i : i + 3]

    white = [sum(1 for x in range(w) if px(x, y) == b"\xff\xff\xff") for y in range(h)]
    assert max(white) > 0, "no white window in the screenshot"
    body = [y for y in range(h) if white[y] >= 0.6 * max(white)]
    y0 = body[0]
    x1 = max(x for x in range(w) if px(x, y0 + 2) == b"\xff\xff\xff")
    # the title bar's height: rows above the body until the desktop's colour
    desktop = px(2, h // 2)
    top = y0 - 1
    while top > 0 and px(x1 - 20, top) != desktop:
        top -= 1
    return x1 - 4, (top + y0) // 2


def test_the_corpus_is_typed_and_a_click_closes_the_window_through_the_scale_map(guest: Guest) -> None:
    g = guest
    mark = f"claudeloop{os.getpid()}"
    text = CORPUS.replace("MARK", mark)
    typed = "/tmp/claude-loop-typed.txt"
    where: dict[str, tuple[int, int]] = {}

    def close_button(body: dict[str, Any]) -> Any:
        until("cat to end", lambda: not g.running("cat"))
        shot = result_image(tool_results(body)[-1])
        assert shot
        where["close"] = xterm_close_button(shot)
        return [("left_click", {"coordinate": list(where["close"])})]

    steps = Steps([
        lambda body: [("key", {"text": "super+t"}), ("wait", {"duration": 2})],
        lambda body: (until("a shell in the xterm", lambda: g.running("bash")), time.sleep(0.5),
                      [("mouse_move", {"coordinate": [320, 200]}), ("type", {"text": f"cat > {typed}\n"})])[2],
        lambda body: (until("cat", lambda: g.running("cat")), [("type", {"text": text}), ("key", {"text": "ctrl+d"})])[1],
        lambda body: [("wait", {"duration": 1}), ("screenshot", {})],
        close_button,
        lambda body: (until("the xterm to close", lambda: not g.running("xterm")), "done")[1],
    ])
    try:
        r = run(g, steps, "--size", "640x400", "--max-steps", "12")
    finally:
        g.kill("xterm")
    assert r.proc.returncode == 0, r.proc.stderr[-3000:]
    assert guest_file(g.container, typed) == text.encode(), "the corpus did not arrive byte for byte"
    pwned = subprocess.run(
        ["docker", "exec", g.container, "sh", "-c", "ls /tmp | grep -c sandtop-pwned || true"],
        capture_output=True, text=True, timeout=30,
    )
    assert pwned.stdout.strip() == "0", "a command in the typed text ran"
    # The click closed the window where the half-size screenshot showed its button.
    assert not g.running("xterm"), "the click on the close button did not close the xterm"
    # The request shapes: system prompt, the toolset entry, pairing, acks.
    first = r.requests[0]["body"]
    assert first["model"] == "claude-mock" and isinstance(first.get("system"), str)
    (toolset,) = first["tools"]
    assert toolset["type"] == "computer_toolset_20260801"
    # Every member of the toolset is offered (none withheld: the loop runs all 17).
    assert "configs" not in toolset, toolset
    assert first["messages"][0]["role"] == "user"
    check_pairing(r.requests)
    acks = [result_text(b) for req in r.requests for b in tool_results(req["body"])]
    assert "Pressed super+t." in acks and "Typed." in acks and "Clicked." in acks
    # The screenshots the model saw are the --size ones.
    shot = result_image(tool_results(r.requests[1]["body"])[0])
    assert shot and decode_png(base64.b64decode(shot))[:2] == (640, 400)
    traj = r.trajectory()
    started = next(e for e in traj if e.get("kind") == "run_started")
    assert started["provider"] == "anthropic" and "anthropic messages" in started["model_api"]


def xterm_body(png_b64: str) -> tuple[int, int, int, int]:
    """The xterm's white body in a screenshot: its top left corner, its
    right end, and a point on its title bar (the middle of the bar, left of
    the buttons)."""
    w, h, rgb = decode_png(base64.b64decode(png_b64))

    def px(x: int, y: int) -> bytes:
        i = (y * w + x) * 3
        return rgb[i : i + 3]

    white = [sum(1 for x in range(w) if px(x, y) == b"\xff\xff\xff") for y in range(h)]
    assert max(white) > 0, "no white window in the screenshot"
    y0 = next(y for y in range(h) if white[y] >= 0.6 * max(white))
    row = [x for x in range(w) if px(x, y0 + 2) == b"\xff\xff\xff"]
    x0, x1 = min(row), max(row)
    desktop = px(2, h // 2)
    top = y0 - 1
    while top > 0 and px(x1 - 20, top) != desktop:
        top -= 1
    return x0, y0, x1, (top + y0) // 2


def test_the_once_withheld_members_run_in_the_loop(guest: Guest) -> None:
    """``cursor_position``, ``left_mouse_down``/``left_mouse_up``,
    ``hold_key`` and ``zoom`` (offered now, none withheld), run through the
    loop on a real guest in a half-size screenshot (``--size 640x400``),
    each checked by its effect: ``hold_key`` holds ``a`` in an xterm's
    ``cat`` (the file gets only a's); down on the xterm's title bar, then
    in the next turn move and up, drags the window as far as the pointer went; ``cursor_position`` answers the
    point a ``mouse_move`` went to, in the screenshot's space, as the
    toolset's ``X=..,Y=..`` text alone; ``zoom`` of a quarter of the
    screenshot answers one image of the requested size (the screenshot's),
    the region at full resolution (equal to the screen's own pixels there).
    The ledger records the reads under ``read``; ``host-cli report`` renders
    the run."""
    g = guest
    held = "/tmp/claude-loop-held.txt"
    seen: dict[str, Any] = {}

    def drag(body: dict[str, Any]) -> Any:
        until("cat to end", lambda: not g.running("cat"))
        shot = result_image(tool_results(body)[-1])
        assert shot
        x0, y0, x1, title = xterm_body(shot)
        seen["before"] = (x0, y0)
        grab = ((x0 + x1) // 3, title)
        seen["grab"] = grab
        # The button stays down across turns (the context budget keeps three
        # screenshots a request: at most three calls a turn here).
        return [("mouse_move", {"coordinate": list(grab)}), ("left_mouse_down", {})]

    def pull(body: dict[str, Any]) -> Any:
        # The window manager starts a move at a motion past its drag
        # threshold and follows the motions after it: two motions, so that
        # there is one after the start.
        grab = seen["grab"]
        return [("mouse_move", {"coordinate": [grab[0] + 5, grab[1]]}),
                ("mouse_move", {"coordinate": [grab[0] + 65, grab[1] + 40]})]

    def release(body: dict[str, Any]) -> Any:
        return [("left_mouse_up", {}), ("wait", {"duration": 1})]

    def after_drag(body: dict[str, Any]) -> Any:
        shot = result_image(tool_results(body)[-1])
        assert shot
        x0, y0, _, _ = xterm_body(shot)
        seen["after"] = (x0, y0)
        return [("mouse_move", {"coordinate": [101, 57]}), ("cursor_position", {})]

    def zoom(body: dict[str, Any]) -> Any:
        seen["position"] = result_text(tool_results(body)[-1])
        # The screen's own pixels of the region, at full resolution, for the zoom to equal.
        seen["screen"] = g.session.client.request(
            "POST", "/v1/screenshot", {"region": {"x": 0, "y": 0, "width": 640, "height": 400}})
        return [("zoom", {"region": [0, 0, 320, 200]})]

    steps = Steps([
        lambda body: [("key", {"text": "super+t"}), ("wait", {"duration": 2})],
        lambda body: (until("a shell in the xterm", lambda: g.running("bash")), time.sleep(0.5),
                      [("mouse_move", {"coordinate": [320, 200]}), ("type", {"text": f"cat > {held}\n"})])[2],
        lambda body: (until("cat", lambda: g.running("cat")),
                      [("hold_key", {"text": "a", "duration": 1}), ("type", {"text": "\n"}),
                       ("key", {"text": "ctrl+d"})])[1],
        drag,
        pull,
        release,
        after_drag,
        zoom,
        lambda body: (seen.__setitem__("zoomed", tool_results(body)[-1]), "done")[1],
    ])
    try:
        r = run(g, steps, "--size", "640x400", "--max-steps", "12")
    finally:
        g.kill("xterm")
    assert r.proc.returncode == 0, r.proc.stderr[-3000:]
    first = r.requests[0]["body"]
    (toolset,) = first["tools"]
    assert toolset == {"type": "computer_toolset_20260801"}, toolset
    check_pairing(r.requests)
    # hold_key: the held key reached the xterm (autorepeat may add more a's).
    typed = guest_file(g.container, held)
    assert typed is not None and re.fullmatch(rb"a+\n", typed), typed
    # down, move, up: the window moved as the pointer did between the press
    # and the release (65, 40 of the half-size image).
    (bx, by), (ax, ay) = seen["before"], seen["after"]
    assert abs(ax - bx - 65) <= 1 and abs(ay - by - 40) <= 1, (seen["before"], seen["after"])
    # cursor_position: where the mouse_move put the pointer, in the screenshot's space.
    assert seen["position"] == "X=101,Y=57", seen["position"]
    # zoom: one image, the requested size, the region at full resolution.
    zoomed = seen["zoomed"]
    assert zoomed["toolset_name"] == "computer" and result_text(zoomed) == ""
    assert [c["type"] for c in zoomed["content"]] == ["image"], zoomed["content"]
    zw, zh, zrgb = decode_png(base64.b64decode(result_image(zoomed) or ""))
    assert (zw, zh) == (640, 400)
    sw, sh, srgb = decode_png(base64.b64decode(seen["screen"]["screenshot"]["data"]))
    assert (sw, sh) == (640, 400)
    same = sum(1 for i in range(0, len(zrgb), 3) if zrgb[i : i + 3] == srgb[i : i + 3])
    assert same >= 0.95 * zw * zh, f"the zoom matches the screen's pixels at {same / (zw * zh):.1%} only"
    # The acknowledgments of the toolset.
    acks = [result_text(b) for req in r.requests for b in tool_results(req["body"])]
    for line in ("Held a for 1s.", "Left mouse button pressed.", "Left mouse button released."):
        assert line in acks, (line, acks)
    # The trajectory: the own actions in the ledger's actions, the reads under `read`.
    traj = r.trajectory()
    pending = [e["detail"] for e in traj if e.get("kind") == "ledger" and e.get("state") == "pending"]
    kinds = [a["type"] for d in pending for a in d.get("actions", [])]
    assert {"mouse_down", "mouse_up", "hold_key"} <= set(kinds), kinds
    reads = [d["read"] for d in pending if "read" in d]
    assert reads == [{"type": "cursor_position"}, {"type": "zoom", "region": [0, 0, 320, 200]}], reads
    out = os.path.join(os.path.dirname(r.folder), "report.html")
    p = subprocess.run([g.host_cli, "report", r.folder, "-o", out], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    with open(out) as f:
        html = f.read()
    for shown in ("press left (held)", "release left", "hold a for 1000 ms",
                  "read where the pointer is", "zoom into [0,0,320,200]"):
        assert shown in html, shown


def test_a_run_of_the_once_withheld_members_resumes_and_replays() -> None:
    """Resume and replay of the own actions and the reads: a run (on a
    fresh guest) presses the button, moves, releases it, holds shift,
    reads the pointer and zooms, and is killed (SIGKILL) while its next
    request waits; ``--resume`` rebuilds the conversation from the
    trajectory (the position's text and the zoom's image among the last
    results, valid by the SDK's types); ``host-cli replay`` on a fresh
    guest re-runs the five calls with actions (``mouse_down``,
    ``mouse_up`` and ``hold_key`` included), passes over the two reads, and
    every step's screen matches the recording."""
    hold = threading.Event()

    def waits(body: dict[str, Any]) -> Any:
        hold.wait(120)  # host-cli is killed while this request waits
        return "never"

    first = Steps([
        lambda body: [("mouse_move", {"coordinate": [400, 300]}), ("left_mouse_down", {})],
        lambda body: [("mouse_move", {"coordinate": [420, 310]}), ("left_mouse_up", {}),
                      ("hold_key", {"text": "shift", "duration": 0})],
        lambda body: [("cursor_position", {}), ("zoom", {"region": [100, 100, 420, 300]})],
        waits,
    ])
    folder = os.path.join(tempfile.mkdtemp(prefix="claude-own-"), "run")
    with guest_session("sandtop-claude-own-") as (host_cli, session):
        g = Guest(host_cli, session)
        mock = MockMessages(KEY, first)
        env = {**os.environ, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": mock.base_url}
        log = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen(
            [g.host_cli, "run", "--provider", "anthropic", "--session", g.session.name, "--no-ask-user",
             "--model", "claude-mock", "--max-steps", "10", "--record", folder, "press, hold, read, zoom"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
        )
        try:
            until("the fourth request (or host-cli's end)", lambda: len(mock.requests) >= 4 or proc.poll() is not None,
                  within=120)
            ended = proc.poll()
            proc.kill()
            proc.wait(30)
        finally:
            hold.set()
            mock.close()
        log.seek(0)
        assert ended is None and len(mock.requests) == 4, (ended, mock.error, log.read()[-3000:])
        assert all(r["problems"] == [] for r in mock.requests)
        seen: dict[str, Any] = {}

        def check(body: dict[str, Any]) -> Any:
            seen["results"] = tool_results(body)
            return "done"

        r = run(g, Steps([check]), resume=folder)
        assert r.proc.returncode == 0, r.proc.stderr[-3000:]
    position, zoomed = seen["results"]
    assert result_text(position) == "X=420,Y=310" and not result_image(position), position
    assert [c["type"] for c in zoomed["content"]] == ["image"], zoomed
    assert decode_png(base64.b64decode(result_image(zoomed) or ""))[:2] == (1280, 800)
    out = os.path.join(os.path.dirname(folder), "replay")
    state = tempfile.mkdtemp(prefix="claude-own-replay-")
    try:
        p = subprocess.run([g.host_cli, "replay", folder, "-o", out], stdin=subprocess.DEVNULL,
                           env={**os.environ, "SANDTOP_STATE_DIR": state},
                           capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    matched = [line for line in p.stdout.splitlines() if line.endswith(": same screen")]
    assert len(matched) == 5 and "every step matched" in p.stdout, p.stdout[-2000:]


def test_a_member_the_loop_cannot_run_stops_the_response_before_anything_runs(guest: Guest) -> None:
    g = guest
    g.session.client.request("POST", "/v1/actions", {"actions": [{"type": "move", "x": 5, "y": 5}], "final_screenshot": False})
    steps = Steps([
        lambda body: [("mouse_move", {"coordinate": [700, 500]}), ("left_click", {})],
        lambda body: "never",
    ])
    r = run(g, steps)
    assert r.proc.returncode == 5, (r.proc.returncode, r.proc.stderr[-2000:])  # action_failed
    assert len(r.requests) == 1
    assert "left_click" in r.proc.stderr
    here = g.session.client.request("POST", "/v1/cursor", {})
    assert (here["x"], here["y"]) == (5, 5), "the valid call before the refused one ran"


def test_the_step_budget_holds(guest: Guest) -> None:
    steps = Steps([
        lambda body: [("wait", {"duration": 0})],
        lambda body: [("mouse_move", {"coordinate": [30, 30]})],
        lambda body: "late",
    ])
    r = run(guest, steps, "--max-steps", "2")
    assert r.proc.returncode == 4, (r.proc.returncode, r.proc.stderr[-2000:])  # max_steps
    assert len(r.requests) == 2


def confirm_policy(answer: str) -> str:
    path = os.path.join(tempfile.mkdtemp(prefix="claude-confirm-"), "policy.json")
    with open(path, "w") as f:
        json.dump({"confirm_actions": answer}, f)
    return path


def test_confirmed_actions_run_and_a_denied_one_runs_nothing(guest: Guest) -> None:
    """--confirm-actions with Claude's members (the toolset's confirm rule
    mapped onto Sandtop's approvals, here the policy file): approved, each
    member is asked about, then runs, and the record says who decided;
    refused, the run ends `refused` before the member reaches the guest."""
    g = guest
    out = f"/tmp/claude-confirm-{os.getpid()}.txt"
    mark = f"approved{os.getpid()}"
    steps = Steps([
        lambda body: [("key", {"text": "super+t"}), ("wait", {"duration": 2})],
        lambda body: (until("a shell in the xterm", lambda: g.running("bash")), time.sleep(0.5),
                      [("mouse_move", {"coordinate": [320, 200]}), ("type", {"text": f"echo {mark} > {out}\n"})])[2],
        lambda body: (until("the file", lambda: guest_file(g.container, out)), "done")[1],
    ])
    try:
        r = run(g, steps, "--size", "640x400", "--max-steps", "6", "--confirm-actions",
                "--approve-policy", confirm_policy("approve"))
    finally:
        g.kill("xterm")
    assert r.proc.returncode == 0, r.proc.stderr[-3000:]
    assert guest_file(g.container, out) == f"{mark}\n".encode()
    asked = [e for e in r.trajectory() if e.get("kind") == "confirm"]
    # key, wait, mouse_move, type: each asked before it ran, and the final
    # screenshot of each call; all approved by the policy.
    actions = [e for e in asked if e["index"] is not None]
    assert len(actions) == 4, asked
    assert all(e["approved"] and e.get("by") == "policy" for e in asked), asked

    # Refused: nothing of the call reaches the guest, and the run says so.
    steps = Steps([
        lambda body: [("key", {"text": "super+t"})],
        lambda body: "never asked",
    ])
    r = run(g, steps, "--size", "640x400", "--max-steps", "4", "--confirm-actions",
            "--approve-policy", confirm_policy("deny"))
    assert r.proc.returncode == 3, (r.proc.returncode, r.proc.stderr[-2000:])  # refused
    assert len(r.requests) == 1, "the run went on after the denial"
    time.sleep(1.0)
    assert not g.running("xterm"), "the denied super+t opened a terminal"
    traj = r.trajectory()
    (decided,) = [e for e in traj if e.get("kind") == "confirm"]
    assert decided["index"] == 0 and not decided["approved"] and decided.get("by") == "policy", decided
    assert any(e.get("kind") == "run_finished" and e.get("ending") == "refused" for e in traj), traj[-3:]


def test_the_offline_exercise_through_the_messages_shapes(guest: Guest) -> None:
    """``host-cli exercise --provider anthropic`` (item 4): the scripted
    model's every request translated into a Messages body and checked, its
    every answer a ``Message`` of computer members; the apps' records
    checked by host-cli itself (``ok`` lines, exit 0)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    folder = os.path.join(tempfile.mkdtemp(prefix="claude-exercise-"), "run")
    p = subprocess.run(
        [guest.host_cli, "exercise", "--provider", "anthropic", "--session", guest.session.name, "--record", folder],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    oks = [line for line in p.stdout.splitlines() if line.startswith("ok ")]
    assert len(oks) == 2 and "FAIL" not in p.stdout, p.stdout[-2000:]
    with open(os.path.join(folder, "trajectory.jsonl")) as f:
        started = next(e for e in map(json.loads, f) if e.get("kind") == "run_started")
    assert started["provider"] == "anthropic" and started["exercise"] is True


def test_differential_the_sdk_runner_and_host_cli_leave_the_same_effects(guest: Guest) -> None:
    """The same scripted Claude through the SDK's ``tool_runner`` with
    ``sandtop.anthropic.Computer`` and through ``host-cli run --provider
    anthropic``: the same file in the guest, every call answered without
    an error on both sides. Differences in what the model is sent are
    docs/contract.md rule 69's (host-cli: a screenshot with every result
    and with the task; the SDK: the line alone)."""
    import anthropic

    import sandtop.anthropic as sa

    g = guest

    def scenario(path: str) -> Steps:
        return Steps([
            lambda body: [("key", {"text": "super+t"}), ("wait", {"duration": 2})],
            lambda body: (until("a shell in the xterm", lambda: g.running("bash")), time.sleep(0.5),
                          [("mouse_move", {"coordinate": [640, 400]}), ("type", {"text": f"cat > {path}\n"})])[2],
            lambda body: (until("cat", lambda: g.running("cat")),
                          [("type", {"text": "same effects ✓\n"}), ("key", {"text": "ctrl+d"})])[1],
            lambda body: (until("cat to end", lambda: not g.running("cat")), [("key", {"text": "ctrl+d"})])[1],
            lambda body: (until("the xterm to close", lambda: not g.running("xterm")), "done")[1],
        ])

    sdk_path, cli_path = "/tmp/claude-diff-sdk.txt", "/tmp/claude-diff-cli.txt"
    sdk_steps = scenario(sdk_path)
    mock = MockMessages(KEY, sdk_steps)
    try:
        client = anthropic.Anthropic(api_key=KEY, base_url=mock.base_url, max_retries=0)
        final = client.beta.messages.tool_runner(
            model="claude-mock", max_tokens=1024, messages=[{"role": "user", "content": "work in the guest"}],
            tools=[sa.Computer(g.session, confirm=lambda ctx: True)], max_iterations=20,
        ).until_done()
    finally:
        sdk_requests = mock.close()
        g.kill("xterm")
    assert mock.error is None, mock.error
    assert final.content[0].text == "done"  # type: ignore[union-attr]
    try:
        r = run(g, scenario(cli_path), "--max-steps", "10")
    finally:
        g.kill("xterm")
    assert r.proc.returncode == 0, r.proc.stderr[-2000:]
    assert guest_file(g.container, sdk_path) == guest_file(g.container, cli_path) == "same effects ✓\n".encode()
    for requests in (sdk_requests, r.requests):
        results = [b for req in requests for b in tool_results(req["body"])]
        assert len(results) == 7 and not any(b.get("is_error") for b in results), results
        assert all(req["problems"] == [] for req in requests)


DEMO = "http://127.0.0.1:8080"


def form_scenario(stamp: str, seen: list[list[dict[str, Any]]]) -> Steps:
    """A scripted Claude filling the demo form through the browser toolset:
    a navigation outside the policy first, then the form by read_page refs.
    ``seen`` collects each turn's tool results."""

    def results(body: dict[str, Any]) -> list[dict[str, Any]]:
        r = tool_results(body)
        seen.append(r)
        return r

    def after_read(body: dict[str, Any]) -> Any:
        [nav, page] = results(body)
        assert not nav.get("is_error"), result_text(nav)
        t = result_text(page)
        return demo_form_calls(t, stamp, "claude@example.test", "über Claude ✓")

    return Steps([
        lambda body: [("navigate", {"url": "https://example.com/"})],
        lambda body: (results(body), [("navigate", {"url": DEMO + "/?from=claude"}),
                                      ("read_page", {"filter": "interactive"})])[1],
        after_read,
        lambda body: (results(body), "done")[1],
    ], family="browser")


def demo_record(g: Guest, stamp: str) -> dict[str, Any]:
    record = until(
        "the app's record",
        lambda: (lambda r: r if r and stamp.encode() in r else None)(
            guest_file(g.container, "/home/user/demo/submissions.jsonl")),
    )
    rows = [json.loads(x) for x in record.decode().splitlines() if stamp in x]
    assert len(rows) == 1, record
    return rows[0]


def browser_policy() -> str:
    path = os.path.join(tempfile.mkdtemp(prefix="claude-browser-"), "policy.json")
    with open(path, "w") as f:
        json.dump({"approve_browser_members": ["navigate", "type", "click", "new_tab", "switch_tab", "close_tab"]}, f)
    return path


def shape(block: dict[str, Any]) -> list[str]:
    return [c["type"] for c in block["content"]] + (["is_error"] if block.get("is_error") else [])


def test_differential_the_browser_toolset_fills_the_form_as_the_sdk_runner_does(guest: Guest) -> None:
    """The same scripted Claude through the SDK's ``tool_runner`` with
    ``sandtop.anthropic.Browser`` and through ``host-cli run --provider
    anthropic --tool browser``: each fills the demo form (checked on the
    app's record); every result has the same blocks on both sides, the
    navigation outside the policy refused on both, and the page read the
    model gets is the same text."""
    import anthropic

    import sandtop
    import sandtop.anthropic as sa

    g = guest
    sdk_seen: list[list[dict[str, Any]]] = []
    cli_seen: list[list[dict[str, Any]]] = []
    sdk_stamp, cli_stamp = f"claude-sdk-{os.getpid()}", f"claude-cli-{os.getpid()}"
    mock = MockMessages(KEY, form_scenario(sdk_stamp, sdk_seen))
    try:
        client = anthropic.Anthropic(api_key=KEY, base_url=mock.base_url, max_retries=0)
        final = client.beta.messages.tool_runner(
            model="claude-mock", max_tokens=1024, messages=[{"role": "user", "content": "fill the form"}],
            tools=[sa.Browser(g.session, origins=[DEMO], confirm=lambda ctx: True)], max_iterations=20,
        ).until_done()
    finally:
        sdk_requests = mock.close()
    assert mock.error is None, mock.error
    assert final.content[0].text == "done"  # type: ignore[union-attr]
    # Both runs start from the same browser state: one blank tab shown.
    sandtop.Browser(g.session).navigate({"url": "about:blank", "tab_id": None})
    try:
        r = run(g, form_scenario(cli_stamp, cli_seen), "--tool", "browser", "--url-policy", DEMO,
                "--approve-policy", browser_policy(), "--no-sign-in", "--max-steps", "10")
    finally:
        g.kill("firefox-esr")
    assert r.proc.returncode == 0, r.proc.stderr[-3000:]
    for stamp in (sdk_stamp, cli_stamp):
        row = demo_record(g, stamp)
        assert (row["email"], row["message"]) == ("claude@example.test", "über Claude ✓")
    assert [[shape(b) for b in turn] for turn in cli_seen] == [[shape(b) for b in turn] for turn in sdk_seen]
    [[outside]] = cli_seen[:1]
    assert outside["is_error"] is True and "browser_state" not in shape(outside)
    # The read the model gets: the same page text and elements, rendered
    # alike (a ref's document part is random per document: compared
    # without it).
    def norm(text: str) -> str:
        return re.sub(r"\b[0-9a-f]{12}\.(\d+)\b", r"ref.\1", text)

    assert norm(result_text(cli_seen[1][1])) == norm(result_text(sdk_seen[1][1]))
    assert "textbox" in result_text(cli_seen[1][1])
    assert [norm(result_text(b)) for b in cli_seen[2]] == [norm(result_text(b)) for b in sdk_seen[2]]
    first = r.requests[0]["body"]
    entries = [t for t in first["tools"] if t.get("type") == "browser_toolset_20260801"]
    assert len(entries) == 1, first["tools"]
    # wait_for has no toolset member: offered beside it as a custom tool.
    assert any(t.get("name") == "browser_wait_for" for t in first["tools"]), first["tools"]
    assert all(req["problems"] == [] for req in sdk_requests + r.requests)


def test_tab_members_and_inputs_the_browser_cannot_run(guest: Guest) -> None:
    """Tab members answer with the ``browser_state`` block alone, a
    screenshot with its image and the tabs, page text with the text; an
    input the loop's browser cannot carry out (a history navigation, a
    right click on a ref) is an ``is_error`` result naming why, and runs
    nothing; a member the run does not offer is withheld from the toolset."""
    g = guest
    tabs: dict[str, Any] = {}

    def opened(body: dict[str, Any]) -> Any:
        [new] = tool_results(body)
        assert shape(new) == ["browser_state"], new
        state = new["content"][0]
        active = [t for t in state["tabs"] if t.get("active")]
        assert len(state["tabs"]) >= 2 and len(active) == 1, state
        tabs["new"] = active[0]["tab_id"]
        tabs["other"] = next(t["tab_id"] for t in state["tabs"] if not t.get("active"))
        return [("list_tabs", {}), ("switch_tab", {"tab_id": tabs["other"]}),
                ("close_tab", {"tab_id": tabs["new"]}), ("screenshot", {}), ("get_page_text", {}),
                ("navigate", {"url": "back"}),
                ("right_click", {"target": {"type": "ref", "ref": "ref_1"}})]

    def checked(body: dict[str, Any]) -> Any:
        [listed, switched, closed, shot, text, back, right] = tool_results(body)
        tabs["results"] = [listed, switched, closed, shot, text, back, right]
        return "done"

    steps = Steps([
        lambda body: [("navigate", {"url": DEMO + "/"})],
        lambda body: [("new_tab", {})],
        opened,
        checked,
    ], family="browser")
    try:
        r = run(g, steps, "--tool", "browser", "--url-policy", DEMO, "--approve-policy", browser_policy(),
                "--no-sign-in", "--max-steps", "10")
    finally:
        g.kill("firefox-esr")
    assert r.proc.returncode == 0, r.proc.stderr[-3000:]
    listed, switched, closed, shot, text, back, right = tabs["results"]
    assert shape(listed) == ["browser_state"] and shape(switched) == ["browser_state"]
    assert shape(closed) == ["browser_state"]
    assert tabs["new"] not in [t["tab_id"] for t in closed["content"][0]["tabs"]]
    assert shape(shot) == ["image", "browser_state"]
    assert shape(text) == ["text", "browser_state"] and result_text(text)
    assert back["is_error"] is True and "'back' is not available" in result_text(back)
    assert right["is_error"] is True and "coordinate target" in result_text(right)
    (entry,) = [t for t in r.requests[0]["body"]["tools"] if t.get("type") == "browser_toolset_20260801"]
    # key and type act on the focus (the loop's confirmation cannot show
    # it); javascript_exec needs run_script, not added here.
    for m in ("key", "type", "wait", "right_click"):
        assert entry["configs"][m] == {"enabled": False}, entry
    assert "javascript_exec" not in entry["configs"]  # off by the API's default
    # Nothing of the refused inputs reached the browser: no ledger entry.
    traj = r.trajectory()
    refused_ids = {back["tool_use_id"], right["tool_use_id"]}
    assert not [e for e in traj if e.get("kind") == "ledger" and e.get("call_id") in refused_ids]


def test_the_offline_browser_exercise_through_the_messages_shapes(guest: Guest) -> None:
    """``host-cli exercise --provider anthropic --browser``: the scripted
    browser exercise (policy refusal, the form by refs, a stale ref caught,
    the sign-in) with every call sent as a browser toolset member and every
    result read back as the API's; the app's records checked by host-cli
    (``ok`` lines, exit 0)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    folder = os.path.join(tempfile.mkdtemp(prefix="claude-bexercise-"), "run")
    try:
        p = subprocess.run(
            [guest.host_cli, "exercise", "--provider", "anthropic", "--browser", "--approve-scripted-checks",
             "--session", guest.session.name, "--record", folder],
            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
        )
    finally:
        guest.kill("firefox-esr")
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    assert "FAIL" not in p.stdout, p.stdout[-2000:]
    with open(os.path.join(folder, "trajectory.jsonl")) as f:
        entries = [json.loads(line) for line in f if line.strip()]
    blocks = [i["anthropic_block"] for e in entries for i in (e.get("output") or e.get("items") or [])
              if isinstance(i, dict) and "anthropic_block" in i]
    members = {b["name"] for b in blocks if b.get("toolset_name") == "browser"}
    assert {"navigate", "read_page", "form_input", "left_click"} <= members, members


def test_a_killed_browser_run_resumes_and_its_report_reads_it(guest: Guest) -> None:
    """Resume and report with this provider: a ``--tool browser`` run killed
    (SIGKILL) while its second request waits is resumed with ``--resume``;
    the resumed request carries the first turn's calls and results, rebuilt
    from the trajectory (and valid by the SDK's types); the form is filled
    by the refs of the read made before the crash (``form_input`` chooses
    ``type`` by the role that read gave), checked on the app's record;
    ``host-cli report`` renders the run."""
    g = guest
    stamp = f"claude-resume-{os.getpid()}"
    flags = ("--tool", "browser", "--url-policy", DEMO, "--approve-policy", browser_policy(), "--no-sign-in",
             "--max-steps", "10")
    hold = threading.Event()

    def waits(body: dict[str, Any]) -> Any:
        hold.wait(120)  # host-cli is killed while this request waits
        return "never"

    first = Steps([lambda body: [("navigate", {"url": DEMO + "/?from=resume"}),
                                 ("read_page", {"filter": "interactive"})], waits], family="browser")
    mock = MockMessages(KEY, first)
    folder = os.path.join(tempfile.mkdtemp(prefix="claude-resume-"), "run")
    env = {**os.environ, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": mock.base_url}
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        [g.host_cli, "run", "--provider", "anthropic", "--session", g.session.name, "--no-ask-user",
         "--model", "claude-mock", *flags, "--record", folder, "fill the form"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
    )
    try:
        until("the second request (or host-cli's end)", lambda: len(mock.requests) >= 2 or proc.poll() is not None,
              within=120)
        ended = proc.poll()
        proc.kill()
        proc.wait(30)
    finally:
        hold.set()
        mock.close()
    log.seek(0)
    assert ended is None and len(mock.requests) == 2, (ended, mock.error, log.read()[-3000:])
    assert mock.requests[0]["problems"] == []

    def fill(body: dict[str, Any]) -> Any:
        [nav, page] = tool_results(body)
        assert not nav.get("is_error") and not page.get("is_error"), (nav, page)
        t = result_text(page)
        return demo_form_calls(t, stamp, "resume@example.test", "resumed ✓")

    try:
        r = run(g, Steps([fill, lambda body: "done"], family="browser"), *flags, resume=folder)
    finally:
        g.kill("firefox-esr")
    assert r.proc.returncode == 0, r.proc.stderr[-3000:]
    resumed = r.requests[0]["body"]
    uses = [b["name"] for m in resumed["messages"] if m["role"] == "assistant" for b in m["content"]]
    assert uses == ["navigate", "read_page"], uses
    row = demo_record(g, stamp)
    assert (row["email"], row["message"]) == ("resume@example.test", "resumed ✓")
    report = os.path.join(os.path.dirname(folder), "report.html")
    p = subprocess.run([g.host_cli, "report", folder, "-o", report], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    with open(report, encoding="utf-8") as f:
        html = f.read()
    assert "browser_type" in html and "browser_navigate" in html, "the report does not show the run's calls"


def test_a_claude_run_replays_on_a_fresh_guest(guest: Guest) -> None:
    """Replay with this provider: a recorded ``--provider anthropic`` run's
    computer calls (kept with their Messages blocks) are read back and
    replayed by ``host-cli replay`` on a fresh guest, every step's screen
    matching the recording."""
    steps = Steps([
        lambda body: [("mouse_move", {"coordinate": [400, 300]}), ("left_click", {"coordinate": [400, 300]})],
        lambda body: [("wait", {"duration": 1})],
        lambda body: "done",
    ])
    # Recorded on a fresh guest of its own: the replay's fresh guest must
    # start from the screen the recording started from.
    with guest_session("sandtop-claude-replay-") as (host_cli, session):
        g = Guest(host_cli, session)
        r = run(g, steps, "--max-steps", "5")
    assert r.proc.returncode == 0, r.proc.stderr[-2000:]
    out = os.path.join(os.path.dirname(r.folder), "replay")
    p = subprocess.run([g.host_cli, "replay", r.folder, "-o", out], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    matched = [line for line in p.stdout.splitlines() if line.endswith(": same screen")]
    assert len(matched) == 3 and "every step matched" in p.stdout, p.stdout[-2000:]


class Legacy(Steps):
    """A scripted Claude speaking the older ``computer_20251124`` tool: one
    tool named ``computer`` whose input names the action."""

    def __call__(self, body: dict[str, Any]) -> Any:
        out = Steps.__call__(self, body)
        if isinstance(out, str):
            return out
        return [{**u, "name": "computer", "input": {"action": u["name"], **u["input"]}, "toolset_name": None}
                for u in out]


def test_the_older_computer_tool_behind_its_flag(guest: Guest) -> None:
    """``--computer-20251124``: the request offers the older tool (validated
    by the SDK's types), sized as the screenshots the model sees (here
    ``--size 640x400``), and its calls act through the ScaleMap: a
    ``mouse_move`` to (320, 200) of the half-size screenshot puts the
    pointer in the 2x2 block at (640, 400) of the screen; results carry no
    toolset."""
    g = guest
    steps = Legacy([
        lambda body: [("mouse_move", {"coordinate": [320, 200]})],
        lambda body: "done",
    ])
    r = run(g, steps, "--computer-20251124", "--size", "640x400", "--max-steps", "4")
    assert r.proc.returncode == 0, r.proc.stderr[-2000:]
    first = r.requests[0]["body"]
    assert first["tools"] == [{"type": "computer_20251124", "name": "computer",
                               "display_width_px": 640, "display_height_px": 400}], first["tools"]
    [moved] = tool_results(r.requests[1]["body"])
    assert "toolset_name" not in moved and result_text(moved) == "Moved the mouse." and result_image(moved)
    here = g.session.client.request("POST", "/v1/cursor", {})
    # (320, 200) of the half-size image is the 2x2 block at (640, 400).
    assert (here["x"] // 2, here["y"] // 2) == (320, 200), here
    started = next(e for e in r.trajectory() if e.get("kind") == "run_started")
    assert started["computer_tool"] == "computer_20251124"


def test_the_offline_exercise_through_the_older_computer_tool(guest: Guest) -> None:
    """``host-cli exercise --provider anthropic --computer-20251124``: the
    computer exercise with every call sent as the older tool's ``action``
    and read back; the apps' records checked by host-cli (exit 0)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    folder = os.path.join(tempfile.mkdtemp(prefix="claude-legacy-"), "run")
    try:
        p = subprocess.run(
            [guest.host_cli, "exercise", "--provider", "anthropic", "--computer-20251124", "--session",
             guest.session.name, "--record", folder],
            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
        )
    finally:
        guest.kill("firefox-esr")
        guest.kill("mousepad")
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    oks = [line for line in p.stdout.splitlines() if line.startswith("ok ")]
    assert len(oks) == 2 and "FAIL" not in p.stdout, p.stdout[-2000:]
    with open(os.path.join(folder, "trajectory.jsonl")) as f:
        entries = [json.loads(line) for line in f if line.strip()]
    blocks = [i["anthropic_block"] for e in entries for i in (e.get("output") or [])
              if isinstance(i, dict) and "anthropic_block" in i and i["anthropic_block"].get("type") == "tool_use"]
    assert blocks and all(b["name"] == "computer" and "action" in b["input"] for b in blocks), blocks[:3]
