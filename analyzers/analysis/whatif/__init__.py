"""What each fix will buy: the run's dependency graph replayed as measured, after each finding's fix
alone, and after all of them (replayed together, not summed), with a greedy order (the largest
predicted saving first, then re-replay).

Predicted step times are the measured step minus the replayed saving (replay after the fix minus
the replay as measured), so a replay's own error does not move the prediction; a fix only shortens
or unblocks work, so no prediction is above the measured step.
"""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import duckdb
import numpy as np

from analyzers.common import thresholds as th
from analyzers.common.contract import computed_contract
from analyzers.analysis.whatif.critical_path import CATEGORIES, critical_path, path_segments
from analyzers.analysis.whatif.graph import RunGraph, build_run_graph
from analyzers.analysis.whatif.models import FixEffect, FixModel
from analyzers.analysis.whatif.replay import RunReplay, replay_run


def fix_model(kind: str) -> FixModel | None:
    """The fix model a finding kind declares (analysis/kinds/<kind>/whatif.py FIX_MODEL), None without one."""
    try:
        module = importlib.import_module(f"analyzers.analysis.kinds.{kind}.whatif")
    except ImportError:
        return None
    model = getattr(module, "FIX_MODEL", None)
    return model if isinstance(model, FixModel) else None


MAX_PATH_SEGMENTS = 200_000     # host/GPU stretches of the critical path kept for the Timeline


@dataclass
class WhatIf:
    run: dict[str, Any]                             # run.whatif of the CLI contract
    findings: dict[str, dict[str, Any] | None]      # finding id -> its whatif (None: no prediction)
    steps: list[dict[str, Any]] = field(default_factory=list)   # per rank and step: measured, replayed
    path_ms: dict[str, float] = field(default_factory=dict)     # critical path by category, ms per step
    path: dict[str, list] = field(default_factory=dict)         # where the path runs (path_segments, per rank)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _mean_step_ns(graph: RunGraph) -> float:
    steps = [g.step_measured_ns for g in graph.ranks if len(g.step_measured_ns)]
    return float(np.mean(np.concatenate(steps))) if steps else 0.0


def _n_steps(graph: RunGraph) -> int:
    return max((len(g.step_measured_ns) for g in graph.ranks), default=0)


def whatif_graph(con: duckdb.DuckDBPyConnection, run_id: str,
                 thresholds: Mapping[str, Any] | None = None) -> RunGraph | None:
    """The run's graph for analyse_whatif, built ahead (while the analysis's views are cached: it
    reads steps, GPU activity and the collectives' matching from there); None where building it
    fails (analyse_whatif then builds it again and its note says why)."""
    try:
        return build_run_graph(con, run_id, th.resolve(thresholds))
    except Exception:     # the replay is an addition: never the reason an analysis fails
        return None


