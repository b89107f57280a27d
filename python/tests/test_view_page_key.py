"""The view's cookie reaches every port of 127.0.0.1; the cookie alone is
not enough (docs/security.md W6).

Headless Chromium signs in to ``host-cli view`` of a local guest (Xvfb and
sandtopd on this host, no Docker), then opens a page of a second local
server on another port of 127.0.0.1 in the same browser. That server
receives the view's cookie (cookies do not isolate ports) and replays it
as a non-browser client would, with the view's own ``Origin`` forged: the
WebSocket (frames, state, questions, answers, takeover, input) and the
snapshot are refused, and nothing is taken over. The page on the other
port cannot read the view's page key either. The real page still works:
frames, the snapshot button, Take control and Give back, a reload; a new
tab of the view's own origin (the cookie, no key) gets no socket.

Skips (``SKIP browser: ...``) without host-cli and sandtopd built, Xvfb,
Chromium, chromedriver or Selenium; ``SANDTOP_REQUIRE=browser`` makes that
a failure.
"""

from __future__ import annotations

import http.client
import http.server
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
from typing import Any, Iterator

import pytest

import sandtop
from guest import binary, skip
from test_view import cookie_name, need_chromium, wait_until

KEY_ITEM = "sandtop-page-key"


def need_local_guest() -> str:
    host_cli = binary("SANDTOP_HOST_CLI", "host-cli")
    if host_cli is None:
        skip("browser", "host-cli is not built (SANDTOP_HOST_CLI)")
    assert host_cli is not None
    if not os.access(os.path.join(os.path.dirname(host_cli), "sandtopd"), os.X_OK) and shutil.which("sandtopd") is None:
        skip("browser", "sandtopd is not built next to host-cli")
    if shutil.which("Xvfb") is None:
        skip("browser", "Xvfb is not installed (a local guest needs it)")
    return host_cli


class Neighbour:
    """Another server on 127.0.0.1 (another port): it records every
    request's path and headers, and serves a page whose script tries what
    a hostile page there could."""

    PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>neighbour</title></head><body>
