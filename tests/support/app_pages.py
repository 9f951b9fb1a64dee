"""Helpers for the dashboard's AppTest tests: open the app on a store, go to a page, read what a
user reads, and the hand_built fixture (a store of two hand-built runs, tests.support.app_store)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.support.app_store import build_store
from tests.support.paths import REPO_ROOT


HOME = str(REPO_ROOT / "app" / "Home.py")


def open_app(monkeypatch, db: Path, samples: str = "none", run_id: str | None = None,
             link: str | None = None) -> AppTest:
    """The dashboard on store `db`, showing run_id, or opened from a link naming `link` (?run=)."""
    monkeypatch.setenv("TRACEDOCTOR_DB", str(db))
    monkeypatch.setenv("TRACEDOCTOR_SAMPLES", samples)
    at = AppTest.from_file(HOME, default_timeout=120)
    if run_id is not None:
        at.session_state["run_id"] = run_id
    if link is not None:
        at.query_params["run"] = link
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(page)
    at.run()
    assert not at.exception, (page, [e.value for e in at.exception])
    return at


def plain(markdown: str) -> str:
    """What a reader sees of text escaped by app.ui.md (backslash escapes removed)."""
    return re.sub(r"\\(.)", r"\1", markdown)


def texts(at: AppTest) -> str:
    """Everything a user reads on the page (markdown, captions, alerts, headers)."""
    parts = []
    for kind in ("markdown", "caption", "info", "warning", "error", "success", "subheader", "title"):
        parts.extend(str(e.value) for e in getattr(at, kind))
    return "\n".join(parts)


@pytest.fixture()
def hand_built(tmp_path, monkeypatch):
    db = tmp_path / "store.duckdb"
    build_store(db)
    return db
