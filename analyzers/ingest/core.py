"""ingest_paths: rank files → one run in the store, in one transaction, or nothing at all.

Steps: sources (inputs → plain JSON files, or for inflated ones ready parse ranges, + content
hashes) → layout (where the event list is, the metadata around it) → ranks → reuse check on the content hash → one transaction that parses
every rank's events (parse.py), writes the ranks rows and the run row. A file DuckDB refuses
is retried the cheaper ways first (lenient typing, one range), else reported and the
transaction redone without it, so good files of the same call still load.
"""
from __future__ import annotations

import os
from pathlib import Path

import duckdb

from analyzers.common.model import FileError, IngestResult
from analyzers.common.progress import Progress, teller
from analyzers.store.database import read_only_reason, transaction
from analyzers.store.partitions import configured_root
from analyzers.store.runs import restore_run
from .jobs import UNDATED_IN_RUN, JobFile, clock_start_us, group_jobs, mixed_jobs_message
from .layout import head_start_us
from .layout import Layout, LayoutError, scan_layout
from . import memory_files
from .ranks import assign_ranks, metadata_warnings, utf8_text, world_size_mismatch
from .sources import Limits, RankFile, collect, default_name, redact_url
from analyzers.common.tempfiles import TempDirUnusable, ingest_temp_dir, sweep_stale_temp_dirs
from .run_writer import (DiskFull, KNOWN_SCHEMA_VERSIONS, ParseFailure, RankInput, duckdb_threads, ingest_result,
                         insert_run_row, next_attempt, predict_timestamps, run_identity, stored_again, wait_for_run,
                         write_run)



def ingest_paths(con: duckdb.DuckDBPyConnection, paths, name: str | None = None,
                 progress: Progress | None = None, limits: Limits | None = None,
                 events_root: str | None = None, runner=None, restore_trashed: bool = True,
                 actor: str | None = None, confine_to: str | None = None) -> IngestResult:
    """Load the rank files of one job as one run; files of several jobs are refused, naming the
    jobs (ingest_jobs stores one run per job). See analyzers/ingest/__init__.py.
    events_root: keep the run's events as Parquet partitions there (analyzers/store/partitions.py), each
    rank parsed as a task of `runner` (analyzers/cluster.py; default: in this process).
    restore_trashed: files of a run in the trash bring it back (False: it stays there, and the
    result has no run id; the dashboard's sample runs, which nobody asked for again); actor: who
    the audit log names for that restore.
    confine_to: read only files under this directory (a team server's data root), each opened
    once and read through that descriptor (sources.collect), so no link swapped in leads out."""
    return _ingest_call(con, paths, name, progress, limits, split=False, events_root=events_root,
                        runner=runner, restore_trashed=restore_trashed, actor=actor, confine_to=confine_to)[0]


def ingest_jobs(con: duckdb.DuckDBPyConnection, paths, name: str | None = None,
                progress: Progress | None = None, limits: Limits | None = None,
                events_root: str | None = None, runner=None, confine_to: str | None = None,
                actor: str | None = None) -> list[IngestResult]:
    """Load the rank files given as one run per job they come from (analyzers/ingest/jobs.py):
    usually one; for a parent folder of unrelated jobs one each, named after its folder (after
    `name` when given). Files that fail, and warnings about the input, come with the first.
    confine_to, actor: as in ingest_paths."""
    return _ingest_call(con, paths, name, progress, limits, split=True, events_root=events_root, runner=runner,
                        confine_to=confine_to, actor=actor)


def _ingest_call(con, paths, name, progress, limits, split: bool, events_root: str | None = None,
                 runner=None, restore_trashed: bool = True, actor: str | None = None,
                 confine_to: str | None = None) -> list[IngestResult]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    limits = limits or Limits()
    events_root = events_root or configured_root()
    refused = read_only_reason(con)
    if refused:
        return [IngestResult(None, [FileError(str(p), f"not loaded: {refused}") for p in paths])]
    sweep_stale_temp_dirs()
    pinned: list[int] = []   # the descriptors of a confined load's files, read through until the end
    try:
        with ingest_temp_dir() as tmpdir:
            return _ingest(con, paths, name, progress, limits, tmpdir, split, events_root, runner, restore_trashed,
                           confine_to, pinned, actor=actor)
    except TempDirUnusable as exc:
        return [IngestResult(None, [FileError(str(p), exc.message) for p in paths])]
    finally:
        for fd in pinned:
            os.close(fd)


