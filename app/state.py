"""The dashboard's access to the store: a connection held only while it is needed, a cursor per
script run, a write lock, cached query results, the sample runs loaded on start, and the run the
user is looking at.

Why this shape: DuckDB lets one process at a time open a store file, and the CLI writes to the
same default store. A connection held for the server's life locked `python -m analyzers ingest`
out for as long as the dashboard ran. So the server opens the store when a script run (a click)
or a download needs it and closes it a moment after the last one is done (StoreLease); between
clicks the CLI can write, and its runs appear in the run picker at the next click. Each script
run gets its own cursor (a DuckDB cursor is a connection to the same database, safe to use from
its thread), taken on first use and handed back when the run ends (release_run_cursor, called by
the entry script). It belongs to the thread running the script: sessions run on their own
threads, and so does a run that starts while the same session's previous run is still
finishing. Ingest and the other writes take one lock so two tabs uploading at once do not
conflict.

Everything derived from events is cached by (store, run id, code version): a run id is the
content hash of its files, so the same id always means the same events, and a load of other runs
keeps those caches. Findings and marks change on re-analysis and review, so they are read fresh
(they are small). A store file deleted or replaced while the server runs is noticed (StoreLease
compares the file it opened with the one at the path), said once per session, and reopened.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import duckdb
import pandas as pd
import streamlit as st

from analyzers.store import partitions
from analyzers.read import queries
from analyzers.common.safe_text import page_markdown as md
from analyzers.store import runs as run_store
from analyzers.common.model import FileError
from analyzers.store.database import StoreBusy, connect_waiting, default_db_path

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES_ENV_VAR = "TRACEDOCTOR_SAMPLES"   # manifest to load on start; "" or "none" loads nothing
DEFAULT_MANIFEST = REPO_ROOT / "sample_traces" / "manifest.json"
# How long the store stays open after the last user is done: clicks in quick succession (and
# Streamlit's own reruns) reuse it instead of reopening; short next to the CLI's 10 s wait.
LINGER_S = 1.5
# How long a click waits for another process (a CLI ingest) to let go of the store.
BUSY_WAIT_S = 120.0


@dataclass
class StoreLease:
    """The server's connection to one store file, open while anyone uses it (plus LINGER_S)."""
    path: str
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _con: duckdb.DuckDBPyConnection | None = None
    _users: int = 0
    _generation: int = 0          # bumped by every close: a late timer must not close a newer open
    _schema_checked: bool = False
    # The file last opened (st_dev, st_ino): an open connection keeps reading and writing a file
    # deleted or replaced under it, so runs loaded then would vanish at its close.
    _identity: tuple[int, int] | None = None
    _stale: bool = False          # the file changed while a cursor was out: close at the next chance
    replacements: int = 0         # how often the file was found deleted or replaced
    replaced_how: str = ""        # "deleted" or "replaced", the last time
    replacements_handled: int = 0  # replacements whose stale caches were dropped (store_changed)
    # cursors handed out and not yet closed, and the pending linger close: shutdown() stops both
    _cursors: weakref.WeakSet = field(default_factory=weakref.WeakSet)
    _linger: threading.Timer | None = None

    def _file_identity(self) -> tuple[int, int] | None:
        try:
            found = os.stat(self.path)
        except OSError:
            return None
        return found.st_dev, found.st_ino

    def _check_file(self) -> bool:
        """Under _lock: True (and counted) when the file is no longer the one last opened."""
        if self._identity is None or self._stale:
            return False
        now = self._file_identity()
        if now == self._identity:
            return False
        self.replacements += 1
        self.replaced_how = "deleted" if now is None else "replaced"
        self._identity = None
        self._stale = self._con is not None
        return True

    def check_file(self) -> bool:
        """True when the store file was deleted or replaced since it was last opened: the next
        acquire opens (or creates) the file now at the path instead of the one it had."""
        with self._lock:
            return self._check_file()

    def mark_stale(self) -> None:
        """The store failed with an I/O error: reopen it at the next chance."""
        with self._lock:
            if self._con is not None:
                self._stale = True

    def acquire(self, wait_s: float = 0.0) -> duckdb.DuckDBPyConnection:
        """A cursor of its own on the store, opening it when closed (reopening it when its file
        was deleted or replaced meanwhile); StoreBusy when another process still holds the file
        after wait_s, StoreUnavailable when it cannot be opened at all. Hand it back with release()."""
        with self._lock:
            self._check_file()
            if self._con is not None and self._stale and self._users == 0:
                try:
                    self._close()
                except duckdb.Error:
                    self._con = None   # closing the old file failed: it is gone either way
            if self._con is None:
                # a store file deleted while the server runs is created afresh, with its schema
                fresh = not self._schema_checked or not os.path.exists(self.path)
                try:
                    self._con = connect_waiting(self.path, wait_s=wait_s, ensure_schema=fresh)
                except (duckdb.Error, OSError) as exc:
                    raise StoreUnavailable(exc) from exc
                self._schema_checked = True
                self._stale = False
                self._identity = self._file_identity()
            self._users += 1
            try:
                # a cursor is a connection of its own: `events` gets the Parquet partitions there too
                cursor = partitions.attach(self._con.cursor())
            except BaseException:
                self._users -= 1
                raise
            self._cursors.add(cursor)
            return cursor

    def release(self, cursor: duckdb.DuckDBPyConnection) -> None:
        try:
            cursor.close()
        except duckdb.Error:
            pass
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._con is None:
                return
            generation = self._generation
            if self._linger is not None:
                self._linger.cancel()
            self._linger = threading.Timer(LINGER_S, self._close_if_unused, args=(generation,))
            self._linger.daemon = True
            self._linger.start()

    def shutdown(self, wait_s: float = 5.0) -> None:
        """At interpreter exit: interrupt the queries still running on page threads, wait for them
        to hand their cursors back, and close the store on this thread. A daemon thread still inside
        DuckDB when the interpreter finalises is ended with pthread_exit, whose unwinding through
        DuckDB's C++ frames aborts the process ("FATAL: exception not rethrown")."""
        with self._lock:
            if self._linger is not None:
                self._linger.cancel()
            cursors = list(self._cursors)
        for cursor in cursors:
            with contextlib.suppress(duckdb.Error):
                cursor.interrupt()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            with self._lock:
                if self._users == 0:
                    break
            time.sleep(0.01)
        with self._lock:
            if self._con is not None:
                with contextlib.suppress(duckdb.Error):
                    self._close()

    def _close_if_unused(self, generation: int) -> None:
        with self._lock:
            if self._users == 0 and self._con is not None and self._generation == generation:
                self._close()

    def _close(self) -> None:
        con, self._con = self._con, None
        self._generation += 1
        self._stale = False
        con.close()

    @property
    def is_open(self) -> bool:
        return self._con is not None


