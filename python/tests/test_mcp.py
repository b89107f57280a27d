"""``host-cli mcp`` driven by the official MCP Python SDK (``mcp`` on PyPI)
as the client, over stdio, against a real guest under Docker.

Both lifecycles the SDK speaks are driven: ``legacy`` (the ``initialize``
handshake, 2025-11-25: approvals are ``elicitation/create`` requests during
the call) and ``auto`` (``server/discover``, 2026-07-28: approvals are
``input_required`` rounds the SDK answers through the same callback).

Checked: the tools are listed with valid JSON Schemas (jsonschema's
metaschema check) and their annotations; the three protocol revisions;
a screenshot decodes at the asked size; the typing corpus arrives
byte-exact in an xterm, each batch approved through form-mode elicitation;
a declined (or cancelled) approval types nothing; an unknown action field
is refused by name and nothing of that batch runs, nobody asked; without
elicitation a batch that types is refused unless the operator's policy
approves it; guests the server started are removed when it exits; the
server session's run folder is one `host-cli report` reads.

Needs Docker and the guest image; skipped otherwise (SANDTOP_REQUIRE=docker
makes that a failure).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator, Optional

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from guest import IMAGE, binary, decode_png, guest_file, skip  # noqa: E402

mcp = pytest.importorskip("mcp")
jsonschema = pytest.importorskip("jsonschema")

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp import types as mt  # noqa: E402

import sandtop  # noqa: E402

# testkit/src/corpus.rs TYPING, byte for byte.
CORPUS = (
    "-rf --no-preserve-root\nHello, World! éüß€中ж✓ 日本語の文字列と한국어 🙂🚀\n"
    "$(touch /tmp/sandtop-pwned-MARK) `touch /tmp/sandtop-pwned-MARK` 'single' \"double\" \\back\\slash\n"
    "\ttab\tseparated\tcolumns\nÀÉÎÕÜ àéîõü ñ ç ø å æ œ ĳ ŀ ł ő ű ș ț ğ ı İ ş\n"
)
TOOLS = {"sandtop_guest_start", "sandtop_guest_stop", "sandtop_guest_list", "computer", "screenshot"}
MODES = ["legacy", "auto"]


class World:
    def __init__(self, host_cli: str, state: str, session: Any) -> None:
        self.host_cli = host_cli
        self.state = state
        self.session = session
        self.name: str = session.name

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.host_cli, *args], capture_output=True, text=True, timeout=120, check=check)

    def guests(self) -> list[dict[str, Any]]:
        return list(json.loads(self.cli("guest", "ls", "--json").stdout))

    def container(self) -> str:
        for s in self.guests():
            if s.get("name") == self.name:
                return str(s["container"])
        raise AssertionError(f"session {self.name} not in guest ls")

    def running(self, proc: str) -> bool:
        p = subprocess.run(["docker", "exec", self.container(), "pgrep", "-x", proc], capture_output=True, timeout=30)
        return p.returncode == 0

    def server(self, *extra: str) -> StdioServerParameters:
        env = {"SANDTOP_STATE_DIR": self.state, "SANDTOP_IMAGE": IMAGE}
        for k in ("DOCKER_HOST", "RUST_LOG"):
            if k in os.environ:
                env[k] = os.environ[k]
        return StdioServerParameters(command=self.host_cli, args=["mcp", *extra], env=env)


def need_docker() -> str:
    host_cli = binary("SANDTOP_HOST_CLI", "host-cli")
    if shutil.which("docker") is None:
        skip("docker", "docker is not installed")
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        skip("docker", "the Docker engine cannot be reached")
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=30).returncode != 0:
        skip("docker", f"the guest image {IMAGE} is missing (make guest-image)")
    if host_cli is None:
        skip("docker", "host-cli is not built (SANDTOP_HOST_CLI)")
    assert host_cli is not None
    return host_cli


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    host_cli = need_docker()
    state = tempfile.mkdtemp(prefix="sandtop-mcp-")
    old = os.environ.get("SANDTOP_STATE_DIR")
    os.environ["SANDTOP_STATE_DIR"] = state
    session = sandtop.Session.start(host_cli=host_cli, screen=(1280, 800))
    try:
        yield World(host_cli, state, session)
    finally:
        session.stop()
        left = subprocess.run([host_cli, "guest", "ls", "--json"], capture_output=True, text=True, timeout=60)
        for s in json.loads(left.stdout or "[]"):
            subprocess.run([host_cli, "guest", "stop", s["name"]], capture_output=True, timeout=120)
        if old is None:
            os.environ.pop("SANDTOP_STATE_DIR", None)
        else:
            os.environ["SANDTOP_STATE_DIR"] = old
        shutil.rmtree(state, ignore_errors=True)


class Person:
    """The person behind the client: answers each approval question with
    a fixed answer, and keeps what each question showed."""

    def __init__(self, answer: str = "approve") -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: Any) -> mt.ElicitResult:
        assert params.mode == "form", params
        props = params.requested_schema["properties"] if isinstance(params.requested_schema, dict) else params.requested_schema.properties
        assert set(props) == {"approve"}, props
        self.asked.append(params.message)
        if self.answer == "approve":
            return mt.ElicitResult(action="accept", content={"approve": True})
        if self.answer == "unchecked":
            return mt.ElicitResult(action="accept", content={"approve": False})
        return mt.ElicitResult(action=self.answer)  # decline, cancel


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def structured(r: Any) -> dict[str, Any]:
    assert r.structured_content is not None, r
    return dict(r.structured_content)


def image(r: Any) -> bytes:
    imgs = [c for c in r.content if getattr(c, "type", None) == "image"]
    assert len(imgs) == 1, r.content
    assert imgs[0].mime_type == "image/png"
    return base64.b64decode(imgs[0].data)


async def call(client: Client, name: str, args: dict[str, Any]) -> Any:
    return await client.call_tool(name, args)


def wait_until(what: str, pred: Any, within: float = 20.0) -> Any:
    end = time.monotonic() + within
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("mode", MODES)
def test_tools_are_listed_with_valid_json_schemas_and_annotations(world: World, mode: str) -> None:
    async def go() -> tuple[str, list[Any]]:
        async with Client(world.server("--session", world.name), mode=mode) as c:
            listed = await c.list_tools()
            return c.protocol_version, list(listed.tools)

    version, tools = run(go())
    assert version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    names = {t.name for t in tools}
    assert TOOLS <= names, names
    assert {"browser_read_page", "browser_click", "browser_type"} <= names, names
    assert "browser_key" not in names and "browser_navigate" not in names
    for t in tools:
        jsonschema.Draft202012Validator.check_schema(t.input_schema)
        assert t.input_schema["type"] == "object"
        assert t.output_schema is not None, t.name
        jsonschema.Draft202012Validator.check_schema(t.output_schema)
        a = t.annotations
        assert a is not None and a.read_only_hint is not None and a.destructive_hint is not None, t.name
        assert a.open_world_hint is not None, t.name
    by = {t.name: t for t in tools}
    assert by["screenshot"].annotations.read_only_hint is True
    assert by["computer"].annotations.read_only_hint is False
    assert by["computer"].annotations.destructive_hint is True
    assert by["sandtop_guest_stop"].annotations.destructive_hint is True
    assert by["browser_read_page"].annotations.read_only_hint is True
    # A valid batch validates against the computer tool's own schema.
    jsonschema.validate(
        {"actions": [{"type": "click", "button": "left", "x": 1, "y": 2}, {"type": "type", "text": "é"}]},
        by["computer"].input_schema,
    )


def test_an_initialize_naming_2025_06_18_is_answered_with_it(world: World) -> None:
    """The oldest revision asked for, spoken as a 2025-06-18 client would."""
    p = subprocess.Popen(
        [world.host_cli, "mcp", "--session", world.name, "--no-browser"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "SANDTOP_STATE_DIR": world.state},
        text=True,
    )
    assert p.stdin is not None and p.stdout is not None
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    p.stdin.write(json.dumps(init) + "\n")
    p.stdin.flush()
    reply = json.loads(p.stdout.readline())
    p.stdin.close()
    p.wait(timeout=30)
    assert reply["result"]["protocolVersion"] == "2025-06-18", reply
    assert reply["result"]["serverInfo"]["name"] == "sandtop"


@pytest.mark.parametrize("size", [(640, 400), (1280, 800)])
def test_a_screenshot_decodes_at_the_asked_size(world: World, size: tuple[int, int]) -> None:
    async def go() -> Any:
        async with Client(world.server("--session", world.name), mode="auto") as c:
            return await call(c, "screenshot", {"size": {"width": size[0], "height": size[1]}})

    r = run(go())
    assert not r.is_error, r
    w, h, rgb = decode_png(image(r))
    assert (w, h) == size
    assert len(rgb) == w * h * 3
    assert structured(r) == {"session": world.name, "width": w, "height": h}


async def xterm_with_cat(world: World, c: Client, path: str) -> None:
    """An xterm (Super+T, pressed again until a shell runs, as a model
    would) with `cat > path` reading its terminal."""
    end = time.monotonic() + 60
    while True:
        r = await call(c, "computer", {"actions": [{"type": "keypress", "keys": ["SUPER", "T"]}, {"type": "wait"}]})
        assert not r.is_error, structured(r)
        t = time.monotonic() + 2.5
        while time.monotonic() < t and not world.running("bash"):
            await asyncio.sleep(0.2)
        if world.running("bash"):
            break
        assert time.monotonic() < end, "Super+T never opened a terminal"
    await asyncio.sleep(0.5)
    r = await call(c, "computer", {"actions": [{"type": "move", "x": 640, "y": 400}, {"type": "type", "text": f"cat > {path}\n"}]})
    assert structured(r)["ok"] is True, structured(r)
    end = time.monotonic() + 20
    while not world.running("cat"):
        assert time.monotonic() < end, "cat never started"
        await asyncio.sleep(0.2)


async def end_cat(world: World, c: Client) -> None:
    r = await call(c, "computer", {"actions": [{"type": "keypress", "keys": ["CTRL", "D"]}]})
    assert structured(r)["ok"] is True, structured(r)
    end = time.monotonic() + 20
    while world.running("cat"):
        assert time.monotonic() < end, "cat did not end"
        await asyncio.sleep(0.2)


def close_xterms(world: World) -> None:
    subprocess.run(["docker", "exec", world.container(), "pkill", "-x", "xterm"], capture_output=True, timeout=30)
    wait_until("xterm gone", lambda: not world.running("xterm"))


@pytest.mark.parametrize("mode", MODES)
def test_the_typing_corpus_arrives_byte_exact_each_batch_approved_by_the_person(world: World, mode: str) -> None:
    person = Person("approve")
    out = f"/tmp/mcp-typed-{mode}.txt"
    text = CORPUS.replace("MARK", f"mcp{os.getpid()}{mode}")

    async def go() -> Any:
        async with Client(world.server("--session", world.name), mode=mode, elicitation_callback=person) as c:
            await xterm_with_cat(world, c, out)
            r = await call(c, "computer", {"actions": [{"type": "type", "text": text}]})
            await end_cat(world, c)
            return r

    try:
        r = run(go())
    finally:
        close_xterms(world)
    s = structured(r)
    assert s["ok"] is True and s["executed"] == 1, s
    assert (s["screenshot"]["width"], s["screenshot"]["height"]) == (1280, 800)
    got = guest_file(world.container(), out)
    assert got == text.encode(), (got, text)
    pwned = subprocess.run(["docker", "exec", world.container(), "sh", "-c", "ls /tmp | grep -c sandtop-pwned || true"], capture_output=True, text=True, timeout=30)
    assert pwned.stdout.strip() == "0", "a command in the typed text ran"
    # Every batch that typed or pressed keys was asked about, showing the
    # call made inert; the corpus batch among them.
    assert len(person.asked) >= 4, person.asked
    assert any("cat > " in m for m in person.asked), person.asked
    assert all(f"guest {world.name}" in m for m in person.asked)
    assert not any("\x1b" in m for m in person.asked)


@pytest.mark.parametrize("mode,answer", [("legacy", "decline"), ("auto", "decline"), ("legacy", "cancel"), ("auto", "unchecked")])
def test_a_batch_the_person_does_not_approve_types_nothing(world: World, mode: str, answer: str) -> None:
    approve, refuse = Person("approve"), Person(answer)
    out = f"/tmp/mcp-declined-{mode}-{answer}.txt"

    async def go() -> Any:
        async with Client(world.server("--session", world.name), mode=mode, elicitation_callback=approve) as c:
            await xterm_with_cat(world, c, out)
        async with Client(world.server("--session", world.name), mode=mode, elicitation_callback=refuse) as c:
            r = await call(c, "computer", {"actions": [{"type": "type", "text": "SHOULD-NOT-APPEAR\n"}]})
        async with Client(world.server("--session", world.name), mode=mode, elicitation_callback=approve) as c:
            await end_cat(world, c)
        return r

    try:
        r = run(go())
    finally:
        close_xterms(world)
    assert r.is_error
    s = structured(r)
    assert s["ok"] is False and s["executed"] == 0 and s["error"]["code"] == "not_approved", s
    assert len(refuse.asked) == 1
    assert guest_file(world.container(), out) == b""


def test_an_unknown_action_field_is_refused_by_name_and_nothing_of_the_batch_runs(world: World) -> None:
    person = Person("approve")

    async def go() -> tuple[Any, Any]:
        async with Client(world.server("--session", world.name), mode="auto", elicitation_callback=person) as c:
            bogus = await call(c, "computer", {"actions": [{"type": "wait"}, {"type": "move", "x": 1, "y": 1, "speed": 3}]})
            outside = await call(c, "computer", {"actions": [{"type": "type", "text": "x"}, {"type": "move", "x": 700, "y": 10}], "size": {"width": 640, "height": 400}})
            return bogus, outside

    bogus, outside = run(go())
    s = structured(bogus)
    assert bogus.is_error and s["ok"] is False and s["executed"] == 0, s
    assert "unknown field `speed`" in s["error"]["message"] and s["error"]["index"] == 1, s
    s = structured(outside)
    assert s["error"]["code"] == "out_of_bounds" and s["error"]["index"] == 1, s
    # Refused before anyone was asked: nothing of either batch could run.
    assert person.asked == []


def test_without_elicitation_typing_needs_the_operators_policy(world: World, tmp_path: Any) -> None:
    async def go(*extra: str) -> Any:
        async with Client(world.server("--session", world.name, *extra), mode="legacy") as c:
            return await call(c, "computer", {"actions": [{"type": "move", "x": 5, "y": 5}, {"type": "keypress", "keys": ["SHIFT"]}]})

    r = run(go())
    s = structured(r)
    assert r.is_error and s["error"]["code"] == "not_approved" and s["executed"] == 0, s
    assert "--approve-policy" in s["error"]["message"]
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"confirm_actions": "approve"}))
    r = run(go("--approve-policy", str(policy)))
    s = structured(r)
    assert s["ok"] is True and s["executed"] == 2, s
    # A move alone needs no one.
    async def move() -> Any:
        async with Client(world.server("--session", world.name), mode="legacy") as c:
            return await call(c, "computer", {"actions": [{"type": "move", "x": 9, "y": 9}]})

    assert structured(run(move()))["ok"] is True


def test_guests_the_server_started_are_listed_stopped_and_removed_at_exit(world: World) -> None:
    names = [f"mcp-a-{os.getpid()}", f"mcp-b-{os.getpid()}"]

    async def go() -> tuple[Any, Any, Any, Any]:
        async with Client(world.server(), mode="auto") as c:
            a = await call(c, "sandtop_guest_start", {"name": names[0], "screen": "800x600"})
            b = await call(c, "sandtop_guest_start", {"name": names[1]})
            listed = await call(c, "sandtop_guest_list", {})
            stopped = await call(c, "sandtop_guest_stop", {"name": names[0]})
            foreign = await call(c, "sandtop_guest_stop", {"name": world.name})
            net = await call(c, "sandtop_guest_start", {"network": "allow:https://example.com"})
            shot = await call(c, "screenshot", {})
            return a, listed, stopped, (foreign, net, shot, b)

    a, listed, stopped, (foreign, net, shot, b) = run(go())
    assert structured(a)["name"] == names[0] and structured(a)["screen"] == "800x600", structured(a)
    rows = {g["name"]: g for g in structured(listed)["guests"]}
    assert rows[names[0]]["started_here"] and rows[names[1]]["started_here"]
    assert rows[world.name]["started_here"] is False
    assert structured(stopped) == {"name": names[0], "stopped": True}
    assert foreign.is_error and "not started by this server" in foreign.content[0].text
    assert net.is_error and "operator" in net.content[0].text
    # The default guest is the one started last.
    assert structured(shot)["session"] == names[1] and (structured(shot)["width"], structured(shot)["height"]) == (1280, 800)
    # The server exited: the guest it started is gone; the other one stays.
    left = {g["name"] for g in world.guests()}
    assert names[0] not in left and names[1] not in left, left
    assert world.name in left


def test_the_run_folder_is_one_report_reads(world: World, tmp_path: Any) -> None:
    rec = tmp_path / "run"

    async def go() -> None:
        async with Client(world.server("--session", world.name, "--record", str(rec)), mode="legacy", elicitation_callback=Person("decline")) as c:
            await call(c, "computer", {"actions": [{"type": "move", "x": 100, "y": 100}]})
            await call(c, "computer", {"actions": [{"type": "type", "text": "no"}]})
            await call(c, "screenshot", {"size": {"width": 320, "height": 200}})

    run(go())
    lines = [json.loads(x) for x in (rec / "trajectory.jsonl").read_text().splitlines() if x.strip()]
    kinds = [x["kind"] for x in lines]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished", kinds
    assert {"response", "ledger", "observation", "confirm"} <= set(kinds), kinds
    confirm = [x for x in lines if x["kind"] == "confirm"]
    assert confirm[0]["approved"] is False and confirm[0]["by"] == "elicitation", confirm
    pngs = [p for p in rec.iterdir() if p.suffix == ".png"]
    assert len(pngs) == 2, pngs
    for p in pngs:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    html = tmp_path / "report.html"
    r = world.cli("report", str(rec), "-o", str(html), check=False)
    assert r.returncode == 0, r.stderr
    assert html.stat().st_size > 1000
    # No image data, and no typed text of a refused batch beyond the call itself.
    assert "base64" not in (rec / "trajectory.jsonl").read_text()


def test_the_demo_form_is_filled_and_submitted_through_the_browser_tools(world: World) -> None:
    """The URL policy is checked before anyone is asked; reads need no
    one; a click the person declines does nothing; approved calls fill
    and submit the demo form, checked on the app's own record."""
    person = Person("approve")
    decliner = Person("decline")
    stamp = f"mcp-form-{os.getpid()}"
    demo = "http://127.0.0.1:8080"

    def find(read: dict[str, Any], role: str, label: str) -> str:
        for e in read["elements"]:
            if e["role"] == role and e["label"].strip().lower().startswith(label.lower()):
                return str(e["ref"])
        raise AssertionError(f"no {role} {label!r} in {read['elements']}")

    async def go() -> dict[str, Any]:
        got: dict[str, Any] = {}
        server = world.server("--session", world.name, "--url-policy", demo)
        async with Client(server, mode="legacy", elicitation_callback=person) as c:
            got["outside"] = await call(c, "browser_navigate", {"url": "https://example.com/", "tab_id": None})
            assert person.asked == []
            got["nav"] = await call(c, "browser_navigate", {"url": demo + "/?from=mcp", "tab_id": None})
            got["read"] = await call(c, "browser_read_page", {"tab_id": None, "filter": "interactive"})
            asked_before = len(person.asked)
            read = structured(got["read"])["result"]
            got["asked_for_read"] = len(person.asked) - asked_before
        async with Client(server, mode="auto", elicitation_callback=decliner) as c:
            got["declined"] = await call(c, "browser_click", {"target": find(read, "button", "Submit"), "tab_id": None})
        async with Client(server, mode="auto", elicitation_callback=person) as c:
            read = structured(await call(c, "browser_read_page", {"tab_id": None, "filter": "interactive"}))["result"]
            for label, text in (("Name", stamp), ("Email", "mcp@example.test"), ("Message", "über MCP ✓")):
                role = "textbox"
                r = await call(c, "browser_type", {"text": text, "target": find(read, role, label), "tab_id": None})
                assert structured(r)["ok"] is True, structured(r)
            got["submit"] = await call(c, "browser_click", {"target": find(read, "button", "Submit"), "tab_id": None})
        return got

    try:
        got = run(go())
    finally:
        subprocess.run(["docker", "exec", world.container(), "pkill", "-x", "firefox-esr"], capture_output=True, timeout=30)
    s = structured(got["outside"])
    assert s["ok"] is False and "not approved" in s["error"], s
    s = structured(got["nav"])
    assert s["ok"] is True, s
    active = [t for t in s["state"]["tabs"] if t["active"]]
    # Tab state as origins only: no path, no query.
    assert active and active[0]["url"] == demo, s["state"]
    assert got["asked_for_read"] == 0
    s = structured(got["declined"])
    assert s["ok"] is False and "not approved" in s["error"], s
    assert any("browser_click" in m and "on: http://127.0.0.1:8080" in m for m in decliner.asked), decliner.asked
    assert structured(got["submit"])["ok"] is True
    record = wait_until("the app's record", lambda: guest_file(world.container(), "/home/user/demo/submissions.jsonl"))
    rows = [json.loads(x) for x in record.decode().splitlines() if stamp in x]
    assert len(rows) == 1, record
    assert rows[0]["name"] == stamp and rows[0]["email"] == "mcp@example.test" and rows[0]["message"] == "über MCP ✓", rows


