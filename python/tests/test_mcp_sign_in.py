"""``request_sign_in`` over MCP, driven by the official MCP Python SDK
against a real guest and the demo app's sign-in page.

The person behind the client answers URL-mode elicitation as a person
would: opens Sandtop's one-time loopback page and types the values there.
The values are canaries, searched for in every byte that crossed the MCP
connection both ways (the server runs behind a recording relay), its
stderr, the run folder, and every result: they must appear nowhere. The
demo app's record says the password arrived (``password_ok``).

Also: a person who declines to open the page gets ``declined`` and the app
sees no attempt; without URL elicitation the call is refused saying how
to allow it, unless ``--credentials FILE`` answers it.

Needs Docker and the guest image (test_mcp.py's ``world``); skipped
otherwise (SANDTOP_REQUIRE=docker makes that a failure).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from guest import IMAGE, guest_file  # noqa: E402

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp import types as mt  # noqa: E402

from test_mcp import MODES, World, call, run, structured, wait_until, world  # noqa: E402,F401

DEMO = "http://127.0.0.1:8080"
EMAIL = "ada.mcp@example.test"
CANARY_PW = f"canary-Pw-{os.getpid()}-7f3a9c"
CANARY_CODE = f"{os.getpid() % 1000000:06d}"
RELAY = Path(__file__).with_name("mcp_relay.py")


def provision(world: World) -> None:
    """The demo account, through docker exec's stdin (never argv)."""
    accounts = json.dumps([{"email": EMAIL, "password": CANARY_PW, "code": CANARY_CODE}]).encode()
    p = subprocess.run(
        ["docker", "exec", "-i", world.container(), "dd", "of=/home/user/demo/accounts.json", "status=none"],
        input=accounts,
        capture_output=True,
        timeout=30,
    )
    assert p.returncode == 0, p.stderr


def record(world: World) -> list[dict[str, Any]]:
    raw = guest_file(world.container(), "/home/user/demo/sign-ins.jsonl") or b""
    return [json.loads(x) for x in raw.decode().splitlines() if x.strip()]


def relayed(world: World, logdir: Path, *extra: str) -> StdioServerParameters:
    """``host-cli mcp`` behind a relay that records both directions and
    its stderr under ``logdir``."""
    env = {"SANDTOP_STATE_DIR": world.state, "SANDTOP_IMAGE": IMAGE}
    for k in ("DOCKER_HOST", "RUST_LOG", "PATH"):
        if k in os.environ:
            env[k] = os.environ[k]
    args = [str(RELAY), str(logdir), world.host_cli, "mcp", "--session", world.name, "--url-policy", DEMO, *extra]
    return StdioServerParameters(command=sys.executable, args=args, env=env)


