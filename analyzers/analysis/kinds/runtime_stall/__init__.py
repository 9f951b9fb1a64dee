"""runtime_stall: the GPU idles while the CPU sits in a slow CUDA runtime/driver call that neither
launches work, synchronises nor copies.

Two families, told apart because their fixes differ (runtime_stall_calls in lib/gaps.sql):
- memory management: cudaFree/cudaMalloc reach the driver only when PyTorch's caching allocator
  was emptied (`torch.cuda.empty_cache()` in the loop: cudaFree also synchronises the whole
  device) or misses (fragmentation, ever-changing shapes); cudaHostAlloc when tensors are pinned
  afresh each step. Fix: keep the cache warm (accel allocator_tuning).
- launch calls of 1 ms or more (a few us is normal): a kernel's first launch loads its code
  (CUDA lazy module loading, JIT compilation); a warm-up cost.
- anything else of 1 ms or more: stream or event creation in the loop, device queries.
And whatever the call, one of RUNTIME_STARTUP_CALL_NS (100 ms) or more is one-off start-up
caught in the trace (context creation inside the first cudaFree, the classic cudaFree(0); lazy
module loading making a kernel's first cudaLaunchKernel take seconds): not a steady-state cost,
so the finding says to profile after warm-up instead of pointing at the allocator.

Cost: per step, the GPU idle time in gaps of cause 'runtime_stall' (see lib/gaps.sql); those
gaps are in no other finding.
"""
from __future__ import annotations

from typing import Any

import duckdb

from analyzers.analysis.kinds import cause_row, gap_causes, query, rounded, to_ms
from analyzers.common.model import AnalysisSpec, EvidenceSeries, Finding

SPEC = AnalysisSpec(
    kind="runtime_stall",
    title="Slow CUDA runtime calls (allocator, start-up) stall the GPU",
    evidence=EvidenceSeries("idle_ms", "GPU idle per step, every cause",
                            "This finding counts {idle_ms_per_step:.2f} ms/step of it: the gaps slow runtime calls cover."),
    metric_keys=frozenset({"allocator_calls_per_step", "allocator_share", "gaps_per_step",
                           "idle_ms_per_step", "launch_share", "longest_gap_ms", "other_share",
                           "startup_share", "top_calls"}),
    gap_cause="runtime_stall",
)
KIND = SPEC.kind
TOP_CALLS = 5

