"""ingest_paths: rank files → one run in the store, in one transaction, or nothing at all.

Steps: sources (inputs → plain JSON files, or for inflated ones ready parse ranges, + content
hashes) → layout (where the event list is, the metadata around it) → ranks → reuse check on the content hash → one transaction that parses
every rank's events (parse.py), writes the ranks rows and the run row. A file DuckDB refuses
is retried the cheaper ways first (lenient typing, one range), else reported and the
transaction redone without it, so good files of the same call still load.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import blake3
import duckdb

from ..model import FileError, IngestResult
from ..partitions import configured_root
from ..progress import Progress, teller
from ..store import read_only_reason
from ..runs import restore_run
from .jobs import JobFile, clock_start_us, group_jobs, head_start_us, mixed_jobs_message
from .layout import Layout, LayoutError, scan_layout
from . import memory_files
from .parse import (delete_dropped, delete_rank, insert_events, is_blank, join_parts, needs_exact, part_counts,
                    predict_exact, predict_exact_ranges, rank_counts, remove_parts, write_parts)
from .ranks import assign_ranks, metadata_warnings, rank_columns, utf8_text, world_size, world_size_mismatch
from .sources import Limits, RankFile, collect, redact_url
from .tempfiles import TempDirUnusable, disk_full, ingest_temp_dir, sweep_stale_temp_dirs, temp_dir_failure

KNOWN_SCHEMA_VERSIONS = {"1"}
# Files are parsed together in one statement up to this many bytes of events (one statement over
# many small files saves DuckDB's per-statement start-up); a larger file gets a statement of its
# own, so a long load reports progress rank by rank.
PARSE_BATCH_BYTES = 256 << 20


@dataclass
class _RankInput:
    """A rank file that passed the layout scan, and how to parse it."""
    source: RankFile
    layout: Layout
    rank: int
    lenient: bool = False        # set after a strict parse failed: mistyped fields become NULL
    single_range: bool = False   # set after a multi-range parse failed: re-read as one range
    exact: bool = False          # timestamps need the text path (epoch µs with decimals)
    part_count: int = 0


class _ParseFailure(Exception):
    """item None: the statement over all files failed; retry them one statement each."""

    def __init__(self, item: _RankInput | None, message: str, detail: str = ""):
        super().__init__(message)
        self.item = item
        self.message = message      # for the user
        self.detail = detail        # DuckDB's own text, to choose the retry


def ingest_paths(con: duckdb.DuckDBPyConnection, paths, name: str | None = None,
                 progress: Progress | None = None, limits: Limits | None = None,
                 events_root: str | None = None, runner=None, restore_trashed: bool = True,
                 actor: str | None = None, confine_to: str | None = None) -> IngestResult:
    """Load the rank files of one job as one run; files of several jobs are refused, naming the
    jobs (ingest_jobs stores one run per job). See analyzers/ingest/__init__.py.
    events_root: keep the run's events as Parquet partitions there (analyzers/partitions.py), each
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


class _DiskFull(Exception):
    """DuckDB could not write the store (or its own spill files): no file of the call can load,
    and retrying file by file would only fill the disk again."""


