"""Load the analyzers' SQL library into a connection once, in dependency order.

Where the SQL lives (paths relative to analyzers/):
- sql/lib/        the only definitions of the shared concepts: interval macros, steps (host and
                  GPU clock), GPU activity categories, launches, copies, collectives, idle gaps
                  and their causes, cross-rank collective matching;
- sql/metrics/    the per-rank and per-step breakdowns every page, report and analysis reads;
- analysis/kinds/<kind>/<kind>.sql   one finding kind's own SQL.
Each file names what it builds on in a first line `-- requires: lib/steps.sql metrics/...`
(sql/ left out of the names); files
load in that order (DuckDB binds a macro's body when it is created, so a macro must exist
before one that calls it). Every statement is CREATE OR REPLACE, so loading again is harmless.

run_cache computes the views an analysis run shares once, into TEMP tables: the per-rank ones rank
by rank (TEMP views named events and ranks narrow the stored tables to one rank), the cross-rank
ones (collectives matched by sequence, the straggler) after them from those; RunCache.only(rank)
then lets an analysis see one rank, so no query holds more than one rank's events.
"""
from __future__ import annotations

import contextlib
import functools
import graphlib
import hashlib
import os
import re
import threading
import weakref
from pathlib import Path
from typing import Callable, Mapping

import duckdb

PACKAGE_DIR = Path(__file__).resolve().parents[1]     # analyzers/
SQL_GLOBS = ("sql/lib/*.sql", "sql/metrics/*.sql", "analysis/kinds/*/*.sql", "analysis/whatif/*.sql")
_REQUIRES = re.compile(r"^--\s*requires:(.*)$")

_loaded: "weakref.WeakSet[duckdb.DuckDBPyConnection]" = weakref.WeakSet()
_lock = threading.Lock()


def library_name(path: Path) -> str:
    """How `-- requires:` lines name a file: lib/steps.sql, metrics/comm.sql, kinds/<kind>/<kind>.sql."""
    name = path.relative_to(PACKAGE_DIR).as_posix()
    return name.removeprefix("sql/").removeprefix("analysis/")


def requires(path: Path) -> list[str]:
    """The library names `path` lists in its `-- requires:` first line."""
    with path.open(encoding="utf-8") as handle:
        match = _REQUIRES.match(handle.readline().strip())
    return match.group(1).split() if match else []


def sql_files() -> list[Path]:
    """Every .sql file of the library, each after the files it requires (ties in path order).

    A required file that does not exist, or a cycle, is an error naming the file."""
    files = {library_name(p): p for pattern in SQL_GLOBS for p in PACKAGE_DIR.glob(pattern)}
    graph: dict[str, list[str]] = {}
    for name in sorted(files):
        needs = requires(files[name])
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
    from analyzers.common import thresholds

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
            raise RuntimeError(f"the SQL library's {library_name(path)} failed to load: {exc}") from exc


@functools.cache
def library_hash() -> str:
    """A hash of the whole SQL library as this code has it."""
    digest = hashlib.blake2b(digest_size=12)
    digest.update(_library_thresholds_sql().encode())
    for path in sql_files():
        digest.update(library_name(path).encode() + b"\0" + path.read_bytes())
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


TEMPLATE_DIR_ENV_VAR = "TRACEDOCTOR_CACHE_DIR"


