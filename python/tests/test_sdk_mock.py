"""The SDK's ResponsesToolRunner with the Sandtop drivers, against the
project's mock Responses server (every request validated against
``CreateResponse`` and the API's own rules) and the fake daemon: no
Docker needed, only the mock-responses binary (testkit)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from typing import Any, Iterator

import pytest

import sandtop

sys.path.insert(0, os.path.dirname(__file__))
from fakes import FakeDaemon, make_session  # noqa: E402
from guest import Mock, binary, skip  # noqa: E402

pytest.importorskip("openai")


@pytest.fixture
def mock() -> Iterator[Mock]:
    exe = binary("SANDTOP_MOCK_RESPONSES", "mock-responses")
    if exe is None:
        skip(
            "sdk",
            "mock-responses is missing and could not be built "
            "(cargo build -p sandtop-testkit --bin mock-responses; or set SANDTOP_MOCK_RESPONSES)",
        )
    assert exe is not None
    work = tempfile.mkdtemp(prefix="sdk-mock-")
    m = Mock(exe, os.path.join(work, "requests.jsonl"), "sk-mock-" + os.urandom(8).hex())
    yield m
    if m.proc.poll() is None:
        m.proc.kill()
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDaemon]:
    d = tempfile.mkdtemp(prefix="st", dir="/tmp")
    monkeypatch.setenv("SANDTOP_STATE_DIR", d)
    fake = FakeDaemon(make_session(d))
    yield fake
    fake.close()
    shutil.rmtree(d, ignore_errors=True)


def computer_call(call_id: str, actions: list[dict[str, Any]], checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "type": "computer_call",
        "id": "cu_" + call_id,
        "call_id": call_id,
        "actions": actions,
        "pending_safety_checks": checks or [],
        "status": "completed",
    }


def function_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call", "id": "fc_" + call_id, "call_id": call_id, "name": name, "arguments": json.dumps(args), "status": "completed"}


def assert_valid(requests: list[dict[str, Any]]) -> None:
    assert requests
    for r in requests:
        assert r["authorized"] and r["validation_errors"] == [] and r["problems"] == [], r


def test_batched_actions_two_calls_and_an_approved_check_through_the_sdk_runner(mock: Mock, daemon: FakeDaemon) -> None:
    from openai import OpenAI
    from openai.lib.computer import ComputerToolset
    from openai.lib.responses_tool_runner import ResponsesToolRunner

    check = {"id": "sc_1", "code": "malicious_instructions", "message": "check"}
    mock.push({"items": [computer_call("c1", [{"type": "click", "button": "left", "x": 5, "y": 6}, {"type": "type", "text": "hé"}], [check])]})
    mock.push({"items": [computer_call("c2", [{"type": "keypress", "keys": ["ENTER"]}]), computer_call("c3", [{"type": "wait"}])]})
    mock.push({"done": "finished"})
    runner = ResponsesToolRunner(computer=ComputerToolset(sandtop.Computer(sandtop.Session.attach("t1"))))
    response = runner.run(
        OpenAI(api_key=mock_key(mock), base_url=mock.base_url, max_retries=0),
        {"model": "gpt-5.5", "input": "go", "store": False},
        approve_safety_checks=lambda call: True,
    )
    requests = mock.close()
    assert response.output_text == "finished"
    assert_valid(requests)
    assert len(requests) == 3
    outs = [i for i in requests[2]["body"]["input"] if i.get("type") == "computer_call_output"]
    assert [o["call_id"] for o in outs] == ["c1", "c2", "c3"]
    assert outs[0]["acknowledged_safety_checks"] == [check]
    assert all(o["output"]["type"] == "computer_screenshot" for o in outs)
    # One daemon call per action, one settled screenshot per call.
    batches = [r["body"]["actions"] for r in daemon.work()]
    assert batches == [
        [{"type": "click", "button": "left", "x": 5, "y": 6}], [{"type": "type", "text": "hé"}], [],
        [{"type": "keypress", "keys": ["ENTER"]}], [],
        [{"type": "wait"}], [],
    ]


def test_browser_reads_and_a_confirmed_click_through_the_sdk_runner(mock: Mock, daemon: FakeDaemon) -> None:
    from openai import OpenAI
    from openai.lib.browser import BrowserToolset
    from openai.lib.responses_tool_runner import ResponsesToolRunner

    mock.push({"items": [function_call("b1", "browser_read_page", {"tab_id": None, "filter": "interactive"})]})
    mock.push({"items": [function_call("b2", "browser_click", {"tab_id": None, "target": "e1"})]})
    mock.push({"done": "clicked"})
    confirmed = []
    toolset = BrowserToolset(
        sandtop.Browser(sandtop.Session.attach("t1")),
        confirm=lambda ctx: confirmed.append((ctx["member"], ctx["arguments"])) or True,
        url_policy=lambda ctx, url: False,
    )
    response = ResponsesToolRunner(browser=toolset).run(
        OpenAI(api_key=mock_key(mock), base_url=mock.base_url, max_retries=0),
        {"model": "gpt-5.5", "input": "click send", "store": False},
    )
    requests = mock.close()
    assert response.output_text == "clicked"
    assert_valid(requests)
    assert confirmed == [("click", {"tab_id": None, "target": "e1"})]
    outs = [i for i in requests[2]["body"]["input"] if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outs] == ["b1", "b2"]
    first = json.loads(outs[0]["output"][0]["text"])
    assert first["ok"] and first["result"]["elements"][0]["ref"] == "e1"
    assert first["state"]["tabs"][0]["url"] == "http://demo.test:8080"
    assert [r["body"] for r in daemon.work() if r["path"] == "/v1/browser/call"] == [
        {"member": "read_page", "tab_id": None, "filter": "interactive"},
        {"member": "click", "tab_id": None, "target": "e1"},
    ]


def mock_key(mock: Mock) -> str:
    return mock.key