def _ingest(con, paths, name, progress, limits, tmpdir, split: bool, events_root=None, runner=None,
            restore_trashed: bool = True, confine_to: str | None = None, pinned: list[int] | None = None,
            actor: str | None = None) -> list[IngestResult]:
    # a cluster's tasks hash plain files as they parse them: the driver reads only their heads
    defer_hash = events_root is not None and getattr(runner, "hashes_in_tasks", False)
    # allocator snapshots and memory timelines, by content: read apart, stored with the run
    memory, trace_paths, memory_in_dirs = memory_files.split_inputs(paths, limits.max_files_per_dir)
    memory_load = memory_files.read_all(memory)
    files, errors = collect(trace_paths, tmpdir, limits, teller(progress) if progress else None, threads=_threads(con),
                            defer_plain_hash=defer_hash, defer_compressed=defer_hash, confine_to=confine_to,
                            pinned=pinned, skip_files=memory_in_dirs)
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
            from .. import partitions

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
    items = sorted((_RankInput(s, lay, r) for (s, lay), r in zip(scanned, ranks) if r is not None),
                   key=lambda item: item.rank)
    for item in items:
        predict_timestamps(item)
    def run_name_of(kept: list[_RankInput]) -> str:   # named after the inputs that loaded, not those refused
        return utf8_text(name if job_name else (name or default_name(_loaded_inputs(paths, kept) or paths)))
    run_name = run_name_of(items)
    source_text = utf8_text(" ".join(redact_url(str(p)) for p in paths))
    if events_root is not None and items:
        from ..cluster import InProcess
        from .partitioned import write_partitioned_job

        result = write_partitioned_job(con, items, run_name_of, source_text, errors, warnings, progress, limits,
                                       events_root, runner or InProcess(), prepared, restore_trashed, actor)
        if result.run_id and memory:      # attached after the events' commit (files already there skipped)
            _attach_memory(con, result.run_id, memory, result.ranks)
        return result
    together = True
    conflicts = 0
    while items:
        run_id, full_hash = _run_id(items, [m.content_hash for m in memory])
        if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]:
            return stored_again(con, run_id, items, errors, warnings, restore_trashed, actor)
        try:
            warnings += _write_run(con, items, run_id, full_hash, run_name, source_text, tmpdir, limits,
                                   together, progress, memory=memory)
        except _ParseFailure as failure:
            if failure.item is None:
                together = False        # find the file DuckDB refused, one statement each
                continue
            if not next_attempt(failure):
                errors.append(FileError(failure.item.source.display, failure.message))
                items = [i for i in items if i is not failure.item]
                run_name = run_name_of(items)
            continue
        except _DiskFull as full:
            return IngestResult(None, errors + [FileError(i.source.display, str(full)) for i in items], warnings)
        except (duckdb.ConstraintException, duckdb.TransactionException) as exc:
            # the same files ingested at the same time by another connection, which wrote the run
            # first (ours was rolled back): once it commits, this call reuses its run; if it
            # rolls back instead, write ours again
            if run_id not in str(exc) and "conflict" not in str(exc).lower():
                raise
            conflicts += 1
            if _wait_for_run(con, run_id):
                return _result(run_id, items, errors, warnings, reused=True)
            if conflicts >= _MAX_CONFLICTS:
                raise
            continue
        return _result(run_id, items, errors, warnings, reused=False)
    return IngestResult(None, errors, warnings)


_MAX_CONFLICTS = 2
_CONFLICT_WAIT_S = 30.0


def predict_timestamps(item: _RankInput) -> None:
    """Set item.exact: whether its timestamps need the exact text path (a compressed file its task
    inflates is predicted there)."""
    if item.source.compressed:
        return
    try:
        if item.source.parts:
            item.exact = predict_exact_ranges(item.source.parts)
        else:
            item.exact = predict_exact(item.source.path, item.layout.events_start, item.layout.body_bytes)
    except OSError:
        pass    # the parse reports an unreadable file


def _loaded_inputs(paths: list, items: list[_RankInput]) -> list:
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


