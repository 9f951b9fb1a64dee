"""Load the analyzers' SQL library into a connection once, in dependency order.

Where the SQL lives (paths relative to analyzers/):
- sql/lib/        the only definitions of the shared concepts: interval macros, steps (host and
                  GPU clock), GPU activity categories, launches, copies, collectives, idle gaps
                  and their causes, cross-rank collective matching;
- sql/metrics/    the per-rank and per-step breakdowns every page, report and analysis reads;
- analyses/<kind>/<kind>.sql   one finding kind's own SQL.
Each file names what it builds on in a first line `-- requires: lib/steps.sql metrics/...`
(sql/ left out of the names); files
load in that order (DuckDB binds a macro's body when it is created, so a macro must exist
before one that calls it). Every statement is CREATE OR REPLACE, so loading again is harmless.
"""
from __future__ import annotations

import contextlib
import functools
import graphlib
import hashlib
import re
import threading
import weakref
from pathlib import Path
from typing import Mapping

import duckdb

PACKAGE_DIR = Path(__file__).resolve().parent
SQL_GLOBS = ("sql/lib/*.sql", "sql/metrics/*.sql", "analyses/*/*.sql")
_REQUIRES = re.compile(r"^--\s*requires:(.*)$")

_loaded: "weakref.WeakSet[duckdb.DuckDBPyConnection]" = weakref.WeakSet()
_lock = threading.Lock()


def _library_name(path: Path) -> str:
    """How `-- requires:` lines name a file: lib/steps.sql, metrics/comm.sql, analyses/<kind>/<kind>.sql."""
    name = path.relative_to(PACKAGE_DIR).as_posix()
    return name.removeprefix("sql/")


def _requires(path: Path) -> list[str]:
    """The library names `path` lists in its `-- requires:` first line."""
    with path.open(encoding="utf-8") as handle:
        match = _REQUIRES.match(handle.readline().strip())
    return match.group(1).split() if match else []


def sql_files() -> list[Path]:
    """Every .sql file of the library, each after the files it requires (ties in path order).

    A required file that does not exist, or a cycle, is an error naming the file."""
    files = {_library_name(p): p for pattern in SQL_GLOBS for p in PACKAGE_DIR.glob(pattern)}
    graph: dict[str, list[str]] = {}
    for name in sorted(files):
        needs = _requires(files[name])
        missing = [n for n in needs if n not in files]
        if missing:
            raise RuntimeError(f"{name} requires {', '.join(missing)}, which does not exist")
        graph[name] = needs
    sorter = graphlib.TopologicalSorter(graph)
    order: list[str] = []
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        raise RuntimeError(f"the SQL library's -- requires: lines form a cycle: {exc.args[1]}") from None
    while sorter.is_active():
        ready = sorted(sorter.get_ready())
        order.extend(ready)
        sorter.done(*ready)
    return [files[name] for name in order]


def _library_thresholds_sql() -> str:
    """library_threshold(name): the thresholds.SQL_LIBRARY_THRESHOLDS the SQL library reads itself
    (where a macro argument would have to pass through every caller of steps(run))."""
    from analyzers import thresholds

    cases = " ".join(f"WHEN '{name}' THEN {float(thresholds.DEFAULTS[name])!r}"    # names and numbers from thresholds.py
                     for name in thresholds.SQL_LIBRARY_THRESHOLDS)
    return f"CREATE OR REPLACE MACRO library_threshold(name) AS CASE name {cases} END;"


def load_sql(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create every macro of the library on `con`; a file that fails is named."""
    con.execute(_library_thresholds_sql())
    for path in sql_files():
        try:
            con.execute(path.read_text(encoding="utf-8"))
        except duckdb.Error as exc:
            raise RuntimeError(f"the SQL library's {_library_name(path)} failed to load: {exc}") from exc


@functools.cache
def library_hash() -> str:
    """A hash of the whole SQL library as this code has it."""
    digest = hashlib.blake2b(digest_size=12)
    digest.update(_library_thresholds_sql().encode())
    for path in sql_files():
        digest.update(_library_name(path).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _library_table(con: duckdb.DuckDBPyConnection) -> str:
    """Where a database records the library its macros come from: the connection's own database
    (a read-only store is attached to an in-memory one, which then holds the macros)."""
    database = con.execute("SELECT current_database()").fetchone()[0]
    return '"' + database.replace('"', '""') + '".main.tracedoctor_sql_library'


def _stored_library_hash(con: duckdb.DuckDBPyConnection) -> str | None:
    try:
        row = con.execute(f"SELECT library_hash FROM {_library_table(con)}").fetchone()   # name quoted above
    except duckdb.CatalogException:
        return None
    return row[0] if row else None


def ensure_loaded(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Load the SQL library on `con` unless its database already holds this version of it (macros
    live in the database, so every cursor and process on the same store shares them: a dashboard
    click then costs a lookup, not a 0.75-1.5 s reload); returns `con`."""
    with _lock:
        if con in _loaded:
            return con
        if _stored_library_hash(con) != library_hash():
            load_sql(con)
            table = _library_table(con)
            con.execute(f"CREATE TABLE IF NOT EXISTS {table} (library_hash VARCHAR)")
            con.execute(f"DELETE FROM {table}")
            con.execute(f"INSERT INTO {table} VALUES (?)", [library_hash()])
        _loaded.add(con)
    return con


# Per-run views that several analyses of one analyze_run read, in dependency order. Each is
# computed ONCE per run into a TEMP table while `run_cache` is open (e.g. gpu_activity took
# ~0.35 s per use on a 1 GB trace and was used by ~10 macros).
CACHED_VIEWS = ("steps", "sync_calls", "dataloader_spans", "gpu_activity", "launches", "copies", "collectives",
                "collective_instances", "rank_balance")
# The thresholds (analyzers/thresholds.py names) a cached view takes after the run id.
_VIEW_THRESHOLDS = {"rank_balance": ("HOST_BLOCKED_MIN_NS",)}


@contextlib.contextmanager
def run_cache(con: duckdb.DuckDBPyConnection, run_id: str, thresholds: Mapping[str, float]):
    """Materialise CACHED_VIEWS for `run_id` on this connection for the duration of the block,
    views that take thresholds computed with `thresholds` (the analysis run's).

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
            names = _VIEW_THRESHOLDS.get(view, ())
            # computed with the views cached before it (launches reads the cached gpu_activity)
            con.execute(f"CREATE OR REPLACE TEMP TABLE td_cache_{view} AS "
                        f"SELECT ? AS td_cache_run, * FROM {view}(?{', ?' * len(names)})",
                        [run_id, run_id, *(thresholds[name] for name in names)])
            made.append(view)
            # same parameters as the stored macro; the thresholds were applied above
            params = "".join(f", {name.lower()}" for name in names)
            con.execute(f"CREATE OR REPLACE TEMP MACRO {view}(run{params}) AS TABLE "
                        f"SELECT * EXCLUDE (td_cache_run) FROM temp.td_cache_{view} WHERE td_cache_run = run")
        yield con
    finally:
        for view in reversed(made):
            for stmt in (f"DROP MACRO TABLE IF EXISTS temp.{view}", f"DROP TABLE IF EXISTS temp.td_cache_{view}"):
                try:
                    con.execute(stmt)
                except duckdb.Error:
                    pass