def _ingest(con, paths, name, progress, limits, tmpdir, split: bool, events_root=None, runner=None,
            restore_trashed: bool = True, confine_to: str | None = None, pinned: list[int] | None = None,
            actor: str | None = None) -> list[IngestResult]:
    # a cluster's tasks hash plain files as they parse them: the driver reads only their heads
    defer_hash = events_root is not None and getattr(runner, "hashes_in_tasks", False)
    # allocator snapshots and memory timelines, by content: read apart, stored with the run
    memory, trace_paths, memory_in_dirs = memory_files.split_inputs(paths, limits.max_files_per_dir)
    memory_load = memory_files.read_all(memory)
    files, errors = collect(trace_paths, tmpdir, limits, teller(progress) if progress else None,
                            threads=duckdb_threads(con), defer_plain_hash=defer_hash, defer_compressed=defer_hash,
                            confine_to=confine_to, pinned=pinned, skip_files=memory_in_dirs)
    memory_origins = {item.origin for item in memory}
    errors = [e for e in errors if not (e.file in memory_origins and "holds no .json" in e.error)]
    errors += [FileError(display, error) for display, error in memory_load.errors]
    warnings: list[FileError] = []
    prepared, staging = {}, None
    if defer_hash:      # the tasks parse (hash, inflate) those files first; the plan follows from them
        from .partitioned import parse_before_planning

        files, prepared, staging = parse_before_planning(files, errors, progress, limits, events_root, runner)
    try:
        if not files and memory_load.files:     # memory files alone: a run of their own
            return [_memory_only_run(con, paths, name, memory_load.files, errors, warnings)]
        return _plan_and_write(con, paths, name, progress, limits, tmpdir, split, events_root, runner, files, errors,
                               warnings, prepared, restore_trashed, actor, memory_load.files)
    finally:
        if staging is not None:
            from analyzers.store import partitions

            partitions.remove([staging])     # what no run took (copies, other jobs' files, failures)


def _plan_and_write(con, paths, name, progress, limits, tmpdir, split, events_root, runner, files, errors,
                    warnings, prepared, restore_trashed: bool = True, actor: str | None = None,
                    memory=()) -> list[IngestResult]:
    files = _drop_repeated_content(files, warnings)
    scanned: list[tuple[RankFile, Layout]] = []
    for source in files:
        try:
            layout = source.layout or scan_layout(source.path)
        except LayoutError as exc:
            errors.append(FileError(source.display, str(exc)))
            continue
        except OSError as exc:
            errors.append(FileError(source.display, f"could not read the file ({exc.strerror or exc})"))
            continue
        schema = layout.meta.get("schemaVersion")
        if schema is not None and str(schema) not in KNOWN_SCHEMA_VERSIONS:
            warnings.append(FileError(source.display, f"unknown schemaVersion {schema!r}: loaded because its "
                                                      "events parse, but fields may be misread"))
        warnings += metadata_warnings(source.display, layout.meta)
        scanned.append((source, layout))
    jobs = group_jobs([JobFile(s.display, s.where, lay.meta,
                               clock_start_us(lay.meta, s.head_start_us if s.compressed else
                                              head_start_us(s.path, s.parts, lay.events_start)))
                       for s, lay in scanned])
    if len(jobs) > 1 and not split and sum(not job.undated for job in jobs) <= 1:
        # one dated job and files without a timestamp in their first GiB, asked for as one run:
        # they stay in it (a broken one fails by its own message), each said by name
        for job in jobs:
            if job.undated:
                warnings.append(FileError(scanned[job.members[0]][0].display, UNDATED_IN_RUN))
        jobs = [job for job in jobs if not job.undated][:1]
    if len(jobs) > 1 and not split:
        return [IngestResult(None, errors + [FileError(" ".join(str(p) for p in paths), mixed_jobs_message(jobs))],
                             warnings)]
    if len(jobs) <= 1:
        return [_ingest_job(con, paths, scanned, name, progress, limits, tmpdir, errors, warnings,
                            events_root=events_root, runner=runner, prepared=prepared,
                            restore_trashed=restore_trashed, actor=actor, memory=memory)]
    results = []
    tell = teller(progress)
    for number, job in enumerate(jobs, 1):
        # each event of this job's load says which job it is (job=(i, n))
        job_progress = None if progress is None else (
            lambda stage, item, fraction, _job=(number, len(jobs)), **details:
            tell(stage, item, fraction, job=_job, **details))
        results.append(_ingest_job(con, paths, [scanned[i] for i in job.members],
                                   f"{name} · {job.label}" if name else job.label, job_progress, limits, tmpdir,
                                   errors if number == 1 else [], warnings if number == 1 else [],
                                   job_name=True, events_root=events_root, runner=runner, prepared=prepared,
                                   restore_trashed=restore_trashed, actor=actor,
                                   memory=_memory_of_job(memory, [scanned[i][0] for i in job.members],
                                                         first=number == 1)))
    return results


