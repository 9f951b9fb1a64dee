"""DuckDB parses one rank file's event list straight into `events` (SQL in events.sql).

The event list is cut at event boundaries into byte ranges, each copied (kernel-side) into its
own `[...]` file, so DuckDB's JSON reader runs one thread per range: a single rank file keeps
every core busy, and no event is ever a Python object.
"""
from __future__ import annotations

import os
import re
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb

from analyzers.store.partitions import stored_events_table
from .layout import Layout, split_points

EVENTS_SQL = Path(__file__).with_name("events.sql").read_text()
DROPPED_KIND = "__dropped__"
_MAX_OBJECT = 16 << 20   # the largest single event; the reader sizes its buffers from it, per thread
_COLUMNS = ("{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR', tid: 'VARCHAR', "
            "ts: 'DOUBLE', dur: 'DOUBLE', id: 'VARCHAR', args: 'JSON'}")
# Strict typing is ~2x faster; ignore_errors (the retry after a failure) turns a mistyped field
# or a non-object element into NULLs, so the event is dropped and counted instead.
_READ_JSON = ("read_json($parts, format = 'array', columns = " + _COLUMNS +
              f", maximum_object_size = {_MAX_OBJECT}, filename = true<lenient>)")
# The exact path reads every event once as JSON text (read_json_objects), takes the digits of ts
# from that text and the fields with json_transform: one scan, no second reader to keep row-aligned
# (a POSITIONAL JOIN of read_json and read_json_objects cost 15% more CPU and ran on one thread).
# json_transform is lenient the way read_json(ignore_errors) is: a mistyped field becomes NULL.
_FIELDS = ('{"ph": "VARCHAR", "cat": "VARCHAR", "name": "VARCHAR", "pid": "VARCHAR", "tid": "VARCHAR", '
           '"ts": "DOUBLE", "dur": "DOUBLE", "id": "VARCHAR", "args": "JSON"}')
_READ_EXACT = (f"(SELECT filename, unnest(json_transform(json, '{_FIELDS}')), "
               # the number's text (one group; split into whole µs and decimals below)
               "regexp_extract(json::VARCHAR, '\"ts\"\\s*:\\s*([0-9]+(?:\\.[0-9]*)?)', 1) AS ts_text "
               f"FROM read_json_objects($parts, format = 'array', maximum_object_size = {_MAX_OBJECT}, "
               "filename = true))")
_TS_GUARD = "WHEN ts IS NULL OR NOT isfinite(ts) OR abs(ts) >= 9.0e15 THEN NULL"
# Whole µs and the fraction apart: ts - floor(ts) is exact in float64, so the only error left is
# the parse's own, < 0.5 ns below 2^43 µs (~8.8e12 µs, 100 days: relative Kineto clocks); a
# single product ts * 1000 would add a rounding of its own and miss by 1 ns.
_TS_SPLIT = "(CAST(floor(ts) AS BIGINT) * 1000 + CAST(round((ts - floor(ts)) * 1000) AS BIGINT))"
_TS_FLOAT = f"CASE {_TS_GUARD} ELSE {_TS_SPLIT} END"
# Epoch-µs clocks (1.7e15) step by 0.25 µs in float64: there the digits of the text are used,
# when they are the same number (the regexp could meet a nested "ts" first; a negative or
# exponent-form ts does not match and keeps the float value). Integer arithmetic on the digits:
# a DECIMAL(38, 9) cast of the text cost 1.7 CPU s per GB more.
_TS_US = "TRY_CAST(split_part(ts_text, '.', 1) AS BIGINT)"
_TS_FRACTION = "split_part(ts_text, '.', 2)"   # '' when the text has none
_TS_EXACT = (f"CASE {_TS_GUARD} "
             f"WHEN abs({_TS_US} - ts) <= 2.0 "   # the whole µs vs a float within 1 µs step
             f"THEN {_TS_US} * 1000 "
             f"+ CAST(substr({_TS_FRACTION} || '000', 1, 3) AS BIGINT) "   # ns: the first 3 decimals
             f"+ CASE WHEN substr({_TS_FRACTION}, 4, 1) >= '5' THEN 1 ELSE 0 END "   # rounded by the 4th
             f"ELSE {_TS_SPLIT} END")
FLOAT_EXACT_LIMIT_NS = (1 << 43) * 1000
SMALL_BODY = 4 << 20   # below this a file with epoch-scale timestamps is always re-read exactly
# Which path a file takes is guessed from the head of its event list, so that a modern trace
# (epoch µs with decimals) is parsed once through the text path instead of float first and again
# from the text (3x the CPU). A wrong guess costs time, not exactness: the float path's result
# is still checked by rank_counts/needs_exact.
SAMPLE_BYTES = 1 << 20
_FRACTIONAL_TS = re.compile(rb'"ts"\s*:\s*-?([0-9]{13,19})\.[0-9]*[1-9]')


