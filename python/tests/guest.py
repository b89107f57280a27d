"""What the guest tests need: the binaries, the skip policy (as
testkit/src/skip.rs: print ``SKIP <tier>: <reason>``, fail instead when the
tier is in ``SANDTOP_REQUIRE``), the mock Responses server as a process,
and a small PNG decoder for the scripted model's looks at the screen."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from contextlib import contextmanager
from typing import IO, Any, Callable, Iterator, Optional

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = os.environ.get("SANDTOP_IMAGE", "sandtop-guest:latest")


def required(tier: str) -> bool:
    return any(t.strip() in (tier, "all") for t in os.environ.get("SANDTOP_REQUIRE", "").split(","))


def skip(tier: str, reason: str) -> None:
    if required(tier):
        pytest.fail(f"{tier} tier is required (SANDTOP_REQUIRE) but cannot run: {reason}")
    print(f"SKIP {tier}: {reason}", file=sys.stderr)
    pytest.skip(f"SKIP {tier}: {reason}")


# The workspace package of each binary the tests run.
PACKAGES = {"host-cli": "host-cli", "mock-responses": "sandtop-testkit"}


def target_dir() -> str:
    return os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")


_built: dict[str, Optional[str]] = {}


def build(name: str) -> Optional[str]:
    """``cargo build -p PACKAGE --bin NAME`` in this checkout, once per run
    (a clean clone has no target/ yet); its path, or None (why printed)
    when there is no checkout or cargo, or the build fails."""
    if name in _built:
        return _built[name]
    path: Optional[str] = None
    cargo = shutil.which("cargo")
    if cargo is None or not os.path.exists(os.path.join(REPO, "Cargo.toml")):
        print(f"{name}: not built, and no cargo or checkout here to build it", file=sys.stderr)
    else:
        argv = [cargo, "build", "--locked", "-p", PACKAGES[name], "--bin", name]
        print(f"{name} is not built; building it: {' '.join(argv[1:])}", file=sys.stderr)
        done = subprocess.run(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=sys.stderr)
        p = os.path.join(target_dir(), "debug", name)
        if done.returncode == 0 and os.access(p, os.X_OK):
            path = p
        else:
            print(f"{name}: the build failed (exit {done.returncode}, its output above)", file=sys.stderr)
    _built[name] = path
    return path


def binary(env: str, name: str) -> Optional[str]:
    """The binary `name`: $ENV when set; else this checkout's build
    (target/debug, target/release, or $CARGO_TARGET_DIR's), built with
    cargo when absent; else one on PATH (an installed host-cli)."""
    path = os.environ.get(env)
    if path:
        return path if os.access(path, os.X_OK) else None
    for d in (os.path.join(target_dir(), "debug"), os.path.join(target_dir(), "release")):
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return build(name) or shutil.which(name)


def need_docker() -> None:
    """Docker and the guest image; else skip."""
    if shutil.which("docker") is None:
        skip("docker", "docker is not installed")
    info = subprocess.run(["docker", "info"], capture_output=True, timeout=30)
    if info.returncode != 0:
        skip("docker", "the Docker engine cannot be reached")
    image = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=30)
    if image.returncode != 0:
        skip("docker", f"the guest image {IMAGE} is missing (make guest-image)")


@contextmanager
def guest_session(prefix: str) -> Iterator[tuple[str, Any]]:
    """host-cli and a 1280x800 guest started through the `sandtop`
    package in a private state folder (SANDTOP_STATE_DIR while it runs);
    stopped and the folder removed after. Skips without Docker, the image
    or host-cli."""
    need_docker()
    host_cli = binary("SANDTOP_HOST_CLI", "host-cli")
    if host_cli is None:
        skip("docker", "host-cli is not built (SANDTOP_HOST_CLI)")
    assert host_cli is not None
    import sandtop

    state = tempfile.mkdtemp(prefix=prefix)
    old = os.environ.get("SANDTOP_STATE_DIR")
    os.environ["SANDTOP_STATE_DIR"] = state
    session = sandtop.Session.start(host_cli=host_cli, screen=(1280, 800), image=IMAGE)
    try:
        yield host_cli, session
    finally:
        session.stop()
        if old is None:
            os.environ.pop("SANDTOP_STATE_DIR", None)
        else:
            os.environ["SANDTOP_STATE_DIR"] = old
        shutil.rmtree(state, ignore_errors=True)


def running(container: str, proc: str) -> bool:
    """Whether a process named `proc` runs in the guest's container."""
    p = subprocess.run(["docker", "exec", container, "pgrep", "-x", proc], capture_output=True, timeout=30)
    return p.returncode == 0


def kill(container: str, proc: str) -> None:
    """Ends the guest's processes named `proc`."""
    subprocess.run(["docker", "exec", container, "pkill", "-x", proc], capture_output=True, timeout=30)


def until(what: str, pred: Callable[[], Any], within: float = 30.0) -> Any:
    """`pred()`'s first true value, asked every 0.2 s for `within` seconds."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def need_guest() -> tuple[str, str]:
    """host-cli and mock-responses (built when absent), with Docker and the
    guest image; else skip."""
    need_docker()
    host_cli = binary("SANDTOP_HOST_CLI", "host-cli")
    mock = binary("SANDTOP_MOCK_RESPONSES", "mock-responses")
    if host_cli is None or mock is None:
        skip(
            "docker",
            "host-cli or mock-responses is missing and could not be built "
            "(cargo build -p host-cli -p sandtop-testkit --bin host-cli --bin mock-responses; "
            "or set SANDTOP_HOST_CLI, SANDTOP_MOCK_RESPONSES)",
        )
    assert host_cli is not None and mock is not None
    return host_cli, mock


class Mock:
    """The mock Responses server (testkit's mock-responses) as a child:
    the key and the replies go in on stdin, the requests come back in a file."""

    def __init__(self, exe: str, record: str, key: str) -> None:
        self.record = record
        self.key = key
        self.proc = subprocess.Popen([exe, "--record", record], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[str] = self.proc.stdin
        self.stdin.write(key + "\n")
        self.stdin.flush()
        self.base_url = self.proc.stdout.readline().strip()
        if not self.base_url.startswith("http://127.0.0.1:"):
            self.proc.kill()
            raise RuntimeError("mock-responses did not start")

    def push(self, reply: dict[str, Any]) -> None:
        self.stdin.write(json.dumps(reply) + "\n")
        self.stdin.flush()

    def close(self) -> list[dict[str, Any]]:
        """Stops the server; every request it answered."""
        self.stdin.close()
        self.proc.wait(timeout=30)
        with open(self.record) as f:
            return [json.loads(line) for line in f if line.strip()]


def decode_png(data: bytes) -> tuple[int, int, bytes]:
    """8-bit RGB, non-interlaced PNG -> (width, height, RGB bytes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, [], 0
    h = 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, colour, _, _, lace = struct.unpack(">IIBBBBB", body)
            assert (depth, colour, lace) == (8, 2, 0)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    raw = zlib.decompress(b"".join(idat))
    stride = w * 3
    out = bytearray(stride * h)
    prev = bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if f == 1:
            for i in range(3, stride):
                line[i] = (line[i] + line[i - 3]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - 3] if i >= 3 else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - 3] if i >= 3 else 0
                b = prev[i]
                c = prev[i - 3] if i >= 3 else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out[y * stride : (y + 1) * stride] = line
        prev = line
    return w, h, bytes(out)


class Frame:
    def __init__(self, png: bytes) -> None:
        self.width, self.height, self.rgb = decode_png(png)

    def count(self, colour: tuple[int, int, int]) -> int:
        # Pixels are 3-aligned; count occurrences at aligned offsets only.
        needle = bytes(colour)
        n, i = 0, self.rgb.find(needle)
        while i != -1:
            if i % 3 == 0:
                n += 1
                i = self.rgb.find(needle, i + 3)
            else:
                i = self.rgb.find(needle, i + 1)
        return n

    def white_share(self, y0: int, y1: int) -> float:
        y0, y1 = min(y0, self.height), min(y1, self.height)
        rows = self.rgb[y0 * self.width * 3 : y1 * self.width * 3]
        return self.count_in(rows, (255, 255, 255)) / max(1, len(rows) // 3)

    @staticmethod
    def count_in(rows: bytes, colour: tuple[int, int, int]) -> int:
        return sum(1 for i in range(0, len(rows), 3) if rows[i : i + 3] == bytes(colour))


def guest_file(container: str, path: str) -> Optional[bytes]:
    p = subprocess.run(["docker", "exec", container, "cat", path], capture_output=True, timeout=30)
    return p.stdout if p.returncode == 0 else None


def ref_in(read: str, role: str, label: str) -> str:
    """The ref of the element of `role` whose label starts with `label`, in
    a read rendered as `[ref] role "label"` lines (sandtop.anthropic's and
    host-cli's rendering for Claude)."""
    for line in read.splitlines():
        m = re.match(r'\[([^\]]+)\] (\w+) "(.*?)"', line)
        if m and m.group(2) == role and m.group(3).strip().lower().startswith(label.lower()):
            return m.group(1)
    raise AssertionError(f"no {role} {label!r} in the read:\n{read}")


def demo_form_calls(read: str, name: str, email: str, message: str) -> list[tuple[str, dict[str, Any]]]:
    """Claude's browser member calls that fill the demo app's form from a
    rendered read and submit it."""

    def target(role: str, label: str) -> dict[str, Any]:
        return {"type": "ref", "ref": ref_in(read, role, label)}

    return [
        ("form_input", {"target": target("textbox", "Name"), "value": name}),
        ("form_input", {"target": target("textbox", "Email"), "value": email}),
        ("form_input", {"target": target("textbox", "Message"), "value": message}),
        ("left_click", {"target": target("button", "Submit")}),
    ]