def _wait_for_run(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """True once run_id is committed by the concurrent ingest; False when it does not appear."""
    deadline = time.monotonic() + _CONFLICT_WAIT_S
    while True:
        if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def stored_again(con, run_id, items, errors, warnings, restore_trashed: bool,
                 actor: str | None = None) -> IngestResult:
    """The result for files already stored as run_id: a run in the trash comes back (the audit
    log naming actor), unless restore_trashed is False (then it stays there, no run named)."""
    if not restore_trashed and con.execute("SELECT count(*) FROM run_trash WHERE run_id = ?", [run_id]).fetchone()[0]:
        return IngestResult(None, errors, warnings)
    restore_run(con, run_id, actor=actor, detail="its files were ingested again")
    return _result(run_id, items, errors, warnings, reused=True)


def _result(run_id, items, errors, warnings, reused) -> IngestResult:
    return IngestResult(run_id, errors, warnings, reused=reused,
                        files=[i.source.display for i in items], ranks=[i.rank for i in items])


EMPTY_LIST = "its traceEvents list is empty"


def _events_blank(item: _RankInput) -> bool:
    """True when the text between the brackets of the file's event list is only whitespace."""
    try:
        if item.source.parts:
            return all(is_blank(part, 1, os.path.getsize(part) - 1) for part in item.source.parts)
        return is_blank(item.source.path, item.layout.events_start + 1, item.layout.events_end)
    except OSError:
        return False


def next_attempt(failure: _ParseFailure) -> bool:
    """After a file failed to parse: its message made plain; True when a cheaper read is left to try."""
    if _events_blank(failure.item):    # DuckDB calls a list of only whitespace malformed
        failure.message, failure.detail = f"no trace events to load: {EMPTY_LIST}", ""
    return _retry_cheaper(failure)


def _retry_cheaper(failure: _ParseFailure) -> bool:
    """Mark the next way to read a file DuckDB refused; False when none is left."""
    item = failure.item
    if not failure.detail:          # our own verdict (no usable events): final
        return False
    if "transform error" in failure.detail.lower() and not item.lenient:
        item.lenient = True         # a mistyped field: drop such events instead
        return True
    if item.part_count > 1 and not item.single_range:
        item.single_range = True    # a cut may have landed inside an event
        return True
    if not item.lenient:
        item.lenient = True
        return True
    return False


def _run_id(items: list[_RankInput], memory_hashes=()) -> tuple[str, str]:
    """The run's id from its files' hashes: the rank files', and the memory files' stored with them."""
    full = blake3.blake3("\n".join(sorted([*(i.source.content_hash for i in items), *memory_hashes])).encode()
                         ).hexdigest()
    return full[:12], full


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
    con.execute("BEGIN TRANSACTION")
    try:
        memory_files.store(con, run_id, new, ranks)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _memory_only_run(con: duckdb.DuckDBPyConnection, paths, name, memory, errors, warnings) -> IngestResult:
    """A run of memory files alone (snapshots, timelines, no trace): its id from their hashes."""
    run_id, full_hash = _run_id([], [m.content_hash for m in memory])
    shown = [m.display for m in memory]
    ranks = sorted({m.rank if m.rank is not None else 0 for m in memory})
    if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]:
        restore_run(con, run_id, detail="its files were ingested again")
        return IngestResult(run_id, errors, warnings, reused=True, files=shown, ranks=ranks)
    con.execute("BEGIN TRANSACTION")
    try:
        memory_files.store(con, run_id, memory, [])
        insert_run_row(con, run_id, utf8_text(name or default_name(paths)),
                       utf8_text(" ".join(redact_url(str(p)) for p in paths)), full_hash, None)
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass
        raise
    return IngestResult(run_id, errors, warnings, reused=False, files=shown, ranks=ranks)


def _threads(con: duckdb.DuckDBPyConnection) -> int:
    try:
        return max(1, int(con.execute("SELECT current_setting('threads')").fetchone()[0]))
    except (duckdb.Error, TypeError, ValueError):
        return os.cpu_count() or 1


def _plain_duckdb_text(exc: Exception) -> str:
    """DuckDB's first line, without its error class, our temp file names or its own advice."""
    text = re.sub(r"^[A-Za-z ]*Error:\s*", "", str(exc)).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    first = re.sub(r"(in file )?\"?/[^\s\"']*\.part\.json\"?,?\s*", "", first)
    first = re.split(r"\.?\s*(?:Parse errors cannot|Try setting|Try increasing)", first)[0]
    first = re.sub(r"at byte \d+ in record/value \d+", "in the traceEvents list", first)  # offsets of our parts
    return first.strip()[:240]


def _plain_duckdb_error(exc: Exception) -> str:
    return f"the JSON is malformed and could not be parsed ({_plain_duckdb_text(exc)})"


