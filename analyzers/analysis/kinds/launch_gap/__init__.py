"""launch_gap: the GPU idles because the CPU issues work too slowly.

Cost: per step, the GPU idle time in gaps whose next work was launched only after the GPU had
gone idle and that no DataLoader wait, blocking host-to-device copy or host sync explains
(those gaps belong to dataloader_stall, h2d_stall and host_sync; see lib/gaps.sql). The
metrics add HTA-style launch statistics (launch delay, kernels shorter than their launch), the
runs of tiny kernels a CUDA graph or fusion would collapse, and the GELU chains (bias add / GELU /
dropout kernels back to back) a fused elementwise kernel would. Per-step counts count only what
starts inside the rank's steps (launch_gap.sql), so ProfilerSteps and inferred iterations give
the same figures; the launch statistics (delays, shares) are over every launch.
"""
from __future__ import annotations

from typing import Any

import duckdb

from analyzers.analysis.kinds import cause_row, gap_causes, query, rounded, to_ms
from analyzers.common.model import AnalysisSpec, EvidenceSeries, Finding

SPEC = AnalysisSpec(
    kind="launch_gap",
    title="GPU idle between kernel launches",
    evidence=EvidenceSeries("idle_ms", "GPU idle per step, every cause",
                            "This finding counts {idle_ms_per_step:.2f} ms/step of it: the gaps whose next kernel was launched only after the GPU had gone idle."),
    metric_keys=frozenset({"elementwise_kernel_share", "gaps_per_step", "gelu_chains_per_step", "idle_ms_per_step",
                           "kernels_in_tiny_runs_per_step", "launch_delay_outliers",
                           "launches_per_step", "long_gap_share", "longest_gap_ms",
                           "mean_kernel_us", "mean_launch_cpu_us", "mean_launch_delay_us",
                           "optimizer_kernel_share", "p50_launch_delay_us", "p95_launch_delay_us",
                           "queued_idle_ms_per_step", "short_kernel_share", "slow_launch_calls",
                           "syncs_per_step", "tiny_kernel_runs_per_step", "tiny_kernel_share",
                           "tiny_run_overhead_ms_per_step", "tiny_run_top_kernel"}),
    gap_cause="launch_bound",
)
KIND = SPEC.kind


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> list[Finding]:
    if not ctx.has_gpu:
        return []
    t = ctx.thresholds
    causes = gap_causes(con, run_id, ctx)
    stats = {r["rank"]: r for r in query(con, "SELECT * FROM launch_stats(?, ?, ?, ?)",
                                         [run_id, int(t["LAUNCH_DELAY_OUTLIER_NS"]),
                                          int(t["LAUNCH_RUNTIME_OUTLIER_NS"]), int(t["TINY_KERNEL_NS"])])}
    tiny = {r["rank"]: r for r in query(
        # per step: the runs inside the rank's steps (GPU clock)
        con, "SELECT rank, count(*) AS runs, sum(kernels) AS kernels, sum(idle_ns) AS idle_ns, "
             "max(kernels) AS longest_run, mode(top_kernel ORDER BY start_ns, top_kernel) AS top_kernel "
             "FROM tiny_kernel_runs(?, ?, ?, ?) WHERE in_steps GROUP BY rank",
        [run_id, int(t["TINY_KERNEL_NS"]), int(t["TINY_RUN_MAX_GAP_NS"]), int(t["TINY_RUN_MIN_KERNELS"])])}
    syncs = {r["rank"]: r["n"] for r in query(
        con, "SELECT rank, count(*) AS n FROM sync_calls_in_steps(?) WHERE counted GROUP BY rank", [run_id])}
    gelu = {r["rank"]: r["chains_in_steps"] for r in query(con, "SELECT rank, chains_in_steps FROM gelu_chains(?)",
                                                           [run_id])}
    findings = []
    for rank in ctx.gpu_ranks():
        row = cause_row(causes, rank, SPEC.gap_cause)
        if row is None:
            continue
        info = ctx.ranks[rank]
        per_step = info.steps_divisor
        cost_ns = row["idle_ns"] / per_step
        wait = cause_row(causes, rank, "gpu_wait")
        ls = stats.get(rank, {})
        tr = tiny.get(rank, {})
        metrics = {
            "idle_ms_per_step": to_ms(cost_ns),
            "gaps_per_step": rounded(row["gaps"] / per_step, 1),
            "longest_gap_ms": to_ms(row["longest_gap_ns"]),
            "queued_idle_ms_per_step": to_ms(wait["idle_ns"] / per_step) if wait else 0.0,
            "launches_per_step": rounded((ls.get("launches_in_steps") or 0) / per_step, 1),
            "mean_launch_delay_us": rounded(ls.get("mean_launch_delay_ns", 0) / 1e3) if ls else None,
            "p50_launch_delay_us": rounded(ls.get("p50_launch_delay_ns", 0) / 1e3) if ls else None,
            "p95_launch_delay_us": rounded(ls.get("p95_launch_delay_ns", 0) / 1e3) if ls else None,
            "launch_delay_outliers": ls.get("delay_outliers"),
            "slow_launch_calls": ls.get("runtime_outliers"),
            "short_kernel_share": rounded(ls.get("short_kernel_share")),
            "tiny_kernel_share": rounded(ls.get("tiny_kernel_share")),
            "mean_kernel_us": rounded((ls.get("mean_kernel_ns") or 0) / 1e3) if ls else None,
            "mean_launch_cpu_us": rounded((ls.get("mean_launch_cpu_ns") or 0) / 1e3) if ls else None,
            "elementwise_kernel_share": rounded(ls.get("elementwise_kernel_share")),
            "optimizer_kernel_share": rounded(ls.get("optimizer_kernel_share")),
            "tiny_kernel_runs_per_step": rounded((tr.get("runs") or 0) / per_step, 2),
            "kernels_in_tiny_runs_per_step": rounded((tr.get("kernels") or 0) / per_step, 1),
            "tiny_run_overhead_ms_per_step": to_ms((tr.get("idle_ns") or 0) / per_step),
            "tiny_run_top_kernel": tr.get("top_kernel"),
            "syncs_per_step": rounded(syncs.get(rank, 0) / per_step, 2),
            # GELU kernels next to a bias add or dropout kernel: what fused_bias_gelu_dropout fuses
            "gelu_chains_per_step": rounded(gelu.get(rank, 0) / per_step, 2),
        }
        long_share = row["long_idle_ns"] / row["idle_ns"] if row["idle_ns"] else 0.0
        metrics["long_gap_share"] = rounded(long_share)
        summary = (f"Rank {rank}: the GPU waits {metrics['idle_ms_per_step']:.2f} ms per step for the CPU to "
                   f"launch work ({metrics['gaps_per_step']:g} gaps per step, longest "
                   f"{metrics['longest_gap_ms']:.2f} ms); {100 * (metrics['short_kernel_share'] or 0):.0f}% of "
                   f"kernels run shorter than their launch call.")
        if long_share >= t["LONG_GAPS_DOMINATE_FRACTION"]:
            # a few long holes are the CPU doing other work (Python, logging, evaluation, setup),
            # not per-kernel launch overhead: say so, the fixes differ
            summary += (f" {100 * long_share:.0f}% of it is in {row['long_gaps']} gaps of {t['LONG_GAP_NS'] / 1e6:g} ms or more: the CPU "
                        "was busy with other work there; look at the CPU timeline in that window.")
        if tr:
            runs = metrics["tiny_kernel_runs_per_step"]
            summary += (f" {runs:g} run{'' if runs == 1 else 's'} of tiny kernels per step could be "
                        "captured in a CUDA graph or fused.")
        findings.append(ctx.make(KIND, f"{KIND}:r{rank}", rank=rank, cost_ns=cost_ns, summary=summary,
                                 metrics=metrics, step=row["worst_step"], t_start_ns=row["worst_start_ns"],
                                 t_end_ns=row["worst_end_ns"]))
    return findings