def events_sql(exact: bool, lenient: bool) -> str:
    """The INSERT; its placeholders are filled with the fixed fragments above."""
    source = _READ_EXACT if exact else _READ_JSON.replace("<lenient>", ", ignore_errors = true" if lenient else "")
    return EVENTS_SQL.replace("<source>", source).replace("<ts_ns>", _TS_EXACT if exact else _TS_FLOAT)


def predict_exact(path: str, events_start: int, body_bytes: int) -> bool:
    """True when the event list (its '[' at events_start in path) shows a timestamp float64
    cannot keep to the ns (>= 2^43 µs with a non-zero fraction) in SAMPLE_BYTES read at its
    start, middle and end (a trace whose first steps were written with whole µs still counts)."""
    if SAMPLE_BYTES <= 0:
        return False
    end = events_start + body_bytes + 1
    starts = sorted({events_start, max(events_start, events_start + (body_bytes - SAMPLE_BYTES) // 2),
                     max(events_start, end - SAMPLE_BYTES)})
    with open(path, "rb") as fh:
        for start in starts:
            fh.seek(start)
            if _has_fractional_epoch_ts(fh.read(min(SAMPLE_BYTES, end - start))):
                return True
    return False


def predict_exact_ranges(parts: list[str] | tuple[str, ...]) -> bool:
    """predict_exact for an event list held as range files: its start, a middle range and its end."""
    if SAMPLE_BYTES <= 0 or not parts:
        return False
    sample = bytearray()
    for part in parts:   # the start, across ranges as small as they come
        if len(sample) >= SAMPLE_BYTES:
            break
        with open(part, "rb") as fh:
            sample += fh.read(SAMPLE_BYTES - len(sample))
    if _has_fractional_epoch_ts(bytes(sample)):
        return True
    for part in dict.fromkeys((parts[len(parts) // 2], parts[-1])):
        with open(part, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - SAMPLE_BYTES))
            if _has_fractional_epoch_ts(fh.read(SAMPLE_BYTES)):
                return True
    return False


def _has_fractional_epoch_ts(sample: bytes) -> bool:
    return any(int(m.group(1)) >= FLOAT_EXACT_LIMIT_NS // 1000 for m in _FRACTIONAL_TS.finditer(sample))


def write_parts(files: list[tuple[str, Layout, int]], tmpdir: str, workers: int) -> list[list[str]]:
    """Copy each byte range of each file's event list into its own '[...]' file.

    files: (path, layout, wanted number of ranges). The copies run on `workers` threads
    (copy_file_range works in the kernel, without the GIL): 1 GB took 0.42-0.55 s on one, 0.25
    on two. Returns the part paths of each file, in order; nothing is left behind on failure.
    """
    jobs = [(index, path, start, stop)
            for index, (path, layout, wanted) in enumerate(files)
            for start, stop in split_points(path, layout, wanted)]
    made: list[str] = []
    made_lock = threading.Lock()

    def copy_one(job: tuple[int, str, int, int]) -> str:
        _, path, start, stop = job
        fd, part_path = tempfile.mkstemp(dir=tmpdir, suffix=".part.json")
        with made_lock:
            made.append(part_path)
        with os.fdopen(fd, "wb") as dst, open(path, "rb") as src:
            dst.write(b"[")
            dst.flush()
            copy_range(src.fileno(), dst.fileno(), start, stop - start)
            dst.write(b"]")
        return part_path

    out: list[list[str]] = [[] for _ in files]
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs)))) as pool:
            for (index, *_), part_path in zip(jobs, pool.map(copy_one, jobs)):
                out[index].append(part_path)
    except BaseException:
        remove_parts(made)
        raise
    return out


