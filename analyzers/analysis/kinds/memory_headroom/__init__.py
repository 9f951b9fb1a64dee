"""memory_headroom: the job's peak leaves much of the device's memory unused, so a larger batch
(or a larger model, fewer micro-batches, less recomputation) would fit: a performance finding.

Per rank and GPU (memory_device_summary): the device's memory (deviceProperties.totalGlobalMem)
minus the peak reserved (what the caching allocator held at most; allocated where reserved is
not recorded). Reported from MEMORY_HEADROOM_MIN_PCT of the device. "Batch could grow ~x%": the
headroom over what a step adds on top of what it starts with (the median over steps of peak -
start allocated: activations and temporaries, which scale with the batch). CPU memory has no
device size in the trace: no finding there.
"""
from __future__ import annotations

import statistics
from typing import Any

import duckdb

from analyzers.analysis.kinds import query
from analyzers.analysis.kinds.memory_common import MEMORY_METRIC_KEYS, memory_evidence, memory_finding
from analyzers.common.units import human_bytes
from analyzers.common.model import AnalysisSpec, Finding

SPEC = AnalysisSpec(
    kind="memory_headroom",
    title="Device memory left unused at the peak (the batch could grow)",
    evidence=memory_evidence(),
    metric_keys=MEMORY_METRIC_KEYS | frozenset({"headroom_bytes", "headroom_pct", "step_rise_bytes",
                                                "batch_could_grow_pct"}),
    cost_unit="memory",
)
KIND = SPEC.kind


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> list[Finding]:
    findings = []
    for d in query(con, "SELECT * FROM memory_device_summary(?) WHERE device_total_bytes > 0 ORDER BY rank, device",
                   [run_id]):
        total = d["device_total_bytes"]
        held = max(d["peak_reserved_bytes"] or 0, d["peak_allocated_bytes"] or 0)
        headroom = total - held
        pct = 100.0 * headroom / total
        if pct < ctx.thresholds["MEMORY_HEADROOM_MIN_PCT"]:
            continue
        rises = [r[0] for r in con.execute(
            "SELECT peak_allocated_bytes - start_allocated_bytes FROM memory_steps(?) "
            "WHERE rank = ? AND device_type = ? AND device_id = ? AND peak_allocated_bytes IS NOT NULL",
            [run_id, d["rank"], d["device_type"], d["device_id"]]).fetchall() if r[0] is not None and r[0] > 0]
        rise = statistics.median(rises) if rises else None
        grow = round(100.0 * headroom / rise) if rise else None
        metrics = {"headroom_bytes": int(headroom), "headroom_pct": round(pct, 2),
                   "peak_reserved_bytes": d["peak_reserved_bytes"],
                   "step_rise_bytes": None if rise is None else int(rise), "batch_could_grow_pct": grow}
        summary = (f"Rank {d['rank']} ({d['device']}): at its peak the job holds {human_bytes(held)} of the device's "
                   f"{human_bytes(total)}; {human_bytes(headroom)} ({pct:.0f}%) stays unused."
                   + (f" A step adds {human_bytes(rise)} on top of what it starts with (activations, temporaries), "
                      + (f"so the batch could grow ~{grow}%" if grow <= 1000 else
                         f"so the batch could grow more than tenfold (~{grow / 100:,.0f}x)")
                      + " (keep ~10% spare for fragmentation)." if grow else "")
                   + " A larger batch uses the GPU better per step.")
        findings.append(memory_finding(ctx, KIND, rank=d["rank"], cost_bytes=headroom, device=d["device"],
                                       device_total_bytes=total, peak_allocated_bytes=d["peak_allocated_bytes"],
                                       summary=summary, metrics=metrics, t_start_ns=d["peak_ts_ns"],
                                       t_end_ns=d["peak_ts_ns"]))
    return findings