class StoreUnavailable(Exception):
    """The store cannot be opened or written (a read-only file or folder, a full disk), in plain
    words: the dashboard says so on the page instead of showing a traceback."""

    def __init__(self, cause: BaseException):
        self.cause = cause
        lines = str(cause).strip().splitlines()   # an exception may have no message at all
        reason = getattr(cause, "strerror", None) or (lines[0] if lines else type(cause).__name__)
        if isinstance(cause, PermissionError) or "permission denied" in str(cause).lower():
            reason = "permission denied (a read-only file or folder?)"
        elif "read-only" in str(cause).lower():
            reason = "the file or its folder is read-only"
        super().__init__(reason)


def is_store_io_error(exc: BaseException) -> bool:
    """An I/O error of the store's own file (it vanished from a network disk, say) met by a page."""
    return isinstance(exc, duckdb.IOException)


def db_path() -> str:
    return str(default_db_path())


@st.cache_resource(show_spinner=False)
def _lease(path: str) -> StoreLease:
    lease = StoreLease(path=path)
    atexit.register(lease.shutdown)
    return lease


def lease() -> StoreLease:
    return _lease(db_path())


# The cursor of the script run executing on this thread. Per run, not per session: a click that
# arrives while the previous run of the same session is still finishing starts a second run on
# another thread, and two runs sharing one cursor failed with "connection is busy".
_this_run = threading.local()


