"""allocator_churn: the caching allocator reserves and releases device memory (segments) step
after step instead of reusing its cache: torch.cuda.empty_cache() in the loop, or requests that
fit no cached block (changing shapes, fragmentation). Each reservation is a cudaMalloc, each
release a cudaFree that synchronises the device.

From memory_steps (lib/memory.sql): the events inside each step that changed the reserved total,
per GPU. Reported from ALLOCATOR_CHURN_MIN_PER_STEP changes per step on average. Cost: the bytes
reserved or released per step (and % of the device). The GPU time those cudaMalloc/cudaFree
calls stall is runtime_stall's (its allocator share): this finding names it
(metrics.runtime_stall_ms_per_step, filled in by root_causes.link_memory_churn) and does not
count it again.
"""
from __future__ import annotations

from typing import Any

import duckdb

from analyzers.analysis.kinds import query
from analyzers.analysis.kinds.memory_common import (MEMORY_METRIC_KEYS, memory_evidence, memory_finding,
                                              of_device)
from analyzers.common.units import human_bytes
from analyzers.common.model import AnalysisSpec, Finding

SPEC = AnalysisSpec(
    kind="allocator_churn",
    title="The allocator reserves and releases memory every step (cudaMalloc/cudaFree churn)",
    evidence=memory_evidence(),
    metric_keys=MEMORY_METRIC_KEYS | frozenset({"reserved_changes_per_step", "churn_bytes_per_step", "steps",
                                                "runtime_stall_ms_per_step"}),
    cost_unit="memory",
)
KIND = SPEC.kind

_SQL = """
    SELECT s.rank, s.device_type, s.device_id, any_value(s.device) AS device, count(*) AS steps,
           avg(s.reserved_changes) AS changes_per_step, avg(s.reserved_churn_bytes) AS churn_per_step,
           arg_max(s.step, s.reserved_churn_bytes) AS worst_step,
           arg_max(s.start_ns, s.reserved_churn_bytes) AS worst_start, arg_max(s.end_ns, s.reserved_churn_bytes) AS worst_end,
           any_value(d.device_total_bytes) AS device_total_bytes, any_value(d.peak_allocated_bytes) AS peak
    FROM memory_steps(?) s JOIN memory_device_summary(?) d USING (rank, device_type, device_id)
    WHERE s.device_type <> 0
    GROUP BY ALL ORDER BY s.rank, s.device_type, s.device_id
"""


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> list[Finding]:
    findings = []
    for r in query(con, _SQL, [run_id, run_id]):
        if r["changes_per_step"] < ctx.thresholds["ALLOCATOR_CHURN_MIN_PER_STEP"] or not r["churn_per_step"]:
            continue
        metrics = {"reserved_changes_per_step": round(r["changes_per_step"], 2),
                   "churn_bytes_per_step": int(r["churn_per_step"]), "steps": r["steps"],
                   "runtime_stall_ms_per_step": None}
        summary = (f"Rank {r['rank']} ({r['device']}): the caching allocator reserves or releases device memory "
                   f"{r['changes_per_step']:.1f} times per step ({human_bytes(r['churn_per_step'])} per step"
                   f"{of_device(r['churn_per_step'], r['device_total_bytes'])}) instead of reusing its cache: "
                   "each is a cudaMalloc or a device-synchronising cudaFree. Drop empty_cache() from the loop, keep "
                   "shapes steady, or use expandable segments.")
        findings.append(memory_finding(ctx, KIND, rank=r["rank"], cost_bytes=r["churn_per_step"], device=r["device"],
                                       device_total_bytes=r["device_total_bytes"], peak_allocated_bytes=r["peak"],
                                       summary=summary, metrics=metrics, step=r["worst_step"],
                                       t_start_ns=r["worst_start"], t_end_ns=r["worst_end"]))
    return findings
