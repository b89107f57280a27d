"""``host-cli mcp --network ask``: the egress proxy's origin questions go
to the person by form-mode elicitation, driven by the official MCP Python
SDK against a real guest.

Without form elicitation the origin is denied, and stderr says how to
allow it.

A local HTTP server (loopback, reached by the host's egress proxy under
``--allow-private 127.0.0.1/32`` and a pinned name) serves a page with a
marker. The person approves the browser calls; their answer to the origin
question decides: approve and the page loads (the marker is read back
through ``browser_read_page``), decline and it stays refused (the marker
never reaches the guest). The question shows the origin only: no path,
no query, nothing the page or the model wrote.

Needs Docker and the guest image (test_mcp.py's ``world``); skipped
otherwise (SANDTOP_REQUIRE=docker makes that a failure).
"""

from __future__ import annotations

import http.server
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp import types as mt  # noqa: E402

from test_mcp import World, call, run, structured, world  # noqa: E402,F401

NAME = "origin.test"
MARKER = f"origin-marker-{os.getpid()}"
SECRET_PATH = f"/secret-path-{os.getpid()}"
RELAY = Path(__file__).with_name("mcp_relay.py")


class Page:
    """A loopback server with one page (never on 0.0.0.0)."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                hits.append(self.path)
                body = f"<!doctype html><title>t</title><button>{MARKER}</button>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def origin(self) -> str:
        return f"http://{NAME}:{self.port}"


@pytest.fixture()
def page() -> Iterator[Page]:
    p = Page()
    try:
        yield p
    finally:
        p.server.shutdown()


class Person:
    """Approves the browser calls; answers the origin question with
    ``origin_answer``; keeps what every question showed."""

    def __init__(self, origin_answer: str) -> None:
        self.origin_answer = origin_answer
        self.origin_questions: list[str] = []
        self.other: list[str] = []

    async def __call__(self, context: Any, params: Any) -> mt.ElicitResult:
        assert params.mode == "form", params
        if "network origin" in params.message:
            self.origin_questions.append(params.message)
            if self.origin_answer == "approve":
                return mt.ElicitResult(action="accept", content={"approve": True})
            return mt.ElicitResult(action=self.origin_answer)
        self.other.append(params.message)
        return mt.ElicitResult(action="accept", content={"approve": True})


def session(world: World, page: Page, person: Person | None, *extra: str, relay: Path | None = None) -> dict[str, Any]:
    server = world.server(
        *extra,
        "--network",
        "ask",
        "--allow-private",
        "127.0.0.1/32",
        "--egress-resolve",
        f"{NAME}=127.0.0.1",
        "--url-policy",
        page.origin,
    )
    if relay is not None:
        # Behind test_mcp_sign_in's relay, which keeps the server's stderr.
        server = StdioServerParameters(command=sys.executable, args=[str(RELAY), str(relay), server.command, *server.args], env=server.env)

    async def go() -> dict[str, Any]:
        got: dict[str, Any] = {}
        async with Client(server, mode="legacy", elicitation_callback=person) as c:
            started = await call(c, "sandtop_guest_start", {"network": "ask"})
            assert not started.is_error, started.content
            got["nav"] = await call(c, "browser_navigate", {"url": page.origin + SECRET_PATH + "?q=1", "tab_id": None})
            got["read"] = await call(c, "browser_read_page", {"tab_id": None, "filter": "interactive"})
            # A second load: the answer lasts for the session (no new question).
            got["again"] = await call(c, "browser_navigate", {"url": page.origin + "/again", "tab_id": None})
        return got

    return run(go())


def text_of(r: Any) -> str:
    return json.dumps(r.structured_content) + " ".join(getattr(c, "text", "") for c in r.content)


def test_an_approved_origin_loads_and_the_question_shows_the_origin_only(world: World, page: Page) -> None:
    person = Person("approve")
    got = session(world, page, person)
    assert len(person.origin_questions) == 1, person.origin_questions
    q = person.origin_questions[0]
    assert page.origin in q, q
    assert SECRET_PATH not in q and "?q=1" not in q, q
    assert MARKER in text_of(got["read"]), structured(got["read"])
    assert SECRET_PATH + "?q=1" in page.hits and "/again" in page.hits, page.hits


def test_a_declined_origin_stays_refused_and_the_page_never_gets_the_content(world: World, page: Page) -> None:
    person = Person("decline")
    got = session(world, page, person)
    # Asked once: the decline lasts for the session.
    assert len(person.origin_questions) == 1, person.origin_questions
    assert page.hits == [], page.hits
    assert MARKER not in text_of(got["read"])


def test_without_form_elicitation_the_origin_is_denied_saying_how_to_allow_it(
    world: World, page: Page, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"approve_browser_members": ["navigate"]}))
    rec = tmp_path / "run"
    logs = tmp_path / "logs"
    logs.mkdir()
    got = session(world, page, None, "--approve-policy", str(policy), "--record", str(rec), relay=logs)
    err = (logs / "stderr").read_text()
    assert page.hits == [], page.hits
    assert MARKER not in text_of(got["read"])
    assert f"--network allow:{page.origin}" in err, err
    lines = [json.loads(x) for f in rec.rglob("*.jsonl") for x in f.read_text().splitlines() if x.strip()]
    asked = [x for x in lines if x.get("kind") == "origin_question"]
    assert asked and all(x["answer"] == "deny" and x["origin"] == page.origin for x in asked), asked


def test_a_cancelled_question_refuses_that_request_only(world: World, page: Page) -> None:
    person = Person("cancel")
    got = session(world, page, person)
    # Not remembered: the next load asks again, and nothing got through.
    assert len(person.origin_questions) >= 2, person.origin_questions
    assert page.hits == [], page.hits
    assert MARKER not in text_of(got["read"])
