"""DuckDB parses one rank file's event list straight into `events` (SQL in events.sql).

The event list is cut at event boundaries into byte ranges, each copied (kernel-side) into its
own `[...]` file, so DuckDB's JSON reader runs one thread per range: a single rank file keeps
every core busy, and no event is ever a Python object.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import duckdb

from .layout import Layout, split_points

EVENTS_SQL = Path(__file__).with_name("events.sql").read_text()
DROPPED_KIND = "__dropped__"
_MAX_OBJECT = 16 << 20   # the largest single event; the reader sizes its buffers from it, per thread
_COLUMNS = ("{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR', tid: 'VARCHAR', "
            "ts: 'DOUBLE', dur: 'DOUBLE', id: 'VARCHAR', args: 'JSON'}")
# Strict typing is ~2x faster; ignore_errors (the retry after a failure) turns a mistyped field
# or a non-object element into NULLs, so the event is dropped and counted instead.
_READ_JSON = ("read_json($parts, format = 'array', columns = " + _COLUMNS +
              f", maximum_object_size = {_MAX_OBJECT}<lenient>)")
# The digits of ts as written, row-aligned with read_json (both scans keep the array order).
_TS_TEXT = ("(SELECT regexp_extract(json::VARCHAR, '\"ts\"\\s*:\\s*(-?[0-9][0-9.eE+-]*)', 1) AS ts_text "
            f"FROM read_json_objects($parts, format = 'array', maximum_object_size = {_MAX_OBJECT}))")
_TS_GUARD = "WHEN ts IS NULL OR NOT isfinite(ts) OR abs(ts) >= 9.0e15 THEN NULL"
# Whole µs and the fraction apart: ts - floor(ts) is exact in float64, so the only error left is
# the parse's own, < 0.5 ns below 2^43 µs (~8.8e12 µs, 100 days: relative Kineto clocks); a
# single product ts * 1000 would add a rounding of its own and miss by 1 ns.
_TS_SPLIT = "(CAST(floor(ts) AS BIGINT) * 1000 + CAST(round((ts - floor(ts)) * 1000) AS BIGINT))"
_TS_FLOAT = f"CASE {_TS_GUARD} ELSE {_TS_SPLIT} END"
# Epoch-µs clocks (1.7e15) step by 0.25 µs in float64: there the digits of the text are used,
# when they are the same number (the regexp could meet a nested "ts" first).
_TS_EXACT = (f"CASE {_TS_GUARD} "
             "WHEN abs(TRY_CAST(ts_text AS DECIMAL(38, 9)) - ts) <= 1.0 "
             "THEN TRY_CAST(TRY_CAST(ts_text AS DECIMAL(38, 9)) * 1000 AS BIGINT) "
             f"ELSE {_TS_SPLIT} END")
FLOAT_EXACT_LIMIT_NS = (1 << 43) * 1000
SMALL_BODY = 4 << 20   # below this the exact text path is used directly: it costs next to nothing


def events_sql(exact: bool, lenient: bool) -> str:
    """The INSERT for one rank file; placeholders are filled with the fixed fragments above."""
    read = _READ_JSON.replace("<lenient>", ", ignore_errors = true" if lenient else "")
    source = f"({read} POSITIONAL JOIN {_TS_TEXT})" if exact else read
    return EVENTS_SQL.replace("<source>", source).replace("<ts_ns>", _TS_EXACT if exact else _TS_FLOAT)


def write_parts(path: str, layout: Layout, tmpdir: str, parts: int) -> list[str]:
    """Copy each byte range of the event list into its own '[...]' file."""
    out: list[str] = []
    try:
        with open(path, "rb") as src:
            for start, stop in split_points(path, layout, parts):
                fd, part_path = tempfile.mkstemp(dir=tmpdir, suffix=".part.json")
                out.append(part_path)
                with os.fdopen(fd, "wb") as dst:
                    dst.write(b"[")
                    dst.flush()
                    _copy_range(src.fileno(), dst.fileno(), start, stop - start)
                    dst.write(b"]")
    except BaseException:
        remove_parts(out)
        raise
    return out


def remove_parts(parts: list[str]) -> None:
    for part in parts:
        try:
            os.unlink(part)
        except OSError:
            pass


def _copy_range(src_fd: int, dst_fd: int, offset: int, count: int) -> None:
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


def insert_events(con: duckdb.DuckDBPyConnection, run_id: str, rank: int, parts: list[str],
                  body_bytes: int, lenient: bool) -> tuple[int, int]:
    """Parse the parts into `events`; returns (array elements seen, elements dropped).

    Must run inside the caller's transaction: dropped elements are written, counted and deleted
    again, which is cheaper than a second pass to count them.
    """
    params = {"run_id": run_id, "rank": rank, "parts": parts}
    exact = body_bytes < SMALL_BODY
    total = con.execute(events_sql(exact, lenient), params).fetchone()[0]
    dropped, inexact = _check(con, run_id, rank)
    if inexact and not exact:
        con.execute("DELETE FROM events WHERE run_id = ? AND rank = ?", [run_id, rank])
        total = con.execute(events_sql(True, lenient), params).fetchone()[0]
        dropped, _ = _check(con, run_id, rank)
    if dropped:
        con.execute("DELETE FROM events WHERE run_id = ? AND rank = ? AND kind = ?", [run_id, rank, DROPPED_KIND])
    return total, dropped


def _check(con: duckdb.DuckDBPyConnection, run_id: str, rank: int) -> tuple[int, int]:
    """(dropped elements, epoch-scale timestamps with a fractional part) of one rank.

    Integer-µs traces (2021 schema) and relative clocks (< 2^43 µs) are exact through float64.
    At epoch scale a fractional text shows up as ts_ns not a multiple of 1000 in 3 cases of 4,
    so in a file above SMALL_BODY (thousands of events) fractions cannot all hide; one such
    timestamp sends the file through the exact text path.
    """
    return con.execute(
        "SELECT count(*) FILTER (kind = ?), count(*) FILTER (abs(ts_ns) >= ? AND ts_ns % 1000 <> 0) "
        "FROM events WHERE run_id = ? AND rank = ?",
        [DROPPED_KIND, FLOAT_EXACT_LIMIT_NS, run_id, rank]).fetchone()
