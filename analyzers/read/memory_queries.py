"""Reads of a run's memory for the report, the CLI JSON and the Memory page: plain SELECTs over
lib/memory.sql (the one definition of every figure), as lists of dicts (no pandas: the CLI's
path stays light).
"""
from __future__ import annotations

from typing import Any

import duckdb

from analyzers.sql.engine import ensure_loaded


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    ensure_loaded(con)
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def device_summaries(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """memory_device_summary rows: per rank and device."""
    return _rows(con, "SELECT * FROM memory_device_summary(?) ORDER BY rank, device_type DESC, device_id", [run_id])


def rank_memory(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[int, dict[str, Any]]:
    """{rank: ranks[].memory of the CLI JSON}: the rank's GPU (else CPU) figures first, every
    device it recorded under `devices`. Ranks without [memory] events are absent."""
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for row in device_summaries(con, run_id):
        by_rank.setdefault(row["rank"], []).append(row)
    out = {}
    for rank, rows in by_rank.items():
        devices = [_device_entry(r) for r in rows]
        out[rank] = {**devices[0], "devices": devices}
    return out


def _device_entry(r: dict[str, Any]) -> dict[str, Any]:
    total = r["device_total_bytes"]
    return {
        "device": r["device"],
        "peak_allocated_bytes": r["peak_allocated_bytes"],
        "peak_reserved_bytes": r["peak_reserved_bytes"],
        "device_total_bytes": total,
        "peak_pct_of_device": None if not total else round(100.0 * max(r["peak_reserved_bytes"] or 0,
                                                                       r["peak_allocated_bytes"] or 0) / total, 2),
        "peak_us": None if r["peak_ts_ns"] is None else r["peak_ts_ns"] / 1000.0,
        "allocations": r["allocations"], "frees": r["frees"],
        "allocated_bytes": r["allocated_bytes"], "freed_bytes": r["freed_bytes"],
        "start_allocated_bytes": r["start_allocated_bytes"], "end_allocated_bytes": r["end_allocated_bytes"],
    }


def snapshot_summaries(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """memory_snapshots[] of the CLI JSON (memory_snapshot_summary; `file` is the file's name)."""
    rows = _rows(con, "SELECT * FROM memory_snapshot_summary(?) ORDER BY snapshot_id", [run_id])
    return [{"file": r.pop("file_name"), **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}}
            for r in rows]


def memory_curve(con: duckdb.DuckDBPyConnection, run_id: str, points: int = 2000) -> list[dict[str, Any]]:
    """Allocated and reserved over time per rank and device, at most `points` per device: each
    bucket of time keeps its highest allocated and reserved (a peak never disappears)."""
    return _rows(con, """
        WITH e AS (SELECT * FROM memory_events(?)),
        span AS (SELECT rank, device, min(ts_ns) AS t0, greatest(max(ts_ns) - min(ts_ns), 1) AS width
                 FROM e GROUP BY ALL)
        SELECT e.rank, e.device, least(CAST(floor((e.ts_ns - s.t0) * ? / s.width) AS BIGINT), ? - 1) AS bucket,
               arg_max(e.ts_ns, e.total_allocated) AS ts_ns,
               max(e.total_allocated) AS allocated_bytes, max(e.total_reserved) AS reserved_bytes
        FROM e JOIN span s USING (rank, device)
        GROUP BY ALL ORDER BY e.rank, e.device, ts_ns""", [run_id, points, points])


def memory_steps(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    return _rows(con, "SELECT * FROM memory_steps(?) ORDER BY rank, device, step", [run_id])


def live_at_peak(con: duckdb.DuckDBPyConnection, run_id: str, rank: int, device: str,
                 limit: int = 50) -> list[dict[str, Any]]:
    """At the device's peak, the allocations held, by the op that made them (largest first)."""
    return _rows(con, """
        SELECT l.* FROM memory_device_summary(?) d, memory_live_at(?, d.rank, d.device_type, d.device_id, d.peak_ts_ns) l
        WHERE d.rank = ? AND d.device = ? ORDER BY l.bytes DESC, l.op LIMIT ?""",
                 [run_id, run_id, rank, device, limit])


def categories_at_peak(con: duckdb.DuckDBPyConnection, run_id: str, rank: int | None = None,
                       device: str | None = None) -> list[dict[str, Any]]:
    """At each rank's and device's peak, the live allocations by category inferred from where
    they were allocated (memory_categories_at_peak), largest first."""
    return _rows(con, "SELECT * FROM memory_categories_at_peak(?) WHERE (? IS NULL OR rank = ?) "
                      "AND (? IS NULL OR device = ?) ORDER BY rank, device, bytes DESC, category",
                 [run_id, rank, rank, device, device])


def op_stats(con: duckdb.DuckDBPyConnection, run_id: str, rank: int | None = None,
             limit: int = 200) -> list[dict[str, Any]]:
    """The per-op memory table (memory_op_stats), by allocated bytes."""
    return _rows(con, "SELECT * FROM memory_op_stats(?) WHERE ? IS NULL OR rank = ? "
                      "ORDER BY self_allocated_bytes DESC, op LIMIT ?", [run_id, rank, rank, limit])


def timeline_categories(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """export_memory_timeline files: the bytes per category at the timeline's peak."""
    return _rows(con, "SELECT * FROM memory_timeline_peak(?) ORDER BY rank, file_name, bytes DESC", [run_id])


def snapshot_segments(con: duckdb.DuckDBPyConnection, run_id: str, snapshot_id: int) -> list[dict[str, Any]]:
    """A snapshot's segments with their blocks' use: allocated (active_allocated) and free (inactive) bytes."""
    return _rows(con, """
        SELECT s.segment_index, s.device, s.address, s.total_size, s.segment_type, s.is_expandable,
               coalesce(sum(b.size) FILTER (WHERE b.state = 'active_allocated'), 0) AS allocated_bytes,
               coalesce(sum(b.size) FILTER (WHERE b.state = 'inactive'), 0) AS free_bytes,
               coalesce(max(b.size) FILTER (WHERE b.state = 'inactive'), 0) AS largest_free_bytes,
               count(b.block_index) AS blocks
        FROM memory_segments s LEFT JOIN memory_blocks b
          ON b.run_id = s.run_id AND b.snapshot_id = s.snapshot_id AND b.segment_index = s.segment_index
        WHERE s.run_id = ? AND s.snapshot_id = ?
        GROUP BY ALL ORDER BY s.total_size DESC, s.segment_index""", [run_id, snapshot_id])


def snapshot_blocks(con: duckdb.DuckDBPyConnection, run_id: str, snapshot_id: int,
                    limit: int = 5000) -> list[dict[str, Any]]:
    """A snapshot's blocks in address order (for the segment map)."""
    return _rows(con, """
        SELECT segment_index, block_index, address, size, state FROM memory_blocks
        WHERE run_id = ? AND snapshot_id = ? ORDER BY segment_index, block_index LIMIT ?""",
                 [run_id, snapshot_id, limit])


def largest_live_blocks(con: duckdb.DuckDBPyConnection, run_id: str, snapshot_id: int,
                        limit: int = 10) -> list[dict[str, Any]]:
    """The largest allocated blocks of a snapshot with the stack frames that allocated them."""
    return _rows(con, """
        SELECT segment_index, address, size, requested_size, frames::VARCHAR AS frames FROM memory_blocks
        WHERE run_id = ? AND snapshot_id = ? AND state = 'active_allocated'
        ORDER BY size DESC, address LIMIT ?""", [run_id, snapshot_id, limit])


def snapshot_oom(con: duckdb.DuckDBPyConnection, run_id: str, snapshot_id: int) -> dict[str, Any] | None:
    """The allocation that failed (the last oom entry of a snapshot's device traces), with its frames."""
    rows = _rows(con, """
        SELECT device, seq, size AS requested_bytes, device_free AS device_free_bytes, frames::VARCHAR AS frames
        FROM memory_trace WHERE run_id = ? AND snapshot_id = ? AND action = 'oom'
        ORDER BY seq DESC LIMIT 1""", [run_id, snapshot_id])
    return rows[0] if rows else None
