"""Events kept outside the store file: Parquet partitioned by run and rank.

A run ingested with an events root (`--events-dir`, a local or NFS folder, or an fsspec URL such
as memory://bucket/td or s3://bucket/td) keeps its events in
`<root>/run_id=<id>/rank=<r>/events.parquet`, one file per rank, without the run_id and rank
columns (the path holds them: hive partitioning). The DuckDB store keeps the catalogue (runs,
ranks, event_partitions: where each rank's file is) and everything derived (findings, notes), so a
1,000-rank run is queried in place, never copied into the store.

Readers see one `events`: on a connection whose store catalogues partitions, attach() shadows the
stored table with a TEMP VIEW that adds the Parquet files (DuckDB prunes the files of other runs
and ranks by their paths before reading any); a run's analyses read only that run's files
(run_events_sql). Writers of the stored table name it in full (stored_events_table).
"""
from __future__ import annotations

import contextlib
import functools
import os
import posixpath
import uuid
from pathlib import Path
from typing import Iterable

import duckdb

STAGING = "_staging"         # ranks written by an ingest not yet committed to the catalogue
SCRATCH = "_analysis"        # per-rank views a cluster analysis shares between its tasks
# The events table's columns in its order, less the two the partition path holds.
EVENT_COLUMNS = ("run_id", "rank", "kind", "cat", "ph", "name", "ts_ns", "dur_ns", "pid", "tid", "device",
                 "stream", "correlation", "external_id", "bytes", "args")
_HIVE = "hive_partitioning = true, hive_types = {'run_id': VARCHAR, 'rank': INTEGER}"


EVENTS_DIR_ENV_VAR = "TRACEDOCTOR_EVENTS_DIR"


def configured_root() -> str | None:
    """$TRACEDOCTOR_EVENTS_DIR: every ingest (the dashboard's too) keeps events there; None: in the store."""
    return os.environ.get(EVENTS_DIR_ENV_VAR) or None


def beside_store(db_path: str | os.PathLike) -> str:
    """The events root for a store whose runs must be partitioned (their ranks are cluster tasks)
    and no root was given: <store file>.events, or a temp folder for an in-memory store."""
    if str(db_path) == ":memory:":
        return _process_events_root()
    return str(Path(db_path).with_name(Path(db_path).name + ".events"))