class Person:
    """Approves form questions (the browser click); answers a URL
    elicitation by opening the page and typing the values, or declines."""

    def __init__(self, answer: str = "type") -> None:
        self.answer = answer
        self.urls: list[str] = []
        self.pages: list[str] = []

    def type_on_page(self, url: str) -> None:
        u = urllib.parse.urlsplit(url)
        assert u.scheme == "http" and u.hostname == "127.0.0.1", url
        with urllib.request.urlopen(url, timeout=30) as r:
            page = r.read().decode()
        self.pages.append(page)
        body = urllib.parse.urlencode({"f.email": EMAIL, "f.password": CANARY_PW, "action": "submit"}).encode()
        req = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={"Origin": f"http://{u.netloc}", "Content-Type": "application/x-www-form-urlencoded"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            said = r.read().decode()
        assert CANARY_PW not in said
        self.pages.append(said)

    async def __call__(self, context: Any, params: Any) -> mt.ElicitResult:
        if params.mode == "form":
            return mt.ElicitResult(action="accept", content={"approve": True})
        assert params.mode == "url", params
        self.urls.append(params.url)
        if self.answer == "decline":
            return mt.ElicitResult(action="decline")
        await asyncio.to_thread(self.type_on_page, params.url)
        return mt.ElicitResult(action="accept")


def find(read: dict[str, Any], label: str) -> str:
    for e in read["elements"]:
        if e["label"].strip().lower().startswith(label.lower()):
            return str(e["ref"])
    raise AssertionError(f"no element {label!r} in {read['elements']}")


async def to_login(c: Client) -> dict[str, Any]:
    r = await call(c, "browser_navigate", {"url": DEMO + "/login", "tab_id": None})
    assert structured(r)["ok"] is True, structured(r)
    return dict(structured(await call(c, "browser_read_page", {"tab_id": None, "filter": "interactive"}))["result"])


def sign_in_args(read: dict[str, Any]) -> dict[str, Any]:
    return {
        "credential_origin": DEMO,
        "reason": "The account page needs a sign-in.",
        "fields": [
            {"id": "email", "label": "Email", "type": "email", "required": True, "target": find(read, "Email")},
            {"id": "password", "label": "Password", "type": "password", "required": True, "target": find(read, "Password")},
        ],
        "options": None,
    }


def everything(logdir: Path, rec: Path, results: list[Any]) -> bytes:
    blob = b"".join(p.read_bytes() for p in sorted(logdir.iterdir()))
    blob += b"".join(p.read_bytes() for p in sorted(rec.iterdir()) if p.suffix != ".png")
    blob += json.dumps([r.model_dump(mode="json") for r in results]).encode()
    return blob


def close_firefox(world: World) -> None:
    subprocess.run(["docker", "exec", world.container(), "pkill", "-x", "firefox-esr"], capture_output=True, timeout=30)


@pytest.mark.parametrize("mode", MODES)
def test_the_person_types_on_the_page_and_the_values_cross_no_mcp_message(world: World, mode: str, tmp_path: Path) -> None:
    provision(world)
    person = Person("type")
    logdir, rec = tmp_path / "relay", tmp_path / "run"
    logdir.mkdir()
    before = len(record(world))

    async def go() -> list[Any]:
        async with Client(relayed(world, logdir, "--record", str(rec)), mode=mode, elicitation_callback=person) as c:
            read = await to_login(c)
            signed = await call(c, "request_sign_in", sign_in_args(read))
            click = await call(c, "browser_click", {"target": find(read, "Sign in"), "tab_id": None})
            return [signed, click]

    try:
        results = run(go())
    finally:
        close_firefox(world)
    signed, click = results
    assert not signed.is_error, signed
    assert structured(signed) == {"status": "submitted"}, structured(signed)
    assert structured(click)["ok"] is True, structured(click)
    assert len(person.urls) == 1 and person.urls[0].startswith("http://127.0.0.1:"), person.urls
    events = wait_until("the app's record", lambda: [e for e in record(world)[before:] if e["event"] == "password_ok"])
    assert events[0]["email"] == EMAIL, events
    # The canary is nowhere: not in either direction of the MCP connection,
    # the server's stderr, the run folder, the results.
    blob = everything(logdir, rec, results)
    assert (logdir / "to_server").stat().st_size > 0 and (logdir / "from_server").stat().st_size > 0
    assert CANARY_PW.encode() not in blob
    assert b'"status":"submitted"' in (rec / "trajectory.jsonl").read_bytes().replace(b" ", b"")
    # The page showed where the values go, and no value.
    assert DEMO in person.pages[0] and 'type="password"' in person.pages[0]
    # The page works once (it is gone once the request ended).
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(person.urls[0], timeout=30)


def test_a_person_who_declines_to_open_the_page_gets_declined_and_nothing_is_typed(world: World, tmp_path: Path) -> None:
    provision(world)
    person = Person("decline")
    logdir = tmp_path / "relay"
    logdir.mkdir()
    before = len(record(world))

    async def go() -> Any:
        async with Client(relayed(world, logdir), mode="legacy", elicitation_callback=person) as c:
            read = await to_login(c)
            signed = await call(c, "request_sign_in", sign_in_args(read))
            await call(c, "browser_click", {"target": find(read, "Sign in"), "tab_id": None})
            return signed

    try:
        signed = run(go())
    finally:
        close_firefox(world)
    assert structured(signed) == {"status": "declined"}, structured(signed)
    # The form was sent empty: the app saw no password of the account.
    assert not [e for e in record(world)[before:] if e["event"] == "password_ok"]


def test_without_url_elicitation_it_is_refused_unless_a_credentials_file_answers(world: World, tmp_path: Path) -> None:
    provision(world)
    logdir = tmp_path / "relay"
    logdir.mkdir()
    creds = tmp_path / "credentials.json"
    creds.write_text(json.dumps({DEMO: {"email": EMAIL, "password": CANARY_PW}}))
    os.chmod(creds, 0o600)
    before = len(record(world))

    async def go(*extra: str) -> Any:
        async with Client(relayed(world, logdir, "--approve-policy", str(policy), *extra), mode="legacy") as c:
            read = await to_login(c)
            signed = await call(c, "request_sign_in", sign_in_args(read))
            if not signed.is_error:
                await call(c, "browser_click", {"target": find(read, "Sign in"), "tab_id": None})
            return signed

    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"approve_browser_members": ["navigate", "click"]}))
    try:
        refused = run(go())
        filled = run(go("--credentials", str(creds)))
    finally:
        close_firefox(world)
    assert refused.is_error
    text = refused.content[0].text
    assert "URL" in text and "--credentials" in text, text
    assert structured(filled) == {"status": "submitted"}, filled
    wait_until("the app's record", lambda: [e for e in record(world)[before:] if e["event"] == "password_ok"])
    assert CANARY_PW.encode() not in b"".join(p.read_bytes() for p in logdir.iterdir())
