"""One package per finding kind (analyzers/analysis/kinds/<kind>/): its SQL (<kind>.sql) and an
__init__.py declaring SPEC (an AnalysisSpec: kind, title, evidence chart, metric keys) and
`find(con, run_id, ctx) -> list[Finding]`; analyzers.execution.pipeline.analyze_run discovers and runs them.

Packages keep analysis logic in SQL and only turn rows into Findings; the helpers here are the
shared bits of that, and analysis_specs() is the one list of kinds (the registry, the CLI and
the app derive theirs from it).
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Sequence

import duckdb

from analyzers.common.model import AnalysisSpec


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
    """gap_causes(run) rows (idle time per rank and cause; lib/gaps.sql), cached on ctx: several
    analyses (launch_gap, host_sync, runtime_stall, dataloader_stall, h2d_stall) split the same gaps."""
    cache = getattr(ctx, "cache", None)
    key = ("gap_causes", run_id)
    if isinstance(cache, dict) and key in cache:
        return cache[key]
    rows = query(con, "SELECT * FROM gap_causes(?, ?, ?, ?) ORDER BY rank, cause",
                 [run_id, float(ctx.thresholds["CAUSE_MIN_COVER_FRACTION"]),
                  int(ctx.thresholds["RUNTIME_STALL_MIN_NS"]), int(ctx.thresholds["LONG_GAP_NS"])])
    if isinstance(cache, dict):
        cache[key] = rows
    return rows


def cause_row(rows: list[dict[str, Any]], rank: int, cause: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["rank"] == rank and r["cause"] == cause), None)


def analysis_modules() -> list[Any]:
    """Every analysis package of analyzers/analysis/kinds (one folder per finding kind, exposing SPEC
    and find), in name order."""
    package = importlib.import_module(__name__)
    modules = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or not info.ispkg:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if isinstance(getattr(module, "SPEC", None), AnalysisSpec) and callable(getattr(module, "find", None)):
            modules.append(module)
    return modules


def analysis_specs() -> dict[str, AnalysisSpec]:
    """{kind: its AnalysisSpec}, in name order: the one list of finding kinds."""
    return {module.SPEC.kind: module.SPEC for module in analysis_modules()}


def kinds_measured_without_gpu() -> frozenset[str]:
    """Kinds an analysis can cost on a trace with no GPU activity (AnalysisSpec.measured_without_gpu):
    there a kind's absence means 0, for every other kind it means "not measurable here"."""
    return frozenset(kind for kind, spec in analysis_specs().items() if spec.measured_without_gpu)