@functools.cache
def _process_events_root() -> str:
    """A temp folder for the partitions of this process's in-memory stores, removed at its exit."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="tracedoctor-events-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def root_problem(root: str | None, db_path: str | os.PathLike) -> str | None:
    """Why a store at db_path must not keep its events under root, or None: a root that lives
    only as long as this process (memory://) for a store on disk, whose runs would outlive
    their events; a URL carrying user:password@ (the catalogue would keep the secret)."""
    if root is None:
        return None
    protocol = _protocol(str(root))
    if protocol == "memory" and str(db_path) != ":memory:":
        return (f"--events-dir {root}: a memory:// folder ends with this process, but the store keeps its runs; "
                "give a folder or an object store (s3://bucket/td)")
    if protocol is not None and "@" in str(root).split("://", 1)[1].split("/", 1)[0]:
        return ("--events-dir: credentials in the URL (user:password@) are not used, and the store would keep "
                "them: give them as the protocol's own settings")
    return None


def root_for(given: str | None, cluster_address: str | None, db_path: str | os.PathLike) -> str | None:
    """Where a load keeps its events: the root given, else $TRACEDOCTOR_EVENTS_DIR, else (its ranks
    being cluster tasks, which cannot write into the store file) beside the store; None: inside."""
    root = given or configured_root()
    if root or cluster_address is None:
        return root
    return beside_store(db_path)


def sql_text(value: str) -> str:
    """A SQL string literal (file names cannot be bound as parameters inside a view or macro)."""
    return "'" + str(value).replace("'", "''") + "'"


def _protocol(url: str) -> str | None:
    """The fsspec protocol of a URL (memory, s3, gcs, ...); None for a local path or file://."""
    if "://" not in url:
        return None
    protocol = url.split("://", 1)[0].lower()
    return None if protocol == "file" else protocol


def normalize_root(root: str | Path) -> str:
    """An events root as DuckDB and fsspec both read it: an absolute local path, or a URL."""
    text = str(root).rstrip("/") or "/"
    if text.lower().startswith("file://"):
        text = text[len("file://"):]
    if _protocol(text) is None:
        return str(Path(text).expanduser().resolve())
    return text


def filesystem(url: str):
    """The fsspec filesystem holding `url` (local files included)."""
    import fsspec

    return fsspec.filesystem(_protocol(url) or "file")


def register(con: duckdb.DuckDBPyConnection, urls: Iterable[str]) -> None:
    """Let DuckDB read and write the fsspec URLs among `urls` (local paths need nothing)."""
    protocols = {p for p in map(_protocol, urls) if p}
    if not protocols:
        return
    registered = set(con.list_filesystems())
    for protocol in sorted(protocols):
        fs = filesystem(f"{protocol}://")
        names = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
        if not registered.intersection(names):
            con.register_filesystem(fs)


def partition_location(root: str, run_id: str, rank: int, token: str) -> str:
    """Where an ingest puts a rank's events; `token` is the ingest's own, so two ingests of the same
    files at once never write (or clean up) each other's file."""
    return posixpath.join(root, f"run_id={run_id}", f"rank={int(rank)}", f"events-{token}.parquet")


def events_root_of(location: str) -> str:
    """The events root a partition file lies under (<root>/run_id=<id>/rank=<r>/<file>)."""
    return location.rsplit("/run_id=", 1)[0]


def staging_location(root: str, token: str, rank: int) -> str:
    return posixpath.join(root, STAGING, token, f"rank={int(rank)}", "events.parquet")


def new_token() -> str:
    return uuid.uuid4().hex[:16]


def make_parent(url: str) -> None:
    filesystem(url).makedirs(posixpath.dirname(url), exist_ok=True)


def write_events(con: duckdb.DuckDBPyConnection, select_sql: str, url: str) -> int:
    """COPY the rows of `select_sql` (events columns without run_id and rank) to a Parquet file at
    `url`; returns its size in bytes."""
    register(con, [url])
    make_parent(url)
    con.execute(f"COPY ({select_sql}) TO {sql_text(url)} (FORMAT parquet, COMPRESSION zstd)")
    return int(filesystem(url).size(url))


def move(source: str, target: str) -> None:
    make_parent(target)
    filesystem(source).mv(source, target)


def remove(urls: Iterable[str]) -> None:
    """Delete files and folders, quietly where they are gone already, and the folders above them
    left empty up to the events root (rank=<r>, run_id=<id>, _staging, _analysis)."""
    for url in urls:
        fs = filesystem(url)
        with contextlib.suppress(FileNotFoundError, OSError):
            if fs.exists(url):
                fs.rm(url, recursive=True)
        parent = posixpath.dirname(url)
        while _ours(posixpath.basename(parent)):
            with contextlib.suppress(FileNotFoundError, OSError):
                if fs.exists(parent) and not fs.ls(parent):
                    fs.rmdir(parent)
            parent = posixpath.dirname(parent)


def _ours(folder: str) -> bool:
    """A folder of the layout below an events root (never the root itself, nor above it)."""
    return folder in (STAGING, SCRATCH) or folder.startswith(("run_id=", "rank=")) or \
        (len(folder) == 16 and all(c in "0123456789abcdef" for c in folder))    # a new_token()


STALE_S = 24 * 3600


def sweep_stale(root: str) -> None:
    """Remove working folders (_staging/<token>, _analysis/<token>) a killed process left under a
    local events root, once a day old (an object store's are left to its lifecycle rules)."""
    if _protocol(root) is not None:
        return
    import time

    for folder in (STAGING, SCRATCH):
        base = Path(root) / folder
        with contextlib.suppress(OSError):
            for entry in base.iterdir():
                if time.time() - entry.stat().st_mtime > STALE_S:
                    remove([str(entry)])


def parquet_events_sql(locations: list[str]) -> str:
    """The events of these partition files, with the events table's columns in its order."""
    files = ", ".join(sql_text(loc) for loc in locations)
    return f"SELECT {', '.join(EVENT_COLUMNS)} FROM read_parquet([{files}], {_HIVE})"



def stored_table(con: duckdb.DuckDBPyConnection, table: str) -> str:
    """The quoted full name of a stored table (main.events would resolve to a TEMP view of that name)."""
    row = con.execute("SELECT database_name FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ? "
                      "AND NOT temporary ORDER BY database_name <> current_database() LIMIT 1", [table]).fetchone()
    database = row[0] if row else con.execute("SELECT current_database()").fetchone()[0]
    return '"' + database.replace('"', '""') + f'".main.{table}'


def stored_events_table(con: duckdb.DuckDBPyConnection) -> str:
    """The quoted full name of the stored events table (plain `events` may be the shadowing view)."""
    return stored_table(con, "events")


def locations(con: duckdb.DuckDBPyConnection, run_id: str | None = None,
              rank: int | None = None) -> list[str]:
    """The catalogued partition files (of one run, one rank), in run and rank order."""
    try:
        return [row[0] for row in con.execute(
            "SELECT location FROM event_partitions WHERE ($run IS NULL OR run_id = $run) "
            "AND ($rank IS NULL OR rank = $rank) ORDER BY run_id, rank", {"run": run_id, "rank": rank}).fetchall()]
    except duckdb.CatalogException:     # an older store opened read-only: no partitions
        return []


def run_events_sql(con: duckdb.DuckDBPyConnection, run_id: str, rank: int | None = None) -> str:
    """SELECT of one run's events (one rank's with `rank`), wherever they are kept."""
    files = locations(con, run_id, rank)
    if files:
        register(con, files)
        return parquet_events_sql(files)
    narrow = "" if rank is None else f" AND rank = {int(rank)}"
    return f"SELECT * FROM {stored_events_table(con)} WHERE run_id = {sql_text(run_id)}{narrow}"


def attach(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Make `events` on this connection (a cursor is one) the stored table plus every catalogued
    partition; without partitions the stored table alone. Returns `con`; never fails.

    A file that cannot be read (deleted by hand, an unmounted share, a bucket without credentials
    here) is left out, so that every other run still reads, and the store still opens: DuckDB
    refuses a list naming a missing file even when it would prune it. Such a run's own analysis
    names the file (run_events_sql lists all of its files)."""
    files = [f for f in locations(con) if _protocol(f) is not None or os.path.isfile(f)]
    for attempt in range(2):
        try:
            if not files:
                con.execute("DROP VIEW IF EXISTS temp.events")
                return con
            register(con, files)
            con.execute(f"CREATE OR REPLACE TEMP VIEW events AS SELECT * FROM {stored_events_table(con)} "
                        f"UNION ALL BY NAME {parquet_events_sql(files)}")
            return con
        except Exception:     # noqa: BLE001 (whatever fsspec or DuckDB raises: the store must open)
            files = [] if attempt else [f for f in files if _readable(f)]
    return con


def _readable(url: str) -> bool:
    try:
        return bool(filesystem(url).exists(url))
    except Exception:     # noqa: BLE001 (a missing package, no credentials, no network)
        return False


def store_identity(con: duckdb.DuckDBPyConnection) -> str:
    """Which store file this connection writes, as the file system knows it (device and inode):
    a copy of the store is another file, so it never counts as the writer of the original's
    partition files. An in-memory store: this process."""
    path = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
    try:
        info = os.stat(path[0]) if path and path[0] else None
    except OSError:
        info = None
    return f"file:{info.st_dev}:{info.st_ino}" if info else f"process:{os.getpid()}"


def own_locations(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> list[str]:
    """The partition files of these runs that this store wrote (a copy of a store shares the
    original's files, and leaves them to it); files catalogued before writers were recorded count
    as this store's."""
    if not run_ids:
        return []
    try:
        return [row[0] for row in con.execute(
            "SELECT location FROM event_partitions WHERE list_contains($runs, run_id) "
            "AND (written_by IS NULL OR written_by = $me) ORDER BY run_id, rank",
            {"runs": run_ids, "me": store_identity(con)}).fetchall()]
    except duckdb.CatalogException:
        return []


class PartitionsMissing(Exception):
    """A run's partition files that cannot be read now: the message names the run, ranks and files."""


def missing(con: duckdb.DuckDBPyConnection, run_id: str) -> list[tuple[int, str]]:
    """(rank, location) of the run's partition files that are not there or cannot be read."""
    try:
        rows = con.execute("SELECT rank, location FROM event_partitions WHERE run_id = ? ORDER BY rank",
                           [run_id]).fetchall()
    except duckdb.CatalogException:
        return []
    return [(rank, loc) for rank, loc in rows
            if not (os.path.isfile(loc) and os.access(loc, os.R_OK) if _protocol(loc) is None else _readable(loc))]


def require_readable(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """PartitionsMissing unless every partition file of the run can be read: its figures would be
    those of the other ranks only."""
    gone = missing(con, run_id)
    if gone:
        ranks = ", ".join(str(rank) for rank, _ in gone)
        files = ", ".join(loc for _, loc in gone[:3]) + (f" and {len(gone) - 3} more" if len(gone) > 3 else "")
        raise PartitionsMissing(f"run {run_id}: the events of rank{'s' if len(gone) > 1 else ''} {ranks} cannot be "
                                f"read ({files} missing or unreadable); put the files back, or delete the run")


def remove_run_files(con: duckdb.DuckDBPyConnection, files: list[str]) -> None:
    """Delete a purged run's partition files (and their folders), then let `events` on `con` stop
    naming them."""
    if files:
        remove(files)
        attach(con)
