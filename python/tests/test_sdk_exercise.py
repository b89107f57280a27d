"""The offline exercise through someone else's runner: the official SDK's
``ResponsesToolRunner`` with ``ComputerToolset(sandtop.Computer(session))``
against the project's mock Responses server (schema-validated requests)
and a real guest, checked as ``host-cli exercise`` checks it: the demo
app's own record and the saved file, never the screenshots or the
model's words.

The scripted model is host-cli's exercise script (host-cli/src/agent/
exercise.rs): it raises a safety check on its first call, opens the demo
form (Super+B), fills it in with non-ASCII text, submits it, opens the
editor (Super+E), types a note and saves it through the Save dialog,
deciding each step from the screenshot the runner is about to send.
Needs Docker and the guest image; skipped otherwise (SANDTOP_REQUIRE=docker
makes that a failure).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import sys
import tempfile
from typing import Any, Optional

import pytest

import sandtop

sys.path.insert(0, os.path.dirname(__file__))
from guest import Frame, Mock, guest_file, need_guest  # noqa: E402

pytest.importorskip("openai")

FORM_NAME = "Zoë Ångström-Łukasz 山田太郎"
FORM_EMAIL = "zoe.angstrom@example.test"
FORM_MESSAGE = "Grüße aus der Sandbox! Ça marche très bien — 日本語のテキスト ✓ 🙂 `$(not a command)`"
NOTE_TEXT = "Sandtop exercise note\nÜmlaute und Akzente: àéîõü ñ ç\nCJK: 中文字 한국어, emoji: 🙂🚀\n"
NOTE_PATH = "/home/user/exercise-note.txt"
# Typed into the Save dialog, which opens in the home folder: a typed path
# makes it load folders as it goes; Enter after a WAIT finds Save sensitive
# (sandtop-exercise's NOTE_NAME).
NOTE_NAME = "exercise-note.txt"
STORE_PATH = "/home/user/demo/submissions.jsonl"
BUTTON = (0x25, 0x63, 0xEB)
GTK_SELECTED = (53, 132, 228)
MAX_TRIES, RETRY_EVERY = 30, 4
_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):048x}"


def keypress(*keys: str) -> dict[str, Any]:
    return {"type": "keypress", "keys": list(keys)}


def type_text(text: str) -> dict[str, Any]:
    return {"type": "type", "text": text}


WAIT = {"type": "wait"}


class ExerciseModel:
    """host-cli's ExerciseScript, deciding the next response from the
    screenshot the runner will send next."""

    def __init__(self, mock: Mock) -> None:
        self.mock = mock
        self.stage = "start"
        self.tries = 0
        self.calls = 0
        self.error: Optional[str] = None

    def call(self, actions: list[dict[str, Any]], checks: Optional[list[dict[str, Any]]] = None) -> None:
        self.calls += 1
        item = {
            "type": "computer_call",
            "id": _id("cu"),
            "call_id": f"call_{self.calls}",
            "actions": actions,
            "pending_safety_checks": checks or [],
            "status": "completed",
        }
        self.mock.push({"items": [item]})

    def done(self, text: str) -> None:
        self.mock.push({"done": text})

    def waiting(self, what: str, retry: Optional[dict[str, Any]] = None) -> None:
        self.tries += 1
        if self.tries > MAX_TRIES:
            self.error = f"{what} did not appear after {MAX_TRIES} waits"
            self.mock.push({"status": 400, "message": self.error})
            return
        actions = [retry] if retry is not None and self.tries % RETRY_EVERY == 0 else []
        self.call(actions + [WAIT])

    def advance(self, stage: str) -> None:
        self.stage, self.tries = stage, 0

    def first(self) -> None:
        self.advance("form")
        check = {
            "id": "sc_exercise_form",
            "code": "sensitive_domain",
            "message": "The exercise is about to open a web form in the guest's browser and submit personal details (a name and an email address).",
        }
        self.call([keypress("SUPER", "B"), WAIT, WAIT], [check])

    def saw(self, shot: Frame) -> None:
        if self.stage == "form":
            if shot.count(BUTTON) <= 500:
                return self.waiting("the demo form", keypress("SUPER", "B"))
            self.advance("saved")
            return self.call(
                [
                    type_text(FORM_NAME), keypress("TAB"), type_text(FORM_EMAIL), keypress("TAB"),
                    type_text(FORM_MESSAGE), keypress("TAB"), keypress("ENTER"), WAIT,
                ]
            )
        if self.stage == "saved":
            if shot.count(BUTTON) >= 50:
                return self.waiting("the saved page")
            self.advance("editor")
            return self.call([keypress("SUPER", "E"), WAIT, WAIT])
        if self.stage == "editor":
            if shot.white_share(70, 100) <= 0.95:
                return self.waiting("the text editor", keypress("SUPER", "E"))
            self.advance("dialog")
            return self.call([type_text(NOTE_TEXT), keypress("CTRL", "S"), WAIT, WAIT])
        if self.stage == "dialog":
            if shot.count(GTK_SELECTED) <= 2000:
                return self.waiting("the save dialog")
            self.advance("closed")
            return self.call([type_text(NOTE_NAME), WAIT, keypress("ENTER"), WAIT, WAIT])
        if self.stage == "closed":
            if shot.count(GTK_SELECTED) > 2000:
                return self.waiting("the save to finish", keypress("ENTER"))
            self.advance("done")
            return self.done("I submitted the contact form and saved the note in the text editor.")
        raise AssertionError(f"a screenshot after the end ({self.stage})")


class WatchedComputer(sandtop.Computer):
    """sandtop.Computer, and the scripted model looks at each screenshot it
    returns (the one the runner sends in the next request)."""

    model: ExerciseModel

    def screenshot(self, *, cancelled: Any = None) -> dict[str, str]:
        shot = super().screenshot(cancelled=cancelled)
        png = base64.b64decode(shot["image_url"].split(",", 1)[1])
        self.model.saw(Frame(png))
        return shot


def test_the_sdk_runner_with_the_sandtop_computer_completes_the_exercise_checked_on_the_apps_record() -> None:
    host_cli, mock_exe = need_guest()
    from openai import OpenAI
    from openai.lib.computer import ComputerToolset
    from openai.lib.responses_tool_runner import ResponsesToolRunner

    key = "sk-mock-" + os.urandom(16).hex()
    work = tempfile.mkdtemp(prefix="sdk-exercise-")
    mock = Mock(mock_exe, os.path.join(work, "requests.jsonl"), key)
    session = sandtop.Session.start(host_cli=host_cli, display=(1280, 800))
    requests: list[dict[str, Any]] = []
    with open(os.path.join(session.folder, "token")) as f:
        daemon_token = f.read().strip()
    try:
        model = ExerciseModel(mock)
        computer = WatchedComputer(session)
        computer.model = model
        model.first()
        approved: list[list[str]] = []

        def approve(call: Any) -> bool:
            # The scripted model's check, approved as --approve-scripted-checks does.
            approved.append([c.id for c in call.pending_safety_checks])
            return True

        runner = ResponsesToolRunner(computer=ComputerToolset(computer))
        client = OpenAI(api_key=key, base_url=mock.base_url, max_retries=0)
        try:
            response = runner.run(
                client,
                {"model": "gpt-5.5", "input": "Submit the demo form, then save a note in the editor.", "store": False},
                max_steps=80,
                approve_safety_checks=approve,
            )
        except Exception as e:
            # The scripted model's own account of where it stopped.
            raise AssertionError(f"the run stopped at stage {model.stage!r}: {model.error}") from e
        assert model.error is None, model.error
        assert response.output_text == "I submitted the contact form and saved the note in the text editor."
        assert approved == [["sc_exercise_form"]]
        # The same checks as host-cli exercise: the demo app's record and the saved file.
        container = session.container_name
        assert container is not None
        store = (guest_file(container, STORE_PATH) or b"").decode("utf-8", "replace")
        last = json.loads([line for line in store.splitlines() if line.strip()][-1])
        assert (last["name"], last["email"], last["message"]) == (FORM_NAME, FORM_EMAIL, FORM_MESSAGE.replace("\n", "\r\n"))
        assert guest_file(container, NOTE_PATH) == NOTE_TEXT.encode("utf-8")
    finally:
        requests = mock.close()
        session.stop()
    # What the mock received from the SDK's runner: schema-valid requests the
    # real API would accept (call ids paired, checks acknowledged, real images).
    assert requests, "the runner sent nothing"
    # The daemon's token never travels towards the model.
    assert len(daemon_token) == 64 and all(daemon_token not in json.dumps(r) for r in requests)
    for r in requests:
        assert r["authorized"], r["n"]
        assert r["validation_errors"] == [], (r["n"], r["validation_errors"])
        assert r["problems"] == [], (r["n"], r["problems"])
        assert r["body"].get("store") is False
        assert r["body"]["tools"] == [{"type": "computer"}]
    outputs = [i for i in requests[1]["body"]["input"] if i.get("type") == "computer_call_output"]
    assert outputs[0]["acknowledged_safety_checks"][0]["id"] == "sc_exercise_form"
    assert outputs[0]["output"]["image_url"].startswith("data:image/png;base64,")
