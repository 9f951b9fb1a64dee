"""Writing one run: the rank files of one job parsed into the store in one transaction (or into a
scratch store on a cluster task), with the retries a file DuckDB refuses gets. ingest.core plans
the runs; ingest.partitioned writes a run's ranks as tasks; both write through here."""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import blake3
import duckdb

from analyzers.common.model import FileError, IngestResult
from analyzers.common.progress import Progress, teller
from analyzers.store.database import transaction
from analyzers.store.runs import restore_run
from . import memory_files
from .layout import Layout
from .parse import (delete_dropped, delete_rank, insert_events, is_blank, join_parts, needs_exact, part_counts,
                    predict_exact, predict_exact_ranges, rank_counts, remove_parts, write_parts)
from .ranks import rank_columns, utf8_text, world_size
from .sources import Limits, RankFile
from analyzers.common.tempfiles import disk_full, temp_dir_failure

_CONFLICT_WAIT_S = 30.0    # how long a run another process is writing is waited for


KNOWN_SCHEMA_VERSIONS = {"1"}


# Files are parsed together in one statement up to this many bytes of events (one statement over
# many small files saves DuckDB's per-statement start-up); a larger file gets a statement of its
# own, so a long load reports progress rank by rank.
PARSE_BATCH_BYTES = 256 << 20


@dataclass
class RankInput:
    """A rank file that passed the layout scan, and how to parse it."""
    source: RankFile
    layout: Layout
    rank: int
    lenient: bool = False        # set after a strict parse failed: mistyped fields become NULL
    single_range: bool = False   # set after a multi-range parse failed: re-read as one range
    exact: bool = False          # timestamps need the text path (epoch µs with decimals)
    part_count: int = 0


class ParseFailure(Exception):
    """item None: the statement over all files failed; retry them one statement each."""

    def __init__(self, item: RankInput | None, message: str, detail: str = ""):
        super().__init__(message)
        self.item = item
        self.message = message      # for the user
        self.detail = detail        # DuckDB's own text, to choose the retry


class DiskFull(Exception):
    """DuckDB could not write the store (or its own spill files): no file of the call can load,
    and retrying file by file would only fill the disk again."""


def predict_timestamps(item: RankInput) -> None:
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