# Each stalling call's share of the runtime_stall gaps it overlaps (half-open intervals). Only
# outermost calls count: a driver call made inside a runtime call (cuMemAlloc_v2 inside
# cudaMalloc) is the same time, so the per-call figures do not double it.
_CALLS_SQL = """
    WITH gaps AS (
        SELECT rank, start_ns, end_ns FROM gpu_idle_gaps(?, ?, ?) WHERE cause = 'runtime_stall'
    ), all_calls AS (
        SELECT * FROM runtime_stall_calls(?, ?)
    ), calls AS (
        SELECT c.* FROM all_calls c
        WHERE NOT EXISTS (SELECT 1 FROM all_calls o
                          WHERE o.rank = c.rank AND o.start_ns <= c.start_ns AND c.end_ns <= o.end_ns
                            AND (o.start_ns, o.end_ns, o.name) <> (c.start_ns, c.end_ns, c.name))
    )
    SELECT c.rank, c.name AS call, c.what, c.end_ns - c.start_ns >= ? AS one_off, count(DISTINCT c.start_ns) AS calls,
           sum(least(c.end_ns, g.end_ns) - greatest(c.start_ns, g.start_ns)) AS stalled_ns,
           max(c.end_ns - c.start_ns) AS longest_ns
    FROM calls c JOIN gaps g
      ON g.rank = c.rank AND c.start_ns < g.end_ns AND g.start_ns < c.end_ns
    GROUP BY ALL
    ORDER BY c.rank, stalled_ns DESC, call
"""


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> list[Finding]:
    if not ctx.has_gpu:
        return []
    causes = gap_causes(con, run_id, ctx)
    stalled = [rank for rank in ctx.gpu_ranks() if cause_row(causes, rank, SPEC.gap_cause) is not None]
    if not stalled:
        return []   # the per-call split re-reads the gaps: only when there is something to split
    t = ctx.thresholds
    min_ns = int(t["RUNTIME_STALL_MIN_NS"])
    calls = query(con, _CALLS_SQL, [run_id, float(t["CAUSE_MIN_COVER_FRACTION"]), min_ns, run_id, min_ns,
                                    int(t["RUNTIME_STARTUP_CALL_NS"])])
    findings = []
    for rank in stalled:
        row = cause_row(causes, rank, SPEC.gap_cause)
        per_step = ctx.ranks[rank].steps_divisor
        cost_ns = row["idle_ns"] / per_step
        mine = [c for c in calls if c["rank"] == rank]
        covered = sum(c["stalled_ns"] for c in mine)
        shares = {what: sum(c["stalled_ns"] for c in mine if not c["one_off"] and c["what"] == what) / covered
                  if covered else None for what in ("allocator", "launch", "other")}
        shares["startup"] = sum(c["stalled_ns"] for c in mine if c["one_off"]) / covered if covered else None
        top = [{"call": c["call"] + (" (start-up)" if c["one_off"] else ""),
                "calls_per_step": rounded(c["calls"] / per_step, 2),
                "stalled_ms_per_step": to_ms(c["stalled_ns"] / per_step), "longest_ms": to_ms(c["longest_ns"])}
               for c in mine[:TOP_CALLS]]
        metrics = {
            "idle_ms_per_step": to_ms(cost_ns),
            "gaps_per_step": rounded(row["gaps"] / per_step, 2),
            "longest_gap_ms": to_ms(row["longest_gap_ns"]),
            # shares of the stalled time: one-off start-up calls (>= RUNTIME_STARTUP_CALL_NS), then
            # by family among the shorter ones (see runtime_stall_calls)
            "startup_share": rounded(shares["startup"]),
            "allocator_share": rounded(shares["allocator"]),
            "launch_share": rounded(shares["launch"]),
            "other_share": rounded(shares["other"]),
            "allocator_calls_per_step": rounded(sum(c["calls"] for c in mine
                                                    if c["what"] == "allocator" and not c["one_off"]) / per_step, 2),
            "top_calls": top,
        }
        findings.append(ctx.make(KIND, f"{KIND}:r{rank}", rank=rank, cost_ns=cost_ns,
                                 summary=_summary(rank, metrics, top), metrics=metrics, step=row["worst_step"],
                                 t_start_ns=row["worst_start_ns"], t_end_ns=row["worst_end_ns"]))
    return findings


def _summary(rank: int, metrics: dict[str, Any], top: list[dict[str, Any]]) -> str:
    calls = ", ".join(f"{c['call']} {c['stalled_ms_per_step']:,.2f} ms ({c['calls_per_step']:g}x, longest "
                      f"{c['longest_ms']:,.2f} ms)" for c in top[:3])
    text = (f"Rank {rank}: the GPU idles {metrics['idle_ms_per_step']:,.2f} ms per step while the CPU waits "
            f"in slow GPU runtime calls" + (f": {calls}." if calls else "."))
    shares = {what: metrics[f"{what}_share"] for what in _ADVICE if metrics[f"{what}_share"] is not None}
    if shares:
        text += " " + _ADVICE[max(shares, key=shares.get)]
    return text


# What the dominant family of stalling calls means, and what to do about it.
_ADVICE = {
    "startup": ("Calls of 100 ms or more are one-off start-up caught in the trace (CUDA context creation, "
                "often inside the first cudaFree; lazy module loading on a kernel's first launch), not a "
                "cost every step pays: profile after warm-up (torch.profiler.schedule(wait=1, warmup=1, "
                "active=3)) to see the steady state."),
    "allocator": ("Most of it is memory management: PyTorch's caching allocator is emptied "
                  "(torch.cuda.empty_cache() in the loop; cudaFree also waits for the whole GPU) or misses "
                  "(fragmentation, changing shapes), so steps pay cudaFree/cudaMalloc again."),
    "launch": ("Launch calls this slow are kernels launched for the first time, their code loaded on demand "
               "(CUDA lazy module loading, JIT): a warm-up cost; profile after warm-up, or load modules "
               "up front with CUDA_MODULE_LOADING=EAGER."),
    "other": ("These are neither allocations nor launches: streams, events or device queries made in the "
              "loop; create them once, outside it."),
}