def cur() -> duckdb.DuckDBPyConnection:
    """This script run's cursor on the store (taken on first use, handed back when the run ends).

    When another process holds the store (a CLI ingest), the page says so and waits for it.
    """
    held = getattr(_this_run, "held", None)
    current = lease()
    if held is not None and held[0] is current:
        return held[1]
    if held is not None:   # the store path changed under this thread (tests): give the old one back
        release_run_cursor()
    try:
        cursor = current.acquire()
    except StoreBusy as busy:
        who = f"process {busy.holder_pid}" if busy.holder_pid else "another process"
        notice = st.empty()
        notice.info(f"The store is in use by {who} (a command-line ingest?); this page loads as soon as "
                    f"it lets go.", icon=":material/hourglass_top:")
        try:
            cursor = current.acquire(wait_s=BUSY_WAIT_S)
        except StoreBusy:
            notice.error(f"The store is still in use by {who} after {BUSY_WAIT_S:.0f} s. Reload this page "
                         "when it is done.", icon=":material/lock:")
            st.stop()
        notice.empty()
    _this_run.held = (current, cursor)
    _tell_replacement(current)
    return cursor


def _tell_replacement(current: StoreLease) -> None:
    """Once per session after the store file was deleted or replaced under the server: say so
    (the runs it held are not shown any more) instead of failing on every page."""
    if current.replacements_handled != current.replacements:
        current.replacements_handled = current.replacements
        store_changed()
    seen = st.session_state.get("_store_replacements")
    st.session_state["_store_replacements"] = current.replacements
    if seen is None or seen == current.replacements:
        return
    what = ("was deleted; a new, empty store was created in its place" if current.replaced_how == "deleted"
            else "was replaced by another file; the dashboard now reads that one")
    st.warning(f"The run store file {what}. Runs stored in the old file are no longer listed; load them again "
               "from **Load traces** if needed.", icon=":material/database:")
    st.session_state[STORE_REPLACED_KEY] = True


def release_run_cursor() -> None:
    """Hand this script run's cursor back (the entry script calls it when the run ends), so the
    store closes once no click needs it and other processes can write to it."""
    held = getattr(_this_run, "held", None)
    _this_run.held = None
    if held is not None:
        held[0].release(held[1])


# --------------------------------------------------------------------------- writes

