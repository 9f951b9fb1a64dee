"""rank_imbalance: the rank every other rank waits for, and the time they lose to it.

The analysis is analyses/rank_imbalance/rank_imbalance.sql (collective_instances -> rank_balance,
step_arrivals -> rank_imbalance_report, one statement); this module only turns its row into a
Finding. A rank late in one step only is a step outlier (a spike): a note, never the straggler.
"""
from __future__ import annotations

import json
from typing import Any

import duckdb

from analyzers.common import thresholds as th
from analyzers.common.model import AnalysisSpec, EvidenceSeries, Finding
from analyzers.sql.engine import ensure_loaded

SPEC = AnalysisSpec(
    kind="rank_imbalance",
    title="Unbalanced ranks (a straggler)",
    evidence=EvidenceSeries("compute_ms", "GPU compute per step, per rank", per_rank=True),
    metric_keys=frozenset({"collective_wait_ms_per_step", "collectives_matched",
                           "host_held_ms_per_step", "imbalance_pct", "imbalance_source",
                           "lost_ms_per_step_by_rank", "max_lost_rank", "mean_work_ms_per_step",
                           "late_rank_by_step", "late_steps", "lateness_ms", "lateness_jitter_ms",
                           "lateness_pattern", "noise_jitter_ms", "period_steps", "periodic_steps",
                           "significant_late_steps",
                           "measured_on", "ranks_compared", "shape_differs", "shape_examples",
                           "shapes_compared", "step_outliers", "steps_compared", "straggler_persistent",
                           "straggler_rank", "straggler_work_ms_per_step", "wait_ms_by_step",
                           "world_size"}),
    measured_without_gpu=True,
)
KIND = SPEC.kind
# compares ranks: runs once on the whole run, after the rank passes (findings.analyze_root_causes)
ACROSS_RANKS = True


