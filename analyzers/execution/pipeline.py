"""Run every analysis on a stored run, cost and rank the findings, store them.

An analysis is a module in analyzers/analysis/kinds/ exposing `KIND` (its finding kind) and
`find(con, run_id, ctx) -> list[Finding]`. `ctx` (AnalysisContext) gives each the per-rank step
figures, the thresholds and whether the run has GPU activity; analyses add plain-words notes to
`ctx.notes` (e.g. "rank 3 has no GPU activity") instead of failing.

Cost is one unit everywhere: GPU time lost per step (ns), and that time as a % of the rank's mean
step time (`cost_pct`). Severity follows cost_pct (thresholds.severity: >= 20% high, >= 10%
medium, else low); findings under MIN_FINDING_PCT are dropped as noise.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any, Callable, Mapping

import duckdb

from analyzers.analysis.context import AnalysisContext, build_context
from analyzers.analysis.integrity import integrity_notes
from analyzers.analysis.kinds import analysis_modules, analysis_specs
from analyzers.analysis.metrics import rank_summary
from analyzers.analysis.passes import PassResult, analysis_pass, merge_passes
from analyzers.analysis.root_causes import (RunCosts, group_across_ranks, link_consequences, link_memory_churn,
                                            order_findings, run_costs)
from analyzers.analysis.version import analysis_version
from analyzers.analysis.whatif import whatif_after_analysis, whatif_graph
from analyzers.common import thresholds as th
from analyzers.common.model import Finding
from analyzers.common.progress import Progress, teller
from analyzers.common.safe_text import SUMMARY_LIMIT, clip
from analyzers.sql.engine import ensure_loaded, run_cache, run_ranks
from analyzers.store import partitions
from analyzers.store.database import transaction


def _unique_ids(findings: list[Finding]) -> None:
    seen: dict[str, int] = {}
    for f in findings:
        if f.finding_id in seen:
            seen[f.finding_id] += 1
            f.finding_id = f"{f.finding_id}#{seen[f.finding_id]}"
        else:
            seen[f.finding_id] = 0


def store_findings(con: duckdb.DuckDBPyConnection, run_id: str, findings: list[Finding],
                   notes: list[str] = (), costs: RunCosts | None = None) -> None:
    """Replace the run's findings, analysis notes and run-level costs (one transaction)."""
    with transaction(con):
        con.execute("DELETE FROM analysis_notes WHERE run_id = ?", [run_id])
        if notes:
            con.executemany("INSERT INTO analysis_notes VALUES (?, ?, ?)", [[run_id, i, n] for i, n in enumerate(notes)])
        con.execute("DELETE FROM findings WHERE run_id = ?", [run_id])
        if findings:
            con.executemany(
                "INSERT INTO findings (run_id, finding_id, kind, severity, rank, ranks, caused_by, position, step, "
                "stream, t_start_ns, t_end_ns, cost_ns, cost_pct, metrics, summary) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [[run_id, f.finding_id, f.kind, f.severity, f.rank, list(f.ranks), f.caused_by, position, f.step,
                  f.stream, f.t_start_ns, f.t_end_ns, f.cost_ns, f.cost_pct, json.dumps(f.metrics),
                  f.summary]
                 for position, f in enumerate(findings)])
        _carry_marks_to_root_causes(con, run_id)
        con.execute("UPDATE runs SET analysis_version = ?, analysis_summary = ?, rank_table = ? WHERE run_id = ?",
                    [analysis_version(), None if costs is None else json.dumps(costs.to_dict()),
                     None if costs is None or costs.rank_table is None else json.dumps(costs.rank_table), run_id])


