"""``host-cli mcp --http 127.0.0.1:PORT``: Streamable HTTP, driven by the
official MCP Python SDK's own HTTP client (``streamable_http_client``) and
by raw requests for what a client must not get through.

Checked: a non-loopback address is refused at start, saying why; the
bearer token is printed once and kept in a 0600 file that is removed at
exit; a request without the token, or with a wrong one, is refused (401);
a foreign ``Host`` (DNS rebinding) or a foreign ``Origin`` is refused
(403) even with the right token; a real session through the SDK, in both
lifecycles (the ``initialize`` handshake with sessions, and 2026-07-28's
stateless requests), lists the tools, takes a screenshot at the asked
size, and runs a batch that presses a key only after the person approves
it through elicitation (a decline runs nothing).

Needs Docker and the guest image (the ``world`` fixture of test_mcp.py);
skipped otherwise (SANDTOP_REQUIRE=docker makes that a failure).
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import signal
import stat
import subprocess
import sys
import threading
from typing import Any, Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from guest import IMAGE, binary, decode_png  # noqa: E402

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

from test_mcp import MODES, Person, World, call, image, run, structured, world  # noqa: E402,F401

INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
).encode()


class HttpServer:
    """``host-cli mcp --http 127.0.0.1:0`` bound to the world's guest; the
    URL and the token read from what it printed."""

    def __init__(self, world: World, token_file: str, *extra: str) -> None:
        env = {**os.environ, "SANDTOP_STATE_DIR": world.state, "SANDTOP_IMAGE": IMAGE}
        self.token_file = token_file
        self.p = subprocess.Popen(
            [world.host_cli, "mcp", "--http", "127.0.0.1:0", "--token-file", token_file, "--session", world.name, *extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        lines: "queue.Queue[str]" = queue.Queue()
        self.printed: list[str] = []

        def pump() -> None:
            assert self.p.stderr is not None
            for line in self.p.stderr:
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        url = token = None
        while url is None or token is None:
            try:
                line = lines.get(timeout=60)
            except queue.Empty:
                raise AssertionError(f"host-cli mcp --http printed no URL and token: {self.printed}") from None
            self.printed.append(line)
            if m := re.search(r"Streamable HTTP at (http://127\.0\.0\.1:(\d+)/mcp)", line):
                url, self.port = m.group(1), int(m.group(2))
            if m := re.search(r"bearer token .*: ([0-9a-f]{64})$", line.strip()):
                token = m.group(1)
        self.url: str = url
        self.token: str = token

    def client(self, mode: str, person: Person | None = None, token: str | None = None) -> Client:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        transport = streamable_http_client(self.url, http_client=create_mcp_http_client(headers=headers))
        return Client(transport, mode=mode, elicitation_callback=person)

    def post(self, headers: dict[str, str], body: bytes = INIT) -> tuple[int, str]:
        """A raw POST whose every header, `Host` included, is ours."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.putrequest("POST", "/mcp", skip_host=True, skip_accept_encoding=True)
        base = {
            "Host": f"127.0.0.1:{self.port}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Content-Length": str(len(body)),
        }
        for k, v in {**base, **headers}.items():
            c.putheader(k, v)
        c.endheaders(body)
        r = c.getresponse()
        text = r.read().decode(errors="replace")
        c.close()
        return r.status, text

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            self.p.wait(timeout=120)


@pytest.fixture(scope="module")
def server(world: World, tmp_path_factory: Any) -> Iterator[HttpServer]:
    s = HttpServer(world, str(tmp_path_factory.mktemp("http") / "token"))
    try:
        yield s
    finally:
        s.stop()


def test_a_non_loopback_address_is_refused_at_start() -> None:
    host_cli = binary("SANDTOP_HOST_CLI", "host-cli")
    if host_cli is None:
        pytest.skip("host-cli is not built")
    for addr in ("0.0.0.0:8123", "192.168.1.2:8123"):
        p = subprocess.run([host_cli, "mcp", "--http", addr], capture_output=True, text=True, timeout=60)
        assert p.returncode != 0
        assert "loopback only" in p.stderr, p.stderr


