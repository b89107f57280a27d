#!/usr/bin/env python3
"""The live view's figures (BENCHMARKS.md, "Live view"), on a real guest.

Run with the sdk-test virtualenv (selenium installed), after `make guest-image`
and a debug build of host-cli:

    target/sdk-venv/bin/python scripts/bench-view.py [N]

It starts a guest and `host-cli view`, opens the page in headless Chromium,
opens an xterm, then:
- input to browser: N single keystrokes through `host-cli act` (the time
  includes starting that process, so it is an upper bound); each is timed
  from just before the process starts to the first frame drawn in the page
  after it (the page's own arrival times, same wall clock);
- damage to browser: N single keystrokes sent straight to the daemon over
  its socket (one kept connection, the package's DaemonClient), timed from
  just before the request to the first frame drawn after it: what remains
  is the xterm drawing the key, the daemon's damage wakeup, the frame, the
  view and the page;
- frames/s while typing: for 4 s, one keystroke per `host-cli act`, as
  fast as they go; frames drawn per second meanwhile;
- frames/s while the screen changes without pause (`yes` in the xterm);
- idle: with the screen still for 10 s, frames drawn (should be 0) and the
  CPU time `host-cli view` used;
- frame to page: the page's own measure (view received the frame -> drawn).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

import sandtop  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
HOST_CLI = os.environ.get("SANDTOP_HOST_CLI", os.path.join(ROOT, "target", "debug", "host-cli"))
ARRIVALS_JS = """
if (!window.__arrivals) {
  window.__arrivals = [];
  const f = window.sandtopView;
  let last = f.frames;
  setInterval(() => { if (f.frames !== last) { last = f.frames; window.__arrivals.push(Date.now()); } }, 1);
}
return window.__arrivals.length;
"""


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    state = tempfile.mkdtemp(prefix="sandtop-bench-view-")
    os.environ["SANDTOP_STATE_DIR"] = state
    session = sandtop.Session.start(host_cli=HOST_CLI, screen=(1280, 800))
    view = subprocess.Popen([HOST_CLI, "view", session.name], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert view.stdout is not None
    link = re.search(r"http://127\.0\.0\.1:\d+/login\?t=[0-9a-f]{64}", view.stdout.readline())
    assert link
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1700,1000", "--disable-dev-shm-usage"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"), options=opts)

    def act(a: dict) -> None:
        subprocess.run([HOST_CLI, "act", "--session", session.name, json.dumps(a)], check=True, capture_output=True)

    try:
        driver.get(link.group(0))
        time.sleep(2)
        driver.execute_script(ARRIVALS_JS)
        act({"type": "keypress", "keys": ["SUPER", "T"]})
        time.sleep(3)
        def to_frame(send: Callable[[], None], took: list[float]) -> list[float]:
            """N keystrokes, each timed from just before `send` to the first
            frame drawn after it; `took` gets `send`'s own time."""
            out: list[float] = []
            for _ in range(n):
                time.sleep(0.3)
                seen = driver.execute_script("return window.__arrivals.length")
                t0 = time.time() * 1000
                send()
                took.append(time.time() * 1000 - t0)
                end = time.monotonic() + 3
                while time.monotonic() < end:
                    later = [t for t in driver.execute_script("return window.__arrivals")[seen:] if t >= t0]
                    if later:
                        out.append(later[0] - t0)
                        break
                    time.sleep(0.002)
            return out

        acted: list[float] = []
        lat = to_frame(lambda: act({"type": "type", "text": "x"}), acted)
        body = {"actions": [{"type": "type", "text": "z"}], "final_screenshot": False}
        direct = to_frame(lambda: session.client.request("POST", "/v1/actions", body), [])
        seen = driver.execute_script("return window.__arrivals.length")
        t0 = time.time() * 1000
        keys = 0
        while time.time() * 1000 - t0 < 4000:
            act({"type": "type", "text": "y"})
            keys += 1
        t1 = time.time() * 1000
        arr = driver.execute_script("return window.__arrivals")[seen:]
        typed = [t for t in arr if t0 <= t <= t1]
        fps = len(typed) / ((t1 - t0) / 1000)
        # The screen changing as fast as it can: `yes` in the xterm.
        act({"type": "keypress", "keys": ["CTRL", "U"]})
        act({"type": "type", "text": "yes\n"})
        time.sleep(1)
        seen = driver.execute_script("return window.__arrivals.length")
        t2 = time.time() * 1000
        time.sleep(4)
        t3 = time.time() * 1000
        arr = driver.execute_script("return window.__arrivals")[seen:]
        flood = len([t for t in arr if t2 <= t <= t3]) / ((t3 - t2) / 1000)
        act({"type": "keypress", "keys": ["CTRL", "C"]})
        act({"type": "type", "text": "clear\n"})
        time.sleep(2)
        pid = view.pid
        def cpu() -> float:
            with open(f"/proc/{pid}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")
        frames0 = driver.execute_script("return window.sandtopView.frames")
        c0 = cpu()
        time.sleep(10)
        c1 = cpu()
        frames1 = driver.execute_script("return window.sandtopView.frames")
        page = driver.execute_script("return window.sandtopView.latencies")
        print(f"input to browser (host-cli act, N={len(lat)}): p50 {pct(lat, 50):.0f} ms, p95 {pct(lat, 95):.0f} ms")
        print(f"  of which host-cli act itself (process start to exit): p50 {pct(acted, 50):.0f} ms")
        print(f"keystroke over the daemon's socket to the frame drawn (N={len(direct)}): p50 {pct(direct, 50):.0f} ms, p95 {pct(direct, 95):.0f} ms")
        print(f"frames/s while typing ({keys} keystrokes in {(t1 - t0) / 1000:.1f} s, one host-cli act each): {fps:.1f}")
        print(f"frames/s while the screen changes continuously (`yes` in the xterm, 4 s): {flood:.1f}")
        print(f"idle 10 s: {frames1 - frames0} frames, host-cli view CPU {100 * (c1 - c0) / 10:.2f} %")
        print(f"frame to page (view got it -> drawn, N={len(page)}): p50 {pct(page, 50):.0f} ms, p95 {pct(page, 95):.0f} ms")
    finally:
        driver.quit()
        view.terminate()
        view.wait(timeout=10)
        session.stop()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
