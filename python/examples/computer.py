"""The SDK's ResponsesToolRunner driving a Sandtop guest's desktop.

    host-cli guest start --name demo        # or let Session.start() do it
    OPENAI_API_KEY=... python examples/computer.py demo "Open the demo form and submit it"

Safety checks are shown and need a typed `yes`; every action is printed
before it runs. The session is left running (host-cli guest stop demo).
"""

from __future__ import annotations

import sys

from openai import OpenAI
from openai.lib.computer import ComputerToolset
from openai.lib.responses_tool_runner import ResponsesToolRunner

import sandtop


def approve(call) -> bool:  # type: ignore[no-untyped-def]
    for check in call.pending_safety_checks or []:
        print(f"safety check {check.code}: {check.message}")
    try:
        with open("/dev/tty") as tty:
            print("approve? type yes: ", end="", flush=True)
            return tty.readline().strip() == "yes"
    except OSError:
        return False  # no terminal: nobody approved


def main() -> int:
    name, task = sys.argv[1], sys.argv[2]
    session = sandtop.Session.attach(name)
    runner = ResponsesToolRunner(computer=ComputerToolset(sandtop.Computer(session)))
    response = runner.run(
        OpenAI(),
        {"model": "gpt-5.5", "input": task, "store": False},
        max_steps=30,
        approve_safety_checks=approve,
        before_action=lambda action: print("action:", action.type) or True,
    )
    print(response.output_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
