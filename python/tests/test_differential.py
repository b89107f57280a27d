"""Differential tests: the same scripted scenarios run once through
``host-cli run`` and once through the SDK's ``ResponsesToolRunner`` with
the Sandtop drivers, on one real guest, each against a fresh mock
Responses server; the request sequences the mock received are compared
item by item (tools declared, call-id pairing, acknowledged checks,
screenshot output shape, storage, what follows an error, the step limit).

Known, documented differences are normalised explicitly (never ignored
wholesale): host-cli sends an initial screenshot in its first user message
(the SDK sends the task text only) and offers ``ask_user`` unless
``--no-ask-user`` (given here). See docs/contract.md.
Needs Docker and the guest image (SANDTOP_REQUIRE=docker: fail instead of skip).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Iterator, Optional

import pytest

import sandtop

sys.path.insert(0, os.path.dirname(__file__))
from guest import Mock, need_guest  # noqa: E402

pytest.importorskip("openai")

TASK = "Move the pointer around, then say finished."
CHECK = {"id": "sc_diff_1", "code": "malicious_instructions", "message": "The page asks for something odd."}


def call(call_id: str, actions: list[dict[str, Any]], checks: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    return {
        "type": "computer_call",
        "id": "cu_" + call_id,
        "call_id": call_id,
        "actions": actions,
        "pending_safety_checks": checks or [],
        "status": "completed",
    }


def move(x: int, y: int) -> dict[str, Any]:
    return {"type": "move", "x": x, "y": y}


WAIT = {"type": "wait"}

SCENARIOS: dict[str, dict[str, Any]] = {
    # An approved check, a batch of actions, then two calls in one response.
    "approval_batch_two_calls": {
        "replies": [
            {"items": [call("c1", [move(10, 10), WAIT], [CHECK])]},
            {"items": [call("c2", [move(20, 20)]), call("c3", [WAIT])]},
            {"done": "finished"},
        ],
        "max_steps": 5,
        "requests": 3,
        "host_exit": 0,
        "sdk_error": None,
    },
    # An action the daemon (and host-cli's preflight) refuses: the run stops,
    # nothing more is asked of the model.
    "invalid_action": {
        "replies": [{"items": [call("c1", [{"type": "click", "button": "left", "x": 5000, "y": 5000}])]}, {"done": "never"}],
        "max_steps": 5,
        "requests": 1,
        "host_exit": 5,  # action_failed
        "sdk_error": "stopped before completion",
    },
    # Commentary alone is not a final answer: both runs stop, failed.
    "commentary_is_not_final": {
        "replies": [
            {"items": [{
                "type": "message", "id": "msg_c1", "status": "completed", "role": "assistant", "phase": "commentary",
                "content": [{"type": "output_text", "text": "Let me look first.", "annotations": [], "logprobs": []}],
            }]},
            {"items": [call("c1", [WAIT])]},
            {"done": "finished"},
        ],
        "max_steps": 5,
        "requests": 1,
        "host_exit": 6,
        "sdk_error": "no completed final message",
    },
    # The step limit: the last allowed request cannot start effects.
    "max_steps": {
        "replies": [{"items": [call("c1", [WAIT])]}, {"items": [call("c2", [move(30, 30)])]}, {"done": "late"}],
        "max_steps": 2,
        "requests": 2,
        "host_exit": 4,  # max_steps
        "sdk_error": "reached max_steps",
    },
}


@pytest.fixture(scope="module")
def guest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, sandtop.Session]]:
    host_cli, mock = need_guest()
    session = sandtop.Session.start(host_cli=host_cli, display=(1280, 800))
    try:
        yield host_cli, mock, session
    finally:
        session.stop()


def run_host_cli(host_cli: str, mock_exe: str, session: sandtop.Session, scenario: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    work = tempfile.mkdtemp(prefix="diff-host-")
    key = "sk-mock-" + os.urandom(8).hex()
    mock = Mock(mock_exe, os.path.join(work, "requests.jsonl"), key)
    for r in scenario["replies"]:
        mock.push(r)
    policy = os.path.join(work, "policy.json")
    with open(policy, "w") as f:
        json.dump({"approve_check_codes": [CHECK["code"]]}, f)
    # host-cli's own interface takes the model key from the environment; this
    # is the mock's throwaway key, not a credential.
    env = {**os.environ, "OPENAI_API_KEY": key, "OPENAI_BASE_URL": mock.base_url}
    p = subprocess.run(
        [
            host_cli, "run", "--session", session.name, "--no-ask-user",
            "--approve-policy", policy, "--max-steps", str(scenario["max_steps"]),
            "--record", os.path.join(work, "run"), TASK,
        ],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )
    return mock.close(), p.returncode


def run_sdk(mock_exe: str, session: sandtop.Session, scenario: dict[str, Any]) -> tuple[list[dict[str, Any]], Optional[BaseException]]:
    from openai import OpenAI
    from openai.lib.computer import ComputerToolset
    from openai.lib.responses_tool_runner import ResponsesToolRunner

    work = tempfile.mkdtemp(prefix="diff-sdk-")
    key = "sk-mock-" + os.urandom(8).hex()
    mock = Mock(mock_exe, os.path.join(work, "requests.jsonl"), key)
    for r in scenario["replies"]:
        mock.push(r)
    error: Optional[BaseException] = None
    try:
        ResponsesToolRunner(computer=ComputerToolset(sandtop.Computer(session))).run(
            OpenAI(api_key=key, base_url=mock.base_url, max_retries=0),
            {"model": "gpt-5.5", "input": TASK, "store": False},
            max_steps=scenario["max_steps"],
            approve_safety_checks=lambda c: all(ch.code == CHECK["code"] for ch in c.pending_safety_checks),
        )
    except Exception as e:  # noqa: BLE001 - the outcome is compared below
        error = e
    return mock.close(), error


def shape(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per request: what is compared between the two runners."""
    out = []
    previous_calls: list[str] = []
    for r in requests:
        body = r["body"]
        items = body.get("input") or []
        answers = [i for i in items if i.get("type") == "computer_call_output" and i.get("call_id") in previous_calls]
        out.append(
            {
                "valid": (r["authorized"], r["validation_errors"], r["problems"]),
                "tools": body.get("tools"),
                "store": body.get("store"),
                "previous_response_id": body.get("previous_response_id"),
                "answers": [
                    {
                        "call_id": a["call_id"],
                        "acknowledged": [c["id"] for c in a.get("acknowledged_safety_checks") or []],
                        "output_keys": sorted(a["output"]),
                        "output_type": a["output"]["type"],
                        "data_url": a["output"].get("image_url", "").startswith("data:image/png;base64,"),
                    }
                    for a in answers
                ],
            }
        )
        response = r.get("response") or {}
        previous_calls = [i["call_id"] for i in response.get("output", []) if i.get("type") == "computer_call"]
    return out