def ingest(paths: list[str], name: str | None = None, progress: Callable[..., None] | None = None,
           audit: tuple[str, str | None, str] | None = None, confine_to: str | None = None) -> list[dict[str, Any]]:
    """Ingest the files, one run per job they come from (usually one; analyzers.ingest.ingest_jobs),
    and analyse each, under the write lock; audit (action, actor, detail) is recorded in the
    store's audit log with each run it gave. progress: told every file, rank and analysis stage
    (analyzers/common/progress.py), with job=(i, n) when the files held several jobs. confine_to: read
    only files under this directory, each through the descriptor its check opened (the data root).

    Returns one dict per job: {"run_id", "name", "reused", "renamed_from" (the stored name a typed
    name replaced on a reused run, or None), "files", "errors", "warnings" (lists of {"file",
    "error"}), "findings" (count), "analysis_error" (str or None)}.
    """
    from analyzers.cluster import CLUSTER_ENV_VAR, executor
    from analyzers.execution.pipeline import analyze_run
    from analyzers.ingest import ingest_jobs
    from analyzers.read.fixes import computed_finding_contract
    from analyzers.common.progress import teller

    tell = teller(progress)
    outcomes = []
    address = os.environ.get(CLUSTER_ENV_VAR) or None     # a team server's Dask cluster, if configured
    with lease().write_lock, executor(address) as engine:
        runner = engine if address else None
        events_root = partitions.root_for(None, address, lease().path)
        refused = partitions.root_problem(events_root, lease().path)
        if refused:   # TRACEDOCTOR_EVENTS_DIR set to a root that ends with this process
            return [{"run_id": None, "name": None, "reused": False, "files": [], "warnings": [], "findings": 0,
                     "errors": [{"file": ", ".join(paths), "error": f"not loaded: {refused}"}],
                     "analysis_error": None}]
        results = ingest_jobs(cur(), paths, name=name, progress=progress, events_root=events_root, runner=runner,
                              confine_to=confine_to, actor=audit[1] if audit else None)
        for number, result in enumerate(results, 1):
            if audit is not None:
                action, actor, detail = audit
                run_store.record_audit(cur(), action, run_id=result.run_id, actor=actor, detail=detail)
            info = queries.run_info(cur(), result.run_id) if result.run_id else None
            renamed_from = None
            if result.reused and info and name and len(results) == 1 and info["name"] != run_store.clean_run_name(name):
                # the same content was stored before under another name: the name typed now wins
                renamed_from = info["name"]
                run_store.rename_run(cur(), result.run_id, name, actor=audit[1] if audit else None)
                info = queries.run_info(cur(), result.run_id)
            outcome = {"run_id": result.run_id, "name": info["name"] if info else None, "reused": result.reused,
                       "renamed_from": renamed_from,
                       "files": list(result.files), "errors": [e.to_dict() for e in result.errors],
                       "warnings": [w.to_dict() for w in result.warnings], "findings": 0, "analysis_error": None}
            if result.run_id is not None:
                job = (number, len(results))
                try:
                    outcome["findings"] = len(analyze_run(
                        cur(), result.run_id, runner=runner, contract_of=computed_finding_contract,
                        store_page_tables=queries.store_page_defaults,
                        progress=lambda stage, item, fraction, **details: tell(stage, item, fraction, job=job,
                                                                               **details)))
                except Exception as exc:  # the run is stored; say plainly that its analysis failed
                    outcome["analysis_error"] = f"the traces loaded but their analysis failed: {exc}"
            outcomes.append(outcome)
    # No st.cache_data.clear() here: cached figures are keyed by run id, and a load changes no
    # stored run's events (a reused run's are the same bytes), so other runs' figures stay warm.
    return outcomes


def load_placement(show_paths: bool = True) -> str | None:
    """Where loads put their events and run their per-rank work, when configured otherwise than
    "inside the store, in this process" (TRACEDOCTOR_EVENTS_DIR, TRACEDOCTOR_CLUSTER); else None.
    show_paths False: the server's folder and cluster address are not named (team mode)."""
    from analyzers.cluster import CLUSTER_ENV_VAR

    address = os.environ.get(CLUSTER_ENV_VAR) or None
    root = partitions.root_for(None, address, lease().path)
    if root is None:
        return None
    said = "Events are kept as Parquet files, one per rank" + (f", under {root}" if show_paths else " on the server")
    if not address:
        return said + "."
    return said + f"; each rank is parsed and analysed as a task on the Dask cluster{f' {address}' if show_paths else ''}."


def reanalyze(run_id: str, actor: str | None = None, why: str | None = None) -> None:
    """Analyse the run again, recorded in the audit log as `reanalyse` by actor (why: the detail)."""
    from analyzers.cluster import CLUSTER_ENV_VAR, executor
    from analyzers.execution.pipeline import analyze_run
    from analyzers.read.fixes import computed_finding_contract

    address = os.environ.get(CLUSTER_ENV_VAR) or None
    with lease().write_lock, executor(address if partitions.locations(cur(), run_id) else None) as engine:
        analyze_run(cur(), run_id, runner=engine if address else None, contract_of=computed_finding_contract,
                    store_page_tables=queries.store_page_defaults)
        run_store.record_audit(cur(), "reanalyse", run_id, actor, why)
    st.cache_data.clear()


def record_refusal(action: str, actor: str | None, detail: str) -> None:
    """An audit log line for a request refused (a path outside the data root): who asked what."""
    with lease().write_lock:
        run_store.record_audit(cur(), action, None, actor, detail)


