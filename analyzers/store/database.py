"""The DuckDB store: where it lives, how to open it, and its schema."""
from __future__ import annotations

import os
import re
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import duckdb

from analyzers.store import partitions

SCHEMA_FILE = Path(__file__).with_name("schema.sql")
DB_ENV_VAR = "TRACEDOCTOR_DB"
MEMORY_LIMIT_ENV_VAR = "TRACEDOCTOR_MEMORY_LIMIT"
# What DuckDB may hold in memory before it spills to disk (next to the store, `<store>.tmp`).
# DuckDB's own default is 80% of RAM, so a run's analyses held every rank's events at once (8 GB
# for 8 ranks of 1 GB); with a cap that a 1 GB rank needs, memory stays flat as ranks grow
# (bench/README.md "Bounded memory").
DEFAULT_MEMORY_LIMIT = "1GB"
# Where a new in-memory store starts from: a provider of a store file to copy (analyzers.sql.engine
# sets one holding the schema and the SQL library, so a one-shot analysis skips parsing the library's
# macros, 1-2.5 s). A file store keeps the library once loaded, and starts empty: a copied file's
# free blocks would outlive a failed append's reclaim. None, a provider returning None or a copy
# that fails: the store starts empty.
_new_store_template: Callable[[], Path | None] | None = None
_MEMORY_SIZE = re.compile(r"^\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$", re.IGNORECASE)


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """What the block writes is committed together or not at all. The rollback after a failure is
    quiet: DuckDB has often ended the transaction already (a failed COMMIT on a full disk), and "no
    transaction is active" must not hide the real error."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass
        raise


def memory_limit() -> str:
    """$TRACEDOCTOR_MEMORY_LIMIT (e.g. "4GB"), else DEFAULT_MEMORY_LIMIT; a value DuckDB would not
    read is an error naming the variable."""
    value = os.environ.get(MEMORY_LIMIT_ENV_VAR) or DEFAULT_MEMORY_LIMIT
    if not _MEMORY_SIZE.match(value):
        raise ValueError(f"{MEMORY_LIMIT_ENV_VAR}={value!r} is not a size such as 512MB or 4GB")
    return value.strip()


def default_db_path() -> Path:
    """$TRACEDOCTOR_DB, else $XDG_DATA_HOME/tracedoctor/tracedoctor.duckdb (~/.local/share by default)."""
    if os.environ.get(DB_ENV_VAR):
        return Path(os.environ[DB_ENV_VAR]).expanduser()
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data_home / "tracedoctor" / "tracedoctor.duckdb"


def store_not_writable(db_path: str | os.PathLike) -> str | None:
    """Why this process cannot write the store file, in plain words; None when it can. DuckDB
    writes the file and, beside it, a write-ahead log (.wal), so both need permission."""
    path = Path(db_path)
    if str(db_path) == ":memory:":
        return None
    folder = path.parent
    while not folder.exists() and folder != folder.parent:   # the folders connect() would create
        folder = folder.parent
    if _on_read_only_mount(folder):
        return f"the store {path} is on a read-only file system"
    if path.exists() and not os.access(path, os.W_OK):
        return f"the store file {path} is read-only (no write permission)"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder of the store, {folder}, is read-only (no write permission)"
    return None


def _on_read_only_mount(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):   # no statvfs (Windows): the permission checks say it
        return False


def set_new_store_template(provider: Callable[[], Path | None] | None) -> None:
    """New in-memory stores start as a copy of provider()'s file."""
    global _new_store_template
    _new_store_template = provider


def _template() -> Path | None:
    try:
        return _new_store_template() if _new_store_template else None
    except (OSError, duckdb.Error):      # an unwritable cache, a full disk: start empty
        return None


def _copy_template_into_memory(con: duckdb.DuckDBPyConnection) -> None:
    template = _template()
    if template is None:
        return
    try:
        con.execute("ATTACH ? AS td_store_template (READ_ONLY)", [str(template)])
        try:
            con.execute("COPY FROM DATABASE td_store_template TO memory")
        finally:
            con.execute("DETACH td_store_template")
    except duckdb.Error:
        pass      # the library then loads from its files, as without a template