def first_user_message(requests: list[dict[str, Any]]) -> list[str]:
    items = requests[0]["body"]["input"]
    if isinstance(items, str):
        return ["input_text"]
    parts = [p for i in items if i.get("role") == "user" for p in (i["content"] if isinstance(i["content"], list) else [{"type": "input_text"}])]
    return [p["type"] for p in parts]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_host_cli_and_the_sdk_runner_send_the_same_requests(guest: tuple[str, str, sandtop.Session], name: str) -> None:
    host_cli, mock_exe, session = guest
    scenario = SCENARIOS[name]
    host, host_exit = run_host_cli(host_cli, mock_exe, session, scenario)
    sdk, sdk_error = run_sdk(mock_exe, session, scenario)
    assert len(host) == len(sdk) == scenario["requests"], (len(host), len(sdk))
    # Documented difference: host-cli's first message carries a screenshot.
    assert first_user_message(host) == ["input_text", "input_image"]
    assert first_user_message(sdk) == ["input_text"]
    assert shape(host) == shape(sdk)
    for r in shape(sdk):
        assert r["valid"] == (True, [], [])
    assert host_exit == scenario["host_exit"]
    if scenario["sdk_error"] is None:
        assert sdk_error is None, repr(sdk_error)
    else:
        assert sdk_error is not None and scenario["sdk_error"] in str(sdk_error), repr(sdk_error)


FORM_URL = "http://127.0.0.1:8080/"
FORM_ORIGIN = "http://127.0.0.1:8080"
OUTSIDE_URL = "http://127.0.0.1.example.test:8080/"