def _write_run(con: duckdb.DuckDBPyConnection, items: list[_RankInput], run_id: str, full_hash: str,
               name: str, source: str, tmpdir: str, limits: Limits, together: bool,
               progress: Progress | None, memory=()) -> list[FileError]:
    """One transaction: every rank's events and ranks row, then the run row. Raises _ParseFailure.

    together: all rank files in one statement (the fast way, see events.sql); else one statement
    per file, which is how a file DuckDB refuses is told apart from the others.
    """
    threads = _threads(con)
    tell = teller(progress)
    warnings: list[FileError] = []
    n = len(items)
    con.execute("BEGIN TRANSACTION")
    try:
        # together: batches of files on one timestamp path (usually all take the same one)
        batches = _parse_batches(items) if together else [[item] for item in items]
        parsed = 0
        for batch in batches:
            tell("parsing", batch[0].source.display if len(batch) == 1 else "", parsed / n,
                 done=parsed + len(batch), total=n)
            _parse(con, run_id, batch, tmpdir, limits, threads, exact=batch[0].exact,
                   blame=batch[0] if len(batch) == 1 else None)
            parsed += len(batch)
            tell("parsed", batch[-1].source.display if len(batch) == 1 else "", parsed / n, done=parsed, total=n)
        counts = rank_counts(con, run_id)
        redo = [i for i in items
                if not i.exact and needs_exact(i.layout.body_bytes, *counts.get(i.rank, (0, 0, 0, 0))[2:])]
        for item in redo:   # epoch-µs timestamps with decimals the sample missed: re-read from the text
            item.exact = True
            delete_rank(con, run_id, item.rank)
            _parse(con, run_id, [item], tmpdir, limits, threads, exact=True, blame=item)
        if redo:
            counts = rank_counts(con, run_id)
        if any(c[1] for c in counts.values()):
            delete_dropped(con, run_id)
        tell("writing", "", 0.0, done=0, total=n)
        for index, item in enumerate(items, 1):
            total, dropped = counts.get(item.rank, (0, 0, 0, 0))[:2]
            kept = total - dropped
            if kept == 0:
                why = EMPTY_LIST if total == 0 else \
                    f"none of its {total} events is usable (each needs 'ph' and a numeric 'ts')"
                raise _ParseFailure(item, f"no trace events to load: {why}")
            if dropped:
                warnings.append(FileError(item.source.display,
                                          f"dropped {dropped} of {total} events with missing or mistyped "
                                          "fields (each needs 'ph', a numeric 'ts', and 'dur' >= 0 when ph is 'X')"))
            _insert_rank_row(con, run_id, item, kept)
            tell("writing", item.source.display, index / n, done=index, total=n, rank=item.rank, rows=kept)
        if memory:
            memory_files.store(con, run_id, list(memory), [i.rank for i in items])
        insert_run_row(con, run_id, name, source, full_hash, world_size([i.layout.meta for i in items]))
        con.execute("COMMIT")
    except BaseException as exc:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass        # a failed COMMIT has ended the transaction already
        if disk_full(exc):
            raise _DiskFull(_disk_full_message(con, exc)) from None
        raise
    return warnings


def insert_run_row(con: duckdb.DuckDBPyConnection, run_id: str, name: str, source: str, full_hash: str,
                   size: int | None) -> None:
    """The runs row of a new run (inside the caller's transaction)."""
    con.execute(
        "INSERT INTO runs (run_id, name, created_at, source, content_hash, world_size) VALUES (?, ?, ?, ?, ?, ?)",
        [run_id, name, datetime.now(timezone.utc).replace(tzinfo=None), source, full_hash, size])


def _parse_batches(items: list[_RankInput]) -> list[list[_RankInput]]:
    """Files in rank order cut into statements: one timestamp path each, up to PARSE_BATCH_BYTES
    of events (a file larger than that alone)."""
    batches: list[list[_RankInput]] = []
    for path in ([i for i in items if not i.exact], [i for i in items if i.exact]):
        batch: list[_RankInput] = []
        size = 0
        for item in path:
            if batch and size + item.layout.body_bytes > PARSE_BATCH_BYTES:
                batches.append(batch)
                batch, size = [], 0
            batch.append(item)
            size += item.layout.body_bytes
        if batch:
            batches.append(batch)
    return batches


def _disk_full_message(con: duckdb.DuckDBPyConnection, exc: BaseException) -> str:
    """Which disk is full, in plain words: the store's, or that of DuckDB's spill files."""
    quoted = re.search(r'"(/[^"]+)"', str(exc))
    written = quoted.group(1) if quoted else None
    try:
        store = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()[0]
    except (duckdb.Error, TypeError):
        store = None
    folder = os.path.dirname(written or store or "") or "?"
    if store and written and os.path.dirname(os.path.abspath(written)) == os.path.dirname(os.path.abspath(store)):
        where = f"the disk holding the store {store} is full"
    else:
        where = f"the disk holding {folder} (DuckDB's temp files) is full" if written else "the disk is full"
    return (f"not loaded: {where} (DuckDB could not write {written or 'the store'}); nothing of this call "
            f"was stored; free space in {folder} and load it again")


