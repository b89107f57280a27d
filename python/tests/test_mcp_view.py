"""``host-cli mcp`` with a client that declares no elicitation: the
approvals go to ``host-cli view``'s buttons (docs/contract.md rule 58).

The MCP server holds the guest's run lock and serves its control socket;
``host-cli view SESSION`` attaches to it as it attaches to a run's, and
shows each question with Approve and Deny. The person here is a program
speaking the view's own interface: it signs in with the printed one-time
link (cookie and page key, as the page gets them), opens the view's
WebSocket with the page's Origin and key, and answers each question it is
sent with the command the page's buttons send.

Checked, against a real guest: every batch that types or presses keys is
asked in the view (kind, guest, the call made inert) and runs once
approved there (an xterm gets the typed text byte-exact); a batch denied
in the view types nothing; the server's run folder records who decided
(``view``); a question closes in the view with who answered.

Needs Docker, the guest image (test_mcp.py's ``world``) and
websocket-client (which Selenium brings: ``pip install './python[view]'``);
skipped otherwise (SANDTOP_REQUIRE=docker makes that a failure).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from typing import Any, Iterator, Optional

import pytest

sys.path.insert(0, os.path.dirname(__file__))

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from guest import skip, guest_file  # noqa: E402
from test_mcp import World, call, close_xterms, end_cat, run, structured, world, xterm_with_cat  # noqa: E402,F401
from test_mcp_network_ask import MARKER, NAME, SECRET_PATH, Page, page, text_of  # noqa: E402,F401


class ViewPerson:
    """The person at ``host-cli view``: signed in through the view's
    link, connected to its WebSocket, answering each question with
    ``answer`` (``approve`` or ``deny``) as the page's buttons do."""

    def __init__(self, link: str) -> None:
        try:
            import websocket  # type: ignore[import-untyped]
        except ImportError:
            skip("docker", "websocket-client is not installed (pip install './python[view]')")
        m = re.match(r"http://127\.0\.0\.1:(\d+)(/login\?t=[0-9a-f]{64})$", link)
        assert m, link
        self.port = int(m.group(1))
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", m.group(2), headers={"Host": f"127.0.0.1:{self.port}"})
        r = c.getresponse()
        body = r.read().decode()
        assert r.status == 200, body
        cookie = r.getheader("Set-Cookie") or ""
        c.close()
        cm = re.match(r"(sandtop_view_\d+)=([0-9a-f]+)", cookie)
        assert cm, cookie
        km = re.search(r'<meta name="sandtop-page-key" content="([0-9a-f]{64})">', body)
        assert km, "the login answer holds no page key"
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{self.port}/ws",
            origin=f"http://127.0.0.1:{self.port}",
            cookie=f"{cm.group(1)}={cm.group(2)}",
            subprotocols=["sandtop-view", f"sandtop-key.{km.group(1)}"],
            timeout=1,
        )
        self.answer = "approve"
        self.questions: list[dict[str, Any]] = []
        self.closed: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        import websocket

        while not self.stopping:
            try:
                op, data = self.ws.recv_data()
            except websocket.WebSocketTimeoutException:
                continue
            except Exception:  # noqa: BLE001 - closed at the end
                return
            if op != websocket.ABNF.OPCODE_TEXT:
                continue  # frames
            e = json.loads(data)
            with self.lock:
                self.events.append(e)
                if e.get("type") == "question":
                    self.questions.append(e)
                    self.ws.send(json.dumps({"type": "answer", "id": e["id"], "answer": self.answer}))
                elif e.get("type") == "closed":
                    self.closed.append(e)

    def set(self, answer: str) -> None:
        with self.lock:
            self.answer = answer

    def close(self) -> None:
        self.stopping = True
        self.ws.close()
        self.thread.join(timeout=5)


class View:
    """`host-cli view NAME` as a process, with a person at it."""

    def __init__(self, world: World, name: str) -> None:
        self.proc = subprocess.Popen(
            [world.host_cli, "view", name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "SANDTOP_STATE_DIR": world.state},
        )
        self.person: Optional[ViewPerson] = None
        try:
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline()
            m = re.search(r"http://127\.0\.0\.1:\d+/login\?t=[0-9a-f]{64}", line)
            assert m, f"host-cli view printed no link: {line!r}"
            self.person = ViewPerson(m.group(0))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.person is not None:
            self.person.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def view(world: World) -> Iterator[ViewPerson]:
    v = View(world, world.name)
    try:
        assert v.person is not None
        yield v.person
    finally:
        v.close()


