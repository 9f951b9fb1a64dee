"""Load the analyzers' SQL library (analyzers/sql/*.sql: macros and views) into a connection once.

Order matters only in that later files build on earlier ones: intervals.sql (interval algebra),
then views.sql (per-run views over `events`), then every other file in name order (one per
analysis, some written by other helpers). Every statement is CREATE OR REPLACE, so loading again
is harmless; `ensure_loaded` skips the work for a connection it has already seen.
"""
from __future__ import annotations

import threading
import weakref
from pathlib import Path

import duckdb

SQL_DIR = Path(__file__).with_name("sql")
FIRST_FILES = ("intervals.sql", "views.sql")

_loaded: "weakref.WeakSet[duckdb.DuckDBPyConnection]"
try:
    _loaded = weakref.WeakSet()
    weakref.ref(duckdb.connect(":memory:"))
    _WEAKREF_OK = True
except TypeError:  # connections that cannot be weakly referenced: fall back to ids
    _WEAKREF_OK = False
_loaded_ids: set[int] = set()
_lock = threading.Lock()


def sql_files() -> list[Path]:
    """The library's .sql files in load order."""
    first = [SQL_DIR / name for name in FIRST_FILES if (SQL_DIR / name).exists()]
    rest = sorted(p for p in SQL_DIR.glob("*.sql") if p.name not in FIRST_FILES)
    return first + rest


def load_sql(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create every macro and view of analyzers/sql/ on `con`."""
    # DuckDB binds a macro's body when it is created, so a file that uses a macro from a file
    # later in name order (comm.sql uses rank_imbalance.sql) fails on the first pass with a
    # CatalogException; retry those after the others until a pass makes no progress.
    pending = sql_files()
    while pending:
        failed: list[tuple[Path, duckdb.Error]] = []
        for path in pending:
            try:
                con.execute(path.read_text())
            except duckdb.CatalogException as exc:
                failed.append((path, exc))
            except duckdb.Error as exc:  # name the file: a broken macro is otherwise hard to find
                raise RuntimeError(f"analyzers/sql/{path.name} failed to load: {exc}") from exc
        if len(failed) == len(pending):
            path, exc = failed[0]
            raise RuntimeError(f"analyzers/sql/{path.name} failed to load: {exc}") from exc
        pending = [path for path, _ in failed]


def ensure_loaded(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Load the SQL library on `con` unless this connection already has it; returns `con`."""
    with _lock:
        if _WEAKREF_OK:
            if con in _loaded:
                return con
        elif id(con) in _loaded_ids:
            return con
        load_sql(con)
        if _WEAKREF_OK:
            _loaded.add(con)
        else:
            _loaded_ids.add(id(con))
    return con
