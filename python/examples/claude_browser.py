"""The anthropic SDK's tool runner driving the guest's browser through
``browser_toolset_20260801``, confined to the demo app's origin.

    host-cli guest start --name demo
    ANTHROPIC_API_KEY=... python examples/claude_browser.py demo "Fill in the demo form and submit it"

A ``navigate`` outside http://127.0.0.1:8080 is refused before anyone is
asked (the toolset's URL policy, and the daemon's with every call); every
other call asks for a typed `yes` at the terminal (no terminal: refused).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anthropic

import sandtop
import sandtop.anthropic


def confirm(context: Any) -> bool:
    print("member:", context.member, "on", context.tab_url)
    if context.member in ("read_page", "find", "get_page_text", "screenshot", "list_tabs"):
        return True  # reads change nothing
    try:
        with open("/dev/tty") as tty:
            print("approve? type yes: ", end="", flush=True)
            return tty.readline().strip() == "yes"
    except OSError:
        return False


def main() -> int:
    name, task = sys.argv[1], sys.argv[2]
    session = sandtop.Session.attach(name)
    browser = sandtop.anthropic.Browser(session, origins=["http://127.0.0.1:8080"], confirm=confirm)
    runner = anthropic.Anthropic().beta.messages.tool_runner(
        model=os.environ.get("ANTHROPIC_MODEL", "claude-opus-5-5"),
        max_tokens=4096,
        messages=[{"role": "user", "content": task}],
        tools=[browser],
        max_iterations=30,
    )
    final = runner.until_done()
    print("".join(block.text for block in final.content if block.type == "text"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