def part_counts(sizes: list[int | None], threads: int, part_bytes: int) -> list[int]:
    """How many ranges to cut each file into: ranges of about equal size, at most part_bytes, and
    a multiple of `threads` in all (None: the file is read as one range).

    DuckDB hands each range to the next free thread, so with 5 equal ranges on 2 threads the last
    one runs alone: 1 GB in 5 ranges parsed in 4.45 s, in 4 or 6 ranges in 3.8 s.
    """
    sizes_known = [s for s in sizes if s is not None]
    total = sum(sizes_known)
    rounds = max(1, -(-total // max(1, threads * part_bytes)))
    target = max(1.0, total / (rounds * threads))
    counts = [1 if s is None else max(1, round(s / target)) for s in sizes]
    splittable = [i for i, s in enumerate(sizes) if s is not None]
    while splittable and sum(counts) % threads:
        biggest = max(splittable, key=lambda i: sizes[i] / counts[i])   # the largest ranges get cut
        counts[biggest] += 1
    return counts


def join_parts(parts: list[str], tmpdir: str) -> str:
    """One '[...]' file holding the events of several range files, in order (the retry that
    reads a file as one range when its ranges were cut as it was inflated)."""
    fd, joined = tempfile.mkstemp(dir=tmpdir, suffix=".part.json")
    try:
        with os.fdopen(fd, "wb") as dst:
            dst.write(b"[")
            first = True
            for part in parts:
                size = os.path.getsize(part)
                if size <= 2:
                    continue                    # "[]": an empty list
                if not first:
                    dst.write(b",")
                first = False
                dst.flush()
                with open(part, "rb") as src:
                    copy_range(src.fileno(), dst.fileno(), 1, size - 2)   # inside its brackets
            dst.write(b"]")
    except BaseException:
        remove_parts([joined])
        raise
    return joined


def is_blank(path: str, start: int, stop: int) -> bool:
    """True when bytes [start, stop) of the file are only JSON whitespace (read in chunks: only
    a failed parse asks, so the fast path never pays for it)."""
    with open(path, "rb") as fh:
        fh.seek(start)
        while start < stop:
            chunk = fh.read(min(8 << 20, stop - start))
            if not chunk:
                break
            if chunk.translate(None, b" \t\r\n"):
                return False
            start += len(chunk)
    return True


def remove_parts(parts: list[str]) -> None:
    for part in parts:
        try:
            os.unlink(part)
        except OSError:
            pass


def copy_range(src_fd: int, dst_fd: int, offset: int, count: int) -> None:
    while count > 0:
        try:
            done = os.copy_file_range(src_fd, dst_fd, count, offset_src=offset)
        except OSError:
            done = 0
        if done <= 0:   # not supported by this filesystem: plain read/write
            data = os.pread(src_fd, min(count, 8 << 20), offset)
            if not data:
                raise OSError("the file ended while it was being read")
            done = os.write(dst_fd, data)
        offset += done
        count -= done


def insert_events(con: duckdb.DuckDBPyConnection, run_id: str, rank_parts: list[tuple[int, list[str]]],
                  exact: bool = False, lenient: bool = False) -> None:
    """Parse the parts of every (rank, parts) pair into `events`, in one statement."""
    parts = [part for _, rank_files in rank_parts for part in rank_files]
    ranks = [rank for rank, rank_files in rank_parts for _ in rank_files]
    con.execute(events_sql(exact, lenient).replace("<events_table>", stored_events_table(con)),
                {"run_id": run_id, "parts": parts, "ranks": ranks})


def rank_counts(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[int, tuple[int, int, int, int]]:
    """Per rank: (array elements, dropped elements, epoch-scale timestamps, those with a fraction).

    Integer-µs traces (2021 schema) and relative clocks (< 2^43 µs) are exact through float64.
    At epoch scale a fractional text shows up as ts_ns not a multiple of 1000 in 3 cases of 4,
    so in a file above SMALL_BODY (thousands of events) fractions cannot all hide; smaller files
    with epoch-scale timestamps are simply re-read through the exact text path.
    """
    rows = con.execute(
        "SELECT rank, count(*), count(*) FILTER (kind = ?), count(*) FILTER (abs(ts_ns) >= ?), "
        f"count(*) FILTER (abs(ts_ns) >= ? AND ts_ns % 1000 <> 0) FROM {stored_events_table(con)} WHERE run_id = ? "
        "GROUP BY rank",
        [DROPPED_KIND, FLOAT_EXACT_LIMIT_NS, FLOAT_EXACT_LIMIT_NS, run_id]).fetchall()
    return {row[0]: tuple(row[1:]) for row in rows}


def needs_exact(body_bytes: int, epoch_ts: int, fractional_ts: int) -> bool:
    return fractional_ts > 0 or (epoch_ts > 0 and body_bytes < SMALL_BODY)


def delete_rank(con: duckdb.DuckDBPyConnection, run_id: str, rank: int) -> None:
    con.execute(f"DELETE FROM {stored_events_table(con)} WHERE run_id = ? AND rank = ?", [run_id, rank])


def delete_dropped(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    con.execute(f"DELETE FROM {stored_events_table(con)} WHERE run_id = ? AND kind = ?", [run_id, DROPPED_KIND])
