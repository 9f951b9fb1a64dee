"""One module per analysis. Each exposes KIND (its finding kind) and
`find(con, run_id, ctx) -> list[Finding]`; analyzers.findings.analyze_run discovers and runs them.

Modules keep analysis logic in SQL (analyzers/sql/) and only turn rows into Findings; the
helpers here are the shared bits of that.
"""
from __future__ import annotations

from typing import Any, Sequence

import duckdb


def query(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Rows of a parameterised query as dicts."""
    cur = con.execute(sql, list(params))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def to_ms(ns: float | None, digits: int = 3) -> float | None:
    return None if ns is None else round(float(ns) / 1e6, digits)


def rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(float(value), digits)


def gap_causes(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> list[dict[str, Any]]:
    """gap_causes(run) rows (idle time per rank and cause; launch_gap.sql), cached on ctx: several
    analyses (launch_gap, host_sync, runtime_stall, dataloader_stall, h2d_stall) split the same gaps."""
    cache = getattr(ctx, "cache", None)
    key = ("gap_causes", run_id)
    if isinstance(cache, dict) and key in cache:
        return cache[key]
    rows = query(con, "SELECT * FROM gap_causes(?, ?, ?) ORDER BY rank, cause",
                 [run_id, float(ctx.thresholds["CAUSE_MIN_COVER_FRACTION"]),
                  int(ctx.thresholds["RUNTIME_STALL_MIN_NS"])])
    if isinstance(cache, dict):
        cache[key] = rows
    return rows


def cause_row(rows: list[dict[str, Any]], rank: int, cause: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["rank"] == rank and r["cause"] == cause), None)
