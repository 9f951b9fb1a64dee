"""untraced_host_time: the step spends time outside every profiled op: Python between ops (inline
tokenisation or augmentation, logging, metric bookkeeping), blocking I/O, sleeps.

The profiler records ops, annotations and runtime calls; a stretch of a step in which no thread of
the process is inside any of them (lib/host_time.sql, holes of UNTRACED_MIN_HOLE_NS or more) is
time the profile cannot attribute to an op; holes count where they recur (between the same two spans
in at least half of the steps): a busy machine descheduling the process opens them at random places.
Cost: on a rank with GPU activity, the GPU idle in
gaps such holes mostly cover (lib/gaps.sql, cause 'untraced'; not counted in launch_gap); on a
CPU-only rank, the untraced time itself. Per step, inside the rank's steps; at least
UNTRACED_MIN_PCT of the step, in the mean and in the median step (holes in a few steps only, a
busy machine descheduling the process, are no cause). Evidence: the longest hole, the spans around it and, with
with_stack, the Python frames inside it.
"""
from __future__ import annotations

from typing import Any

import duckdb

from analyzers.analysis.kinds import cause_row, gap_causes, query, rounded, to_ms
from analyzers.common.model import AnalysisSpec, EvidenceSeries, Finding

SPEC = AnalysisSpec(
    kind="untraced_host_time",
    title="The step spends host time outside every profiled op",
    evidence=EvidenceSeries("idle_ms", "GPU idle per step, every cause",
                            "This finding counts {idle_ms_per_step:.2f} ms/step of it: the gaps the process spent outside every profiled op."),
    metric_keys=frozenset({"gpu", "holes_per_step", "idle_ms_per_step", "longest_hole_ms", "before_op",
                           "after_op", "python_frames", "step_time_ms", "steps_with_holes", "steps_compared",
                           "untraced_ms_per_step", "untraced_pct_of_step"}),
    measured_without_gpu=True,
    gap_cause="untraced",
)
KIND = SPEC.kind

_HOLES_SQL = """
    WITH holes AS (
        SELECT * FROM untraced_host_time(?, ?) WHERE recurring
    ), per_step AS (
        -- every step, those without holes too: a hole in one step (the process descheduled by a
        -- busy machine, a one-off) moves the mean, not the median
        SELECT s.rank, s.step, coalesce(sum(h.dur_ns), 0) AS ns
        FROM steps(?) s LEFT JOIN holes h ON h.rank = s.rank AND h.step = s.step
        GROUP BY ALL
    ), typical AS (
        SELECT rank, median(ns) AS median_step_ns, count(*) AS n_steps FROM per_step GROUP BY rank
    )
    SELECT h.rank, count(*) AS holes, sum(h.dur_ns) AS untraced_ns, max(h.dur_ns) AS longest_ns,
           any_value(t.median_step_ns) AS median_step_ns, any_value(t.n_steps) AS n_steps,
           list(DISTINCT h.step ORDER BY h.step) AS hole_steps,
           arg_max(h.step, (h.dur_ns, -h.start_ns)) AS worst_step,
           arg_max(h.start_ns, (h.dur_ns, -h.start_ns)) AS worst_start_ns,
           arg_max(h.end_ns, (h.dur_ns, -h.start_ns)) AS worst_end_ns,
           arg_max(h.before_name, (h.dur_ns, -h.start_ns)) AS before_name,
           arg_max(h.after_name, (h.dur_ns, -h.start_ns)) AS after_name
    FROM holes h JOIN typical t ON t.rank = h.rank
    GROUP BY h.rank
"""

# with_stack traces: the Python frames inside a rank's longest hole that hold at least half of it,
# innermost (shortest) first: the outer ones (the training loop, main) hold all of it
_FRAMES_SQL = """
    SELECT name, min(dur_ns) AS frame_ns
    FROM events
    WHERE run_id = ? AND rank = ? AND kind = 'python_function' AND dur_ns > 0
      AND ts_ns < ? AND ts_ns + dur_ns > ?
    GROUP BY name
    HAVING sum(least(ts_ns + dur_ns, ?) - greatest(ts_ns, ?)) >= 0.5 * ?
    ORDER BY frame_ns, name
    LIMIT 3
"""


