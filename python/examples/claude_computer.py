"""The anthropic SDK's tool runner driving a Sandtop guest's desktop through
``computer_toolset_20260801``.

    host-cli guest start --name demo        # or let Session.start() do it
    ANTHROPIC_API_KEY=... python examples/claude_computer.py demo "Open the demo form and submit it"

Typing and key presses need a typed `yes` at the terminal (the toolset's
``confirm``; without a terminal nobody approves and they are refused);
every other member call is printed before it runs. The session is left
running (host-cli guest stop demo).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anthropic

import sandtop
import sandtop.anthropic


def confirm(context: Any) -> bool:
    print("member:", context.member)
    if context.member not in ("type", "key", "hold_key"):
        return True
    try:
        with open("/dev/tty") as tty:
            print(f"{context.member} {context.input.text!r}? type yes: ", end="", flush=True)
            return tty.readline().strip() == "yes"
    except OSError:
        return False  # no terminal: nobody approved


def main() -> int:
    name, task = sys.argv[1], sys.argv[2]
    session = sandtop.Session.attach(name)
    computer = sandtop.anthropic.Computer(session, confirm=confirm)
    runner = anthropic.Anthropic().beta.messages.tool_runner(
        model=os.environ.get("ANTHROPIC_MODEL", "claude-opus-5-5"),
        max_tokens=4096,
        messages=[{"role": "user", "content": task}],
        tools=[computer],
        max_iterations=30,
    )
    final = runner.until_done()
    print("".join(block.text for block in final.content if block.type == "text"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
