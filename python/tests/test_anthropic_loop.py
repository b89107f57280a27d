"""``host-cli run --provider anthropic`` (issue 35, item 3): the loop
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
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterator

import pytest

pytest.importorskip("anthropic")

sys.path.insert(0, os.path.dirname(__file__))
from guest import decode_png, guest_file, guest_session, kill, running, until  # noqa: E402
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

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> Any:
        self.bodies.append(body)
        if not self.steps:
            raise AssertionError("the script has no more steps")
        out = self.steps.pop(0)(body)
        if isinstance(out, str):
            return out
        return [tool_use(name, args, "computer") for name, args in out]


class Run:
    def __init__(self, requests: list[dict[str, Any]], proc: subprocess.CompletedProcess[str], folder: str) -> None:
        self.requests = requests
        self.proc = proc
        self.folder = folder

    def trajectory(self) -> list[dict[str, Any]]:
        with open(os.path.join(self.folder, "trajectory.jsonl")) as f:
            return [json.loads(line) for line in f if line.strip()]


def run(g: Guest, steps: Steps, *extra: str, task: str = "work in the guest") -> Run:
    mock = MockMessages(KEY, steps)
    work = tempfile.mkdtemp(prefix="claude-loop-")
    folder = os.path.join(work, "run")
    # host-cli takes the model key from the environment only; this is the
    # mock's throwaway key, not a credential.
    env = {**os.environ, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": mock.base_url}
    env.pop("OPENAI_API_KEY", None)
    try:
        proc = subprocess.run(
            [g.host_cli, "run", "--provider", "anthropic", "--session", g.session.name, "--no-ask-user",
             "--model", "claude-mock", "--record", folder, *extra, task],
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
    assert all(toolset["configs"][m] == {"enabled": False} for m in ("zoom", "cursor_position", "hold_key"))
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