def _frames(con: duckdb.DuckDBPyConnection, run_id: str, rank: int, start_ns: int, end_ns: int) -> list[str]:
    rows = query(con, _FRAMES_SQL, [run_id, rank, end_ns, start_ns, end_ns, start_ns, end_ns - start_ns])
    return [r["name"] for r in rows]


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> list[Finding]:
    holes = {r["rank"]: r for r in query(con, _HOLES_SQL, [run_id, int(ctx.thresholds["UNTRACED_MIN_HOLE_NS"]), run_id])}
    if not holes:
        return []
    causes = gap_causes(con, run_id, ctx) if ctx.has_gpu else []
    findings = []
    for rank, h in sorted(holes.items()):
        info = ctx.ranks.get(rank)
        if info is None:
            continue
        per_step = info.steps_divisor
        untraced_ns = h["untraced_ns"] / per_step
        if info.has_gpu:
            row = cause_row(causes, rank, SPEC.gap_cause)
            if row is None:
                continue    # the GPU had queued work through every hole: nothing lost
            cost_ns = row["idle_ns"] / per_step
        else:
            cost_ns = untraced_ns
        if min(ctx.cost_pct(rank, cost_ns), ctx.cost_pct(rank, h["median_step_ns"])) < ctx.thresholds["UNTRACED_MIN_PCT"]:
            continue
        frames = _frames(con, run_id, rank, h["worst_start_ns"], h["worst_end_ns"])
        metrics = {
            "idle_ms_per_step": to_ms(cost_ns) if info.has_gpu else None,
            "untraced_ms_per_step": to_ms(untraced_ns),
            "untraced_pct_of_step": rounded(ctx.cost_pct(rank, untraced_ns), 2),
            "holes_per_step": rounded(h["holes"] / per_step, 2),
            "longest_hole_ms": to_ms(h["longest_ns"]),
            "before_op": h["before_name"],
            "after_op": h["after_name"],
            "python_frames": frames or None,
            "step_time_ms": to_ms(info.mean_step_ns),
            "steps_with_holes": h["hole_steps"],
            "steps_compared": h["n_steps"],
            "gpu": info.has_gpu,
        }
        where = (f" The longest hole ({metrics['longest_hole_ms']:.2f} ms) follows {h['before_name'] or 'the step start'}"
                 f" and ends at {h['after_name'] or 'the step end'}")
        where += f"; Python frames inside it: {', '.join(frames)}." if frames else \
            " (record with_stack=True to see the Python frames inside it)."
        if info.has_gpu:
            summary = (f"Rank {rank}: the GPU idles {metrics['idle_ms_per_step']:.2f} ms per step while the process "
                       f"runs outside every profiled op ({metrics['untraced_ms_per_step']:.2f} ms per step untraced, "
                       f"{metrics['holes_per_step']:g} holes of {ctx.thresholds['UNTRACED_MIN_HOLE_NS'] / 1e6:g} ms or more).")
        else:
            summary = (f"Rank {rank} (no GPU activity): {metrics['untraced_ms_per_step']:.2f} ms per step "
                       f"({metrics['untraced_pct_of_step']:.0f}% of the step) pass outside every profiled op.")
        if len(h["hole_steps"]) < h["n_steps"]:
            # holes in some steps only (every k-th step: an evaluation, a checkpoint, an upload)
            where += (f" The holes open in {len(h['hole_steps'])} of {h['n_steps']} steps "
                      f"({', '.join(str(step) for step in h['hole_steps'])}), so the mean per step spreads them.")
        findings.append(ctx.make(KIND, f"{KIND}:r{rank}", rank=rank, cost_ns=cost_ns, summary=summary + where,
                                 metrics=metrics, step=h["worst_step"], t_start_ns=h["worst_start_ns"],
                                 t_end_ns=h["worst_end_ns"]))
    return findings
