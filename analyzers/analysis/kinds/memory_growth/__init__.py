"""memory_growth: allocated memory rising step over step (a leak: tensors kept across steps, e.g.
a list of losses or outputs still attached to the graph, a cache that never evicts).

From memory_steps (lib/memory.sql): allocated at the end of each host step, per rank and device.
A finding needs at least MEMORY_GROWTH_MIN_STEPS steps whose end level rises in at least
MEMORY_GROWTH_RISING_FRACTION of the step-to-step changes, by MEMORY_GROWTH_MIN_BYTES_PER_STEP or
more on average. Cost: the growth per step in bytes (and % of device memory); where the device's
size is known, how many more steps until it is full. The ops that made what stays: allocations
made in a step before the last and still held when the last step ends (memory_allocations),
by the outermost op that made them.
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
    kind="memory_growth",
    title="Memory grows every step (a leak)",
    evidence=memory_evidence(),
    metric_keys=MEMORY_METRIC_KEYS | frozenset({"growth_bytes_per_step", "total_growth_bytes", "steps",
                                                "rising_steps", "steps_until_full", "held_by_op",
                                                "end_allocated_bytes_by_step"}),
    measured_without_gpu=True,
    cost_unit="memory",
)
KIND = SPEC.kind
TOP_OPS = 5

_HELD_SQL = """
    SELECT top_op, op, count(*) AS allocations, sum(bytes) AS bytes
    FROM memory_allocations(?)
    WHERE rank = ? AND device_type = ? AND device_id = ? AND step IS NOT NULL AND step < ?
      AND (free_ts_ns IS NULL OR free_ts_ns >= ?)
    GROUP BY ALL ORDER BY bytes DESC, top_op, op LIMIT ?
"""


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> list[Finding]:
    t = ctx.thresholds
    steps = query(con, "SELECT s.*, d.device_total_bytes, d.peak_allocated_bytes AS device_peak, "
                       "d.peak_reserved_bytes AS device_peak_reserved FROM memory_steps(?) s "
                       "JOIN memory_device_summary(?) d USING (rank, device_type, device_id) "
                       "ORDER BY rank, device_type, device_id, step", [run_id, run_id])
    by_device: dict[tuple, list[dict[str, Any]]] = {}
    for row in steps:
        by_device.setdefault((row["rank"], row["device_type"], row["device_id"]), []).append(row)
    findings = []
    for (rank, device_type, device_id), rows in by_device.items():
        ends = [r["end_allocated_bytes"] for r in rows if r["end_allocated_bytes"] is not None]
        if len(ends) < t["MEMORY_GROWTH_MIN_STEPS"]:
            continue
        deltas = [b - a for a, b in zip(ends, ends[1:])]
        rising = sum(1 for d in deltas if d > 0)
        per_step = (ends[-1] - ends[0]) / len(deltas)
        if rising < t["MEMORY_GROWTH_RISING_FRACTION"] * len(deltas) or per_step < t["MEMORY_GROWTH_MIN_BYTES_PER_STEP"]:
            continue
        first = rows[0]
        last = rows[-1]
        held = query(con, _HELD_SQL, [run_id, rank, device_type, device_id, last["step"], last["end_ns"], TOP_OPS])
        total = first["device_total_bytes"]
        until_full = None
        if total:
            until_full = int(max(total - (first["device_peak_reserved"] or first["device_peak"] or 0), 0) // per_step)
        metrics = {
            "growth_bytes_per_step": int(per_step), "total_growth_bytes": int(ends[-1] - ends[0]),
            "steps": len(ends), "rising_steps": rising, "steps_until_full": until_full,
            "end_allocated_bytes_by_step": [{"step": r["step"], "bytes": r["end_allocated_bytes"]} for r in rows],
            "held_by_op": [{"op": h["top_op"], "allocating_op": h["op"], "allocations": h["allocations"],
                            "bytes": int(h["bytes"])} for h in held],
        }
        who = ", ".join(f"{h['top_op']} {human_bytes(h['bytes'])} in {h['allocations']} allocations"
                        for h in held[:3])
        summary = (f"Rank {rank} ({first['device']}): allocated memory grows {human_bytes(per_step)} per step"
                   f"{of_device(per_step, total)}, rising in {rising} of {len(deltas)} steps "
                   f"({human_bytes(ends[0])} -> {human_bytes(ends[-1])}): something keeps tensors from one step "
                   "to the next (a list of outputs or losses still holding the graph, a growing cache)."
                   + (f" Still held from earlier steps: {who}." if who else "")
                   + (f" At this rate the device is full in ~{until_full:,} steps." if until_full is not None else ""))
        findings.append(memory_finding(ctx, KIND, rank=rank, cost_bytes=per_step, device=first["device"],
                                       device_total_bytes=total, peak_allocated_bytes=first["device_peak"],
                                       summary=summary, metrics=metrics, t_start_ns=first["start_ns"],
                                       t_end_ns=last["end_ns"]))
    return findings
