"""The dashboard's access to the store: one shared connection, a cursor per session, a write lock,
cached query results, the sample runs loaded on start, and the run the user is looking at.

Why this shape: DuckDB allows one writer *process*, so the whole Streamlit server shares one
connection (st.cache_resource). Sessions run on their own threads, so each gets its own cursor
(a DuckDB cursor is a connection to the same database, safe to use from its thread). Ingest and
the other writes take one lock so two tabs uploading at once do not conflict.

Everything derived from events is cached by (store, run id): a run id is the content hash of its
files, so the same id always means the same events. Findings and marks change on re-analysis and
review, so they are read fresh (they are small).
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import duckdb
import pandas as pd
import streamlit as st

from analyzers import queries
from analyzers import runs as run_store
from analyzers.model import FileError
from analyzers.store import connect, default_db_path

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES_ENV_VAR = "TRACEDOCTOR_SAMPLES"   # manifest to load on start; "" or "none" loads nothing
DEFAULT_MANIFEST = REPO_ROOT / "sample_traces" / "manifest.json"


@dataclass
class Store:
    """The process-wide connection and the lock that serialises writes."""
    path: str
    con: duckdb.DuckDBPyConnection
    write_lock: threading.Lock = field(default_factory=threading.Lock)


def db_path() -> str:
    return str(default_db_path())


@st.cache_resource(show_spinner=False)
def _open_store(path: str) -> Store:
    return Store(path=path, con=connect(path))


def store() -> Store:
    return _open_store(db_path())


def cur() -> duckdb.DuckDBPyConnection:
    """This session's cursor on the shared connection (created on first use)."""
    current = store()
    key = f"_cursor::{current.path}"
    if key not in st.session_state:
        st.session_state[key] = current.con.cursor()
    return st.session_state[key]


# --------------------------------------------------------------------------- writes

def ingest(paths: list[str], name: str | None = None,
           progress: Callable[[str, str, float], None] | None = None) -> dict[str, Any]:
    """Ingest one run and analyse it, under the write lock.

    Returns {"run_id", "reused", "files", "errors", "warnings" (lists of {"file", "error"}),
    "findings" (count), "analysis_error" (str or None)}.
    """
    from analyzers.ingest import ingest_paths

    with store().write_lock:
        result = ingest_paths(cur(), paths, name=name, progress=progress)
        outcome = {"run_id": result.run_id, "reused": result.reused, "files": list(result.files),
                   "errors": [e.to_dict() for e in result.errors],
                   "warnings": [w.to_dict() for w in result.warnings], "findings": 0, "analysis_error": None}
        if result.run_id is not None:
            try:
                from analyzers.findings import analyze_run

                outcome["findings"] = len(analyze_run(cur(), result.run_id))
            except Exception as exc:  # the run is stored; say plainly that its analysis failed
                outcome["analysis_error"] = f"the traces loaded but their analysis failed: {exc}"
    st.cache_data.clear()
    return outcome


def reanalyze(run_id: str) -> None:
    from analyzers.findings import analyze_run

    with store().write_lock:
        analyze_run(cur(), run_id)
    st.cache_data.clear()


def write(action: Callable[..., Any], *args: Any) -> Any:
    """Run one analyzers.runs mutation (rename, tags, notes, marks, delete) under the write lock."""
    with store().write_lock:
        return action(cur(), *args)


# --------------------------------------------------------------------------- sample runs

def manifest_path() -> Path | None:
    value = os.environ.get(SAMPLES_ENV_VAR)
    if value is None:
        return DEFAULT_MANIFEST
    if value.strip().lower() in ("", "none", "0"):
        return None
    return Path(value)


@st.cache_resource(show_spinner="Loading the bundled sample runs…")
def _load_samples(path: str, manifest: str | None) -> list[FileError]:
    """Ingest every run of the manifest once per server process (content hashes make it idempotent).

    Manifest format: [{"name": str, "paths": [paths relative to the manifest], "label": str}].
    Returns the problems met, in plain words, so the sidebar can show them.
    """
    if manifest is None or not Path(manifest).exists():
        return []
    problems: list[FileError] = []
    try:
        entries = json.loads(Path(manifest).read_text())
        assert isinstance(entries, list)
    except (ValueError, AssertionError, OSError) as exc:
        return [FileError(manifest, f"sample manifest unreadable: {exc}")]
    try:
        from analyzers.ingest import ingest_paths
    except ImportError as exc:  # a checkout without the ingest module still opens
        return [FileError(manifest, f"cannot load samples: {exc}")]
    try:
        from analyzers.findings import analyze_run
    except ImportError as exc:
        analyze_run = None
        problems.append(FileError(manifest, f"samples loaded without findings: {exc}"))
    base = Path(manifest).parent
    current = _open_store(path)
    with current.write_lock:
        con = current.con.cursor()
        try:
            # Newest run first everywhere (list_runs): ingest the manifest backwards so its first
            # entry, the most telling sample, is the newest and the run a new session opens on.
            for entry in reversed(entries):
                try:
                    paths = [str(base / p) for p in entry.get("paths", [])]
                    result = ingest_paths(con, paths, name=entry.get("name"))
                    problems.extend(result.errors)
                    if result.run_id is None:
                        continue
                    analysed = con.execute("SELECT count(*) FROM findings WHERE run_id = ?",
                                           [result.run_id]).fetchone()[0]
                    if analyze_run is not None and (not result.reused or not analysed):
                        analyze_run(con, result.run_id)
                    label = entry.get("label")
                    if label and not result.reused:
                        run_store.set_notes(con, result.run_id, label)
                        run_store.set_tags(con, result.run_id, ["sample"])
                except Exception as exc:  # one broken sample must not keep the app from opening
                    problems.append(FileError(str(entry.get("name", "?")), f"sample not loaded: {exc}"))
        finally:
            con.close()
    return problems