def _template_dir() -> Path:
    """$TRACEDOCTOR_CACHE_DIR, else $XDG_CACHE_HOME/tracedoctor (~/.cache by default)."""
    if os.environ.get(TEMPLATE_DIR_ENV_VAR):
        return Path(os.environ[TEMPLATE_DIR_ENV_VAR]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tracedoctor"


@functools.cache
def _template_name() -> str:
    """The template's file name: one per library, schema and DuckDB version."""
    from analyzers.store import database

    digest = hashlib.blake2b(digest_size=8)
    digest.update(library_hash().encode() + database.SCHEMA_FILE.read_bytes() + duckdb.__version__.encode())
    return f"store-template-{digest.hexdigest()}.duckdb"


def store_template() -> Path:
    """A store file holding the empty schema and this SQL library, built once per library, schema
    and DuckDB version in the user's cache: new in-memory stores start as a copy (database.connect),
    which takes ~0.1 s where loading the library's macros from their files takes 1-2.5 s."""
    from analyzers.store import database

    path = _template_dir() / _template_name()
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        con = database.connect(partial)      # a file store: never from the template
        try:
            ensure_loaded(con)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        os.replace(partial, path)        # whole or not at all; a concurrent builder's copy is the same
    finally:
        for leftover in (partial, partial.with_name(partial.name + ".wal")):
            with contextlib.suppress(OSError):
                leftover.unlink()
    return path


# Per-run views that several analyses of one analyze_run read, in dependency order. Each is
# computed ONCE per run into a TEMP table while `run_cache` is open (e.g. gpu_activity took
# ~0.35 s per use on a 1 GB trace and was used by ~10 macros). RANK_VIEWS are filled rank by
# rank (a rank's rows need only its own events, and a query over one rank costs what it costs on a
# one-rank run, where the whole run's joins and sorts outgrow memory); RUN_FACTS (run-wide facts
# those read) come before them and ACROSS_RANK_VIEWS (collectives matched across ranks, the
# straggler) after them, both on the whole run.
RUN_FACTS = ("profiler_step_names", "run_workload")
RANK_VIEWS = ("steps", "sync_calls", "dataloader_spans", "untraced_host_time", "gpu_activity", "launches", "copies",
              "collectives", "rank_breakdown", "gpu_step_segments", "rank_step_costs", "rank_gpu_work", "memory_events", "memory_allocations")
ACROSS_RANK_VIEWS = ("collective_instances", "rank_balance")
CACHED_VIEWS = RUN_FACTS + RANK_VIEWS + ACROSS_RANK_VIEWS
# The thresholds (analyzers/common/thresholds.py names) a cached view takes after the run id.
VIEW_THRESHOLDS = {"rank_gpu_work": ("HOST_BLOCKED_MIN_NS",), "rank_balance": ("HOST_BLOCKED_MIN_NS",),
                   "untraced_host_time": ("UNTRACED_MIN_HOLE_NS",)}


class RunCache:
    """The cached views of one run on a connection (see run_cache); `only(rank)` narrows them.

    events_sql(rank): the SELECT of the run's events (of one rank), wherever they are kept
    (partitions.run_events_sql by default)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, run_id: str, ranks: list[int],
                 events_sql: Callable[[int | None], str] | None = None):
        from analyzers.store import partitions

        self.con, self.run_id, self.ranks = con, run_id, ranks
        self.made: list[str] = []
        self._files: dict[str, tuple[list[str], dict[str, str]]] = {}   # served from Parquet (serve_files)
        self._ranks_table = partitions.stored_table(con, "ranks")
        self._events_sql = events_sql or (lambda rank: partitions.run_events_sql(con, run_id, rank))

    def _source(self, view: str) -> str:
        if view in self._files:
            from analyzers.store.partitions import sql_text

            files, types = self._files[view]
            columns = ", ".join(f'CAST("{name}" AS {sql_type}) AS "{name}"' for name, sql_type in types.items())
            return f"(SELECT {columns} FROM read_parquet([{', '.join(map(sql_text, files))}]))"
        return f"temp.td_cache_{view}"

    def _serve(self, view: str, rank: int | None) -> None:
        """TEMP MACRO `view(run, ...)` reading its cached rows (only `rank`'s unless None)."""
        names = VIEW_THRESHOLDS.get(view, ())
        params = "".join(f", {name.lower()}" for name in names)   # the thresholds were applied when cached
        narrow = "" if rank is None or view in RUN_FACTS else f" AND rank = {int(rank)}"
        self.con.execute(f"CREATE OR REPLACE TEMP MACRO {view}(run{params}) AS TABLE SELECT * EXCLUDE (td_cache_run) "
                         f"FROM {self._source(view)} WHERE td_cache_run = run{narrow}")

    def _scope(self, rank: int | None) -> None:
        """Make events, ranks and the cached views read one rank's rows (rank None: the whole run)."""
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW events AS {self._events_sql(rank)}")
        if rank is None:
            self.con.execute("DROP VIEW IF EXISTS temp.ranks")
        else:
            self.con.execute(f"CREATE OR REPLACE TEMP VIEW ranks AS SELECT * FROM {self._ranks_table} "
                             f"WHERE rank = {int(rank)}")
        for view in self.made:
            self._serve(view, rank)

    @contextlib.contextmanager
    def only(self, rank: int):
        """Within the block, queries see the run as if `rank` were its only rank; the cached
        ACROSS_RANK_VIEWS keep their whole-run figures (their rows of that rank)."""
        self._scope(rank)
        try:
            yield self.con
        finally:
            self._scope(None)

    def _fill(self, view: str, thresholds: Mapping[str, float], first: bool) -> None:
        names = VIEW_THRESHOLDS.get(view, ())
        into = f"CREATE OR REPLACE TEMP TABLE td_cache_{view} AS" if first else f"INSERT INTO temp.td_cache_{view} BY NAME"
        # computed with the views cached before it (launches reads the cached gpu_activity)
        self.con.execute(f"{into} SELECT ? AS td_cache_run, * FROM {view}(?{', ?' * len(names)})",
                         [self.run_id, self.run_id, *(thresholds[name] for name in names)])
        if view not in self.made:
            self.made.append(view)

    def fill_run_facts(self, thresholds: Mapping[str, float]) -> None:
        self._scope(None)
        for view in RUN_FACTS:
            self._fill(view, thresholds, first=True)
            self._serve(view, None)

    def fill_ranks(self, thresholds: Mapping[str, float], rank_passes: list[int | None]) -> None:
        """RANK_VIEWS, a pass per rank (None: the whole run at once)."""
        for index, rank in enumerate(rank_passes):
            self._scope(rank)
            for view in RANK_VIEWS:     # computed by the stored macro, not read from the table filled so far
                self.con.execute(f"DROP MACRO TABLE IF EXISTS temp.{view}")
            for view in RANK_VIEWS:
                self._fill(view, thresholds, first=index == 0)
                self._serve(view, rank)
        self._scope(None)

    def fill_across(self, thresholds: Mapping[str, float]) -> None:
        self._scope(None)
        for view in ACROSS_RANK_VIEWS:
            self._fill(view, thresholds, first=True)
            self._serve(view, None)

    def fill(self, thresholds: Mapping[str, float], per_rank: bool) -> None:
        self.fill_run_facts(thresholds)
        self.fill_ranks(thresholds, self.ranks if per_rank and self.ranks else [None])
        self.fill_across(thresholds)

    def serve_rows(self, view: str, rows: list[tuple], columns: list[str]) -> None:
        """Serve `view` from rows computed elsewhere (a run fact the driver computed), td_cache_run
        first; at least one row."""
        if not rows:
            raise ValueError(f"serve_rows({view!r}) needs at least one row")
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE td_cache_{view} AS SELECT * FROM (VALUES "
                         f"{', '.join(['(' + ', '.join(['?'] * len(columns)) + ')'] * len(rows))}) "
                         f"AS t({', '.join(columns)})", [v for row in rows for v in row])
        self._files.pop(view, None)
        if view not in self.made:
            self.made.append(view)
        self._serve(view, None)

    def serve_files(self, view: str, files: list[str], types: dict[str, str]) -> None:
        """Serve `view` from Parquet files of its cached rows (written by save, which gave `types`:
        each column's type, restored on reading); at least one file."""
        from analyzers.store import partitions

        if not files:
            raise ValueError(f"serve_files({view!r}) needs at least one file")
        partitions.register(self.con, files)
        self._files[view] = (list(files), dict(types))
        if view not in self.made:
            self.made.append(view)
        self._serve(view, None)

    def save(self, view: str, url: str) -> dict[str, str]:
        """Write the cached rows of `view` to a Parquet file at `url` (for serve_files elsewhere);
        returns each column's type. Parquet has no 128-bit integers: sums (HUGEINT) go as BIGINT,
        exact for any duration a trace holds, and serve_files makes them HUGEINT again."""
        from analyzers.store import partitions

        types = {row[0]: row[1] for row in self.con.execute(f"DESCRIBE temp.td_cache_{view}").fetchall()}
        columns = ", ".join(f'CAST("{name}" AS BIGINT) AS "{name}"' if sql_type in ("HUGEINT", "UHUGEINT")
                            else f'"{name}"' for name, sql_type in types.items())
        partitions.register(self.con, [url])
        partitions.make_parent(url)
        self.con.execute(f"COPY (SELECT {columns} FROM temp.td_cache_{view}) TO {partitions.sql_text(url)} "
                         "(FORMAT parquet)")
        return types

    def rows(self, view: str) -> tuple[list[str], list[tuple]]:
        """(columns, rows) of a cached view, td_cache_run first."""
        result = self.con.execute(f"SELECT * FROM {self._source(view)}")
        return [d[0] for d in result.description], result.fetchall()

    def drop(self) -> None:
        from analyzers.store import partitions

        stmts = ["DROP VIEW IF EXISTS temp.ranks"]
        for view in reversed(self.made):
            stmts += [f"DROP MACRO TABLE IF EXISTS temp.{view}", f"DROP TABLE IF EXISTS temp.td_cache_{view}"]
        for stmt in stmts:
            try:
                self.con.execute(stmt)
            except duckdb.Error:
                pass
        try:
            partitions.attach(self.con)     # `events` as the connection had it: stored table + partitions
        except duckdb.Error:
            pass


def run_ranks(con: duckdb.DuckDBPyConnection, run_id: str) -> list[int]:
    """The run's ranks, in order: those loaded, and any its events name."""
    return [row[0] for row in con.execute(
        "SELECT rank FROM ranks WHERE run_id = $run UNION SELECT DISTINCT rank FROM events WHERE run_id = $run "
        "ORDER BY rank", {"run": run_id}).fetchall()]


@contextlib.contextmanager
def run_cache(con: duckdb.DuckDBPyConnection, run_id: str, thresholds: Mapping[str, float],
              per_rank: bool = True):
    """Materialise CACHED_VIEWS for `run_id` on this connection for the duration of the block,
    views that take thresholds computed with `thresholds` (the analysis run's); yields a RunCache.
    per_rank False computes RANK_VIEWS on the whole run at once (the same rows, slower and
    larger on many ranks).

    Each view `v(run)` is computed into TEMP TABLE td_cache_v, and a TEMP MACRO `v(run)`
    reading it shadows the stored macro (DuckDB resolves unqualified names in the temp catalog
    first, and binds macro bodies at use, so every macro calling `v(run)` reads the table); a
    rank pass (RunCache.only) shadows the tables events and ranks with TEMP VIEWs of one rank the
    same way. While the block is open the connection serves these views for `run_id` only (other runs
    read as empty: the stored macro cannot be reached under its own name, DuckDB resolves
    `main.v` to the temp macro too), so query one run per block. Everything is dropped on exit.
    Temp objects are per connection (a cursor is its own connection): other users of the store
    are unaffected.
    """
    ensure_loaded(con)
    cache = RunCache(con, run_id, run_ranks(con, run_id))
    try:
        cache.fill(thresholds, per_rank)
        yield cache
    finally:
        cache.drop()


def _register_store_template() -> None:
    from analyzers.store import database

    database.set_new_store_template(store_template)


_register_store_template()
