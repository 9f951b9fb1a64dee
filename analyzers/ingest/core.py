"""ingest_paths: rank files → one run in the store, in one transaction, or nothing at all.

Steps: sources (inputs → plain JSON files, or for inflated ones ready parse ranges, + content
hashes) → layout (where the event list is, the metadata around it) → ranks → reuse check on the content hash → one transaction that parses
every rank's events (parse.py), writes the ranks rows and the run row. A file DuckDB refuses
is retried the cheaper ways first (lenient typing, one range), else reported and the
transaction redone without it, so good files of the same call still load.
"""
from __future__ import annotations

import os

import duckdb

from analyzers.common.model import FileError, IngestResult
from analyzers.common.progress import Progress, teller
from analyzers.store.database import read_only_reason
from analyzers.store.partitions import configured_root
from analyzers.store.runs import restore_run
from .jobs import JobFile, clock_start_us, group_jobs, mixed_jobs_message
from .layout import head_start_us
from .layout import Layout, LayoutError, scan_layout
from .ranks import assign_ranks, metadata_warnings, utf8_text, world_size_mismatch
from .sources import Limits, RankFile, collect, default_name, redact_url
from .tempfiles import TempDirUnusable, ingest_temp_dir, sweep_stale_temp_dirs
from .run_writer import (DiskFull, KNOWN_SCHEMA_VERSIONS, ParseFailure, RankInput, duckdb_threads, ingest_result,
                         next_attempt, predict_timestamps, run_identity, wait_for_run, write_run)



def ingest_paths(con: duckdb.DuckDBPyConnection, paths, name: str | None = None,
                 progress: Progress | None = None, limits: Limits | None = None,
                 events_root: str | None = None, runner=None) -> IngestResult:
    """Load the rank files of one job as one run; files of several jobs are refused, naming the
    jobs (ingest_jobs stores one run per job). See analyzers/ingest/__init__.py.
    events_root: keep the run's events as Parquet partitions there (analyzers/store/partitions.py), each
    rank parsed as a task of `runner` (analyzers/cluster.py; default: in this process)."""
    return _ingest_call(con, paths, name, progress, limits, split=False, events_root=events_root,
                        runner=runner)[0]


def ingest_jobs(con: duckdb.DuckDBPyConnection, paths, name: str | None = None,
                progress: Progress | None = None, limits: Limits | None = None,
                events_root: str | None = None, runner=None) -> list[IngestResult]:
    """Load the rank files given as one run per job they come from (analyzers/ingest/jobs.py):
    usually one; for a parent folder of unrelated jobs one each, named after its folder (after
    `name` when given). Files that fail, and warnings about the input, come with the first."""
    return _ingest_call(con, paths, name, progress, limits, split=True, events_root=events_root, runner=runner)


def _ingest_call(con, paths, name, progress, limits, split: bool, events_root: str | None = None,
                 runner=None) -> list[IngestResult]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    limits = limits or Limits()
    events_root = events_root or configured_root()
    refused = read_only_reason(con)
    if refused:
        return [IngestResult(None, [FileError(str(p), f"not loaded: {refused}") for p in paths])]
    sweep_stale_temp_dirs()
    try:
        with ingest_temp_dir() as tmpdir:
            return _ingest(con, paths, name, progress, limits, tmpdir, split, events_root, runner)
    except TempDirUnusable as exc:
        return [IngestResult(None, [FileError(str(p), exc.message) for p in paths])]


def _ingest(con, paths, name, progress, limits, tmpdir, split: bool, events_root=None, runner=None) -> list[IngestResult]:
    # a cluster's tasks hash plain files as they parse them: the driver reads only their heads
    defer_hash = events_root is not None and getattr(runner, "hashes_in_tasks", False)
    files, errors = collect(paths, tmpdir, limits, teller(progress) if progress else None, threads=duckdb_threads(con),
                            defer_plain_hash=defer_hash, defer_compressed=defer_hash)
    warnings: list[FileError] = []
    prepared, staging = {}, None
    if defer_hash:      # the tasks parse (hash, inflate) those files first; the plan follows from them
        from .partitioned import parse_before_planning

        files, prepared, staging = parse_before_planning(files, errors, progress, limits, events_root, runner)
    try:
        return _plan_and_write(con, paths, name, progress, limits, tmpdir, split, events_root, runner, files, errors,
                               warnings, prepared)
    finally:
        if staging is not None:
            from analyzers.store import partitions

            partitions.remove([staging])     # what no run took (copies, other jobs' files, failures)


def _plan_and_write(con, paths, name, progress, limits, tmpdir, split, events_root, runner, files, errors,
                    warnings, prepared) -> list[IngestResult]:
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
    if len(jobs) > 1 and not split:
        return [IngestResult(None, errors + [FileError(" ".join(str(p) for p in paths), mixed_jobs_message(jobs))],
                             warnings)]
    if len(jobs) <= 1:
        return [_ingest_job(con, paths, scanned, name, progress, limits, tmpdir, errors, warnings,
                            events_root=events_root, runner=runner, prepared=prepared)]
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
                                   job_name=True, events_root=events_root, runner=runner, prepared=prepared))
    return results


def _ingest_job(con, paths, scanned: list[tuple[RankFile, Layout]], name, progress, limits, tmpdir,
                errors: list[FileError], warnings: list[FileError], job_name: bool = False,
                events_root: str | None = None, runner=None, prepared=None) -> IngestResult:
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
    run_name = utf8_text(name if job_name else (name or default_name(_loaded_inputs(paths, items) or paths)))
    source_text = utf8_text(" ".join(redact_url(str(p)) for p in paths))
    if events_root is not None and items:
        from analyzers.cluster import InProcess
        from .partitioned import write_partitioned_job

        return write_partitioned_job(con, items, run_name, source_text, errors, warnings, progress, limits,
                                     events_root, runner or InProcess(), prepared)
    together = True
    conflicts = 0
    while items:
        run_id, full_hash = run_identity(items)
        if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]:
            restore_run(con, run_id, detail="its files were ingested again")   # a trashed run comes back
            return ingest_result(run_id, items, errors, warnings, reused=True)
        try:
            warnings += write_run(con, items, run_id, full_hash, run_name, source_text, tmpdir, limits,
                                   together, progress)
        except ParseFailure as failure:
            if failure.item is None:
                together = False        # find the file DuckDB refused, one statement each
                continue
            if not next_attempt(failure):
                errors.append(FileError(failure.item.source.display, failure.message))
                items = [i for i in items if i is not failure.item]
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
