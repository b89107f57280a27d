"""A fake sandtopd on a Unix socket, and a session folder around it."""

from __future__ import annotations

import base64
import json
import os
import socketserver
import struct
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Optional

TOKEN = "ab" * 32


def png(w: int, h: int, rgb: tuple[int, int, int] = (90, 90, 90)) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + bytes(rgb) * w
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(row * h))
        + chunk(b"IEND", b"")
    )


def scale_map(screen: tuple[int, int], image: tuple[int, int]) -> dict[str, Any]:
    return {
        "screen": {"width": screen[0], "height": screen[1]},
        "region": {"x": 0, "y": 0, "width": screen[0], "height": screen[1]},
        "image": {"width": image[0], "height": image[1]},
    }


def screenshot(screen: tuple[int, int], image: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    image = image or screen
    return {
        "format": "png",
        "width": image[0],
        "height": image[1],
        "data": base64.b64encode(png(*image)).decode(),
        "scale_map": scale_map(screen, image),
    }


TIMINGS = {"actions_ms": 1, "settle_ms": 0, "capture_ms": 1, "scale_ms": 0, "encode_ms": 1, "total_ms": 3, "settled": True}
INFO = {
    "protocol": "1.0",
    "daemon_version": "0.1.0",
    "display": {"width": 64, "height": 32},
    "capabilities": {"xtest": True, "shm": True, "damage": True, "xfixes": True, "randr": True, "formats": ["png"]},
    "limits": {},
    "state": "open",
}


class Reply:
    def __init__(self, status: int, body: Any, ctype: str = "application/json", delay: float = 0.0) -> None:
        self.status, self.body, self.ctype, self.delay = status, body, ctype, delay


class FakeDaemon:
    """Records every request; answers with ``handler(method, path, body)``
    (default: a working desktop of ``screen`` and a browser with one tab)."""

    def __init__(self, folder: str, screen: tuple[int, int] = (64, 32)) -> None:
        self.folder = folder
        self.screen = screen
        self.requests: list[dict[str, Any]] = []
        self.closed_early: list[str] = []
        self.handler: Callable[[str, str, Any], Reply] = self.default
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _serve(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                fake.requests.append(
                    {"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "body": body}
                )
                if self.headers.get("Authorization") != "Bearer " + TOKEN:
                    reply = Reply(401, {"code": "unauthorized", "message": "no"})
                else:
                    reply = fake.handler(self.command, self.path, body)
                if reply.delay:
                    end = time.monotonic() + reply.delay
                    while time.monotonic() < end:
                        time.sleep(0.02)
                        # A closed client shows as a readable socket at EOF.
                        import select

                        r, _, _ = select.select([self.connection], [], [], 0)
                        if r and not self.connection.recv(1, 2):  # MSG_PEEK
                            fake.closed_early.append(self.path)
                            return
                data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = _serve
            do_POST = _serve

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                # A client that went away mid-reply (the size-limit and
                # cancellation tests) is expected; anything else is shown.
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    super().handle_error(request, client_address)

        self.path = os.path.join(folder, "sandtopd.sock")
        self.server = Server(self.path, Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def work(self) -> list[dict[str, Any]]:
        """Requests other than /v1/info."""
        return [r for r in self.requests if r["path"] != "/v1/info"]

    def default(self, method: str, path: str, body: Any) -> Reply:
        if path == "/v1/info":
            return Reply(200, INFO)
        if path == "/v1/actions":
            actions = body["actions"]
            shot = None
            if body.get("final_screenshot", True):
                size = body.get("screenshot", {}).get("size")
                shot = screenshot(self.screen, (size["width"], size["height"]) if size else None)
            return Reply(200, {"executed": len(actions), "screenshot": shot, "timings": TIMINGS})
        if path == "/v1/browser/state":
            return Reply(200, {"tabs": [{"id": "t1", "title": "Demo", "url": "http://demo.test:8080/form?token=x", "active": True}]})
        if path == "/v1/browser/call":
            state = {"tabs": [{"id": "t1", "title": "Demo", "url": "http://demo.test:8080/", "active": True}]}
            member = body["member"]
            if member in ("read_page", "find", "get_page_text"):
                els = [] if member == "get_page_text" else [{"ref": "e1", "role": "button", "label": "Send"}]
                outcome = {"kind": "read", "version": 1, "text": "Contact", "elements": els, "omitted": []}
            elif member in ("screenshot", "zoom"):
                outcome = {"kind": "image", "png_base64": base64.b64encode(png(8, 4)).decode(), "width": 8, "height": 4}
            elif member in ("wait_for", "run_script"):
                outcome = {"kind": "text", "text": "found"}
            else:
                outcome = {"kind": "done"}
            return Reply(200, {"outcome": outcome, "state": state, "elapsed_ms": 3})
        return Reply(404, {"code": "not_found", "message": "no"})


def make_session(state: str, name: str = "t1", backend: str = "local", screen: tuple[int, int] = (64, 32)) -> str:
    folder = os.path.join(state, "sessions", name)
    os.makedirs(folder, mode=0o700)
    record = {"name": name, "backend": backend, "screen": {"width": screen[0], "height": screen[1]}, "created_unix": 1}
    with open(os.path.join(folder, "session.json"), "w") as f:
        json.dump(record, f)
    fd = os.open(os.path.join(folder, "token"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, TOKEN.encode() + b"\n")
    os.close(fd)
    return folder
