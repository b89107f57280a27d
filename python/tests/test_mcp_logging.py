"""MCP logging from ``host-cli mcp``, read by the official MCP Python SDK:
nothing before the client asks; then one message per tool call naming the
tool and how it ended, at the levels asked (``logging/setLevel`` on
2025-11-25, the request's ``_meta`` log level on 2026-07-28), and never
what a call typed.

Needs Docker and the guest image (test_mcp.py's ``world``); skipped
otherwise (SANDTOP_REQUIRE=docker makes that a failure).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

sys.path.insert(0, os.path.dirname(__file__))

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from test_mcp import Person, World, call, run, structured, world  # noqa: E402,F401

TYPED = f"typed-canary-{os.getpid()}"


class Log:
    def __init__(self) -> None:
        self.got: list[Any] = []

    async def __call__(self, params: Any) -> None:
        self.got.append(params)


def batch() -> dict[str, Any]:
    # Typed at a bare desktop (nothing has the focus): harmless.
    return {"actions": [{"type": "move", "x": 5, "y": 5}, {"type": "type", "text": TYPED}]}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_each_call_is_logged_by_tool_and_outcome_never_by_what_it_typed(world: World, mode: str) -> None:
    log, quiet = Log(), Log()

    async def go() -> None:
        # A client that does not ask gets nothing.
        async with Client(world.server("--session", world.name), mode=mode, logging_callback=quiet) as c:
            await call(c, "screenshot", {"size": {"width": 320, "height": 200}})
        kwargs: dict[str, Any] = {} if mode == "legacy" else {"log_level": "info"}
        async with Client(world.server("--session", world.name), mode=mode, logging_callback=log, elicitation_callback=Person("approve"), **kwargs) as c:
            if mode == "legacy":
                await c.set_logging_level("info")
            await call(c, "screenshot", {"size": {"width": 320, "height": 200}})
            r = await call(c, "computer", batch())
            assert structured(r)["ok"] is True, structured(r)
            await call(c, "computer", {"actions": [{"type": "move", "x": 99999, "y": 1}]})

    run(go())
    assert quiet.got == []
    data = [m.data for m in log.got]
    assert all(m.logger == "sandtop" for m in log.got)
    tools = [d["tool"] for d in data]
    assert tools.count("screenshot") == 1 and tools.count("computer") >= 2, data
    refused = [m for m in log.got if m.data["tool"] == "computer" and m.data["outcome"] == "refused or failed"]
    assert refused and refused[0].level == "warning", data
    assert all(isinstance(d["ms"], int) for d in data)
    assert TYPED not in json.dumps(data)