def analyse_whatif(con: duckdb.DuckDBPyConnection, run_id: str, findings: list[Mapping[str, Any]],
                   thresholds: Mapping[str, Any] | None = None, graph: RunGraph | None = None) -> WhatIf:
    """The run's what-if: findings as the CLI contract has them (id, kind, rank, ranks, metrics, fixes);
    graph: the run's graph when built already (whatif_graph), else built here."""
    t = th.resolve(thresholds)
    if graph is None:
        graph = build_run_graph(con, run_id, t)
    started = time.perf_counter() - graph.build_seconds     # (seconds: the graph's building included)
    notes = list(graph.notes)
    if not graph.ranks or not _n_steps(graph):
        return WhatIf(run={"measured_step_ms": None, "replayed_step_ms": None, "all_fixes_step_ms": None,
                           "order": []},
                      findings={str(f["id"]): None for f in findings},
                      notes=["No step to replay: the what-if needs ProfilerStep#N ranges or iterations to infer."],
                      seconds=time.perf_counter() - started)
    base = replay_run(graph)
    notes.extend(base.notes)
    measured = _mean_step_ns(graph)
    replayed = base.mean_step_ns()
    steps, worst = _step_rows(graph, base)
    if worst > t["WHATIF_REPLAY_MAX_ERROR_PCT"]:
        notes.append(f"The replay misses a measured step by up to {worst:.1f}%: a dependency the trace does not "
                     "record (a wait on another thread, process or device) decides those steps; predictions there "
                     "are rougher.")
    paths = {g.rank: critical_path(g, r) for g, r in zip(graph.ranks, base.ranks)}
    _add_path_per_step(steps, graph, base, paths)
    path = _path_in_trace(graph, paths, notes)
    n_steps = _n_steps(graph)
    path_ms = _path_by_category(paths, n_steps, len(graph.ranks))

    def applied(g: RunGraph, fixes: list[tuple[FixModel, Mapping[str, Any]]]) -> RunGraph:
        """g with these fixes applied one after the other (each transform reads the graph the ones
        before left)."""
        for model, finding in fixes:
            effect = model.transform(g, finding, t)
            if effect is not None:
                g = effect.graph
        return g

    effects: dict[str, tuple[FixModel, Mapping[str, Any]]] = {}
    alone: dict[str, float] = {}        # finding id -> the mean replayed step after its fix alone
    out: dict[str, dict[str, Any] | None] = {}
    for f in findings:
        fid = str(f["id"])
        model = fix_model(str(f["kind"]))
        effect = None
        if model is not None and not f.get("caused_by"):
            try:
                effect = model.transform(graph, f, t)
            except Exception as exc:     # a model bug must not lose the analysis
                notes.append(f"The {f['kind']} fix model failed on this run: {exc}")
        if effect is None:
            out[fid] = None
            continue
        effects[fid] = (model, f)
        step_after = alone[fid] = replay_run(effect.graph).mean_step_ns()
        saving = max(replayed - step_after, 0.0)
        on_path = sum(paths[rank].touched_ns(hit.host, hit.gpu, hit.host_lead, hit.host_lead_cap)
                      for rank, hit in effect.touched.items() if rank in paths)
        out[fid] = {"fix": model.fix, "fix_ids": model.predicts(f),
                    "step_ms_after": round((measured - saving) / 1e6, 3),
                    "saving_ms": round(saving / 1e6, 3),
                    "on_critical_path_ms": round(on_path / max(n_steps, 1) / max(len(paths), 1) / 1e6, 3),
                    "assumptions": list(effect.assumptions)}
    # greedy: the largest saving first, then re-replay with it applied (the first round's trials are
    # the fixes alone, replayed above)
    order: list[str] = []
    fixed = graph                       # the graph with the fixes chosen so far
    left = dict(effects)
    current = replayed
    while left:
        trials = ({fid: alone[fid] for fid in left} if not order else
                  {fid: replay_run(applied(fixed, [e])).mean_step_ns() for fid, e in left.items()})
        best = min(trials, key=lambda k: (trials[k], k))
        order.append(best)
        fixed = applied(fixed, [left.pop(best)])
        current = trials[best]
        out[best]["step_ms_after_order"] = round((measured - max(replayed - current, 0.0)) / 1e6, 3)
    all_fixes = measured - max(replayed - current, 0.0)
    run = {"measured_step_ms": round(measured / 1e6, 3), "replayed_step_ms": round(replayed / 1e6, 3),
           "all_fixes_step_ms": round(all_fixes / 1e6, 3), "order": order,
           "replay_error_pct": round(100 * (replayed - measured) / measured, 2) if measured else None,
           "critical_path_ms": path_ms}
    return WhatIf(run=run, findings=out, steps=steps, path_ms=path_ms, path=path, notes=notes,
                  seconds=time.perf_counter() - started)


def _step_rows(graph: RunGraph, replay: RunReplay) -> tuple[list[dict[str, Any]], float]:
    rows, worst = [], 0.0
    for g, r in zip(graph.ranks, replay.ranks):
        for step, measured, replayed in zip(g.step_numbers.tolist(), g.step_measured_ns.tolist(), r.step_ns.tolist()):
            error = 100.0 * (replayed - measured) / measured if measured else 0.0
            worst = max(worst, abs(error))
            rows.append({"rank": g.rank, "step": step, "measured_ms": round(measured / 1e6, 3),
                         "replayed_ms": round(replayed / 1e6, 3), "error_pct": round(error, 2)})
    return rows, worst


