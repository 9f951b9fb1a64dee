"""A run's events as Parquet partitions (analyzers/store/partitions.py) instead of rows in the store.

The driver plans the run as any ingest does (files, layouts, ranks, the run id); each rank is then a
task (analyzers/cluster.py runs them here or on a cluster) that parses its file into a scratch
in-memory DuckDB with the same parser and retries as the store's ingest, and writes its events to
a staging file under the events root. Once every rank is done, the driver moves the files to
<root>/run_id=<id>/rank=<r>/events.parquet and commits the run, its ranks and their partitions to
the catalogue in one transaction. A file that fails is reported and the others still load; nothing
of a failed call stays (staging is removed, moved files are deleted again).
"""
from __future__ import annotations

import dataclasses
import os
import posixpath
import time
from dataclasses import dataclass, field
from typing import Any

import duckdb

from analyzers.store import partitions
from analyzers.store.database import transaction
from analyzers.common.model import FileError, IngestResult
from analyzers.common.progress import Progress, teller
from .run_writer import (DiskFull, ParseFailure, RankInput, duckdb_threads, ingest_result, insert_run_row,
                         next_attempt, predict_timestamps, run_identity, stored_again, wait_for_run, write_run)
from .layout import Layout
from .layout import LayoutError, scan_layout
from .sources import Limits, RankFile, hash_file

# ranks columns a task sends back (run_id and rank are the driver's)
_RANK_COLUMNS = ("file_name", "file_hash", "schema_version", "device_name", "base_time_ns", "distributed_info",
                 "device_properties", "trace_meta", "n_events")


@dataclass
class RankIngestTask:
    """One rank file to parse and write as a Parquet file at `target`."""
    source: RankFile
    layout: Layout
    rank: int
    exact: bool
    target: str
    limits: Limits


@dataclass
class RankIngestOutcome:
    rank: int
    display: str
    location: str | None = None          # the staging file; None when the file failed
    content_hash: str = ""
    layout: Layout | None = None      # the file's whole layout (a compressed one's, once inflated here)
    unreadable: bool = False          # failed before its events: not a trace (the driver drops it before planning)
    n_events: int = 0
    n_bytes: int = 0
    ranks_row: dict[str, Any] = field(default_factory=dict)
    warnings: list[FileError] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


def ingest_rank(task: RankIngestTask) -> RankIngestOutcome:
    """Parse one rank file into a scratch store and write its events as Parquet (a task)."""
    from analyzers.cluster import task_connection
    from analyzers.common.tempfiles import ingest_temp_dir

    started = time.perf_counter()
    outcome = RankIngestOutcome(task.rank, task.source.display)
    local_copies = [p for p in (*task.source.parts, task.source.path, task.source.compressed) if p]
    missing = [p for p in local_copies if not os.path.exists(p)]
    if missing:     # an archive member is inflated by the driver, into its temp folder
        outcome.error = (f"{missing[0]} is not readable on this worker: the workers need the traces on storage "
                         "they all reach, and for archives (.zip, .tar.gz) the driver's TRACEDOCTOR_TMPDIR too")
        outcome.seconds = time.perf_counter() - started
        return outcome
    con = task_connection()
    try:
        with ingest_temp_dir() as tmpdir:
            source, layout = task.source, task.layout
            planned = bool(source.content_hash)     # the driver read it, and chose its timestamp path (exact)
            if source.compressed:     # left for this task to inflate (collect's defer_compressed)
                source, layout, failed = _inflate(task, tmpdir, duckdb_threads(con))
                if failed:
                    outcome.error, outcome.unreadable = failed, True
                    return outcome
            elif not source.content_hash:      # left for this task to hash (collect's defer_plain_hash)
                source.content_hash = hash_file(source.path)
            if layout is None:      # scanned here, as the driver's plan would have (core._plan_and_write)
                try:
                    layout = scan_layout(source.path)
                except LayoutError as exc:
                    outcome.error, outcome.unreadable = str(exc), True
                    return outcome
                except OSError as exc:
                    outcome.error, outcome.unreadable = f"could not read the file ({exc.strerror or exc})", True
                    return outcome
            outcome.content_hash, outcome.layout = source.content_hash, layout
            item = RankInput(source, layout, task.rank, exact=task.exact)
            if not planned:
                predict_timestamps(item)
            while True:
                try:
                    outcome.warnings += write_run(con, [item], "partition", "", "", "", tmpdir, task.limits,
                                                        True, None)
                    break
                except ParseFailure as failure:
                    if not next_attempt(failure):
                        outcome.error = failure.message
                        return outcome
                except DiskFull as full:
                    outcome.error = str(full)
                    return outcome
        columns = [c for c in partitions.EVENT_COLUMNS if c not in ("run_id", "rank")]
        outcome.n_bytes = partitions.write_events(con, f"SELECT {', '.join(columns)} FROM events", task.target)
        row = con.execute(f"SELECT {', '.join(_RANK_COLUMNS)} FROM ranks").fetchone()
        outcome.ranks_row = dict(zip(_RANK_COLUMNS, row))
        outcome.n_events = int(outcome.ranks_row["n_events"] or 0)
        outcome.location = task.target
    except Exception as exc:     # noqa: BLE001 (a task reports its file's failure; it never fails the map)
        outcome.error = f"its events could not be written to {task.target} ({exc})"
    finally:
        con.close()
        outcome.seconds = time.perf_counter() - started
    return outcome