def test_the_token_is_printed_once_and_kept_in_a_0600_file(server: HttpServer) -> None:
    assert stat.S_IMODE(os.stat(server.token_file).st_mode) == 0o600
    with open(server.token_file) as f:
        assert f.read().strip() == server.token
    assert sum(server.token in line for line in server.printed) == 1, server.printed


def test_the_right_token_is_let_in(server: HttpServer) -> None:
    status, body = server.post({"Authorization": f"Bearer {server.token}"})
    assert status == 200, body
    assert '"protocolVersion":"2025-11-25"' in body.replace(" ", ""), body


@pytest.mark.parametrize("auth", [None, "Bearer " + "0" * 64, "Bearer ", "Basic dXNlcjpwYXNz", "TOKEN"])
def test_a_missing_or_wrong_token_is_refused(server: HttpServer, auth: str | None) -> None:
    headers = {} if auth is None else {"Authorization": auth.replace("TOKEN", server.token)}
    status, body = server.post(headers)
    assert status == 401, body
    assert "Bearer TOKEN" in body
    assert server.token not in body


@pytest.mark.parametrize("origin", ["http://evil.test", "null", "http://localhost:PORT", "https://127.0.0.1:PORT"])
def test_a_foreign_origin_is_refused_even_with_the_token(server: HttpServer, origin: str) -> None:
    status, body = server.post({"Authorization": f"Bearer {server.token}", "Origin": origin.replace("PORT", str(server.port))})
    assert status == 403, body
    assert "Origin" in body
    # Its own origin passes.
    status, _ = server.post({"Authorization": f"Bearer {server.token}", "Origin": f"http://127.0.0.1:{server.port}"})
    assert status == 200


@pytest.mark.parametrize("host", ["evil.test:PORT", "localhost:PORT", "127.0.0.1", "127.0.0.1:1"])
def test_a_foreign_host_is_refused_even_with_the_token(server: HttpServer, host: str) -> None:
    status, body = server.post({"Authorization": f"Bearer {server.token}", "Host": host.replace("PORT", str(server.port))})
    assert status == 403, body
    assert "DNS rebinding" in body


def test_the_sdk_client_with_a_wrong_token_gets_nothing(server: HttpServer) -> None:
    async def go() -> None:
        async with server.client("legacy", token="f" * 64) as c:
            await c.list_tools()

    with pytest.raises(BaseException):
        run(go())


@pytest.mark.parametrize("mode", MODES)
def test_a_real_session_over_streamable_http(server: HttpServer, world: World, mode: str) -> None:
    approve, decline = Person("approve"), Person("decline")

    async def go() -> dict[str, Any]:
        got: dict[str, Any] = {}
        async with server.client(mode, approve) as c:
            got["version"] = c.protocol_version
            got["tools"] = {t.name for t in (await c.list_tools()).tools}
            got["shot"] = await call(c, "screenshot", {"size": {"width": 640, "height": 400}})
            got["key"] = await call(c, "computer", {"actions": [{"type": "keypress", "keys": ["SHIFT"]}]})
        async with server.client(mode, decline) as c:
            got["declined"] = await call(c, "computer", {"actions": [{"type": "keypress", "keys": ["SHIFT"]}]})
        return got

    got = run(go())
    assert got["version"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert {"computer", "screenshot", "sandtop_guest_start", "browser_read_page"} <= got["tools"], got["tools"]
    w, h, _ = decode_png(image(got["shot"]))
    assert (w, h) == (640, 400)
    assert structured(got["shot"])["session"] == world.name
    s = structured(got["key"])
    assert s["ok"] is True and s["executed"] == 1, s
    assert len(approve.asked) == 1 and f"guest {world.name}" in approve.asked[0], approve.asked
    s = structured(got["declined"])
    assert s["ok"] is False and s["executed"] == 0 and s["error"]["code"] == "not_approved", s
    assert len(decline.asked) == 1


def test_the_token_file_is_removed_at_exit(server: HttpServer) -> None:
    """Last in this file: it stops the module's server (SIGTERM)."""
    assert os.path.exists(server.token_file)
    server.stop()
    assert server.p.returncode == 0, server.printed
    assert not os.path.exists(server.token_file)