<script>
window.tries = {done: false};
try { window.tries.storage = sessionStorage.getItem("%(item)s"); } catch (e) { window.tries.storage = "error"; }
const ws = new WebSocket("ws://127.0.0.1:%(port)d/ws", ["sandtop-view", "sandtop-key.guess"]);
ws.onopen = () => { window.tries.ws = "open"; ws.send(JSON.stringify({type: "take"})); };
ws.onerror = () => { window.tries.ws = window.tries.ws || "error"; };
ws.onclose = () => { window.tries.ws = window.tries.ws || "closed"; window.tries.done = true; };
</script></body></html>"""

    def __init__(self, view_port: int) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        page = (self.PAGE % {"item": KEY_ITEM, "port": view_port}).encode()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                outer.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                body = page if self.path == "/" else b""
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def cookies_seen(self, name: str) -> list[str]:
        out = []
        for _, h in self.requests:
            for pair in h.get("cookie", "").split(";"):
                k, _, v = pair.strip().partition("=")
                if k == name:
                    out.append(v)
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def replay_ws(port: int, cookie: str, protocols: str | None) -> tuple[int, bytes]:
    """A non-browser client's handshake with the captured cookie and the
    view's own Origin forged: the status and what followed the head."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        head = (
            "GET /ws HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: http://127.0.0.1:{port}\r\nCookie: {cookie_name(port)}={cookie}\r\n"
        )
        if protocols is not None:
            head += f"Sec-WebSocket-Protocol: {protocols}\r\n"
        s.sendall((head + "\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data


def replay_get(port: int, path: str, cookie: str, origin: bool = True) -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.putrequest("GET", path, skip_host=True)
    c.putheader("Host", f"127.0.0.1:{port}")
    c.putheader("Cookie", f"{cookie_name(port)}={cookie}")
    if origin:
        c.putheader("Origin", f"http://127.0.0.1:{port}")
    c.endheaders()
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


class World:
    def __init__(self, driver: Any, view: subprocess.Popen[str], link: str, session: Any) -> None:
        self.driver = driver
        self.view = view
        self.link = link
        self.session = session
        self.port = int(re.search(r":(\d+)/", link).group(1))  # type: ignore[union-attr]

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    host_cli = need_local_guest()
    chromium, chromedriver = need_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    state = tempfile.mkdtemp(prefix="sandtop-view-key-")
    old_state = os.environ.get("SANDTOP_STATE_DIR")
    os.environ["SANDTOP_STATE_DIR"] = state
    session = sandtop.Session.start(host_cli=host_cli, backend="local", screen=(320, 200))
    view = subprocess.Popen([host_cli, "view", session.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    driver = None
    try:
        assert view.stdout is not None
        line = view.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:\d+/login\?t=[0-9a-f]{64}", line)
        assert m, f"host-cli view printed no link: {line!r}"
        opts = webdriver.ChromeOptions()
        opts.binary_location = chromium
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,900", "--disable-dev-shm-usage"):
            opts.add_argument(a)
        driver = webdriver.Chrome(service=Service(chromedriver), options=opts)
        w = World(driver, view, m.group(0), session)
        driver.get(w.link)
        yield w
    finally:
        if driver is not None:
            driver.quit()
        view.terminate()
        view.wait(timeout=10)
        session.stop()
        if old_state is None:
            os.environ.pop("SANDTOP_STATE_DIR", None)
        else:
            os.environ["SANDTOP_STATE_DIR"] = old_state
        shutil.rmtree(state, ignore_errors=True)


def test_a_server_on_another_port_gets_the_cookie_and_it_opens_nothing(world: World) -> None:
    driver = world.driver
    port = world.port
    # The real page: signed in, its key in sessionStorage, the address bar
    # on the page (not the spent link), frames arriving over the socket.
    wait_until("a first frame", lambda: world.js("return window.sandtopView.frames") > 0)
    key = world.js(f"return sessionStorage.getItem('{KEY_ITEM}')")
    assert isinstance(key, str) and re.fullmatch(r"[0-9a-f]{64}", key), key
    assert world.js("return location.pathname + location.search") == "/"
    assert world.js("return document.querySelector('meta[name=\"sandtop-page-key\"]')") is None
    cookie = driver.get_cookie(cookie_name(port))
    assert cookie is not None and cookie.get("httpOnly") is True
    cookie_value = str(cookie["value"])
    assert cookie_value != key

    neighbour = Neighbour(port)
    main = driver.current_window_handle
    try:
        # The same browser opens a page on another port of 127.0.0.1.
        driver.switch_to.new_window("tab")
        driver.get(f"http://127.0.0.1:{neighbour.port}/")
        tries = wait_until("the neighbour's tries", lambda: world.js("return window.tries.done && window.tries"))
        driver.close()
        driver.switch_to.window(main)
        # The cookie crossed ports; the key did not (not in any request,
        # and the page there cannot read the view's sessionStorage).
        assert cookie_value in neighbour.cookies_seen(cookie_name(port)), neighbour.requests
        assert all(key not in path and key not in str(h) for path, h in neighbour.requests)
        assert tries["storage"] is None, tries
        assert tries["ws"] != "open", tries

        # The captured cookie replayed by a non-browser client, Origin forged.
        status, head = replay_ws(port, cookie_value, None)
        assert status == 403 and b"cookie alone" in head, head
        assert replay_ws(port, cookie_value, "sandtop-view")[0] == 403
        assert replay_ws(port, cookie_value, "sandtop-view, sandtop-key." + "0" * 64)[0] == 403
        assert replay_ws(port, cookie_value, "sandtop-view, sandtop-key." + cookie_value)[0] == 403
        status, body = replay_get(port, "/snapshot.png", cookie_value)
        assert status == 403 and not body.startswith(b"\x89PNG"), body[:100]
        # What the cookie alone does get: the static page, without the key.
        status, body = replay_get(port, "/", cookie_value, origin=False)
        assert status == 200 and b"<canvas" in body
        assert key.encode() not in body
        assert b'<meta name="sandtop-page-key" content="">' in body
        for asset in ("/app.js", "/app.css"):
            status, body = replay_get(port, asset, cookie_value, origin=False)
            assert status == 200 and key.encode() not in body, asset
        # Nothing was taken over.
        assert world.js("return window.sandtopView.localControl") is False
        assert world.js("return window.sandtopView.holder") != "operator"
        # Control for the check below: the same handshake with the key opens.
        assert replay_ws(port, cookie_value, "sandtop-view, sandtop-key." + key)[0] == 101
    finally:
        neighbour.close()
        if driver.current_window_handle != main:
            driver.close()
            driver.switch_to.window(main)


def test_the_real_page_still_works(world: World) -> None:
    from selenium.webdriver.common.by import By

    driver = world.driver
    wait_until("a first frame", lambda: world.js("return window.sandtopView.frames") > 0)
    # The snapshot button: fetched with the key, a PNG.
    driver.find_element(By.ID, "snapshot").click()
    shot = wait_until("a snapshot", lambda: world.js("return window.sandtopView.snapshots.slice(-1)[0]"))
    assert shot["ok"] is True and shot["status"] == 200 and shot["type"] == "image/png" and shot["bytes"] > 100, shot
    # Take control and give it back (no run: the view's own takeover).
    driver.find_element(By.ID, "take").click()
    wait_until("control", lambda: world.js("return window.sandtopView.localControl"))
    driver.find_element(By.ID, "give").click()
    wait_until("control given back", lambda: not world.js("return window.sandtopView.localControl"))
    # A reload keeps the key (sessionStorage) and the page works on.
    driver.refresh()
    wait_until("a frame after a reload", lambda: world.js("return window.sandtopView.frames") > 0)
    assert world.js("return window.sandtopView.hasKey") is True


def test_a_new_tab_of_the_views_origin_has_the_cookie_but_no_key(world: World) -> None:
    driver = world.driver
    main = driver.current_window_handle
    driver.switch_to.new_window("tab")
    try:
        driver.get(f"http://127.0.0.1:{world.port}/")
        # The page loads (the cookie), but has no key and opens no socket.
        wait_until("the page", lambda: world.js("return !!window.sandtopView"))
        assert world.js("return window.sandtopView.hasKey") is False
        wait_until("the no-key note", lambda: world.js("return document.getElementById('link').textContent") == "no key")
        assert world.js("return window.sandtopView.frames") == 0
    finally:
        driver.close()
        driver.switch_to.window(main)