def context(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> Any:
    """The framework's AnalysisContext (built here when called directly with ctx=None)."""
    if ctx is None:
        from analyzers.analysis.context import build_context
        ctx = build_context(con, run_id)
    return ctx


def threshold(ctx: Any, name: str) -> float:
    """A named threshold (analyzers/common/thresholds.py), as overridden for this analysis run."""
    table = getattr(ctx, "thresholds", None) or {}
    return float(table.get(name, th.DEFAULTS[name]))


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def ms(ns: float | None) -> float | None:
    return None if ns is None else round(float(ns) / 1e6, 4)


def _dims(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


def _note_single_rank(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> None:
    """One rank of a larger job: imbalance cannot be measured, but time in collectives hints at it."""
    notes = getattr(ctx, "notes", None)
    world = con.execute("SELECT world_size FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if notes is None or not world or (world[0] or 1) < 2:
        return
    only = rows(con, "SELECT rank, has_gpu, comm_ns_per_step, exposed_ns_per_step, mean_step_ns FROM rank_balance(?, ?)",
                [run_id, int(threshold(ctx, "HOST_BLOCKED_MIN_NS"))])
    if len(only) != 1:
        return
    r = only[0]
    loaded = con.execute("SELECT count(*) FROM ranks WHERE run_id = ?", [run_id]).fetchone()[0]
    if loaded > 1:   # the others are loaded, but give nothing to compare (no steps, no GPU work)
        text = (f"Only rank {r['rank']} of the {loaded} loaded ranks has steps and work to compare: rank "
                "imbalance needs two or more ranks' traces of the same steps.")
    else:
        text = (f"Only rank {r['rank']} of {world[0]} is in this run: rank imbalance needs two or more "
                "ranks' traces of the same steps.")
    # GPU: collective kernel time; gloo: the time its training thread is blocked in collectives
    in_comm_ns = r["comm_ns_per_step"] if r["has_gpu"] else r["exposed_ns_per_step"]
    if in_comm_ns and r["mean_step_ns"]:
        share = 100.0 * in_comm_ns / r["mean_step_ns"]
        where = "in collective kernels" if r["has_gpu"] else "blocked in collectives (gloo)"
        text += (f" It spends {share:.0f}% of its step time {where}, waiting for the other ranks "
                 "included; load the other ranks' files to see who it waits for.")
    notes.append(text)


def _outlier_words(outliers: list[dict[str, Any]]) -> str:
    """'step 14 (rank 2, +42.0 ms)' for each step outlier, joined."""
    return ", ".join(f"step {o['step']} (rank {o['rank']}, +{o['extra_ns'] / 1e6:.1f} ms)" for o in outliers)


def _note_step_outliers(outliers: list[dict[str, Any]], ctx: Any) -> None:
    """One note per step outlier: a spike on one rank in one step, which is not a straggler."""
    notes = getattr(ctx, "notes", None)
    if notes is None:
        return
    for o in outliers:
        notes.append(f"In step {o['step']} the other ranks waited {o['extra_ns'] / 1e6:.1f} ms longer than in the "
                     f"median step for rank {o['rank']}, in that step only: a one-off spike (a step outlier), "
                     "not a straggler; rank_imbalance leaves it out of its cost.")


def _note_noise(s: dict[str, Any], ctx: Any) -> None:
    """Lateness within the run's own jitter: no finding, the measured jitter as a note."""
    notes = getattr(ctx, "notes", None)
    if notes is None or s["jitter_ns"] is None:
        return
    beyond, by_work = s["beyond_noise_steps"] or 0, s["beyond_noise_by_work_steps"] or 0
    if beyond > by_work:
        # late beyond the jitter, but not by more work of its own: the host delayed the ranks in turn
        notes.append(f"The ranks reach their collectives apart by more than their own step-to-step jitter "
                     f"({s['jitter_ns'] / 1e6:.2f} ms, the ranks' robust sigma of their own work per step) in {beyond} of "
                     f"{s['steps_compared']} steps, but the last rank did more work of its own in only {by_work} of them "
                     "(it was held up, not busier: a loaded host delays ranks in turn): no rank imbalance above the noise.")
        return
    notes.append(f"The ranks reach their collectives apart by no more than their own step-to-step jitter "
                 f"({s['jitter_ns'] / 1e6:.2f} ms, the ranks' robust sigma of their own work per step; the last rank was "
                 f"late beyond it in {s['significant_steps'] or 0} of {s['steps_compared']} steps): no rank "
                 "imbalance above the noise.")


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any = None) -> list[Finding]:
    ensure_loaded(con)
    ctx = context(con, run_id, ctx)
    summary = rows(con, "SELECT * FROM rank_imbalance_report(?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   [run_id, int(threshold(ctx, "HOST_BLOCKED_MIN_NS")), threshold(ctx, "STRAGGLER_MIN_STEP_SHARE"),
                    threshold(ctx, "STRAGGLER_MIN_LATENESS_SIGMAS"), threshold(ctx, "STEP_OUTLIER_SIGMAS"),
                    threshold(ctx, "MIN_FINDING_PCT") / 100.0,    # the reporting floor, as a fraction
                    threshold(ctx, "RANK_LATENESS_MIN_STEP_FRACTION"), threshold(ctx, "PERIODIC_MIN_PHASE_SHARE"),
                    threshold(ctx, "MOVING_LATENESS_MIN_WORK_SHARE")])
    if not summary or summary[0]["straggler_rank"] is None:
        _note_single_rank(con, run_id, ctx)   # fewer than two ranks to compare: say so, no finding
        return []
    s = summary[0]
    _note_step_outliers(s["outliers"], ctx)
    if s["pattern"] == "noise":
        _note_noise(s, ctx)
        return []
    straggler = int(s["straggler_rank"])
    cost_ns = float(s["cost_ns"] or 0)
    cost_pct = ctx.cost_pct(straggler, cost_ns)
    if cost_ns <= 0 or cost_pct < threshold(ctx, "MIN_FINDING_PCT"):
        return []

    steps = s["steps"]
    shapes: list[dict[str, Any]] = []
    if not s["point_to_point"]:
        # Shapes only mean something where every rank runs the same program (data parallel);
        # pipeline stages (send/recv) run different layers with different shapes by design.
        shapes = rows(con, "SELECT name, straggler_dims, other_dims, n_calls FROM rank_shape_differences(?, ?) "
                           "ORDER BY n_calls DESC, name, straggler_dims LIMIT 5", [run_id, straggler])
    world = con.execute("SELECT world_size FROM runs WHERE run_id = ?", [run_id]).fetchone()

    imbalance_pct = float(s["imbalance_pct"] or 0.0)
    moving = s["pattern"] == "moving"       # the rank waited for changes from step to step
    periodic = s["pattern"] == "periodic"   # one rank, every k-th step
    if periodic:
        # extra work on one rank every k steps (eval, checkpoint, logging): its own shapes (an eval
        # batch) differ, which is no uneven split of the training data
        source = "periodic"
    elif shapes:
        source = "input"        # the straggler is fed differently shaped data
    elif moving or imbalance_pct >= threshold(ctx, "RANK_IMBALANCE_WORK_PCT"):
        # moving: each step's late rank has that step's extra work; averages over steps hide it
        source = "compute"      # same shapes, more work (data-dependent compute, slower device)
    else:
        source = "stall"        # it is late without more work: a stall of its own
    ordinary = [r for r in steps if not r["outlier"]]
    worst = max(ordinary, key=lambda r: r["wait_ns"] or 0) if ordinary else None
    n_waiting = int(s["n_ranks"]) - 1

    metrics: dict[str, Any] = {
        "straggler_rank": straggler,
        "world_size": world[0] if world else None,
        "ranks_compared": int(s["n_ranks"]),
        "imbalance_pct": round(imbalance_pct, 3),
        "imbalance_source": source,
        "straggler_work_ms_per_step": ms(s["straggler_work_ns"]),
        "mean_work_ms_per_step": ms(s["mean_work_ns"]),
        "lost_ms_per_step_by_rank": {str(r["rank"]): ms(r["lost_ns"]) for r in s["lost_by_rank"]},
        "max_lost_rank": s["max_lost_rank"],
        "collective_wait_ms_per_step": ms(s["wait_ns_per_step"]),
        "host_held_ms_per_step": ms(s["held_cost_ns"]),
        "collectives_matched": bool(s["matched"]),
        "measured_on": s["source"],
        "wait_ms_by_step": {str(r["step"]): ms(r["wait_ns"]) for r in steps},
        "late_rank_by_step": {str(r["step"]): r["late_rank"] for r in steps},
        "straggler_persistent": s["persistent"],
        "late_steps": s["late_steps"],
        "steps_compared": s["steps_compared"],
        "lateness_ms": ms(s["lateness_ns"]),
        "lateness_jitter_ms": ms(s["lateness_sigma_ns"]),
        "noise_jitter_ms": ms(s["jitter_ns"]),
        "lateness_pattern": s["pattern"],
        "significant_late_steps": s["significant_steps"],
        "period_steps": s["period"],
        "periodic_steps": list(s["periodic_steps"] or []),
        "step_outliers": [{"step": o["step"], "rank": o["rank"], "extra_ms": ms(o["extra_ns"])}
                          for o in s["outliers"]],
        "shape_differs": bool(shapes),
        "shapes_compared": not s["point_to_point"],
        "shape_examples": [{"op": r["name"], "straggler_dims": _dims(r["straggler_dims"]),
                            "other_dims": _dims(r["other_dims"]), "calls": r["n_calls"]} for r in shapes],
    }
    work_word = "compute" if s["source"] == "gpu" else "work outside collectives"
    others = "the other rank loses" if n_waiting == 1 else f"the other {n_waiting} ranks lose"
    if moving:
        cause = ("uneven batches (the ranks' input shapes differ)" if shapes else
                 "the work differs across ranks from step to step (the input shapes do not: data-dependent "
                 "compute, or the host)" if not s["point_to_point"] else "the work differs across ranks from step to step")
        if s["late_steps"] > threshold(ctx, "STRAGGLER_MIN_STEP_SHARE") * s["steps_compared"]:
            # mostly the same rank, by a lateness too uneven to call it a persistent straggler
            who = (f"Rank {straggler} was last in {s['late_steps']} of {s['steps_compared']} steps, late by an "
                   f"amount that swings from step to step ({ms(s['lateness_ns']):.2f} ms at the median, robust "
                   f"sigma {ms(s['lateness_sigma_ns']):.2f} ms)")
        else:
            who = (f"No rank is a persistent straggler: the rank the others wait for changes from step to step "
                   f"(rank {straggler} in {s['late_steps']} of {s['steps_compared']} steps)")
        text = (f"{who}; the last rank was later than the ranks' step-to-step jitter "
                f"({ms(s['jitter_ns']):.2f} ms) in most steps, and {others} {cost_ns / 1e6:.2f} ms per "
                f"step ({cost_pct:.1f}% of the step) waiting in collectives: {cause}.")
    elif periodic:
        late = ", ".join(str(x) for x in s["periodic_steps"])
        text = (f"Periodic extra work on rank {straggler} every {s['period']} steps (steps {late}): {others} "
                f"{cost_ns / 1e6:.2f} ms per step on average ({cost_pct:.1f}% of the step) waiting for it in "
                "collectives, in those steps only (an evaluation, a checkpoint or logging on one rank). Spread "
                "that work over the ranks or make it asynchronous (torch.distributed.checkpoint.async_save).")
    else:
        text = (f"Rank {straggler} is the straggler: {others} {cost_ns / 1e6:.2f} ms per step "
                f"({cost_pct:.1f}% of the step) waiting for it in collectives; its {work_word} per step "
                f"is {imbalance_pct:.1f}% above the mean.")
        if s["late_steps"] is not None:
            text += (f" It was last in {s['late_steps']} of {s['steps_compared']} steps, "
                     f"{ms(s['lateness_ns']):.2f} ms late at the median (the ranks' jitter: "
                     f"{ms(s['jitter_ns']):.2f} ms).")
    if s["outliers"]:
        text += f" Left out of this cost as one-off spikes (step outliers): {_outlier_words(s['outliers'])}."
    held = float(s["held_cost_ns"] or 0)
    if s["source"] == "gpu" and held < threshold(ctx, "HELD_WAIT_MIN_FRACTION") * cost_ns:
        text += (f" Only {held / 1e6:.2f} ms of that wait also holds up their hosts; the rest is hidden "
                 "behind their own host work (data loading, Python), so balancing alone wins less.")
    if shapes and not periodic:
        ex = shapes[0]
        text += (f" Its inputs are shaped differently ({ex['name']}: {ex['straggler_dims']} vs "
                 f"{ex['other_dims']} elsewhere): uneven batches are a likely cause.")
    elif source == "stall" and not moving:
        text += " It does no more work than the others, so it is late for another reason (see its other findings)."
    elif source == "compute" and not moving and not periodic and not s["point_to_point"]:
        text += (" Its inputs are shaped like the others': one rank is slower at the same work; look at that "
                 "host (other processes, CPU or GPU throttling, a slower device).")
    return [ctx.make(KIND, f"{KIND}:r{straggler}", rank=straggler, cost_ns=cost_ns, summary=text,
                     metrics=metrics, step=None if worst is None else worst["step"],
                     t_start_ns=s["wait_start_ns"] if worst is None else worst["start_ns"],
                     t_end_ns=s["wait_end_ns"] if worst is None else worst["end_ns"])]