def connect(db_path: str | os.PathLike | None = None, read_only: bool | None = False,
            ensure_schema: bool = True) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) the store and make sure the schema exists.

    db_path None means default_db_path(); ":memory:" gives a throwaway in-memory store.
    read_only None: read-only when this process cannot write the store (store_not_writable),
    so that reading commands still work; writes on such a connection are refused by
    read_only_reason() callers (ingest) with that reason. A store that does not exist and
    cannot be created raises duckdb.IOException.
    ensure_schema False skips the migration and CREATE IF NOT EXISTS statements, for a caller
    that reopens a store it has already brought up to date (the dashboard, on every click).
    A new in-memory store starts as a copy of the template (set_new_store_template).
    """
    path = str(db_path) if db_path is not None else str(default_db_path())
    if read_only is None:
        read_only = path != ":memory:" and Path(path).exists() and store_not_writable(path) is not None
    if path != ":memory:" and not read_only:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    if read_only and path != ":memory:":
        # DuckDB refuses every CREATE on a read-only database, the analyzers' macros included: the
        # store is attached read-only beside an in-memory database that takes them
        con = duckdb.connect(":memory:")
        con.execute("ATTACH ? AS store (READ_ONLY)", [path])
        con.execute("SET search_path = 'memory.main,store.main'")
    else:
        con = duckdb.connect(path, read_only=read_only)
        if path == ":memory:":
            _copy_template_into_memory(con)
    # DuckDB draws a progress bar on stdout for statements over 2 s (a big ingest): never in
    # the CLI's JSON, never in a server's log
    con.execute("SET enable_progress_bar = false")
    con.execute(f"SET memory_limit = '{memory_limit()}'")    # checked by memory_limit()'s pattern
    if path == ":memory:" or read_only:   # DuckDB would spill to ./.tmp, wherever the process started
        con.execute("SET temp_directory = ?", [os.path.join(tempfile.gettempdir(), f"tracedoctor-spill-{os.getpid()}")])
    # A bulk append (an ingest) buffers this many row groups per thread before writing them
    # out; DuckDB's default of 5 (~614k events) kept a 100 MB trace whole in memory until the
    # commit. One: 100 MB peaked at 188-191 MiB instead of 227, 1 GB at 295 instead of 393,
    # as fast (bench/README.md). It only affects bulk inserts, so queries are untouched.
    con.execute("SET write_buffer_row_group_count = 1")
    if ensure_schema and not read_only:
        _retry_conflicts(lambda: _migrate(con))
        _retry_conflicts(lambda: con.execute(SCHEMA_FILE.read_text()))
        _retry_conflicts(lambda: _add_columns(con))
    if not read_only and path != ":memory:":
        reclaim_unused_tail(con, path)
    return partitions.attach(con)     # `events` includes the runs kept as Parquet partitions


def is_file_store(con: duckdb.DuckDBPyConnection) -> bool:
    """The store behind `con` is a file (kept for later reads: the dashboard, another command), not
    a throwaway in-memory one."""
    rows = con.execute("SELECT path FROM duckdb_databases() WHERE NOT internal AND path IS NOT NULL").fetchall()
    return bool(rows)


def read_only_reason(con: duckdb.DuckDBPyConnection) -> str | None:
    """Why nothing can be written through this connection (its store is attached read-only),
    naming the file; None when it is writable."""
    row = con.execute("SELECT readonly, path FROM duckdb_databases() WHERE NOT internal "
                      "ORDER BY readonly DESC LIMIT 1").fetchone()
    if not row or not row[0]:
        return None
    return store_not_writable(row[1]) or f"the store {row[1]} is open read-only"


# DuckDB's file: 3 header blocks of 4 KiB, then blocks of block_size (pragma_database_size)
_HEADER_BYTES = 3 * 4096
RECLAIM_MIN_BYTES = 1 << 20


def reclaim_unused_tail(con: duckdb.DuckDBPyConnection, path: str) -> int:
    """Give back to the disk the end of the store file that no block uses; returns the bytes freed.

    An ingest that died during its append (SIGKILL, the OOM killer, a full disk) has already
    written row groups past the store's last block: the file keeps that size, and a later kill
    that gets further extends it (4 kills: 0.3 MB -> 67 MB, no run added). DuckDB cuts unused
    blocks off the file's end when it checkpoints, but skips a checkpoint with nothing to write:
    then a catalog change is made first. A checkpoint that cannot run now (another transaction
    of this process, a disk too full for the log) is left for the next open.
    """
    before = _unused_tail_bytes(con, path)
    if before < RECLAIM_MIN_BYTES:
        return 0
    try:
        con.execute("CHECKPOINT")       # writes what the log holds, and trims the file's end
        if _unused_tail_bytes(con, path) >= RECLAIM_MIN_BYTES:     # skipped: nothing to write
            con.execute("CREATE TABLE IF NOT EXISTS store_reclaim_marker (unused INTEGER)")
            con.execute("DROP TABLE store_reclaim_marker")
            con.execute("CHECKPOINT")
    except duckdb.Error:
        pass
    return max(0, before - _unused_tail_bytes(con, path))


def _unused_tail_bytes(con: duckdb.DuckDBPyConnection, path: str) -> int:
    try:
        total_blocks, block_size = con.execute(
            "SELECT total_blocks, block_size FROM pragma_database_size() "
            "WHERE database_name = current_database()").fetchone()
        return os.path.getsize(path) - (_HEADER_BYTES + total_blocks * block_size)
    except (duckdb.Error, OSError, TypeError):
        return 0


class StoreBusy(Exception):
    """Another process holds the store file (DuckDB lets one process write a file at a time)."""

    def __init__(self, message: str, path: str, holder_pid: int | None):
        super().__init__(message)
        self.path = path
        self.holder_pid = holder_pid


_LOCK_WAIT_S = 10.0


def connect_waiting(db_path: str | os.PathLike | None = None, wait_s: float | None = None,
                    ensure_schema: bool = True, read_only: bool | None = False) -> duckdb.DuckDBPyConnection:
    """connect(), waiting up to wait_s (default _LOCK_WAIT_S) while another process holds the
    store (a second CLI call finishing its ingest); then StoreBusy naming the file and the
    holder, in plain words. read_only as in connect() (None: read-only where not writable)."""
    deadline = time.monotonic() + (_LOCK_WAIT_S if wait_s is None else wait_s)
    while True:
        try:
            return connect(db_path, read_only=read_only, ensure_schema=ensure_schema)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower():
                raise
            if time.monotonic() >= deadline:
                path = str(db_path if db_path is not None else default_db_path())
                holder = re.search(r"PID (\d+)", str(exc))
                raise StoreBusy(f"the store {path} is in use by another process"
                                f"{f' (PID {holder.group(1)})' if holder else ''}, e.g. another ingest or a "
                                "dashboard loading traces; try again when it is done, or pass --db with another "
                                "store file",
                                path, int(holder.group(1)) if holder else None) from None
            time.sleep(0.2)


_CONFLICT_RETRIES = 8


def _retry_conflicts(step) -> None:
    """Run a schema step, again after a short wait when a concurrent connection of this process
    changed the catalog at the same moment (DuckDB's "write-write conflict"): the second try sees
    the other's tables and columns, and the step (idempotent) has nothing left to do."""
    for attempt in range(_CONFLICT_RETRIES):
        try:
            step()
            return
        except duckdb.TransactionException:
            if attempt == _CONFLICT_RETRIES - 1:
                raise
            time.sleep(0.02 * (attempt + 1))


# Columns renamed since stores were first written: (table, old name, new name). The hashes moved
# from sha256 to BLAKE3 (hashing 1 GB took 0.14 s instead of 0.63-0.89 s); runs stored before
# keep their sha256-based ids, so the same files ingested again become a new run once.
_RENAMED_COLUMNS = (("runs", "sha256", "content_hash"), ("ranks", "file_sha256", "file_hash"))


# Columns added since stores were first written: (table, column, type). CREATE TABLE IF NOT EXISTS
# leaves an older table as it is, so they are added here.
_ADDED_COLUMNS = (("runs", "analysis_version", "VARCHAR"), ("runs", "analysis_summary", "JSON"),
                  ("runs", "rank_table", "JSON"),
                  ("findings", "ranks", "INTEGER[]"), ("findings", "caused_by", "VARCHAR"),
                  ("findings", "position", "INTEGER"), ("event_partitions", "written_by", "VARCHAR"))


def _add_columns(con: duckdb.DuckDBPyConnection) -> None:
    for table, column, sql_type in _ADDED_COLUMNS:
        if not _has_column(con, table, column):
            con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {sql_type}")   # names from the tuple


def _has_column(con: duckdb.DuckDBPyConnection, table: str, column: str) -> bool:
    return bool(con.execute(
        "SELECT count(*) FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = ? AND column_name = ?", [table, column]).fetchone()[0])


def _migrate(con: duckdb.DuckDBPyConnection) -> None:
    """Bring a store written by an earlier version to the current column names (idempotent)."""
    for table, old, new in _RENAMED_COLUMNS:
        if not _has_column(con, table, old):
            continue
        try:
            con.execute(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}")   # names from the tuple above
        except duckdb.Error:
            if _has_column(con, table, old):   # not renamed by a concurrent connection either
                raise