def _ingest_job(con, paths, scanned: list[tuple[RankFile, Layout]], name, progress, limits, tmpdir,
                errors: list[FileError], warnings: list[FileError], job_name: bool = False,
                events_root: str | None = None, runner=None, prepared=None,
                restore_trashed: bool = True, actor: str | None = None, memory=()) -> IngestResult:
    """One job's scanned files -> one run (or the stored identical one); job_name: name is the
    job's own (one of several jobs of the input), not the input's. events_root: its events as
    Parquet partitions there (ingest/partitioned.py), a task per rank on `runner`."""
    errors, warnings = list(errors), list(warnings)
    ranks, rank_errors, rank_warnings = assign_ranks([(s.display, s.where, lay.meta)
                                                      for s, lay in scanned])
    errors += rank_errors
    warnings += rank_warnings
    warnings += world_size_mismatch([(s.display, lay.meta) for (s, lay), r in zip(scanned, ranks) if r is not None])
    items = sorted((RankInput(s, lay, r) for (s, lay), r in zip(scanned, ranks) if r is not None),
                   key=lambda item: item.rank)
    for item in items:
        predict_timestamps(item)
    def run_name_of(kept: list[RankInput]) -> str:   # named after the inputs that loaded, not those refused
        return utf8_text(name if job_name else (name or default_name(_loaded_inputs(paths, kept) or paths)))
    run_name = run_name_of(items)
    source_text = utf8_text(" ".join(redact_url(str(p)) for p in paths))
    if events_root is not None and items:
        from analyzers.cluster import InProcess
        from .partitioned import write_partitioned_job

        result = write_partitioned_job(con, items, run_name_of, source_text, errors, warnings, progress, limits,
                                       events_root, runner or InProcess(), prepared, restore_trashed, actor)
        if result.run_id and memory:      # attached after the events' commit (files already there skipped)
            _attach_memory(con, result.run_id, memory, result.ranks)
        return result
    together = True
    conflicts = 0
    while items:
        run_id, full_hash = run_identity(items, [m.content_hash for m in memory])
        if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]:
            return stored_again(con, run_id, items, errors, warnings, restore_trashed, actor)
        try:
            warnings += write_run(con, items, run_id, full_hash, run_name, source_text, tmpdir, limits,
                                  together, progress, memory=memory)
        except ParseFailure as failure:
            if failure.item is None:
                together = False        # find the file DuckDB refused, one statement each
                continue
            if not next_attempt(failure):
                errors.append(FileError(failure.item.source.display, failure.message))
                items = [i for i in items if i is not failure.item]
                run_name = run_name_of(items)
            continue
        except DiskFull as full:
            return IngestResult(None, errors + [FileError(i.source.display, str(full)) for i in items], warnings)
        except (duckdb.ConstraintException, duckdb.TransactionException) as exc:
            # the same files ingested at the same time by another connection, which wrote the run
            # first (ours was rolled back): once it commits, this call reuses its run; if it
            # rolls back instead, write ours again
            if run_id not in str(exc) and "conflict" not in str(exc).lower():
                raise
            conflicts += 1
            if wait_for_run(con, run_id):
                return ingest_result(run_id, items, errors, warnings, reused=True)
            if conflicts >= _MAX_CONFLICTS:
                raise
            continue
        return ingest_result(run_id, items, errors, warnings, reused=False)
    return IngestResult(None, errors, warnings)