def _insert_rank_row(con: duckdb.DuckDBPyConnection, run_id: str, item: _RankInput, n_events: int) -> None:
    """The ranks row of one file; metadata the store refuses fails that file, not the call."""
    try:
        cols = rank_columns(item.layout.meta)
        con.execute(
            "INSERT INTO ranks (run_id, rank, file_name, file_hash, schema_version, device_name, base_time_ns, "
            "distributed_info, device_properties, trace_meta, n_events) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, item.rank, utf8_text(item.source.member), item.source.content_hash, cols["schema_version"],
             cols["device_name"], cols["base_time_ns"], cols["distributed_info"], cols["device_properties"],
             cols["trace_meta"], n_events])
    except RecursionError:
        raise _ParseFailure(item, "its top-level metadata is nested too deeply to store") from None
    except (duckdb.ConversionException, duckdb.InvalidInputException, UnicodeError) as exc:
        raise _ParseFailure(item, f"its top-level metadata could not be stored ({_plain_duckdb_text(exc)})") from None


def _parse(con: duckdb.DuckDBPyConnection, run_id: str, items: list[_RankInput], tmpdir: str, limits: Limits,
           threads: int, exact: bool, blame: _RankInput | None) -> None:
    """Parse the ranges of each file in one statement: ranges cut as the file was inflated, else
    cut now (enough to keep every thread busy). The ranges made here are removed afterwards."""
    made: list[str] = []
    try:
        to_cut = [item for item in items if not item.source.parts]
        wanted = part_counts([None if item.single_range else item.layout.body_bytes for item in to_cut],
                             threads, limits.part_bytes)
        cut = write_parts([(item.source.path, item.layout, n) for item, n in zip(to_cut, wanted)], tmpdir, threads)
        made += [part for parts in cut for part in parts]
        cut_parts = dict(zip(map(id, to_cut), cut))
        rank_parts: list[tuple[int, list[str]]] = []
        for item in items:
            if not item.source.parts:
                parts = cut_parts[id(item)]
            elif item.single_range and len(item.source.parts) > 1:
                parts = [join_parts(list(item.source.parts), tmpdir)]
                made += parts
            else:
                parts = list(item.source.parts)
            item.part_count = len(parts)
            rank_parts.append((item.rank, parts))
        insert_events(con, run_id, rank_parts, exact=exact, lenient=blame is not None and blame.lenient)
    except duckdb.InterruptException:
        raise KeyboardInterrupt from None    # Ctrl-C, not a file DuckDB refused: no retry
    except duckdb.Error as exc:
        if disk_full(exc):
            raise       # not the file's fault: _write_run reports the full disk
        raise _ParseFailure(blame, _plain_duckdb_error(exc), str(exc)) from None
    except UnicodeDecodeError:
        # DuckDB quoted the bad element cut inside a multibyte character, and its message could
        # not be decoded: a malformed element all the same, retried the cheaper ways
        raise _ParseFailure(blame, "the JSON is malformed and could not be parsed (an element of the "
                                   "traceEvents list is not a valid event)", "undecodable error message") from None
    except OSError as exc:   # copying its ranges into the temp directory failed (a full disk)
        raise _ParseFailure(blame, temp_dir_failure(tmpdir, exc)) from None
    finally:
        remove_parts(made)


def default_name(paths: list) -> str:
    """The first input's base name without trace/archive suffixes; "+N" when there are more."""
    if not paths:
        return "run"
    base = Path(redact_url(str(paths[0])).rstrip("/\\")).name
    for suffix in (".json.gz", ".tar.gz", ".tgz", ".json", ".zip", ".gz", ".tar"):
        if base.lower().endswith(suffix) and len(base) > len(suffix):
            base = base[: -len(suffix)]
            break
    if base.endswith(".pt.trace"):
        base = base[: -len(".pt.trace")]
    return base + (f" (+{len(paths) - 1})" if len(paths) > 1 else "")