def test_a_typing_batch_approved_in_the_view_runs_and_one_denied_there_types_nothing(world: World, view: ViewPerson, tmp_path: Any) -> None:
    rec = tmp_path / "run"
    approved_out = "/tmp/mcp-view-approved.txt"
    denied_out = "/tmp/mcp-view-denied.txt"
    text = f"typed after the view's Approve {os.getpid()} éü✓\n"

    async def go() -> tuple[Any, Any]:
        # No elicitation_callback: the client declares no elicitation.
        async with Client(world.server("--session", world.name, "--record", str(rec)), mode="legacy") as c:
            view.set("approve")
            await xterm_with_cat(world, c, approved_out)
            ok = await call(c, "computer", {"actions": [{"type": "type", "text": text}]})
            await end_cat(world, c)
            await xterm_with_cat(world, c, denied_out)
            view.set("deny")
            denied = await call(c, "computer", {"actions": [{"type": "type", "text": "SHOULD-NOT-APPEAR\n"}]})
            view.set("approve")
            await end_cat(world, c)
            return ok, denied

    try:
        ok, denied = run(go())
    finally:
        close_xterms(world)
    s = structured(ok)
    assert s["ok"] is True and s["executed"] == 1, s
    assert guest_file(world.container(), approved_out) == text.encode()
    s = structured(denied)
    assert denied.is_error and s["ok"] is False and s["executed"] == 0, s
    assert s["error"]["code"] == "not_approved" and "denied it in the view" in s["error"]["message"], s
    assert guest_file(world.container(), denied_out) == b""
    # Every question was one of the server's, about this guest, and closed
    # in the view saying the view answered.
    with view.lock:
        questions, closed = list(view.questions), list(view.closed)
    assert len(questions) >= 6, questions
    assert all(q["kind"] == "confirm_action" and f"guest {world.name}" in q["title"] for q in questions), questions
    assert any("SHOULD-NOT-APPEAR" in q["text"] for q in questions)
    assert all(q["answers"] == ["approve", "deny"] for q in questions)
    by_id = {c["id"]: c for c in closed}
    assert all(by_id[q["id"]]["by"] == "view" for q in questions), closed
    assert sorted(c["answer"] for c in closed if c["id"] in {q["id"] for q in questions}).count("deny") == 1
    # The run folder says who decided each.
    lines = [json.loads(x) for x in (rec / "trajectory.jsonl").read_text().splitlines() if x.strip()]
    confirm = [x for x in lines if x["kind"] == "confirm"]
    assert confirm and all(x["by"] == "view" for x in confirm), confirm
    assert [x["approved"] for x in confirm].count(False) == 1, confirm


def test_the_view_shows_the_server_as_the_guests_run_while_it_is_connected(world: World, view: ViewPerson) -> None:
    async def go() -> Any:
        async with Client(world.server("--session", world.name), mode="auto") as c:
            # The view attaches within its 100 ms look.
            end = time.monotonic() + 10
            while time.monotonic() < end:
                with view.lock:
                    if any(e.get("type") == "hello" and "host-cli mcp" in e.get("task", "") for e in view.events):
                        return True
                time.sleep(0.1)
            return False

    assert run(go()), view.events[-5:]


def test_an_origin_question_without_elicitation_is_answered_in_the_view(world: World, page: Page, tmp_path: Any) -> None:
    """`--network ask` with a client that cannot ask: the proxy's
    question goes to the view of the guest the server started (the origin
    only); Approve lets the page load."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"approve_browser_members": ["navigate"]}))
    rec = tmp_path / "run"
    server = world.server(
        "--approve-policy",
        str(policy),
        "--record",
        str(rec),
        "--network",
        "ask",
        "--allow-private",
        "127.0.0.1/32",
        "--egress-resolve",
        f"{NAME}=127.0.0.1",
        "--url-policy",
        page.origin,
    )
    views: list[View] = []

    async def go() -> dict[str, Any]:
        got: dict[str, Any] = {}
        async with Client(server, mode="legacy") as c:
            started = await call(c, "sandtop_guest_start", {"network": "ask"})
            assert not started.is_error, started.content
            views.append(View(world, structured(started)["name"]))
            got["nav"] = await call(c, "browser_navigate", {"url": page.origin + SECRET_PATH + "?q=1", "tab_id": None})
            got["read"] = await call(c, "browser_read_page", {"tab_id": None, "filter": "interactive"})
        return got

    try:
        got = run(go())
    finally:
        for v in views:
            v.close()
    assert views and views[0].person is not None
    person = views[0].person
    origin_qs = [q for q in person.questions if q["kind"] == "origin"]
    assert len(origin_qs) == 1, person.questions
    q = origin_qs[0]
    assert page.origin in q["title"] and SECRET_PATH not in q["title"] + q["text"], q
    assert q["answers"] == ["approve", "deny", "cancel"], q
    assert any(c["id"] == q["id"] and c["by"] == "view" and c["answer"] == "approve" for c in person.closed), person.closed
    assert MARKER in text_of(got["read"]), structured(got["read"])
    assert SECRET_PATH + "?q=1" in page.hits, page.hits
    # The view saw the proxy's decision too, and the run folder recorded it.
    assert any(e.get("type") == "network" for e in person.events), [e.get("type") for e in person.events]
    lines = [json.loads(x) for f in rec.rglob("*.jsonl") for x in f.read_text().splitlines() if x.strip()]
    asked = [x for x in lines if x.get("kind") == "origin_question"]
    assert asked and asked[0]["answer"] == "approve" and asked[0]["origin"] == page.origin, asked