def ensure_samples_loaded() -> list[FileError]:
    manifest = manifest_path()
    return _load_samples(db_path(), None if manifest is None else str(manifest))


# --------------------------------------------------------------------------- reads

def list_runs() -> list[dict[str, Any]]:
    return run_store.list_runs(cur())


@st.cache_data(show_spinner=False, max_entries=64)
def step_breakdown(path: str, run_id: str) -> pd.DataFrame:
    return queries.step_breakdown(cur(), run_id)


@st.cache_data(show_spinner=False, max_entries=64)
def rank_breakdown(path: str, run_id: str) -> pd.DataFrame:
    return queries.rank_breakdown(cur(), run_id)


@st.cache_data(show_spinner=False, max_entries=64)
def rank_summary(path: str, run_id: str) -> pd.DataFrame:
    from analyzers.metrics import rank_summary as summary

    return pd.DataFrame(summary(cur(), run_id))


def is_cpu_only(run_id: str) -> bool:
    """A run whose ranks have step figures but no GPU activity (rank_summary leaves idle_pct unset)."""
    summary = rank_summary(db_path(), run_id)
    return bool(len(summary)) and bool(summary["idle_pct"].isna().all())


@st.cache_data(show_spinner=False, max_entries=64)
def collectives(path: str, run_id: str) -> pd.DataFrame:
    return queries.collectives(cur(), run_id)


@st.cache_data(show_spinner=False, max_entries=64)
def collective_summary(path: str, run_id: str) -> pd.DataFrame:
    return queries.collective_summary(cur(), run_id)


@st.cache_data(show_spinner=False, max_entries=64)
def time_bounds(path: str, run_id: str) -> tuple[int, int] | None:
    return queries.time_bounds(cur(), run_id)


@st.cache_data(show_spinner=False, max_entries=32)
def timeline_window(path: str, run_id: str, t0_ns: int, t1_ns: int, ranks: tuple[int, ...] | None,
                    include_python: bool) -> pd.DataFrame:
    return queries.timeline_window(cur(), run_id, t0_ns, t1_ns, list(ranks) if ranks else None,
                                   include_python=include_python)


def findings(run_id: str) -> list[dict[str, Any]]:
    return queries.findings(cur(), run_id)


def run_info(run_id: str) -> dict[str, Any] | None:
    return queries.run_info(cur(), run_id)


# --------------------------------------------------------------------------- the current run

RUN_KEY = "run_id"
PENDING_RUN_KEY = "_pending_run_id"
PICKER_KEY = "_run_picker"


def run_label(run: dict[str, Any]) -> str:
    tags = f" [{', '.join(run['tags'])}]" if run.get("tags") else ""
    return f"{run['name']}{tags} · {run['run_id'][:8]}"


def sidebar_run_picker(problems: list[FileError]) -> str | None:
    """The run every page shows, picked in the sidebar; remembered in the session."""
    all_runs = list_runs()
    with st.sidebar:
        if not all_runs:
            st.caption("No runs stored yet.")
            st.session_state.pop(RUN_KEY, None)
        else:
            ids = [r["run_id"] for r in all_runs]
            labels = {r["run_id"]: run_label(r) for r in all_runs}
            pending = st.session_state.pop(PENDING_RUN_KEY, None)
            if pending in ids:  # a page asked to show this run
                st.session_state[RUN_KEY] = pending
            if st.session_state.get(RUN_KEY) not in ids:
                st.session_state[RUN_KEY] = default_run(ids)
            # Widget state does not survive a page switch, so the choice lives in RUN_KEY and the
            # widget is re-seeded from it on every run.
            st.session_state[PICKER_KEY] = st.session_state[RUN_KEY]
            st.selectbox("Run", ids, key=PICKER_KEY, format_func=labels.get,
                         on_change=lambda: st.session_state.update({RUN_KEY: st.session_state[PICKER_KEY]}))
        from app.ui import md  # app.ui imports this module; import here, at call time

        for problem in problems:
            st.warning(f"{md(Path(problem.file).name)}: {md(problem.error)}")
    return st.session_state.get(RUN_KEY)


def default_run(ids: list[str]) -> str:
    """The run a new session opens on: the newest with findings (something to show), else the newest."""
    counts = queries.finding_counts(cur())
    with_findings = set(counts.loc[counts["n_findings"] > 0, "run_id"])
    return next((run_id for run_id in ids if run_id in with_findings), ids[0])


def page_start() -> str | None:
    """Every page's first call: the sidebar run picker (and any sample-loading problems).

    Pages draw it themselves rather than the entry script, so each page also runs on its own
    (streamlit.testing runs a switched-to page without re-running the entry script).
    """
    return sidebar_run_picker(ensure_samples_loaded())


def current_run() -> str | None:
    return st.session_state.get(RUN_KEY)


def select_run(run_id: str) -> None:
    """Show this run from the next rerun on."""
    st.session_state[PENDING_RUN_KEY] = run_id
