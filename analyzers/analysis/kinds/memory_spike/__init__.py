"""memory_spike: one op's short-lived allocation sets a step's peak (a giant transient
intermediate: a broadcast materialised, a full attention matrix, a concatenation of everything).

For each step (memory_steps), the allocations held at the step's peak (memory_allocations) that
the step made and freed again; the largest one is a spike when it lives through at most
MEMORY_SPIKE_MAX_LIFETIME_FRACTION of the step's memory events (counted in events, not time: the
profiler's own overhead stretches time unevenly) and makes at least MEMORY_SPIKE_FRACTION of the
step's rise above where it began (and MEMORY_SPIKE_MIN_BYTES). Cost: its bytes, how much lower
the peak would be without it; the step where it is largest is the one shown.
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
    kind="memory_spike",
    title="One op's transient allocation sets the memory peak",
    evidence=memory_evidence(),
    metric_keys=MEMORY_METRIC_KEYS | frozenset({"op", "allocating_op", "spike_bytes", "step_rise_bytes",
                                                "share_of_rise", "lifetime_ms", "steps_with_spike",
                                                "step_peak_bytes"}),
    measured_without_gpu=True,
    cost_unit="memory",
)
KIND = SPEC.kind

# per step: the largest allocation held at the step's peak that the step made and freed
_SPIKES_SQL = """
    WITH s AS (
        SELECT st.*, d.device_total_bytes, d.peak_allocated_bytes AS device_peak
        FROM memory_steps(?) st JOIN memory_device_summary(?) d USING (rank, device_type, device_id)
        WHERE st.peak_ts_ns IS NOT NULL
    )
    SELECT s.rank, s.device_type, s.device_id, s.device, s.step, s.start_ns, s.end_ns, s.device_total_bytes,
           s.device_peak, s.peak_allocated_bytes, s.peak_allocated_bytes - s.start_allocated_bytes AS rise,
           arg_max(a.bytes, a.bytes) AS spike_bytes, arg_max(a.top_op, a.bytes) AS top_op,
           arg_max(a.op, a.bytes) AS op, arg_max(a.free_ts_ns - a.alloc_ts_ns, a.bytes) AS lifetime_ns,
           arg_max(a.free_seq - a.alloc_seq, a.bytes) AS lifetime_events, s.events AS step_events,
           arg_max(a.alloc_ts_ns, a.bytes) AS alloc_ts_ns, arg_max(a.free_ts_ns, a.bytes) AS free_ts_ns
    FROM s JOIN memory_allocations(?) a
      ON a.rank = s.rank AND a.device_type = s.device_type AND a.device_id = s.device_id
     AND a.alloc_ts_ns >= s.start_ns AND a.alloc_ts_ns <= s.peak_ts_ns
     AND a.free_ts_ns > s.peak_ts_ns AND a.free_ts_ns <= s.end_ns
    GROUP BY ALL
    ORDER BY s.rank, s.device_type, s.device_id, s.step
"""


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> list[Finding]:
    t = ctx.thresholds
    rows = query(con, _SPIKES_SQL, [run_id, run_id, run_id])
    spikes: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if (r["rise"] and r["rise"] > 0 and r["spike_bytes"] >= t["MEMORY_SPIKE_MIN_BYTES"]
                and r["spike_bytes"] >= t["MEMORY_SPIKE_FRACTION"] * r["rise"]
                and r["lifetime_events"] <= t["MEMORY_SPIKE_MAX_LIFETIME_FRACTION"] * r["step_events"]):
            spikes.setdefault((r["rank"], r["device_type"], r["device_id"]), []).append(r)
    findings = []
    for (rank, _, _), found in spikes.items():
        worst = max(found, key=lambda r: (r["spike_bytes"], -r["step"]))
        metrics = {
            "op": worst["top_op"], "allocating_op": worst["op"], "spike_bytes": int(worst["spike_bytes"]),
            "step_rise_bytes": int(worst["rise"]), "share_of_rise": round(worst["spike_bytes"] / worst["rise"], 3),
            "lifetime_ms": round(worst["lifetime_ns"] / 1e6, 3), "steps_with_spike": len(found),
            "step_peak_bytes": int(worst["peak_allocated_bytes"]),
        }
        op = worst["top_op"] if worst["top_op"] == worst["op"] else f"{worst['top_op']} ({worst['op']})"
        summary = (f"Rank {rank} ({worst['device']}): {op} allocates {human_bytes(worst['spike_bytes'])} for "
                   f"{worst['lifetime_ns'] / 1e6:,.2f} ms and that sets step {worst['step']}'s peak "
                   f"({human_bytes(worst['peak_allocated_bytes'])}; {100 * metrics['share_of_rise']:.0f}% of the "
                   f"step's rise){of_device(worst['spike_bytes'], worst['device_total_bytes'])}; seen in "
                   f"{len(found)} step(s). Compute it in chunks, in place, or recompute it (checkpointing) to "
                   "lower the peak by up to that much.")
        findings.append(memory_finding(ctx, KIND, rank=rank, cost_bytes=worst["spike_bytes"], device=worst["device"],
                                       device_total_bytes=worst["device_total_bytes"],
                                       peak_allocated_bytes=worst["device_peak"], summary=summary, metrics=metrics,
                                       step=worst["step"], t_start_ns=worst["alloc_ts_ns"],
                                       t_end_ns=worst["free_ts_ns"]))
    return findings