def lost_rank(task: RankIngestTask, error: BaseException) -> RankIngestOutcome:
    """The outcome of a rank task whose worker died under it on every try (out of memory, most
    often): that file fails alone, named, and the rest of the batch is stored."""
    return RankIngestOutcome(task.rank, task.source.display, unreadable=True,
                             error=f"the worker parsing it died on every try (out of memory?): {error}")


def _inflate(task: RankIngestTask, tmpdir: str, threads: int) -> tuple[RankFile, Layout, str | None]:
    """The task's .json.gz inflated into parse ranges here, as collect does it on the driver, under
    the driver's names: (its RankFile, its Layout, None), or (.., .., why it cannot be read)."""
    from .sources import collect

    files, failed = collect([task.source.compressed], tmpdir, task.limits, threads=threads)
    if failed or not files:
        return task.source, task.layout, failed[0].error if failed else "the file holds no trace"
    inflated = dataclasses.replace(files[0], display=task.source.display, member=task.source.member,
                                   where=task.source.where, origin=task.source.origin, compressed="")
    try:
        layout = inflated.layout or scan_layout(inflated.path)
    except (LayoutError, OSError) as exc:
        return task.source, task.layout, str(exc)
    return inflated, layout, None


def parse_before_planning(files: list[RankFile], errors: list[FileError], progress: Progress | None,
                          limits: Limits, root: str, runner) -> tuple[list[RankFile], dict[int, RankIngestOutcome], str]:
    """A cluster's deferred files (collect's defer_plain_hash / defer_compressed: the driver read
    only their heads) parsed by their tasks before the run is planned, each into
    <root>/_staging/<token>/file=<k>/: then the plan (copies, jobs, ranks) is made from what it is
    made from in-process, their hashes and whole metadata (a trace's baseTimeNanoseconds comes
    after its events). Returns (the files, less those that turned out not to be traces, which are
    in `errors` now; {id(file): its outcome}; the staging folder to remove at the end)."""
    root = partitions.normalize_root(root)
    token = partitions.new_token()
    staging = posixpath.join(root, partitions.STAGING, token)
    deferred = [f for f in files if f.compressed or not f.content_hash]
    problem = getattr(runner, "cannot_write", lambda _root: None)(root)
    if not deferred or problem:
        return files, {}, staging
    tasks = [RankIngestTask(f, f.layout, -1, False, posixpath.join(staging, f"file={k}", "events.parquet"), limits)
             for k, f in enumerate(deferred)]
    tell = teller(progress)
    n = len(tasks)

    def told(_index: int, outcome: RankIngestOutcome) -> None:
        told.done += 1
        tell("parsed", outcome.display, told.done / n, done=told.done, total=n, rows=outcome.n_events)
    told.done = 0
    tell("parsing", "", 0.0, done=0, total=n)
    outcomes = runner.map(ingest_rank, tasks, on_done=told, on_lost=lost_rank)
    prepared, dropped = {}, set()
    for source, outcome in zip(deferred, outcomes):
        if outcome.unreadable:        # as collect or the layout scan would have refused it here
            errors.append(FileError(source.display, outcome.error))
            dropped.add(id(source))
            continue
        source.content_hash = outcome.content_hash or source.content_hash
        if outcome.layout is not None:
            source.layout = outcome.layout
        prepared[id(source)] = outcome
    return [f for f in files if id(f) not in dropped], prepared, staging


