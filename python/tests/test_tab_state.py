"""What ``sandtop.Browser.state()`` hands the SDK of each tab: the URL
reduced to its origin, the title with control characters made visible,
credential-like parts redacted and bounded — host-cli's rules, checked
against the vectors the host's own test reads
(crates/sandtop-agent/src/browser/toolset/tab_vectors.json; docs/contract.md
rule 31)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sys
import tempfile
from typing import Iterator

import pytest

import sandtop
from sandtop import browser

sys.path.insert(0, os.path.dirname(__file__))
from fakes import FakeDaemon, Reply, make_session  # noqa: E402

VECTORS = json.loads(
    (pathlib.Path(__file__).resolve().parents[2] / "crates/sandtop-agent/src/browser/toolset/tab_vectors.json").read_text(
        encoding="utf-8"
    )
)


@pytest.mark.parametrize("url, shown", VECTORS["urls"])
def test_urls_are_reduced_to_origins_as_the_host_does(url: str, shown: str) -> None:
    assert browser.tab_url(url) == shown


@pytest.mark.parametrize("title, shown, truncated", VECTORS["titles"])
def test_titles_are_filtered_as_the_host_does(title: str, shown: str, truncated: bool) -> None:
    assert browser.tab_title(title) == shown
    assert len(browser.tab_title(title).encode()) <= 1024


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDaemon]:
    d = tempfile.mkdtemp(prefix="st", dir="/tmp")
    monkeypatch.setenv("SANDTOP_STATE_DIR", d)
    fake = FakeDaemon(make_session(d))
    yield fake
    fake.close()
    shutil.rmtree(d, ignore_errors=True)


def test_state_hands_the_sdk_filtered_tabs(daemon: FakeDaemon) -> None:
    tab = {
        "id": "t1",
        "title": "Reset\u202e password=hunter2",
        "url": "https://ann:pw@mail.example:8443/inbox?token=1#x",
        "active": True,
    }
    daemon.handler = lambda method, path, body: (
        Reply(200, {"tabs": [tab]}) if path == "/v1/browser/state" else daemon.default(method, path, body)
    )
    state = sandtop.Browser(sandtop.Session.attach("t1")).state()
    assert state == {
        "tabs": [
            {
                "id": "t1",
                "title": "Reset<U+202E> password=[redacted]",
                "url": "https://mail.example:8443",
                "active": True,
            }
        ]
    }