def test_a_cancelled_batch_is_stopped_and_recorded_as_unknown(world: World, tmp_path: Any) -> None:
    """The client gives up on a long batch (its SDK sends
    `notifications/cancelled`): the server drops the request, the daemon
    stops the batch, the ledger says `unknown`, and the desktop takes the
    next call."""
    import anyio

    rec = tmp_path / "run"

    async def go() -> tuple[bool, Any]:
        async with Client(world.server("--session", world.name, "--record", str(rec)), mode="legacy") as c:
            finished = False
            with anyio.move_on_after(1.0):
                await c.call_tool("computer", {"actions": [{"type": "wait"}] * 10})
                finished = True
            r = None
            for _ in range(50):
                r = await c.call_tool("computer", {"actions": [{"type": "move", "x": 3, "y": 3}]})
                if structured(r)["ok"] or structured(r)["error"]["code"] != "busy":
                    break
                await asyncio.sleep(0.1)
            return finished, r

    finished, r = run(go())
    assert finished is False, "ten waits finished within a second"
    assert structured(r)["ok"] is True, structured(r)
    lines = [json.loads(x) for x in (rec / "trajectory.jsonl").read_text().splitlines() if x.strip()]
    first = [x["state"] for x in lines if x["kind"] == "ledger" and x["call_id"] == "mcp_0001"]
    assert first == ["pending", "unknown"], first


def test_a_long_batch_reports_progress_when_asked(world: World) -> None:
    got: list[tuple[float, Optional[str]]] = []

    async def on_progress(progress: float, total: Optional[float], message: Optional[str]) -> None:
        got.append((progress, message))

    async def go() -> Any:
        async with Client(world.server("--session", world.name), mode="legacy") as c:
            return await c.call_tool("computer", {"actions": [{"type": "wait"}] * 10}, progress_callback=on_progress)

    r = run(go())
    assert structured(r)["ok"] is True and structured(r)["executed"] == 10, structured(r)
    # Ten waits of at least 300 ms each: at least two ticks of a second.
    assert len(got) >= 2, got
    assert [p for p, _ in got] == sorted(p for p, _ in got)
    assert all(m is not None and "running" in m for _, m in got), got