def write_partitioned_job(con: duckdb.DuckDBPyConnection, items: list, run_name, source_text: str,
                          errors: list[FileError], warnings: list[FileError], progress: Progress | None,
                          limits: Limits, root: str, runner,
                          prepared: dict[int, RankIngestOutcome] | None = None,
                          restore_trashed: bool = True, actor: str | None = None) -> IngestResult:
    """One job's planned rank files -> a run whose events are Parquet partitions under `root`;
    prepared: files parse_before_planning parsed already (by id of their RankFile). run_name: the
    run's name, or a function giving it for the files that loaded (a file that failed is not counted)."""
    from .ranks import world_size

    root = partitions.normalize_root(root)
    problem = getattr(runner, "cannot_write", lambda _root: None)(root)
    if problem:
        return IngestResult(None, errors + [FileError(i.source.display, f"not loaded: {problem}") for i in items],
                            warnings)
    partitions.sweep_stale(root)
    tell = teller(progress)
    prepared = prepared or {}
    run_id, full_hash = run_identity(items)
    if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]:
        return stored_again(con, run_id, items, errors, warnings, restore_trashed, actor)
    token = partitions.new_token()
    staging = posixpath.join(root, partitions.STAGING, token)
    todo = [i for i in items if id(i.source) not in prepared]
    tasks = [RankIngestTask(i.source, i.layout, i.rank, i.exact, partitions.staging_location(root, token, i.rank),
                            limits) for i in todo]
    n = len(tasks)

    def told(index: int, outcome: RankIngestOutcome) -> None:
        told.done += 1
        tell("parsed", outcome.display, told.done / n, done=told.done, total=n, rank=outcome.rank,
             rows=outcome.n_events)
    told.done = 0
    moved: list[str] = []
    try:
        if tasks:
            tell("parsing", "", 0.0, done=0, total=n)
        parsed = dict(zip([id(i.source) for i in todo], runner.map(ingest_rank, tasks, on_done=told, on_lost=lost_rank) if tasks else []))
        kept = []
        for item in items:
            outcome = prepared.get(id(item.source)) or parsed[id(item.source)]
            outcome.rank = item.rank
            warnings += outcome.warnings
            if outcome.error:
                errors.append(FileError(item.source.display, outcome.error))
            else:
                kept.append((item, outcome))
        if not kept:
            return IngestResult(None, errors, warnings)
        items = [item for item, _ in kept]
        run_id, full_hash = run_identity(items)
        if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]:
            return stored_again(con, run_id, items, errors, warnings, restore_trashed, actor)
        tell("writing", "", 0.0, done=0, total=n)
        located = []
        for item, outcome in kept:
            target = partitions.partition_location(root, run_id, item.rank, token)
            partitions.move(outcome.location, target)
            moved.append(target)
            located.append((item, outcome, target))
        try:
            _commit(con, run_id, full_hash, run_name(items) if callable(run_name) else run_name, source_text, world_size([i.layout.meta for i, _ in kept]),
                    located)
        except (duckdb.ConstraintException, duckdb.TransactionException) as exc:
            # the same files ingested at the same moment elsewhere, committed first: theirs is the run
            # (our own files, never theirs, are removed below)
            if (run_id not in str(exc) and "conflict" not in str(exc).lower()) or not wait_for_run(con, run_id):
                raise
            return ingest_result(run_id, items, errors, warnings, reused=True)
        moved = []      # committed: the catalogue owns them now
    finally:
        partitions.remove([*moved, staging])
    partitions.attach(con)
    return ingest_result(run_id, items, errors, warnings, reused=False)


def _commit(con: duckdb.DuckDBPyConnection, run_id: str, full_hash: str, name: str, source: str,
            size: int | None, located: list) -> None:
    writer = partitions.store_identity(con)
    with transaction(con):
        for item, outcome, target in located:
            row = outcome.ranks_row
            con.execute(f"INSERT INTO ranks (run_id, rank, {', '.join(_RANK_COLUMNS)}) "
                        f"VALUES (?, ?{', ?' * len(_RANK_COLUMNS)})",
                        [run_id, item.rank, *(row[c] for c in _RANK_COLUMNS)])
            con.execute("INSERT INTO event_partitions (run_id, rank, location, n_events, n_bytes, written_by) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        [run_id, item.rank, target, outcome.n_events, outcome.n_bytes, writer])
        insert_run_row(con, run_id, name, source, full_hash, size)