_MAX_CONFLICTS = 2


def _memory_of_job(memory, job_files: list[RankFile], first: bool) -> list:
    """The memory files that go with one of several jobs: those in a folder of its rank files; the
    first job also takes those in no job's folder."""
    folders = {str(Path(f.display).parent) for f in job_files}
    mine = [m for m in memory if str(Path(m.display).parent) in folders]
    return mine if mine or not first else [m for m in memory if str(Path(m.display).parent) == "."]


def _attach_memory(con: duckdb.DuckDBPyConnection, run_id: str, memory, ranks: list[int]) -> None:
    """Store memory files with an existing run, in one transaction, skipping those it has."""
    have = {row[0] for row in con.execute(
        "SELECT file_hash FROM memory_snapshots WHERE run_id = ? UNION SELECT file_name FROM memory_timeline "
        "WHERE run_id = ?", [run_id, run_id]).fetchall()}
    new = [m for m in memory if m.content_hash not in have and m.member not in have]
    if not new:
        return
    with transaction(con):
        memory_files.store(con, run_id, new, ranks)


def _memory_only_run(con: duckdb.DuckDBPyConnection, paths, name, memory, errors, warnings) -> IngestResult:
    """A run of memory files alone (snapshots, timelines, no trace): its id from their hashes."""
    run_id, full_hash = run_identity([], [m.content_hash for m in memory])
    shown = [m.display for m in memory]
    ranks = sorted({m.rank if m.rank is not None else 0 for m in memory})
    if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]:
        restore_run(con, run_id, detail="its files were ingested again")
        return IngestResult(run_id, errors, warnings, reused=True, files=shown, ranks=ranks)
    with transaction(con):
        memory_files.store(con, run_id, memory, [])
        insert_run_row(con, run_id, utf8_text(name or default_name(paths)),
                       utf8_text(" ".join(redact_url(str(p)) for p in paths)), full_hash, None)
    return IngestResult(run_id, errors, warnings, reused=False, files=shown, ranks=ranks)


def _loaded_inputs(paths: list, items: list[RankInput]) -> list:
    """The inputs that gave at least one rank file, in the order given (the run is named after
    the first of them, not after a file that failed)."""
    origins = {item.source.origin for item in items}
    return [given for given in paths if str(given) in origins]


def _drop_repeated_content(files: list[RankFile], warnings: list[FileError]) -> list[RankFile]:
    """One rank per distinct trace: the same text given twice in one call (the same file picked
    twice, a .json beside its .json.gz) would otherwise load as two identical ranks. A file not
    hashed yet (content_hash "") is kept: whoever hashes it drops it then."""
    first_by_hash: dict[str, str] = {}
    kept = []
    for source in files:
        if not source.content_hash:
            kept.append(source)
            continue
        first = first_by_hash.get(source.content_hash)
        if first is None:
            first_by_hash[source.content_hash] = source.display
            kept.append(source)
        elif first == source.display:
            warnings.append(FileError(source.display, "given twice: loaded once"))
        else:
            warnings.append(FileError(source.display, f"the same trace as {first}, which is loaded; "
                                                      "this copy is skipped"))
    return kept
