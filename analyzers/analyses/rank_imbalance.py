"""rank_imbalance: the rank every other rank waits for, and the time they lose to it.

The analysis is analyzers/sql/rank_imbalance.sql (collective_instances -> rank_balance ->
rank_imbalance_report, one statement); this module only turns its row into a Finding.
"""
from __future__ import annotations

import json
from typing import Any

import duckdb

from analyzers import thresholds as th
from analyzers.model import Finding
from analyzers.sqlrun import ensure_loaded

KIND = "rank_imbalance"
MEASURED_WITHOUT_GPU = True   # gloo collectives block the host, so their waits are measured on CPU traces too


def context(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> Any:
    """The framework's AnalysisContext (built here when called directly with ctx=None)."""
    if ctx is None:
        from analyzers.findings import build_context
        ctx = build_context(con, run_id)
    return ctx


def threshold(ctx: Any, name: str) -> float:
    """A named threshold (analyzers/thresholds.py), as overridden for this analysis run."""
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
    only = rows(con, "SELECT rank, has_gpu, comm_ns_per_step, mean_step_ns FROM rank_balance(?)", [run_id])
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
    if r["comm_ns_per_step"] and r["mean_step_ns"]:
        share = 100.0 * r["comm_ns_per_step"] / r["mean_step_ns"]
        where = "collective kernels" if r["has_gpu"] else "collectives (gloo blocks the host)"
        text += (f" It spends {share:.0f}% of its step time in {where}, waiting for the other ranks "
                 "included; load the other ranks' files to see who it waits for.")
    notes.append(text)


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any = None) -> list[Finding]:
    ensure_loaded(con)
    ctx = context(con, run_id, ctx)
    summary = rows(con, "SELECT * FROM rank_imbalance_report(?)", [run_id])
    if not summary or summary[0]["straggler_rank"] is None:
        _note_single_rank(con, run_id, ctx)   # fewer than two ranks to compare: say so, no finding
        return []
    s = summary[0]
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
    if shapes:
        source = "input"        # the straggler is fed differently shaped data
    elif imbalance_pct >= threshold(ctx, "RANK_IMBALANCE_WORK_PCT"):
        source = "compute"      # same shapes, more work (data-dependent compute, slower device)
    else:
        source = "stall"        # it is late without more work: a stall of its own
    worst = max(steps, key=lambda r: r["wait_ns"] or 0) if steps else None
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
        "shape_differs": bool(shapes),
        "shapes_compared": not s["point_to_point"],
        "shape_examples": [{"op": r["name"], "straggler_dims": _dims(r["straggler_dims"]),
                            "other_dims": _dims(r["other_dims"]), "calls": r["n_calls"]} for r in shapes],
    }
    work_word = "compute" if s["source"] == "gpu" else "work outside collectives"
    others = "the other rank loses" if n_waiting == 1 else f"the other {n_waiting} ranks lose"
    text = (f"Rank {straggler} is the straggler: {others} {cost_ns / 1e6:.2f} ms per step "
            f"({cost_pct:.1f}% of the step) waiting for it in collectives; its {work_word} per step "
            f"is {imbalance_pct:.1f}% above the mean.")
    held = float(s["held_cost_ns"] or 0)
    if s["source"] == "gpu" and held < 0.5 * cost_ns:
        text += (f" Only {held / 1e6:.2f} ms of that wait also holds up their hosts; the rest is hidden "
                 "behind their own host work (data loading, Python), so balancing alone wins less.")
    if shapes:
        ex = shapes[0]
        text += (f" Its inputs are shaped differently ({ex['name']}: {ex['straggler_dims']} vs "
                 f"{ex['other_dims']} elsewhere): uneven batches are a likely cause.")
    elif source == "stall":
        text += " It does no more work than the others, so it is late for another reason (see its other findings)."
    return [ctx.make(KIND, f"{KIND}:r{straggler}", rank=straggler, cost_ns=cost_ns, summary=text,
                     metrics=metrics, step=None if worst is None else worst["step"],
                     t_start_ns=s["wait_start_ns"] if worst is None else worst["start_ns"],
                     t_end_ns=s["wait_end_ns"] if worst is None else worst["end_ns"])]