def wait_for_run(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
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
    return ingest_result(run_id, items, errors, warnings, reused=True)


def ingest_result(run_id, items, errors, warnings, reused) -> IngestResult:
    return IngestResult(run_id, errors, warnings, reused=reused,
                        files=[i.source.display for i in items], ranks=[i.rank for i in items])


EMPTY_LIST = "its traceEvents list is empty"


def events_blank(item: RankInput) -> bool:
    """True when the text between the brackets of the file's event list is only whitespace."""
    try:
        if item.source.parts:
            return all(is_blank(part, 1, os.path.getsize(part) - 1) for part in item.source.parts)
        return is_blank(item.source.path, item.layout.events_start + 1, item.layout.events_end)
    except OSError:
        return False


def next_attempt(failure: ParseFailure) -> bool:
    """After a file failed to parse: its message made plain; True when a cheaper read is left to try."""
    if events_blank(failure.item):    # DuckDB calls a list of only whitespace malformed
        failure.message, failure.detail = f"no trace events to load: {EMPTY_LIST}", ""
    return retry_cheaper(failure)


def retry_cheaper(failure: ParseFailure) -> bool:
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


def run_identity(items: list[RankInput], memory_hashes=()) -> tuple[str, str]:
    """The run's id from its files' hashes: the rank files', and the memory files' stored with them."""
    full = blake3.blake3("\n".join(sorted([*(i.source.content_hash for i in items), *memory_hashes])).encode()
                         ).hexdigest()
    return full[:12], full


def duckdb_threads(con: duckdb.DuckDBPyConnection) -> int:
    try:
        return max(1, int(con.execute("SELECT current_setting('threads')").fetchone()[0]))
    except (duckdb.Error, TypeError, ValueError):
        return os.cpu_count() or 1


def plain_duckdb_text(exc: Exception) -> str:
    """DuckDB's first line, without its error class, our temp file names or its own advice."""
    text = re.sub(r"^[A-Za-z ]*Error:\s*", "", str(exc)).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    first = re.sub(r"(in file )?\"?/[^\s\"']*\.part\.json\"?,?\s*", "", first)
    first = re.split(r"\.?\s*(?:Parse errors cannot|Try setting|Try increasing)", first)[0]
    first = re.sub(r"at byte \d+ in record/value \d+", "in the traceEvents list", first)  # offsets of our parts
    return first.strip()[:240]


def plain_duckdb_error(exc: Exception) -> str:
    return f"the JSON is malformed and could not be parsed ({plain_duckdb_text(exc)})"


def write_run(con: duckdb.DuckDBPyConnection, items: list[RankInput], run_id: str, full_hash: str,
              name: str, source: str, tmpdir: str, limits: Limits, together: bool,
              progress: Progress | None, memory=()) -> list[FileError]:
    """One transaction: every rank's events and ranks row, the memory files stored with them (memory),
    then the run row. Raises ParseFailure.

    together: all rank files in one statement (the fast way, see events.sql); else one statement
    per file, which is how a file DuckDB refuses is told apart from the others.
    """
    threads = duckdb_threads(con)
    tell = teller(progress)
    warnings: list[FileError] = []
    n = len(items)
    try:
        with transaction(con):
            # together: batches of files on one timestamp path (usually all take the same one)
            batches = parse_batches(items) if together else [[item] for item in items]
            parsed = 0
            for batch in batches:
                tell("parsing", batch[0].source.display if len(batch) == 1 else "", parsed / n,
                     done=parsed + len(batch), total=n)
                parse_rank_batch(con, run_id, batch, tmpdir, limits, threads, exact=batch[0].exact,
                       blame=batch[0] if len(batch) == 1 else None)
                parsed += len(batch)
                tell("parsed", batch[-1].source.display if len(batch) == 1 else "", parsed / n, done=parsed, total=n)
            counts = rank_counts(con, run_id)
            redo = [i for i in items
                    if not i.exact and needs_exact(i.layout.body_bytes, *counts.get(i.rank, (0, 0, 0, 0))[2:])]
            for item in redo:   # epoch-µs timestamps with decimals the sample missed: re-read from the text
                item.exact = True
                delete_rank(con, run_id, item.rank)
                parse_rank_batch(con, run_id, [item], tmpdir, limits, threads, exact=True, blame=item)
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
                    raise ParseFailure(item, f"no trace events to load: {why}")
                if dropped:
                    warnings.append(FileError(item.source.display,
                                              f"dropped {dropped} of {total} events with missing or mistyped "
                                              "fields (each needs 'ph', a numeric 'ts', and 'dur' >= 0 when ph is 'X')"))
                insert_rank_row(con, run_id, item, kept)
                tell("writing", item.source.display, index / n, done=index, total=n, rank=item.rank, rows=kept)
            if memory:
                memory_files.store(con, run_id, list(memory), [i.rank for i in items])
            insert_run_row(con, run_id, name, source, full_hash, world_size([i.layout.meta for i in items]))
    except BaseException as exc:
        if disk_full(exc):
            raise DiskFull(disk_full_message(con, exc)) from None
        raise
    return warnings


def insert_run_row(con: duckdb.DuckDBPyConnection, run_id: str, name: str, source: str, full_hash: str,
                   size: int | None) -> None:
    """The runs row of a new run (inside the caller's transaction)."""
    con.execute(
        "INSERT INTO runs (run_id, name, created_at, source, content_hash, world_size) VALUES (?, ?, ?, ?, ?, ?)",
        [run_id, name, datetime.now(timezone.utc).replace(tzinfo=None), source, full_hash, size])


def parse_batches(items: list[RankInput]) -> list[list[RankInput]]:
    """Files in rank order cut into statements: one timestamp path each, up to PARSE_BATCH_BYTES
    of events (a file larger than that alone)."""
    batches: list[list[RankInput]] = []
    for path in ([i for i in items if not i.exact], [i for i in items if i.exact]):
        batch: list[RankInput] = []
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


def disk_full_message(con: duckdb.DuckDBPyConnection, exc: BaseException) -> str:
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


def insert_rank_row(con: duckdb.DuckDBPyConnection, run_id: str, item: RankInput, n_events: int) -> None:
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
        raise ParseFailure(item, "its top-level metadata is nested too deeply to store") from None
    except (duckdb.ConversionException, duckdb.InvalidInputException, UnicodeError) as exc:
        raise ParseFailure(item, f"its top-level metadata could not be stored ({plain_duckdb_text(exc)})") from None


def parse_rank_batch(con: duckdb.DuckDBPyConnection, run_id: str, items: list[RankInput], tmpdir: str, limits: Limits,
           threads: int, exact: bool, blame: RankInput | None) -> None:
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
            raise       # not the file's fault: write_run reports the full disk
        raise ParseFailure(blame, plain_duckdb_error(exc), str(exc)) from None
    except UnicodeDecodeError:
        # DuckDB quoted the bad element cut inside a multibyte character, and its message could
        # not be decoded: a malformed element all the same, retried the cheaper ways
        raise ParseFailure(blame, "the JSON is malformed and could not be parsed (an element of the "
                                   "traceEvents list is not a valid event)", "undecodable error message") from None
    except OSError as exc:   # copying its ranges into the temp directory failed (a full disk)
        raise ParseFailure(blame, temp_dir_failure(tmpdir, exc)) from None
    finally:
        remove_parts(made)
