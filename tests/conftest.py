"""Fixtures every folder of tests/ uses, and the session's hooks. Helpers live in tests/support."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))    # the repository root: analyzers, accel, tests.support

from tests.support.paths import SHARED_TRACES  # noqa: E402


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """Path to ../shared/traces; skips the test when it is absent."""
    if not (SHARED_TRACES / "README.md").exists():
        pytest.skip(f"real traces not available at {SHARED_TRACES}")
    return SHARED_TRACES


@pytest.fixture(scope="module")
def _module_store():
    from analyzers.sql.engine import ensure_loaded
    from analyzers.store.database import connect

    con = ensure_loaded(connect(":memory:"))
    yield con
    con.close()


@pytest.fixture()
def run_store(_module_store):
    """An in-memory store with no run in it, the SQL library loaded: one store per module (loading
    the library costs 1.5-2.5 s per database), each test's runs purged after it."""
    from analyzers.store.runs import purge_run

    assert _module_store.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    yield _module_store
    for (run_id,) in _module_store.execute("SELECT run_id FROM runs").fetchall():
        purge_run(_module_store, run_id)


def pytest_sessionfinish(session, exitstatus):
    """Free the DuckDB connections tests left to the garbage collector before the interpreter
    exits, so DuckDB's binding does not print a leak report after pytest's summary line."""
    import gc

    if "streamlit" in sys.modules:  # the app's cached store connection lives in st.cache_resource
        import streamlit as st

        st.cache_resource.clear()
    gc.collect()
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


_EXIT_STATUS = pytest.StashKey[int]()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Leave with pytest's own status once every report is written, skipping the interpreter's
    finalization: Streamlit's AppTest leaves script threads whose DuckDB cursors are torn down
    there, and a native thread unwound at that point aborted the process (rc 134, "FATAL:
    exception not rethrown") after a green summary in about 1 run in 3. xdist workers leave
    through their own channel."""
    status = config.stash.get(_EXIT_STATUS, None)
    if status is None or hasattr(config, "workerinput"):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Expose each phase's report on the test item (rep_setup, rep_call), so fixtures can tell
    in teardown whether the test failed (the browser test screenshots the page then)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
