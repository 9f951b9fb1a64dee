"""h2d_stall: host-to-device copies the GPU waits on.

Cost: per step, (a) HtoD copy time no compute kernel overlaps (exposed copy time: the GPU does
nothing else while the batch crosses the link) plus (b) GPU idle time while the CPU was blocked
in a pageable or synchronous HtoD copy call (lib/gaps.sql, cause 'h2d_copy'). The metrics say
how the copies are made: pageable vs pinned, blocking calls, bytes, and achieved bandwidth
against the link (PCIE_PRACTICAL_GBPS, PCIe Gen4 x16). Per-step figures count only the copies
the rank's steps issued and the copy and idle time inside its steps on the GPU clock
(h2d_summary's *_in_steps columns), so ProfilerSteps and inferred iterations give the same
figures and start-up is no step's cost; bandwidth and the pageable share are over all copies.
"""
from __future__ import annotations

from typing import Any

import duckdb

from analyzers.analysis.kinds import cause_row, gap_causes, query, rounded, to_ms
from analyzers.common.model import AnalysisSpec, EvidenceSeries, Finding

SPEC = AnalysisSpec(
    kind="h2d_stall",
    title="Host-to-device copies stall the GPU",
    evidence=EvidenceSeries("memory_ms", "Memory copies no compute hides, per step (every direction)",
                            "This finding counts {exposed_copy_ms_per_step:.2f} ms/step of exposed host-to-device copies plus {blocked_idle_ms_per_step:.2f} ms/step of GPU idle while the CPU was blocked in a copy call."),
    metric_keys=frozenset({"achieved_gbps", "blocked_idle_ms_per_step", "copies_per_step",
                           "copy_ms_per_step", "exposed_copy_ms_per_step", "h2d_overlap_pct",
                           "largest_copy_mb", "link_gbps", "link_share", "mb_per_step",
                           "pageable_gbps", "pageable_share", "pinned_gbps",
                           "sync_copies_per_step"}),
    gap_cause="h2d_copy",
)
KIND = SPEC.kind


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> list[Finding]:
    if not ctx.has_gpu:
        return []
    link = ctx.thresholds["PCIE_PRACTICAL_GBPS"]
    causes = gap_causes(con, run_id, ctx)
    findings = []
    for row in query(con, "SELECT * FROM h2d_summary(?) ORDER BY rank", [run_id]):
        rank = row["rank"]
        info = ctx.ranks.get(rank)
        if info is None:
            continue
        per_step = info.steps_divisor
        blocked = cause_row(causes, rank, SPEC.gap_cause)
        blocked_ns = (blocked["idle_ns"] if blocked else 0) / per_step
        exposed_ns = row["exposed_ns"] / per_step
        cost_ns = exposed_ns + blocked_ns
        if cost_ns <= 0:
            continue
        gbps = row["gbps"]
        # per-step figures: the copies inside the rank's steps (GPU clock), see h2d_summary
        copy_ns = row["copy_in_steps_ns"] or 0
        metrics = {
            "exposed_copy_ms_per_step": to_ms(exposed_ns),
            "blocked_idle_ms_per_step": to_ms(blocked_ns),
            "copies_per_step": rounded(row["copies_in_steps"] / per_step, 2),
            "mb_per_step": rounded((row["bytes_in_steps"] or 0) / per_step / 1e6, 3),
            "copy_ms_per_step": to_ms(copy_ns / per_step),
            "pageable_share": rounded(row["pageable_share"]),
            "sync_copies_per_step": rounded(row["sync_copies_in_steps"] / per_step, 2),
            "h2d_overlap_pct": rounded(100.0 * (1 - row["exposed_ns"] / copy_ns), 2) if copy_ns else None,
            "achieved_gbps": rounded(gbps, 2),
            "pageable_gbps": rounded(row["pageable_gbps"], 2),
            "pinned_gbps": rounded(row["pinned_gbps"], 2),
            "link_gbps": link,
            "link_share": rounded(gbps / link, 3) if gbps is not None else None,
            "largest_copy_mb": rounded((row["largest_bytes"] or 0) / 1e6, 3),
        }
        how = []
        if (row["pageable_share"] or 0) > 0:
            how.append(f"{100 * row['pageable_share']:.0f}% of bytes from pageable memory")
        if row["sync_copies_in_steps"]:
            how.append(f"{metrics['sync_copies_per_step']:g} blocking copies per step")
        if gbps is not None:
            how.append(f"{gbps:.1f} GB/s achieved vs ~{link:g} GB/s for PCIe Gen4 x16")
        summary = (f"Rank {rank}: the GPU waits {to_ms(cost_ns):.2f} ms per step on host-to-device copies "
                   f"({metrics['mb_per_step']:g} MB per step, {metrics['h2d_overlap_pct'] or 0:.0f}% hidden under "
                   f"compute)" + (f"; {', '.join(how)}." if how else "."))
        findings.append(ctx.make(KIND, f"{KIND}:r{rank}", rank=rank, cost_ns=cost_ns, summary=summary,
                                 metrics=metrics, step=row["worst_step"], stream=row["largest_stream"],
                                 t_start_ns=row["largest_start_ns"], t_end_ns=row["largest_end_ns"]))
    return findings
