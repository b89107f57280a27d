"""A stdio relay for the MCP tests: runs the command after LOGDIR, copies
the client's bytes to it and its bytes back, and appends both directions
and its stderr to LOGDIR/to_server, from_server and stderr, so that a test
can search everything that crossed the connection.

Usage: python mcp_relay.py LOGDIR COMMAND [ARG...]
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import IO


def pump(src: IO[bytes], dst: IO[bytes] | None, log: IO[bytes]) -> None:
    while True:
        chunk = src.read1(65536) if hasattr(src, "read1") else src.read(65536)
        if not chunk:
            break
        log.write(chunk)
        log.flush()
        if dst is not None:
            try:
                dst.write(chunk)
                dst.flush()
            except (BrokenPipeError, ValueError):
                break
    if dst is not None:
        try:
            dst.close()
        except (BrokenPipeError, ValueError):
            pass


def main() -> int:
    logdir, argv = sys.argv[1], sys.argv[2:]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdin and p.stdout and p.stderr
    logs = [open(os.path.join(logdir, n), "ab") for n in ("to_server", "from_server", "stderr")]
    threads = [
        threading.Thread(target=pump, args=(sys.stdin.buffer, p.stdin, logs[0]), daemon=True),
        threading.Thread(target=pump, args=(p.stdout, sys.stdout.buffer, logs[1])),
        threading.Thread(target=pump, args=(p.stderr, sys.stderr.buffer, logs[2])),
    ]
    for t in threads:
        t.start()
    code = p.wait()
    for t in threads[1:]:
        t.join()
    for f in logs:
        f.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