def _add_path_per_step(rows: list[dict[str, Any]], graph: RunGraph, replay: RunReplay, paths) -> None:
    """Each step row gets its critical path by category (ms): the path's elements that end inside
    the step's replayed window, and how many GPU ops and host nodes of it lie on the path."""
    by_key = {(row["rank"], row["step"]): row for row in rows}
    for g, r in zip(graph.ranks, replay.ranks):
        path = paths[g.rank]
        starts, ends = r.h_end[g.step_start_node], r.h_end[g.step_end_node]
        for step, lo, hi in zip(g.step_numbers.tolist(), starts.tolist(), ends.tolist()):
            inside = (path.end_ns > lo) & (path.end_ns <= hi)
            totals = path.category_totals(inside)
            row = by_key.get((g.rank, step))
            if row is not None:
                row["critical_path_ms"] = {c: round(int(v) / 1e6, 3) for c, v in zip(CATEGORIES, totals) if v}
                row["path_gpu_ops"] = int((inside & path.is_gpu).sum())
                row["path_host_nodes"] = int((inside & ~path.is_gpu).sum())


def _path_in_trace(graph: RunGraph, paths, notes: list[str]) -> dict[str, list]:
    """Every rank's path_segments, with a rank column; none past MAX_PATH_SEGMENTS (the document
    stays small enough to read on every page load), which a note says."""
    out: dict[str, list] = {"rank": [], "on_gpu": [], "start_ns": [], "end_ns": [], "elements": []}
    for g in graph.ranks:
        segments = path_segments(g, paths[g.rank])
        out["rank"].extend([g.rank] * len(segments["start_ns"]))
        for key, values in segments.items():
            out[key].extend(values)
    if len(out["rank"]) > MAX_PATH_SEGMENTS:
        notes.append(f"The critical path switches between host and GPU {len(out['rank']):,} times: too many to "
                     f"keep for the Timeline (at most {MAX_PATH_SEGMENTS:,}); it shows none.")
        return {key: [] for key in out}
    return out


def _path_by_category(paths, n_steps: int, n_ranks: int) -> dict[str, float]:
    totals = dict.fromkeys(CATEGORIES, 0)
    for p in paths.values():
        for k, v in p.by_category().items():
            totals[k] += v
    divisor = max(n_steps, 1) * max(n_ranks, 1) * 1e6
    return {k: round(v / divisor, 3) for k, v in totals.items() if v}


def store_whatif(con: duckdb.DuckDBPyConnection, run_id: str, result: WhatIf) -> None:
    """Replace the run's stored what-if."""
    import json

    document = {"run": result.run, "findings": result.findings, "steps": result.steps, "notes": result.notes,
                "path": result.path, "seconds": round(result.seconds, 3)}
    con.execute("DELETE FROM whatif WHERE run_id = ?", [run_id])
    con.execute("INSERT INTO whatif VALUES (?, ?)", [run_id, json.dumps(document)])


def stored_whatif(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    """The run's stored what-if document, None when there is none (an older store or analysis)."""
    import json

    try:
        row = con.execute("SELECT result::VARCHAR FROM whatif WHERE run_id = ?", [run_id]).fetchone()
    except duckdb.CatalogException:
        return None
    return None if row is None or row[0] is None else json.loads(row[0])


def whatif_after_analysis(con: duckdb.DuckDBPyConnection, run_id: str, findings: list[Any], costs: Any,
                          thresholds: Mapping[str, Any] | None = None,
                          contract_of: Callable[[Any, Mapping[str, Any] | None], Mapping[str, Any]] | None = None,
                          graph: RunGraph | None = None) -> None:
    """analyze_run's hook: replay the run with the findings just stored, store the result; a failure
    stores a note instead of losing the analysis. contract_of: a finding and its run's costs -> the
    finding in the contract's shape with the fixes it gets (analyzers.read.fixes.computed_finding_contract,
    handed down by the caller: the analysis does not choose fixes); without it no fix is named and
    each kind's fix model replays its default fix. graph: the run's graph when built already (whatif_graph)."""
    trace = costs.to_dict() if costs is not None else None
    contracts = [(contract_of or _without_fixes)(f, trace) for f in findings]
    try:
        result = analyse_whatif(con, run_id, contracts, thresholds, graph)
    except Exception as exc:      # the replay is an addition: never the reason an analysis fails
        result = WhatIf(run={"measured_step_ms": None, "replayed_step_ms": None, "all_fixes_step_ms": None,
                             "order": []},
                        findings={c["id"]: None for c in contracts},
                        notes=[f"The what-if replay failed on this run: {exc}"])
    store_whatif(con, run_id, result)


def _without_fixes(finding: Any, trace: Mapping[str, Any] | None) -> dict[str, Any]:
    return computed_contract(finding)
