"""The examples in python/examples/ run as a user runs them (OPENAI_API_KEY
and OPENAI_BASE_URL in their environment, here the mock's throwaway key and
address) against a real guest. Without a terminal nobody approves, so the
browser example's navigation is refused and its read still runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import pytest

import sandtop

sys.path.insert(0, os.path.dirname(__file__))
from guest import Mock, need_guest  # noqa: E402

pytest.importorskip("openai")
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def run_example(mock_exe: str, script: str, session: sandtop.Session, replies: list[dict[str, Any]]) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    key = "sk-mock-" + os.urandom(8).hex()
    mock = Mock(mock_exe, os.path.join(tempfile.mkdtemp(prefix="example-"), "requests.jsonl"), key)
    for r in replies:
        mock.push(r)
    p = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, script), session.name, "the task"],
        env={**os.environ, "OPENAI_API_KEY": key, "OPENAI_BASE_URL": mock.base_url},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180, start_new_session=True,
    )
    return p, mock.close()


def test_the_examples_run_against_a_guest() -> None:
    host_cli, mock_exe = need_guest()
    with sandtop.Session.start(host_cli=host_cli) as session:
        call = {"type": "computer_call", "id": "cu_1", "call_id": "c1", "status": "completed",
                "actions": [{"type": "move", "x": 10, "y": 10}, {"type": "wait"}], "pending_safety_checks": []}
        p, requests = run_example(mock_exe, "computer.py", session, [{"items": [call]}, {"done": "computer done"}])
        assert p.returncode == 0, p.stderr[-2000:]
        assert p.stdout.splitlines() == ["action: move", "action: wait", "action: screenshot", "computer done"]
        assert len(requests) == 2 and all(r["validation_errors"] == [] and r["problems"] == [] for r in requests)

        def fcall(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
            return {"type": "function_call", "id": "fc_" + call_id, "call_id": call_id, "name": name,
                    "arguments": json.dumps(args), "status": "completed"}

        p, requests = run_example(
            mock_exe, "browser.py", session,
            [
                {"items": [fcall("b1", "browser_navigate", {"url": "http://127.0.0.1:8080/", "tab_id": None})]},
                {"items": [fcall("b2", "browser_get_page_text", {"tab_id": None})]},
                {"done": "browser done"},
            ],
        )
        assert p.returncode == 0, p.stderr[-2000:]
        assert p.stdout.splitlines()[-1] == "browser done"
        outs = [i for i in requests[-1]["body"]["input"] if i.get("type") == "function_call_output"]
        results = [json.loads(o["output"][0]["text"]) for o in outs]
        assert [r["ok"] for r in results] == [False, True]
        assert "not approved" in results[0]["error"]