def fcall(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call", "id": "fc_" + call_id, "call_id": call_id, "name": name, "arguments": json.dumps(args), "status": "completed"}


# Browser: a navigation the URL policy refuses, one it allows (confirmed),
# a read, a confirmed click on a ref that names nothing, then the end.
BROWSER = {
    "replies": [
        {"items": [fcall("b1", "browser_navigate", {"url": OUTSIDE_URL, "tab_id": None})]},
        {"items": [fcall("b2", "browser_navigate", {"url": FORM_URL, "tab_id": None})]},
        {"items": [fcall("b3", "browser_get_page_text", {"tab_id": None})]},
        {"items": [fcall("b4", "browser_click", {"target": "no-such-ref", "tab_id": None})]},
        {"done": "finished"},
    ],
    "max_steps": 8,
}


def browser_shape(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    previous: list[str] = []
    for r in requests:
        items = r["body"].get("input") or []
        answers = []
        for i in items:
            if i.get("type") != "function_call_output" or i.get("call_id") not in previous:
                continue
            payload = json.loads(i["output"][0]["text"])
            answers.append(
                {
                    "call_id": i["call_id"],
                    "ok": payload["ok"],
                    "error": payload.get("error"),
                    "result_kind": type(payload.get("result")).__name__,
                    "tabs": [(t["url"], t["active"]) for t in payload.get("state", {}).get("tabs", [])],
                }
            )
        out.append({"valid": (r["authorized"], r["validation_errors"], r["problems"]), "store": r["body"].get("store"), "answers": answers})
        previous = [i["call_id"] for i in (r.get("response") or {}).get("output", []) if i.get("type") == "function_call"]
    return out


def tool_names(requests: list[dict[str, Any]]) -> list[str]:
    return [t.get("name", t["type"]) for t in requests[0]["body"]["tools"]]


def test_browser_calls_host_cli_and_the_sdk_runner_send_the_same_requests(guest: tuple[str, str, sandtop.Session]) -> None:
    from openai import OpenAI
    from openai.lib.browser import BrowserToolset
    from openai.lib.responses_tool_runner import ResponsesToolRunner

    host_cli, mock_exe, session = guest
    # Both runs start from the same browser state: one blank tab shown.
    sandtop.Browser(session).navigate({"url": "about:blank", "tab_id": None})
    work = tempfile.mkdtemp(prefix="diff-browser-")
    key = "sk-mock-" + os.urandom(8).hex()
    mock = Mock(mock_exe, os.path.join(work, "host.jsonl"), key)
    for r in BROWSER["replies"]:
        mock.push(r)
    policy = os.path.join(work, "policy.json")
    with open(policy, "w") as f:
        json.dump({"approve_browser_members": ["navigate", "click"]}, f)
    p = subprocess.run(
        [
            host_cli, "run", "--session", session.name, "--no-ask-user", "--no-sign-in", "--browser",
            "--url-policy", FORM_ORIGIN, "--approve-policy", policy,
            "--max-steps", str(BROWSER["max_steps"]), "--record", os.path.join(work, "run"), TASK,
        ],
        env={**os.environ, "OPENAI_API_KEY": key, "OPENAI_BASE_URL": mock.base_url},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )
    host = mock.close()
    assert p.returncode == 0, p.stderr[-2000:]

    sandtop.Browser(session).navigate({"url": "about:blank", "tab_id": None})
    mock = Mock(mock_exe, os.path.join(work, "sdk.jsonl"), key)
    for r in BROWSER["replies"]:
        mock.push(r)
    asked: list[str] = []
    toolset = BrowserToolset(
        sandtop.Browser(session),
        # host-cli's members: the defaults without `key` (it acts on whatever has the focus).
        members=[n[len("browser_"):] for n in tool_names(host)],
        confirm=lambda ctx: asked.append(ctx["member"]) or True,
        url_policy=lambda ctx, url: url.startswith(FORM_ORIGIN + "/"),
    )
    response = ResponsesToolRunner(browser=toolset).run(
        OpenAI(api_key=key, base_url=mock.base_url, max_retries=0),
        {"model": "gpt-5.5", "input": TASK, "store": False},
        max_steps=BROWSER["max_steps"],
    )
    sdk = mock.close()
    assert response.output_text == "finished"
    assert asked == ["navigate", "click"]  # the refused navigation was never put to anyone
    # The same declarations, word for word (host-cli words its tools as the SDK does).
    assert sdk[0]["body"]["tools"] == host[0]["body"]["tools"]
    assert browser_shape(host) == browser_shape(sdk)
    shapes = browser_shape(sdk)
    assert all(s["valid"] == (True, [], []) for s in shapes)
    assert shapes[1]["answers"][0]["ok"] is False  # outside the URL policy
    assert shapes[2]["answers"][0]["ok"] is True and shapes[2]["answers"][0]["tabs"] == [(FORM_ORIGIN, True)]
    assert shapes[4]["answers"][0]["ok"] is False  # a ref that names nothing


class CountingComputer(sandtop.Computer):
    """sandtop.Computer, counting the actions that reached the daemon."""

    sent: int = 0

    def _act(self, action: Any, kind: str, cancelled: Any) -> None:
        sandtop.computer.action_body(action, kind)  # refused here before counting
        self.sent += 1
        super()._act(action, kind, cancelled)


def test_a_later_invalid_call_host_cli_refuses_the_response_the_sdk_runs_the_earlier_call(guest: tuple[str, str, sandtop.Session]) -> None:
    """The one behavioural difference left, kept visible: host-cli checks
    every call of a response before any runs (an action field OpenAI's
    schema does not define refuses the whole response, zero effects); the
    SDK's runner hands calls to the driver one by one, so the Sandtop
    driver refuses the bad action by name only when it comes to it, after
    the earlier call ran. Both stop the run with no further request."""
    host_cli, mock_exe, session = guest
    scenario = {
        "replies": [
            {"items": [call("c1", [move(40, 40)]), call("c2", [{"type": "move", "x": 50, "y": 50, "foo": 1}])]},
            {"done": "never"},
        ],
        "max_steps": 5,
    }
    host, host_exit = run_host_cli(host_cli, mock_exe, session, scenario)
    from openai import OpenAI
    from openai.lib.computer import ComputerToolset
    from openai.lib.responses_tool_runner import ResponsesToolRunner

    work = tempfile.mkdtemp(prefix="diff-sdk-")
    key = "sk-mock-" + os.urandom(8).hex()
    mock = Mock(mock_exe, os.path.join(work, "requests.jsonl"), key)
    for r in scenario["replies"]:
        mock.push(r)
    computer = CountingComputer(session)
    with pytest.raises(Exception, match="stopped before completion"):
        ResponsesToolRunner(computer=ComputerToolset(computer)).run(
            OpenAI(api_key=key, base_url=mock.base_url, max_retries=0),
            {"model": "gpt-5.5", "input": TASK, "store": False},
            max_steps=5,
        )
    sdk = mock.close()
    assert len(host) == len(sdk) == 1
    assert shape(host) == shape(sdk)
    assert host_exit == 5  # action_failed: c1 skipped, c2 refused, daemon 0 ms
    assert computer.sent == 1  # c1's move ran; c2 was refused by name, never sent


def preview_call(call_id: str, action: dict[str, Any], checks: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    return {
        "type": "computer_call",
        "id": "cu_" + call_id,
        "call_id": call_id,
        "action": action,
        "pending_safety_checks": checks or [],
        "status": "completed",
    }


def test_the_preview_tool_host_cli_and_the_sdk_computer_toolset_send_the_same_requests(guest: tuple[str, str, sandtop.Session]) -> None:
    """The older ``computer_use_preview`` shape (one ``action`` per call):
    ``host-cli run --tool computer-use-preview`` against the SDK's
    ``ComputerToolset.run`` (its runner declares only the GA tool)."""
    from openai import OpenAI
    from openai.lib.computer import ComputerToolset

    host_cli, mock_exe, session = guest
    replies = [
        {"items": [preview_call("p1", move(15, 15), [CHECK])]},
        {"items": [preview_call("p2", {"type": "wait"})]},
        {"done": "finished"},
    ]
    work = tempfile.mkdtemp(prefix="diff-preview-")
    key = "sk-mock-" + os.urandom(8).hex()
    mock = Mock(mock_exe, os.path.join(work, "host.jsonl"), key)
    for r in replies:
        mock.push(r)
    policy = os.path.join(work, "policy.json")
    with open(policy, "w") as f:
        json.dump({"approve_check_codes": [CHECK["code"]]}, f)
    p = subprocess.run(
        [
            host_cli, "run", "--session", session.name, "--no-ask-user", "--tool", "computer-use-preview",
            "--approve-policy", policy, "--record", os.path.join(work, "run"), TASK,
        ],
        env={**os.environ, "OPENAI_API_KEY": key, "OPENAI_BASE_URL": mock.base_url},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )
    host = mock.close()
    assert p.returncode == 0, p.stderr[-2000:]
    mock = Mock(mock_exe, os.path.join(work, "sdk.jsonl"), key)
    for r in replies:
        mock.push(r)
    tool = {"type": "computer_use_preview", "display_width": session.screen[0], "display_height": session.screen[1], "environment": "linux"}
    response = ComputerToolset(sandtop.Computer(session)).run(
        OpenAI(api_key=key, base_url=mock.base_url, max_retries=0),
        {"model": "computer-use-preview", "input": TASK, "tools": [tool], "truncation": "auto", "store": False},
        approve_safety_checks=lambda c: True,
    )
    sdk = mock.close()
    assert response.output_text == "finished"
    assert host[0]["body"]["tools"] == sdk[0]["body"]["tools"] == [tool]
    assert len(host) == len(sdk) == 3
    assert shape(host) == shape(sdk)
    assert all(r["valid"] == (True, [], []) for r in shape(sdk))
    assert [r["body"].get("truncation") for r in host] == [r["body"].get("truncation") for r in sdk] == ["auto"] * 3
