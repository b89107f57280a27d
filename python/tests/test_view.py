"""``host-cli view`` in a real browser: headless Chromium from Debian,
driven over WebDriver by Selenium, against a real guest under Docker.

What it proves (docs/contract.md rule 49, docs/security.md W1): the view
refuses a request without its token, with a foreign Host, and a WebSocket
from a foreign Origin; frames arrive and show what a daemon screenshot
shows, and a full-resolution snapshot is one click away; Take control and
typing in the page put the
text byte-exact into an xterm inside the guest; a view-only link, open in
the same browser beside the full one, shows no controls and its commands
change nothing; Approve in the page lets a waiting run go on, and on a
run with a real terminal (a pty) the terminal's prompt closes saying the
view answered; a run's report renders with no console error and shows
every step. With
``SANDTOP_VIEW_SHOTS=DIR`` it saves the page and the report as PNGs there
(the README's pictures).

Skips (``SKIP browser: ...``) without Docker, the guest image, Chromium,
chromedriver or Selenium; ``SANDTOP_REQUIRE=browser`` (or docker) makes
that a failure.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Any, Iterator

import pytest

import sandtop
from guest import decode_png, guest_file, need_guest, skip

GRID = (32, 20)


def need_chromium() -> tuple[str, str]:
    try:
        import selenium  # noqa: F401
    except ImportError:
        skip("browser", "selenium is not installed (pip install './python[view]')")
    chromium = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        skip("browser", "chromium and chromium-driver are not installed (make deps)")
    assert chromium is not None and driver is not None
    return chromium, driver


def wait_until(what: str, pred: Any, within: float = 20.0, every: float = 0.1) -> Any:
    end = time.monotonic() + within
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {within} s")
        time.sleep(every)


def cookie_name(port: int) -> str:
    """A view's cookie carries its port: two views in one browser keep
    their own sessions."""
    return f"sandtop_view_{port}"


def http_get(port: int, path: str, host: str | None = None, cookie: str | None = None, key: str | None = None) -> tuple[int, bytes]:
    import http.client

    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.putrequest("GET", path, skip_host=True)
    c.putheader("Host", host or f"127.0.0.1:{port}")
    if cookie:
        c.putheader("Cookie", f"{cookie_name(port)}={cookie}")
    if key:
        c.putheader("Sandtop-Page-Key", key)
    c.endheaders()
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def ws_upgrade(port: int, origin: str, cookie: str, key: str | None = None) -> int:
    """A raw WebSocket handshake (with the page key when given, as the
    page sends it); returns the status code."""
    protocols = f"Sec-WebSocket-Protocol: sandtop-view, sandtop-key.{key}\r\n" if key else ""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(
            (
                "GET /ws HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                f"Origin: {origin}\r\nCookie: {cookie_name(port)}={cookie}\r\n{protocols}\r\n"
            ).encode()
        )
        head = s.recv(1024).decode("latin-1")
    return int(head.split(" ", 2)[1])


def grid_of_rgb(w: int, h: int, rgb: bytes) -> list[float]:
    gw, gh = GRID
    out = []
    for gy in range(gh):
        for gx in range(gw):
            x0, x1 = gx * w // gw, (gx + 1) * w // gw
            y0, y1 = gy * h // gh, (gy + 1) * h // gh
            total, n = 0, 0
            for y in range(y0, y1, 2):
                row = y * w * 3
                for x in range(x0, x1, 2):
                    i = row + x * 3
                    total += rgb[i] + rgb[i + 1] + rgb[i + 2]
                    n += 3
            out.append(total / max(1, n))
    return out


GRID_JS = """
const c = document.getElementById('screen');
const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
const [gw, gh] = arguments[0];
const out = [];
for (let gy = 0; gy < gh; gy++) for (let gx = 0; gx < gw; gx++) {
  const x0 = Math.floor(gx * c.width / gw), x1 = Math.floor((gx + 1) * c.width / gw);
  const y0 = Math.floor(gy * c.height / gh), y1 = Math.floor((gy + 1) * c.height / gh);
  let t = 0, n = 0;
  for (let y = y0; y < y1; y += 2) for (let x = x0; x < x1; x += 2) {
    const i = (y * c.width + x) * 4; t += d[i] + d[i + 1] + d[i + 2]; n += 3;
  }
  out.push(t / Math.max(1, n));
}
return [c.width, c.height, out];
"""


class World:
    def __init__(self, host_cli: str, state: str, session: Any, view: subprocess.Popen[str], link: str, driver: Any) -> None:
        self.host_cli = host_cli
        self.state = state
        self.session = session
        self.view = view
        self.link = link
        self.port = int(re.search(r":(\d+)/", link).group(1))  # type: ignore[union-attr]
        self.driver = driver

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.host_cli, *args], capture_output=True, text=True, timeout=120, check=check)

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def key(self) -> str:
        """The page key of the view open in the current tab (the tab's
        sessionStorage: only the view's own page can read it)."""
        k = wait_until("the page key", lambda: self.js("return sessionStorage.getItem('sandtop-page-key')"))
        assert re.fullmatch(r"[0-9a-f]{64}", k), k
        return str(k)

    def cookie(self, port: int | None = None) -> str:
        c = self.driver.get_cookie(cookie_name(port or self.port))
        assert c is not None, "the view set no cookie"
        assert c.get("httpOnly") is True
        assert c.get("sameSite") == "Strict"
        return str(c["value"])

    def container(self) -> str:
        ls = json.loads(self.cli("guest", "ls", "--json").stdout)
        for s in ls:
            if s.get("name") == self.session.name:
                return str(s["container"])
        raise AssertionError(f"session {self.session.name} not in guest ls")


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    host_cli, _mock = need_guest()
    chromium, chromedriver = need_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    state = tempfile.mkdtemp(prefix="sandtop-view-")
    os.environ["SANDTOP_STATE_DIR"] = state
    session = sandtop.Session.start(host_cli=host_cli, screen=(1280, 800))
    view = subprocess.Popen([host_cli, "view", session.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert view.stdout is not None
    line = view.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:\d+/login\?t=[0-9a-f]{64}", line)
    assert m, f"host-cli view printed no link: {line!r}"
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1700,1000", "--disable-dev-shm-usage"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=opts)
    w = World(host_cli, state, session, view, m.group(0), driver)
    try:
        driver.get(w.link)
        yield w
    finally:
        driver.quit()
        view.terminate()
        view.wait(timeout=10)
        session.stop()
        shutil.rmtree(state, ignore_errors=True)


def close_the_apps(world: World) -> None:
    """Ends the browser, the editor and the terminals the tests before left
    open, so that an exercise starts on the desktop it expects: a Firefox
    left from an earlier exercise can hold a pointer grab, and the daemon
    then refuses the first click as input_blocked (rightly). TERM first,
    so Firefox leaves its profile unlocked; KILL after 10 s."""
    container = world.container()
    apps = ["firefox-esr", "mousepad", "xterm"]

    def running() -> bool:
        return any(
            subprocess.run(["docker", "exec", container, "pgrep", "-x", a], capture_output=True, timeout=30).returncode == 0
            for a in apps
        )

    for signal, patience in (("TERM", 10.0), ("KILL", 10.0)):
        for a in apps:
            subprocess.run(["docker", "exec", container, "pkill", f"-{signal}", "-x", a], capture_output=True, timeout=30)
        end = time.monotonic() + patience
        while running() and time.monotonic() < end:
            time.sleep(0.2)
        if not running():
            return
    raise AssertionError(f"{apps} still run in the guest after TERM and KILL")


def click_approve(world: World) -> int:
    """Clicks every open question's Approve button; how many it clicked."""
    from selenium.webdriver.common.by import By

    clicked = 0
    for b in world.driver.find_elements(By.CSS_SELECTOR, ".question button.answer-approve"):
        try:
            b.click()
            clicked += 1
        except Exception:  # noqa: BLE001 - closed between find and click
            pass
    return clicked


def test_the_view_refuses_requests_without_its_token_a_foreign_host_and_a_foreign_origin(world: World) -> None:
    port = world.port
    cookie = world.cookie()
    # No cookie: nothing but a refusal.
    status, body = http_get(port, "/")
    assert status == 401, body
    assert b"<canvas" not in body
    status, _ = http_get(port, "/app.js")
    assert status == 401
    # The link works once: the browser spent it.
    status, _ = http_get(port, world.link.split(str(port), 1)[1])
    assert status == 401
    status, _ = http_get(port, "/login?t=" + "0" * 64)
    assert status == 401
    # A foreign Host (DNS rebinding) is refused even with the cookie.
    for host in (f"evil.test:{port}", f"localhost:{port}", "127.0.0.1"):
        status, _ = http_get(port, "/", host=host, cookie=cookie)
        assert status == 403, host
    # With the cookie and its own Host, the page.
    status, body = http_get(port, "/", cookie=cookie)
    assert status == 200 and b"<canvas" in body
    # A WebSocket only from the view's own origin, with its page key.
    key = world.key()
    assert ws_upgrade(port, "http://evil.test", cookie, key) == 403
    assert ws_upgrade(port, f"http://127.0.0.1:{port}.evil.test", cookie, key) == 403
    assert ws_upgrade(port, f"http://127.0.0.1:{port}", "f" * 64, key) == 401
    # The cookie alone (it reaches every port of 127.0.0.1) is refused.
    assert ws_upgrade(port, f"http://127.0.0.1:{port}", cookie) == 403
    assert ws_upgrade(port, f"http://127.0.0.1:{port}", cookie, key) == 101


def test_frames_arrive_and_show_what_a_daemon_screenshot_shows(world: World) -> None:
    wait_until("a first frame", lambda: world.js("return window.sandtopView.frames") > 0)
    # A quiet screen: the page's newest frame against a screenshot now.
    time.sleep(1.0)
    shot = os.path.join(world.state, "now.png")
    world.cli("screenshot", "--session", world.session.name, "-o", shot)
    with open(shot, "rb") as f:
        w, h, rgb = decode_png(f.read())
    cw, ch, page = world.js(GRID_JS, list(GRID))
    assert (cw, ch) == (w, h) == (1280, 800)
    daemon = grid_of_rgb(w, h, rgb)
    diff = sum(abs(a - b) for a, b in zip(page, daemon)) / len(daemon)
    worst = max(abs(a - b) for a, b in zip(page, daemon))
    # JPEG at quality 70 and the pointer drawn in: a few levels, not a
    # different picture.
    assert diff < 4.0 and worst < 40.0, (diff, worst)
    # Something changes: a new frame follows without the page asking.
    before = world.js("return window.sandtopView.frames")
    world.cli("act", "--session", world.session.name, json.dumps({"type": "keypress", "keys": ["SUPER", "T"]}))
    wait_until("a frame after the screen changed", lambda: world.js("return window.sandtopView.frames") > before)


def test_the_snapshot_is_a_full_resolution_png_of_the_screen(world: World) -> None:
    # Not without the cookie, nor with the cookie alone.
    status, _ = http_get(world.port, "/snapshot.png")
    assert status == 401
    status, _ = http_get(world.port, "/snapshot.png", cookie=world.cookie())
    assert status == 403
    key = world.key()

    passes = [0]

    def compare() -> tuple[float, float]:
        """The snapshot against a daemon screenshot taken right after it
        (the snapshot has the pointer drawn in; a screenshot may not)."""
        passes[0] += 1
        status, body = http_get(world.port, "/snapshot.png", cookie=world.cookie(), key=key)
        assert status == 200, body[:200]
        w, h, rgb = decode_png(body)
        assert (w, h) == (1280, 800)
        # A new name each pass: `host-cli screenshot` never overwrites.
        shot = os.path.join(world.state, f"snapshot-check-{passes[0]}.png")
        world.cli("screenshot", "--session", world.session.name, "-o", shot)
        with open(shot, "rb") as f:
            sw, sh, srgb = decode_png(f.read())
        assert (sw, sh) == (w, h)
        ours, daemon = grid_of_rgb(w, h, rgb), grid_of_rgb(w, h, srgb)
        diffs = [abs(a - b) for a, b in zip(ours, daemon)]
        return max(diffs), sum(diffs) / len(diffs)

    # A window the test before opened may still be drawing: the two agree
    # once the screen is still.
    end = time.monotonic() + 20
    while True:
        worst, mean = compare()
        if worst < 40.0 and mean < 1.0:
            break
        assert time.monotonic() < end, f"the snapshot never showed the screen: worst {worst}, mean {mean}"
        time.sleep(0.5)


def ws_commands(port: int, cookie: str, key: str, commands: list[dict[str, Any]], within: float = 10.0) -> list[dict[str, Any]]:
    """Sends commands over the view's WebSocket (websocket-client, which
    Selenium brings) and returns the text events that came back while it
    waited for one refusal per command (or `within` seconds)."""
    import websocket  # type: ignore[import-untyped]

    ws = websocket.create_connection(
        f"ws://127.0.0.1:{port}/ws",
        origin=f"http://127.0.0.1:{port}",
        cookie=f"{cookie_name(port)}={cookie}",
        subprotocols=["sandtop-view", f"sandtop-key.{key}"],
        timeout=2,
    )
    events: list[dict[str, Any]] = []
    try:
        for c in commands:
            ws.send(json.dumps(c))
        end = time.monotonic() + within
        while time.monotonic() < end and sum(e.get("type") == "refused" for e in events) < len(commands):
            try:
                op, data = ws.recv_data()
            except websocket.WebSocketTimeoutException:
                continue
            if op == websocket.ABNF.OPCODE_TEXT:
                events.append(json.loads(data))
    finally:
        ws.close()
    return events


def test_a_view_only_link_shows_no_controls_and_its_commands_change_nothing(world: World) -> None:
    from selenium.webdriver.common.by import By

    ro = subprocess.Popen(
        [world.host_cli, "view", "--view-only", world.session.name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    driver = world.driver
    main = driver.current_window_handle
    try:
        assert ro.stdout is not None
        line = ro.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/login\?t=[0-9a-f]{64}", line)
        assert m, f"host-cli view --view-only printed no link: {line!r}"
        port = int(m.group(1))
        driver.switch_to.new_window("tab")
        driver.get(m.group(0))
        wait_until("a first frame in the view-only page", lambda: world.js("return window.sandtopView.frames") > 0)
        # No controls: the bar is hidden and the buttons are off.
        assert not driver.find_element(By.ID, "controls").is_displayed()
        assert driver.find_element(By.ID, "take").get_attribute("disabled") is not None
        cookie = world.cookie(port)
        key = world.key()
        # The full view, in the first tab, still has its own session.
        status, _ = http_get(world.port, "/", cookie=world.cookie())
        assert status == 200
        # Its commands are refused by the server, not only hidden: Take,
        # then keys that would create a file, change nothing.
        marker = "/tmp/view-only-was-obeyed"
        events = ws_commands(
            port,
            cookie,
            key,
            [
                {"type": "take"},
                {"type": "act", "actions": [{"type": "type", "text": f"touch {marker}\n"}]},
                {"type": "answer", "id": 1, "answer": "approve"},
            ],
        )
        refused = [e for e in events if e.get("type") == "refused"]
        assert len(refused) == 3 and all("view-only" in e.get("why", "") for e in refused), events
        # Nobody holds the desktop: another client acts at once.
        world.cli("act", "--session", world.session.name, json.dumps({"type": "wait"}))
        time.sleep(1.0)
        assert guest_file(world.container(), marker) is None
    finally:
        if driver.current_window_handle != main:
            driver.close()
            driver.switch_to.window(main)
        ro.terminate()
        ro.wait(timeout=10)


def test_take_control_and_typing_in_the_page_reach_an_xterm_byte_exact(world: World) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    # An xterm has the focus (Super+T, the test above or now).
    world.cli("act", "--session", world.session.name, json.dumps({"type": "keypress", "keys": ["SUPER", "T"]}))
    time.sleep(2.5)
    world.driver.find_element(By.ID, "take").click()
    wait_until("control", lambda: world.js("return window.sandtopView.localControl || window.sandtopView.holder === 'operator'"))
    # While the view holds the desktop, another client is refused.
    other = world.cli("act", "--session", world.session.name, json.dumps({"type": "wait"}), check=False)
    assert other.returncode != 0 and "in use" in other.stderr, other.stderr
    text = "Grüße 中文 ñ — äöü ¿? $HOME"
    canvas = world.driver.find_element(By.ID, "screen")
    world.js("arguments[0].focus()", canvas)
    ActionChains(world.driver).send_keys(f"printf '%s' '{text}' > /tmp/view-typed.txt").send_keys(Keys.ENTER).perform()
    container = world.container()
    got = wait_until("the typed file", lambda: guest_file(container, "/tmp/view-typed.txt"), within=20)
    assert got == text.encode(), (got, text.encode())
    world.driver.find_element(By.ID, "give").click()
    wait_until("control given back", lambda: not world.js("return window.sandtopView.localControl"))
    world.cli("act", "--session", world.session.name, json.dumps({"type": "wait"}))


def test_the_report_of_the_exercise_renders_with_no_console_errors_and_every_step(world: World) -> None:
    close_the_apps(world)
    run = os.path.join(world.state, "exercise-run")
    ex = world.cli("exercise", "--session", world.session.name, "--approve-scripted-checks", "--record", run, check=False)
    assert ex.returncode == 0, ex.stdout + ex.stderr
    report = os.path.join(world.state, "report.html")
    world.cli("report", run, "-o", report)
    steps = set()
    with open(os.path.join(run, "trajectory.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e.get("kind") == "response":
                steps.add(e["step"])
    driver = world.driver
    main = driver.current_window_handle
    driver.switch_to.new_window("tab")
    try:
        driver.get_log("browser")
        driver.get("file://" + report)
        shown = driver.execute_script("return document.querySelectorAll('section.step').length")
        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert not errors, errors
        assert shown >= len(steps) > 0, (shown, len(steps))
        shots = os.environ.get("SANDTOP_VIEW_SHOTS")
        if shots:
            os.makedirs(shots, exist_ok=True)
            driver.save_screenshot(os.path.join(shots, "report.png"))
    finally:
        driver.close()
        driver.switch_to.window(main)


def test_approve_in_the_page_lets_a_waiting_run_go_on(world: World) -> None:
    """The exercise raises a safety check; with no terminal and no
    --approve-scripted-checks only the view can approve it. The page's
    Approve button is the operator's explicit yes: the run goes on, passes
    on the apps' own records, and its trajectory says the view answered."""
    from selenium.webdriver.common.by import By

    close_the_apps(world)
    run = os.path.join(world.state, "approved-run")
    # No controlling terminal (a new session, stdin from /dev/null): the
    # question can only be answered in the view.
    ex = subprocess.Popen(
        [world.host_cli, "exercise", "--session", world.session.name, "--record", run],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    clicked = 0
    shots = os.environ.get("SANDTOP_VIEW_SHOTS")
    shown: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 240
        while ex.poll() is None and time.monotonic() < deadline:
            if not world.driver.find_elements(By.CSS_SELECTOR, ".question button.answer-approve"):
                time.sleep(0.1)
                continue
            if clicked == 0:
                # What the page shows of the run while it waits: its step,
                # its usage, the call's actions (marked on the screen).
                shown = world.js(
                    "return {step: document.getElementById('step').textContent,"
                    " usage: document.getElementById('usage').textContent,"
                    " listed: document.querySelectorAll('#last-call li').length,"
                    " actions: (window.sandtopView.lastCall || {actions: []}).actions.length}"
                )
                if shots:
                    # The README's picture: a run waiting for the operator.
                    os.makedirs(shots, exist_ok=True)
                    world.driver.save_screenshot(os.path.join(shots, "view.png"))
            clicked += click_approve(world)
            time.sleep(0.1)
        out, err = ex.communicate(timeout=60)
    finally:
        if ex.poll() is None:
            ex.kill()
    assert clicked >= 1, "no question reached the page"
    assert ex.returncode == 0, out + err
    assert re.match(r"\d+ of \d+$", shown["step"]) and "requests" in shown["usage"], shown
    assert shown["actions"] >= 1 and shown["listed"] == shown["actions"] + 1, shown
    answered = []
    with open(os.path.join(run, "trajectory.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e.get("kind") == "answered":
                answered.append(e)
    assert answered and all(a["by"] == "view" and a["answer"] == "approve" for a in answered), answered
    # The decision's own entry says who made it too (the report shows it).
    decided = []
    with open(os.path.join(run, "trajectory.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e.get("kind") == "safety_checks":
                decided.append(e)
    assert decided and all(d.get("by") == "view" and d["decision"] == "approved" for d in decided), decided
    # Every question closed in the page too.
    wait_until("the questions closed", lambda: not world.driver.find_elements(By.CSS_SELECTOR, ".question"))


def test_approve_in_the_page_closes_the_terminals_prompt(world: World) -> None:
    """The same question on a real terminal (a pty as the run's controlling
    terminal, nobody typing) and in the page: the page's Approve wins, the
    run goes on, and the terminal's prompt closes saying so."""
    import fcntl
    import pty
    import termios
    import threading

    close_the_apps(world)
    run = os.path.join(world.state, "terminal-run")
    master, slave = pty.openpty()

    def own_terminal() -> None:
        # A new session (start_new_session) whose controlling terminal is
        # the pty: the run's /dev/tty.
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    ex = subprocess.Popen(
        [world.host_cli, "exercise", "--session", world.session.name, "--record", run],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=own_terminal,
    )
    os.close(slave)
    seen = bytearray()

    def read_terminal() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    clicked = 0
    try:
        deadline = time.monotonic() + 240
        while ex.poll() is None and time.monotonic() < deadline:
            if b"Approve and run these actions?" in seen:
                clicked += click_approve(world)
            time.sleep(0.1)
        out, err = ex.communicate(timeout=60)
    finally:
        if ex.poll() is None:
            ex.kill()
            ex.wait(timeout=30)
        # The run is gone: its end of the pty closed, the reader sees EOF.
        reader.join(timeout=10)
        os.close(master)
    text = seen.decode("utf-8", "replace")
    assert clicked >= 1, f"no question reached the page; the terminal showed: {text[-2000:]}"
    assert ex.returncode == 0, out + err
    assert "(answered in the view: approve)" in text, text[-2000:]
    with open(os.path.join(run, "trajectory.jsonl")) as f:
        decided = [e for e in map(json.loads, f) if e.get("kind") == "safety_checks"]
    assert decided and all(d.get("by") == "view" for d in decided), decided
