"""The SDK's ResponsesToolRunner with BrowserToolset over a Sandtop guest's
own browser (the daemon's Firefox).

    OPENAI_API_KEY=... python examples/browser.py demo "Fill in the contact form at http://127.0.0.1:8080/"

Every state-changing member is confirmed on the terminal (`confirm`);
navigation is allowed to one origin only (`url_policy`).
"""

from __future__ import annotations

import json
import sys
from urllib.parse import urlsplit

from openai import OpenAI
from openai.lib.browser import BrowserToolset
from openai.lib.responses_tool_runner import ResponsesToolRunner

import sandtop

ALLOWED = ("http", "127.0.0.1", 8080)


def confirm(ctx) -> bool:  # type: ignore[no-untyped-def]
    print(f"browser {ctx['member']} {json.dumps(ctx['arguments'], ensure_ascii=True)}")
    try:
        with open("/dev/tty") as tty:
            print("allow? type yes: ", end="", flush=True)
            return tty.readline().strip() == "yes"
    except OSError:
        return False


def url_policy(ctx, url: str) -> bool:  # type: ignore[no-untyped-def]
    u = urlsplit(url)
    return (u.scheme, u.hostname, u.port) == ALLOWED


def main() -> int:
    name, task = sys.argv[1], sys.argv[2]
    session = sandtop.Session.attach(name)
    toolset = BrowserToolset(sandtop.Browser(session), confirm=confirm, url_policy=url_policy)
    runner = ResponsesToolRunner(browser=toolset)
    response = runner.run(OpenAI(), {"model": "gpt-5.5", "input": task, "store": False}, max_steps=30)
    print(response.output_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
