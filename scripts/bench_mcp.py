"""The MCP call's overhead over `host-cli act` on the same batch
(BENCHMARKS.md "MCP server"): the wall time of N `computer` calls through
the official MCP Python SDK over stdio (one server session), against N
`host-cli act` runs and the daemon's own time for the batch.

    SANDTOP_STATE_DIR=... python scripts/bench_mcp.py HOST_CLI SESSION [N]

Needs a running session (`host-cli guest start`) and the `mcp` package
(`pip install './python[test]'`). Prints medians in ms; asserts nothing.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time

from mcp import Client, StdioServerParameters

BATCH = [{"type": "move", "x": 100, "y": 100}, {"type": "move", "x": 200, "y": 150}]
SIZE = {"width": 1280, "height": 800}


async def mcp_times(host_cli: str, session: str, n: int) -> list[float]:
    import os

    env = {k: v for k, v in os.environ.items() if k in ("SANDTOP_STATE_DIR", "DOCKER_HOST", "HOME", "PATH")}
    params = StdioServerParameters(command=host_cli, args=["mcp", "--session", session, "--no-browser"], env=env)
    out = []
    async with Client(params, mode="legacy") as c:
        await c.call_tool("computer", {"actions": BATCH, "size": SIZE})
        for _ in range(n):
            t = time.perf_counter()
            r = await c.call_tool("computer", {"actions": BATCH, "size": SIZE})
            out.append((time.perf_counter() - t) * 1000)
            assert r.structured_content and r.structured_content["ok"], r
    return out


def act_times(host_cli: str, session: str, n: int) -> tuple[list[float], list[float]]:
    wall, daemon = [], []
    for _ in range(n):
        t = time.perf_counter()
        p = subprocess.run(
            [host_cli, "act", "--session", session, "--size", "1280x800", json.dumps(BATCH)],
            capture_output=True,
            text=True,
            check=True,
        )
        wall.append((time.perf_counter() - t) * 1000)
        tm = json.loads(p.stdout)["timings"]
        daemon.append(float(tm.get("total_ms", 0.0)))
    return wall, daemon


def main() -> None:
    host_cli, session = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    m = asyncio.run(mcp_times(host_cli, session, n))
    a, d = act_times(host_cli, session, n)
    med = statistics.median
    print(f"computer over MCP (one session): p50 {med(m):.1f} ms, p95 {sorted(m)[int(0.95 * n) - 1]:.1f} ms")
    print(f"host-cli act (a process each):   p50 {med(a):.1f} ms, p95 {sorted(a)[int(0.95 * n) - 1]:.1f} ms")
    print(f"daemon's own time for the batch: p50 {med(d):.1f} ms")
    print(f"MCP call minus daemon time: p50 {med(m) - med(d):.1f} ms; act minus daemon: {med(a) - med(d):.1f} ms")


if __name__ == "__main__":
    main()
