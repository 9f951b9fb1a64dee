"""Load the analyzers' SQL library (analyzers/sql/*.sql: macros and views) into a connection once.

Order matters only in that later files build on earlier ones: intervals.sql (interval algebra),
then views.sql (per-run views over `events`), then every other file in name order (one per
analysis, some written by other helpers). Every statement is CREATE OR REPLACE, so loading again
is harmless; `ensure_loaded` skips the work for a connection it has already seen.
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from pathlib import Path

import duckdb

SQL_DIR = Path(__file__).with_name("sql")
FIRST_FILES = ("intervals.sql", "views.sql")

_loaded: "weakref.WeakSet[duckdb.DuckDBPyConnection]" = weakref.WeakSet()
_lock = threading.Lock()


def sql_files() -> list[Path]:
    """The library's .sql files in load order."""
    first = [SQL_DIR / name for name in FIRST_FILES if (SQL_DIR / name).exists()]
    rest = sorted(p for p in SQL_DIR.glob("*.sql") if p.name not in FIRST_FILES)
    return first + rest


def load_sql(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create every macro and view of analyzers/sql/ on `con`.

    A file may use macros of a file that sorts after it (DuckDB binds a macro's body when it is
    created, against the macros that exist then, which in a stored database may be an older
    version): files that fail are retried after the others until no more progress is made.
    """
    pending = sql_files()
    while pending:
        failed: list[tuple[Path, duckdb.Error]] = []
        for path in pending:
            try:
                con.execute(path.read_text())
            except duckdb.Error as exc:
                failed.append((path, exc))
        if len(failed) == len(pending):   # no progress: name the file, a broken macro is otherwise hard to find
            path, exc = failed[0]
            raise RuntimeError(f"analyzers/sql/{path.name} failed to load: {exc}") from exc
        pending = [path for path, _ in failed]


def ensure_loaded(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Load the SQL library on `con` unless this connection already has it; returns `con`."""
    with _lock:
        if con not in _loaded:
            load_sql(con)
            _loaded.add(con)
    return con


# Per-run views that several analyses of one analyze_run read, in dependency order. Each is
# computed ONCE per run into a TEMP table while `run_cache` is open (e.g. gpu_activity took
# ~0.35 s per use on a 1 GB trace and was used by ~10 macros).
CACHED_VIEWS = ("steps", "sync_calls", "dataloader_spans", "gpu_activity", "launches", "copies", "collectives",
                "collective_instances", "rank_balance")


@contextlib.contextmanager
def run_cache(con: duckdb.DuckDBPyConnection, run_id: str):
    """Materialise CACHED_VIEWS for `run_id` on this connection for the duration of the block.

    Each view `v(run)` is computed into TEMP TABLE td_cache_v, and a TEMP MACRO `v(run)`
    reading it shadows the stored macro (DuckDB resolves unqualified names in the temp catalog
    first, and binds macro bodies at use, so every macro calling `v(run)` reads the table).
    While the block is open the connection serves these views for `run_id` only (other runs
    read as empty: the stored macro cannot be reached under its own name, DuckDB resolves
    `main.v` to the temp macro too), so query one run per block. Everything is dropped on exit.
    Temp objects are per connection (a cursor is its own connection): other users of the store
    are unaffected.
    """
    ensure_loaded(con)
    made: list[str] = []
    try:
        for view in CACHED_VIEWS:
            # computed with the views cached before it (launches reads the cached gpu_activity)
            con.execute(f"CREATE OR REPLACE TEMP TABLE td_cache_{view} AS "
                        f"SELECT ? AS td_cache_run, * FROM {view}(?)", [run_id, run_id])
            made.append(view)
            con.execute(f"CREATE OR REPLACE TEMP MACRO {view}(run) AS TABLE "
                        f"SELECT * EXCLUDE (td_cache_run) FROM temp.td_cache_{view} WHERE td_cache_run = run")
        yield con
    finally:
        for view in reversed(made):
            for stmt in (f"DROP MACRO TABLE IF EXISTS temp.{view}", f"DROP TABLE IF EXISTS temp.td_cache_{view}"):
                try:
                    con.execute(stmt)
                except duckdb.Error:
                    pass
