"""One analysis pass: a set of analyses run on what a connection shows of a run (one rank's
events, or the whole run), and how the passes' findings and notes are merged."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import duckdb

from analyzers.analysis.context import AnalysisContext
from analyzers.analysis.kinds import gap_causes
from analyzers.common.model import Finding


@dataclass
class PassResult:
    """What one analysis pass (one rank's analyses, or those across ranks) found."""
    found: dict[str, list[Finding]]     # by kind, in analysis order
    noted: dict[str, list[str]]
    gap_rows: list[dict[str, Any]] = field(default_factory=list)   # idle time by cause (gap_causes)
    gap_error: str | None = None
    seconds: float = 0.0
    integrity_rows: dict[str, list[dict[str, Any]]] | None = None   # a rank task's integrity.RANK_CONDITIONS rows


def analysis_pass(con: duckdb.DuckDBPyConnection, run_id: str, ctx: AnalysisContext, modules: list[Any],
                  with_gaps: bool, told=None) -> PassResult:
    """Run `modules` on what `con` shows of the run (one rank inside RunCache.only, on a cluster
    worker, or the whole run); with_gaps: also split its GPU idle time by cause."""
    import time

    started = time.perf_counter()
    shared: dict[Any, Any] = {}     # query results the analyses of one pass share
    result = PassResult({m.SPEC.kind: [] for m in modules}, {m.SPEC.kind: [] for m in modules})
    for module in modules:
        if told:
            told(module)
        pass_ctx = dataclasses.replace(ctx, notes=[], cache=shared)
        try:
            result.found[module.SPEC.kind].extend(module.find(con, run_id, pass_ctx))
        except Exception as exc:  # one broken analysis must not hide the others' findings
            pass_ctx.notes.append(f"The {module.SPEC.kind} analysis failed on this run: {exc}")
        result.noted[module.SPEC.kind].extend(pass_ctx.notes)
    if with_gaps:
        try:      # the idle time by cause, for run_costs
            result.gap_rows = gap_causes(con, run_id, dataclasses.replace(ctx, cache=shared))
        except duckdb.Error as exc:    # costs that cannot be split by cause: no "unexplained idle" figure
            result.gap_error = str(exc)
    result.seconds = time.perf_counter() - started
    return result


def merge_passes(modules: list[Any], results: list[PassResult], per_rank: bool) -> tuple[list[Finding], list[str]]:
    """(the passes' findings, each analysis' in pass order; their notes)."""
    found: dict[str, list[Finding]] = {m.SPEC.kind: [] for m in modules}
    noted: dict[str, list[str]] = {m.SPEC.kind: [] for m in modules}
    for result in results:
        for kind, rows in result.found.items():
            found[kind].extend(rows)
        for kind, rows in result.noted.items():
            noted[kind].extend(rows)
    notes: list[str] = []
    for kind in noted:       # a note several rank passes made, once
        notes.extend(dict.fromkeys(noted[kind]) if per_rank else noted[kind])
    gap_errors = [r.gap_error for r in results if r.gap_error]
    if gap_errors:
        notes.append(f"GPU idle time could not be split by cause on this run: {gap_errors[0]}")
    return [f for kind in found for f in found[kind]], notes