def _carry_marks_to_root_causes(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Review marks made on per-rank findings ("launch_gap:r3", "launch_gap:r0:s7", as older versions
    named them) move to the finding of their cause ("launch_gap"), the newest mark winning, unless
    that finding already has its own mark: a re-analysis after an upgrade keeps the team's reviews."""
    con.execute("""
        INSERT INTO finding_marks (run_id, finding_id, status, note, updated_at)
        SELECT m.run_id, m.cause_id, arg_max(m.status, m.updated_at), arg_max(m.note, m.updated_at), max(m.updated_at)
        FROM (SELECT *, regexp_extract(finding_id, '^([A-Za-z0-9_]+):r-?\\d+', 1) AS cause_id
              FROM finding_marks WHERE run_id = $run_id) m
        WHERE m.cause_id <> ''
          AND m.cause_id IN (SELECT finding_id FROM findings WHERE run_id = $run_id)
          AND m.cause_id NOT IN (SELECT finding_id FROM finding_marks WHERE run_id = $run_id)
        GROUP BY m.run_id, m.cause_id""", {"run_id": run_id})
    con.execute("""
        DELETE FROM finding_marks
        WHERE run_id = $run_id AND regexp_matches(finding_id, '^[A-Za-z0-9_]+:r-?\\d+')""", {"run_id": run_id})


def run_analyses(con: duckdb.DuckDBPyConnection, run_id: str,
                 thresholds: Mapping[str, Any] | None = None,
                 progress: Progress | None = None) -> tuple[list[Finding], list[str]]:
    """Every analysis on the run: (findings, root causes first, each consequence after its cause;
    notes). Stores nothing. progress: told each analysis (analyzers/common/progress.py)."""
    findings, notes, _ = analyze_root_causes(con, run_id, thresholds, progress)
    return findings, notes


def analyze_root_causes(con: duckdb.DuckDBPyConnection, run_id: str,
                        thresholds: Mapping[str, Any] | None = None,
                        progress: Progress | None = None,
                        per_rank: bool = True, runner=None,
                        while_cached: Callable[[duckdb.DuckDBPyConnection], None] | None = None
                        ) -> tuple[list[Finding], list[str], RunCosts]:
    """Every analysis on the run, its per-rank findings grouped into one finding per cause
    (analyzers.analysis.root_causes), consequences linked to their cause: (findings, notes, RunCosts).
    progress: told "analysing" before each stage (the shared views, each rank's analyses, each
    analysis across ranks) and "analysed" at the end.
    per_rank: the analyses that look at one rank at a time (all but ACROSS_RANKS ones) run rank
    by rank on that rank's events (sql.engine.RunCache.only), so their cost and memory stay those of
    a one-rank run; False runs them once on the whole run (the same findings).
    runner: an analyzers.cluster executor; for a run kept as Parquet partitions, each rank's views
    and analyses are then its tasks (analyzers/execution/rank_tasks.py), the cross-rank ones run here.
    while_cached: called with the connection after the analyses, while the run's shared views are
    still cached (sql.engine.run_cache), so what it reads of them is not computed again (not called
    when a runner analyses the ranks)."""
    tell = teller(progress)
    ensure_loaded(con)
    resolved = th.resolve(thresholds)
    modules = analysis_modules()
    across = [m for m in modules if getattr(m, "ACROSS_RANKS", False)] if per_rank else []
    ranks = run_ranks(con, run_id)
    if runner is not None and per_rank and ranks and partitions.locations(con, run_id):
        from analyzers.execution.rank_tasks import analyze_on_runner

        ctx, results, integrity, rank_table = analyze_on_runner(con, run_id, resolved, ranks, modules, across,
                                                                runner, tell)
    else:
        # (rank, its analyses): a pass per rank with all but the ACROSS_RANKS analyses, then those on
        # the whole run (rank None); per_rank False: one whole-run pass with every analysis
        passes = [(rank, [m for m in modules if m not in across]) for rank in ranks] if per_rank else []
        passes += [(None, across if per_rank else modules)]
        total = 1 + sum(len(pass_modules) for _, pass_modules in passes)
        tell("analysing", "shared per-run views", 0.0, done=1, total=total)
        with run_cache(con, run_id, resolved, per_rank=per_rank) as cache:   # the shared views, computed once
            ctx = build_context(con, run_id, resolved)
            results = []
            done = 1
            for rank, pass_modules in passes:
                def told(module, _rank=rank):
                    nonlocal done
                    done += 1
                    tell("analysing", module.SPEC.title if _rank is None else f"rank {_rank}: {module.SPEC.title}",
                         (done - 1) / total, done=done, total=total)
                with contextlib.nullcontext() if rank is None else cache.only(rank):
                    # idle split by cause: none after a pass it failed on (the run then gets no split)
                    with_gaps = pass_modules is not across and ctx.has_gpu and not any(r.gap_error for r in results)
                    results.append(analysis_pass(con, run_id, ctx, pass_modules, with_gaps=with_gaps, told=told))
            integrity = integrity_notes(con, run_id, ctx.thresholds)
            rank_table = rank_summary(con, run_id)     # from the cached views, not the events again
            if while_cached is not None:
                while_cached(con)
    found, notes = merge_passes(modules, results, per_rank)
    ctx.notes.extend(notes + integrity)
    findings, notes, costs = _finish(ctx, found, results)
    return findings, notes, dataclasses.replace(costs, rank_table=rank_table)


def _finish(ctx: AnalysisContext, findings: list[Finding], results: list[PassResult]
            ) -> tuple[list[Finding], list[str], RunCosts]:
    """Root causes from the passes' findings: grouped across ranks, consequences linked, ordered;
    the run's costs. Fixes are chosen when a finding is read (analyzers.read.fixes)."""
    gap_rows = [] if any(r.gap_error for r in results) else [row for r in results for row in r.gap_rows]
    min_pct = ctx.thresholds["MIN_FINDING_PCT"]
    memory_kinds = {kind for kind, spec in analysis_specs().items() if spec.cost_unit == "memory"}
    # memory findings cost bytes (their analyses apply their own cut-offs), no step time
    findings = group_across_ranks([f for f in findings if f.kind in memory_kinds or f.cost_pct >= min_pct])
    link_memory_churn(findings)
    link_consequences(findings, ctx.thresholds["STRAGGLER_EXPLAINED_FRACTION"],
                      {kind: spec.title for kind, spec in analysis_specs().items()})
    findings = order_findings(findings)
    _unique_ids(findings)
    costs = dataclasses.replace(
        run_costs(findings, ctx.mean_step_ns, len(ctx.ranks), gap_rows,
                  {r.rank: r.steps_divisor for r in ctx.ranks.values()}, ctx.has_gpu),
        thresholds={k: v for k, v in ctx.thresholds.items() if th.DEFAULTS.get(k) != v},
        job_ranks=ctx.workload.get("job_ranks"), workload=ctx.workload.get("workload", "unknown"),
        engine=ctx.workload.get("engine"), workload_evidence=ctx.workload.get("evidence", ""),
        step_unit={k: v for k, v in ctx.step_unit.items() if k != "note"})
    job_ranks, held = ctx.workload.get("job_ranks"), len(ctx.ranks)
    if job_ranks and job_ranks > held:   # some ranks of a larger job: say how much of it a finding covers
        for f in findings:
            f.summary = clip(f"{f.summary} Seen on {len(f.ranks) or 1} of the job's {job_ranks} ranks "
                             f"(this run holds {held}).", SUMMARY_LIMIT)
    if costs.step_ms and costs.root_cause_ms > costs.step_ms * 1.001:
        ctx.notes.append(f"The findings' costs add up to {costs.root_cause_ms:.2f} ms per step, more than the "
                         f"{costs.step_ms:.2f} ms step: some of them overlap (e.g. on different ranks), so fixing "
                         f"all of them saves at most the step time.")
    return findings, ctx.notes, costs


def analyze_run(con: duckdb.DuckDBPyConnection, run_id: str,
                thresholds: Mapping[str, Any] | None = None, progress: Progress | None = None,
                runner=None, contract_of=None, store_page_tables=None) -> list[Finding]:
    """Run all analyses, replace the run's rows in `findings`, then the run's what-if replay
    (analyzers.analysis.whatif), return findings by cost (desc); progress: told each analysis stage
    (analyzers/common/progress.py); runner: see analyze_root_causes; contract_of: how the replay
    learns each finding's fixes (analyzers.read.fixes.computed_finding_contract; the caller hands
    it down, as fixes are chosen when read; None: each fix model replays its default fix);
    store_page_tables(con, run_id): called while the run's views are cached, to store the tables
    the pages open on (analyzers.read.queries.store_page_defaults; a failure there only leaves the
    pages to compute them)."""
    graph = {}      # the what-if's graph, built from the views the analyses cached (it needs no finding)

    def while_cached(cached: duckdb.DuckDBPyConnection) -> None:
        graph.update(graph=whatif_graph(cached, run_id, thresholds))
        if store_page_tables is not None:
            try:
                store_page_tables(cached, run_id)
            except (duckdb.Error, OSError, ValueError):
                pass      # the pages compute what is not stored

    findings, notes, costs = analyze_root_causes(con, run_id, thresholds, progress, runner=runner,
                                                 while_cached=while_cached)
    store_findings(con, run_id, findings, notes, costs)
    whatif_after_analysis(con, run_id, findings, costs, thresholds, contract_of, graph=graph.get("graph"))
    teller(progress)("analysed", "", 1.0, findings=len(findings))
    return findings