def write(action: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run one analyzers.store.runs mutation (rename, tags, notes, marks, delete, restore) under the
    write lock; kwargs carry the actor the store's audit log records."""
    with lease().write_lock:
        return action(cur(), *args, **kwargs)


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
        from analyzers.execution.pipeline import analyze_run
        from analyzers.read.fixes import computed_finding_contract
    except ImportError as exc:
        analyze_run = None
        problems.append(FileError(manifest, f"samples loaded without findings: {exc}"))
    base = Path(manifest).parent
    current = _lease(path)
    with current.write_lock:
        con = current.acquire(wait_s=BUSY_WAIT_S)
        try:
            # Newest run first everywhere (list_runs): ingest the manifest backwards so its first
            # entry, the most telling sample, is the newest and the run a new session opens on.
            for entry in reversed(entries):
                try:
                    paths = [str(base / p) for p in entry.get("paths", [])]
                    # a sample run someone deleted stays deleted (a restart or a cleared cache loads
                    # the manifest again)
                    result = ingest_paths(con, paths, name=entry.get("name"), restore_trashed=False)
                    problems.extend(result.errors)
                    if result.run_id is None:
                        continue
                    analysed = con.execute("SELECT count(*) FROM findings WHERE run_id = ?",
                                           [result.run_id]).fetchone()[0]
                    if analyze_run is not None and (not result.reused or not analysed):
                        analyze_run(con, result.run_id, contract_of=computed_finding_contract,
                                    store_page_tables=queries.store_page_defaults)
                    label = entry.get("label")
                    if label and not result.reused:
                        run_store.set_notes(con, result.run_id, label)
                        run_store.set_tags(con, result.run_id, ["sample"])
                except Exception as exc:  # one broken sample must not keep the app from opening
                    problems.append(FileError(str(entry.get("name", "?")), f"sample not loaded: {exc}"))
        finally:
            current.release(con)
    return problems


def store_changed() -> None:
    """After the store file was deleted or replaced: cached results and the record that the
    sample runs are loaded belong to the old file."""
    st.cache_data.clear()
    _load_samples.clear()


def ensure_samples_loaded() -> list[FileError]:
    manifest = manifest_path()
    current = lease()
    if current.check_file():
        current.replacements_handled = current.replacements
        store_changed()
    try:
        return _load_samples(db_path(), None if manifest is None else str(manifest))
    except StoreBusy as busy:   # not cached: the next click tries again
        return [FileError(str(manifest), f"sample runs not loaded yet: {busy}")]


# --------------------------------------------------------------------------- reads

def list_runs() -> list[dict[str, Any]]:
    return run_store.list_runs(cur())


def code_version() -> str:
    """The analysis version of this code (the SQL library among it): a part of every cache key,
    so results computed by other SQL are not served after the code changed under a running server."""
    from analyzers.analysis.version import analysis_version

    return analysis_version()


# The per-run figures below take seconds on a 1 GB run: each is computed once per run id (a
# content hash: its events never change) and code version, with a spinner saying what is being
# computed meanwhile, and kept across loads of other runs.

def per_run_figure(query: Callable[[Any, str], Any], spinner: str | bool) -> Callable[[str, str], Any]:
    """`query(cursor, run_id)` cached per store, run and code version, with `spinner` shown while it
    is computed. Streamlit keys a cache by the function's module, qualified name and source: each
    figure's function gets its own qualified name, so no two figures share a cache."""
    def compute(path: str, run_id: str, version: str) -> Any:
        return query(cur(), run_id)

    compute.__qualname__ = f"per_run_figure.{query.__name__}"
    cached = st.cache_data(show_spinner=spinner, max_entries=64)(compute)

    def read(path: str, run_id: str) -> Any:
        return cached(path, run_id, code_version())

    read.__name__ = read.__qualname__ = query.__name__
    return read


def _rank_summary_frame(con, run_id: str) -> pd.DataFrame:
    from analyzers.analysis.metrics import rank_summary as summary

    return pd.DataFrame(summary(con, run_id))


step_breakdown = per_run_figure(queries.step_breakdown, "Computing the step times of this run…")
rank_breakdown = per_run_figure(queries.rank_breakdown, "Computing where each rank's time goes…")
rank_summary = per_run_figure(_rank_summary_frame, "Summarising the ranks of this run…")
collectives = per_run_figure(queries.collectives, "Matching the collectives of this run across ranks…")
collective_summary = per_run_figure(queries.collective_summary, "Summarising the collectives of this run…")
_run_summary = per_run_figure(queries.run_summary, False)


def run_summary(run_id: str) -> dict:
    """The run-wide figures (queries.run_summary: mean steps, idle %, has_gpu)."""
    return _run_summary(db_path(), run_id)


def is_cpu_only(run_id: str) -> bool:
    """A run whose ranks have no GPU activity (a CPU-only trace)."""
    return bool(len(rank_summary(db_path(), run_id))) and not run_summary(run_id)["has_gpu"]


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


def run_costs(run_id: str) -> dict[str, Any] | None:
    return queries.run_costs(cur(), run_id)


def whatif(run_id: str) -> dict[str, Any] | None:
    return queries.whatif(cur(), run_id)


def run_notes(run_id: str) -> list[str]:
    return queries.run_notes(cur(), run_id)


def run_info(run_id: str) -> dict[str, Any] | None:
    return queries.run_info(cur(), run_id)


# --------------------------------------------------------------------------- the current run

RUN_KEY = "run_id"
PENDING_RUN_KEY = "_pending_run_id"
GONE_RUN_KEY = "_gone_run_id"
STORE_REPLACED_KEY = "_store_replaced_now"
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
            gone = st.session_state.pop(RUN_KEY, None)
            if gone is not None:   # the last run was deleted meanwhile
                st.session_state[GONE_RUN_KEY] = gone
        else:
            ids = [r["run_id"] for r in all_runs]
            labels = {r["run_id"]: run_label(r) for r in all_runs}
            pending = st.session_state.pop(PENDING_RUN_KEY, None)
            if pending in ids:  # a page asked to show this run
                st.session_state[RUN_KEY] = pending
            linked = _run_from_url(ids)
            if linked is not None:   # the page was opened from a link naming a run (?run=<id>)
                st.session_state[RUN_KEY] = linked
            if st.session_state.get(RUN_KEY) not in ids:
                gone = st.session_state.get(RUN_KEY)
                st.session_state[RUN_KEY] = default_run(ids)
                if gone is not None:   # deleted meanwhile, here or by someone else
                    st.session_state[GONE_RUN_KEY] = gone
            # Widget state does not survive a page switch, so the choice lives in RUN_KEY and the
            # widget is re-seeded from it on every run.
            st.session_state[PICKER_KEY] = st.session_state[RUN_KEY]
            st.selectbox("Run", ids, key=PICKER_KEY, format_func=labels.get,
                         on_change=lambda: st.session_state.update({RUN_KEY: st.session_state[PICKER_KEY]}))
        for problem in problems:
            st.warning(f"{md(Path(problem.file).name)}: {md(problem.error)}")
    _run_to_url(st.session_state.get(RUN_KEY))
    gone = st.session_state.pop(GONE_RUN_KEY, None)
    if st.session_state.pop(STORE_REPLACED_KEY, False):
        gone = None   # not deleted from the store: the store itself changed, as its warning said
    if gone is not None:
        st.warning(f"The run you were looking at (`{gone[:8]}`) is no longer stored: it was deleted, here or by "
                   "someone else (a maintainer can restore it from the trash in **Manage runs**)."
                   + (" Showing the run picked in the sidebar instead." if st.session_state.get(RUN_KEY) else ""),
                   icon=":material/delete:")
    return st.session_state.get(RUN_KEY)


# The query parameter naming the run a page shows (?run=<id>: the link to send a colleague), and
# the value this session last read or wrote there (a link opened later changes it).
URL_RUN_PARAM = "run"
URL_RUN_SEEN_KEY = "_url_run_seen"


def _run_from_url(ids: list[str]) -> str | None:
    """The stored run the page's ?run= names (a full id or a unique prefix, as the CLI takes), when
    the link is new to this session; None otherwise. A link to a run not stored says so."""
    wanted = st.query_params.get(URL_RUN_PARAM)
    if not wanted or wanted == st.session_state.get(URL_RUN_SEEN_KEY):
        return None
    st.session_state[URL_RUN_SEEN_KEY] = wanted
    matches = [run_id for run_id in ids if run_id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    st.warning(f"The link names run `{md(wanted[:16])}`, which is not stored here"
               + (" (or names several)" if matches else "") + ": showing the run picked in the sidebar.",
               icon=":material/link_off:")
    return None


def _run_to_url(run_id: str | None) -> None:
    """Keep ?run=<id> on the page's URL, so the address bar is a link to what it shows."""
    if run_id and st.query_params.get(URL_RUN_PARAM) != run_id:
        st.query_params[URL_RUN_PARAM] = run_id
    st.session_state[URL_RUN_SEEN_KEY] = run_id


def default_run(ids: list[str]) -> str:
    """The run a new session opens on: the newest with findings (something to show), else the newest."""
    counts = queries.finding_counts(cur())
    with_findings = set(counts.loc[counts["n_findings"] > 0, "run_id"])
    return next((run_id for run_id in ids if run_id in with_findings), ids[0])


def page_start() -> str | None:
    """Every page's first call: the sidebar run picker (and any sample-loading problems); the
    picked run is analysed first when its findings are missing or stale.

    Pages draw it themselves rather than the entry script, so each page also runs on its own
    (streamlit.testing runs a switched-to page without re-running the entry script).
    """
    run_id = sidebar_run_picker(ensure_samples_loaded())
    if run_id is not None and events_problem(run_id):
        st.error(md(events_problem(run_id)), icon=":material/folder_off:")
    elif run_id is not None:
        ensure_analysed(run_id)
    return run_id


@st.cache_data(ttl=30, show_spinner=False)
def _missing_partitions(path: str, run_id: str) -> list[tuple[int, str]]:
    return partitions.missing(cur(), run_id)


def events_problem(run_id: str) -> str | None:
    """Why this run's events cannot be read now (a partition file deleted or unreadable), in a
    sentence for the page (a team server's paths left out), or None. Checked again every 30 s."""
    gone = _missing_partitions(str(lease().path), run_id)
    if not gone:
        return None
    ranks = ", ".join(str(rank) for rank, _ in gone)
    from app import auth

    where = "" if auth.is_team_mode() else " (" + ", ".join(loc for _, loc in gone[:3]) + ")"
    return (f"The events of rank{'s' if len(gone) > 1 else ''} {ranks} of this run cannot be read{where}: "
            "their file is missing or unreadable, so this run's figures are not shown. Put the file back, or "
            "delete the run (Manage runs).")


def ensure_analysed(run_id: str) -> None:
    """Analyse a run whose findings are not this version's: one ingested with the CLI's `ingest`
    (which only loads), or analysed by an older TraceDoctor whose findings would be shown as
    current. A failure is shown, and the page goes on with what is stored."""
    from analyzers.read.stored import analysis_is_current

    failed = st.session_state.setdefault("_analysis_failed", {})
    if run_id in failed:   # tried once in this session: say so again rather than redo it on every click
        st.error(f"The analysis of this run failed: {md(failed[run_id])}", icon=":material/error:")
        return
    if analysis_is_current(cur(), run_id):
        return
    with st.spinner("Analysing this run (its findings are missing or from an older version)…"):
        try:
            from app import auth

            reanalyze(run_id, auth.actor(), "its findings were missing or from an older version")
        except Exception as exc:
            failed[run_id] = str(exc)
            st.error(f"The analysis of this run failed: {md(str(exc))}", icon=":material/error:")


def current_run() -> str | None:
    return st.session_state.get(RUN_KEY)


def select_run(run_id: str) -> None:
    """Show this run from the next rerun on."""
    st.session_state[PENDING_RUN_KEY] = run_id
