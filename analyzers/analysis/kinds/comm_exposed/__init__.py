"""comm_exposed: collective time no compute hides, per rank, straggler waiting excluded.

GPU ranks: NCCL kernel time no compute kernel overlaps. gloo (CPU) ranks: time the training
thread is blocked in communication (cpu_comm_blocked in lib/rank_balance.sql).

The analysis is analyses/comm_exposed/comm_exposed.sql (comm_exposure, one statement); this module only
turns its rows into Findings with the metrics accel.registry uses to pick fixes
(mean_msg_bytes, busbw_gbps, world_size, local_world_size).
"""
from __future__ import annotations

from typing import Any

import duckdb

from analyzers.analysis.kinds.rank_imbalance import context, ms, rows, threshold
from analyzers.common.model import AnalysisSpec, EvidenceSeries, Finding
from analyzers.common.units import human_bytes
from analyzers.sql.engine import ensure_loaded

SPEC = AnalysisSpec(
    kind="comm_exposed",
    title="Communication not hidden behind compute",
    evidence=EvidenceSeries("comm_exposed_ms", "Communication no compute hides, per step (waiting for other ranks included)",
                            "Of this, {imbalance_wait_ms_per_step:.2f} ms/step is waiting for later ranks: the rank imbalance finding's where their lateness is above the noise, else jitter (see the run's notes); this finding counts the rest."),
    metric_keys=frozenset({"algbw_gbps", "busbw_gbps", "by_collective", "bytes_per_step",
                           "collective_wait_ms_per_step", "collectives_per_step",
                           "comm_ms_per_step", "comm_source", "exposed_ms_per_step", "group_size",
                           "imbalance_wait_ms_per_step", "link_class", "local_world_size",
                           "mean_msg_bytes", "median_msg_bytes", "nodes", "overlap_pct",
                           "allreduce_rounds_per_step", "optimizer_steps_per_step", "hosts",
                           "serialized_after_compute", "sized_share", "small_msg_share",
                           "waiting_known", "world_size"}),
    measured_without_gpu=True,
)
KIND = SPEC.kind
# compares ranks: runs once on the whole run, after the rank passes (findings.analyze_root_causes)
ACROSS_RANKS = True


def _local_world_size(con: duckdb.DuckDBPyConnection, run_id: str) -> int | None:
    """GPUs per node, from deviceProperties (the GPUs the profiled process could see)."""
    row = con.execute("SELECT max(json_array_length(device_properties)) FROM ranks WHERE run_id = ?",
                      [run_id]).fetchone()
    return int(row[0]) if row and row[0] else None


def _link_class(busbw_gbps: float | None, ctx: Any) -> str:
    """What the achieved bus bandwidth says about the link (thresholds LINK_SLOW_GBPS, LINK_FAST_GBPS)."""
    if busbw_gbps is None:
        return "unknown"
    if busbw_gbps < threshold(ctx, "LINK_SLOW_GBPS"):
        return "slow"
    return "fast" if busbw_gbps >= threshold(ctx, "LINK_FAST_GBPS") else "medium"


def _hosts(con: duckdb.DuckDBPyConnection, run_id: str) -> int | None:
    """How many hosts recorded the job's traces (the traces' host_name), when every rank of the job
    is loaded and names its host; else None."""
    row = con.execute("""
        SELECT count(DISTINCT json_extract_string(k.trace_meta, '$.host_name')),
               count(json_extract_string(k.trace_meta, '$.host_name')), count(*), any_value(r.world_size)
        FROM ranks k JOIN runs r ON r.run_id = k.run_id WHERE k.run_id = ?""", [run_id]).fetchone()
    distinct, named, loaded, world = row
    if not loaded or named != loaded or (world or 1) > loaded:
        return None
    return int(distinct)


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any = None) -> list[Finding]:
    ensure_loaded(con)
    ctx = context(con, run_id, ctx)
    min_pct = threshold(ctx, "MIN_FINDING_PCT")
    small_bytes = int(threshold(ctx, "COMM_SMALL_MESSAGE_BYTES"))
    exposure = rows(con, "SELECT * FROM comm_exposure(?, ?, ?) ORDER BY rank",
                    [run_id, small_bytes, int(threshold(ctx, "HOST_BLOCKED_MIN_NS"))])
    if not exposure:
        return []
    local_world = _local_world_size(con, run_id)
    hosts = _hosts(con, run_id)
    rounds = {int(r["rank"]): r for r in rows(con, "SELECT * FROM gradient_sync_rounds(?)", [run_id])}
    findings: list[Finding] = []
    for r in exposure:
        rank = int(r["rank"])
        mean_step = r["mean_step_ns"] or 0
        cost_ns = float(r["cost_ns"] or 0)
        cost_pct = ctx.cost_pct(rank, cost_ns)
        if cost_ns <= 0 or cost_pct < min_pct:
            continue
        overlap = r["overlap_pct"]
        serialized = overlap is not None and overlap < threshold(ctx, "COMM_SERIALIZED_OVERLAP_PCT")
        types = (r["by_collective"] or [])[:5]
        metrics: dict[str, Any] = {
            "comm_source": r["comm_source"],
            "exposed_ms_per_step": ms(r["exposed_ns_per_step"]),
            "imbalance_wait_ms_per_step": ms(r["imbalance_wait_ns_per_step"]),
            "comm_ms_per_step": ms(r["comm_ns_per_step"]),
            "overlap_pct": None if overlap is None else round(float(overlap), 2),
            "serialized_after_compute": serialized,
            "collectives_per_step": round(float(r["collectives_per_step"] or 0), 2),
            "sized_share": r["sized_share"],
            "mean_msg_bytes": r["mean_msg_bytes"],
            "median_msg_bytes": r["median_msg_bytes"],
            "small_msg_share": r["small_msg_share"],
            "bytes_per_step": r["bytes_per_step"],
            "algbw_gbps": None if r["algbw_gbps"] is None else round(float(r["algbw_gbps"]), 3),
            "busbw_gbps": None if r["busbw_gbps"] is None else round(float(r["busbw_gbps"]), 3),
            "world_size": r["world_size"],
            "local_world_size": local_world,
            "link_class": _link_class(r["busbw_gbps"], ctx),
            "group_size": r["group_size"],
            "waiting_known": bool(r["matched"]),
            "collective_wait_ms_per_step": ms(r["wait_ns_per_step"]),
            "by_collective": [{"collective": c["collective"], "instances": c["instances"],
                               "total_bytes": c["total_bytes"], "mean_bytes": c["mean_bytes"],
                               "true_ms": ms(c["true_ns"]), "wait_ms": ms(c["wait_ns"]),
                               "algbw_gbps": c["algbw_gbps"], "busbw_gbps": c["busbw_gbps"]}
                              for c in types],
        }
        on_cpu = r["comm_source"] == "cpu"
        exposed_what = ("the training thread is blocked in communication" if on_cpu
                        else "of communication is exposed")
        text = (f"Rank {rank}: {cost_ns / 1e6:.2f} ms per step {exposed_what} "
                f"({cost_pct:.1f}% of the step), {r['collectives_per_step']:.0f} collectives per step")
        if overlap is not None:
            text += f", {overlap:.0f}% of comm time overlapped with " + ("the thread's own work" if on_cpu else "compute")
        text += "."
        if serialized:
            text += " Communication runs after the compute (serialised after backward) instead of during it."
        if r["median_msg_bytes"] is not None:
            text += f" Median message {human_bytes(r['median_msg_bytes'], decimals=1)}"
            if (r["small_msg_share"] or 0) > 0:
                text += f", {100 * r['small_msg_share']:.0f}% under {human_bytes(small_bytes, decimals=1)}"
            if r["busbw_gbps"] is not None:
                text += f"; bus bandwidth {r['busbw_gbps']:.1f} GB/s"
            text += "."
        if (r["imbalance_wait_ns_per_step"] or 0) > threshold(ctx, "MENTION_MIN_STEP_FRACTION") * mean_step:
            text += (f" Another {r['imbalance_wait_ns_per_step'] / 1e6:.2f} ms per step is waiting for later "
                     "ranks, not counted here (rank_imbalance's where their lateness is above the noise, else "
                     "the ranks' jitter).")
        if not r["matched"] and (r["world_size"] or 1) > 1:
            text += " Other ranks' traces are missing, so time spent waiting for them cannot be separated."
        sync = rounds.get(rank)
        if sync is not None:
            metrics["allreduce_rounds_per_step"] = round(float(sync["allreduce_rounds_per_step"]), 2)
            metrics["optimizer_steps_per_step"] = round(float(sync["optimizer_steps_per_step"]), 2)
            if metrics["optimizer_steps_per_step"] > 0 and \
                    metrics["allreduce_rounds_per_step"] > metrics["optimizer_steps_per_step"]:
                text += (f" Gradients are all-reduced {metrics['allreduce_rounds_per_step']:g} times per "
                         f"optimizer step ({metrics['optimizer_steps_per_step']:g}): gradient accumulation "
                         "without no_sync.")
        if hosts is not None:
            metrics["hosts"] = hosts
        if local_world and local_world > 1 and r["world_size"]:
            # deviceProperties lists the GPUs the process saw: the node's, unless visibility was
            # restricted per rank (then it is 1 and says nothing about nodes)
            metrics["nodes"] = -(-int(r["world_size"]) // local_world)
        findings.append(ctx.make(KIND, f"{KIND}:r{rank}", rank=rank, cost_ns=cost_ns, summary=text,
                                 metrics=metrics, step=r["worst_step"], stream=r["comm_stream"],
                                 t_start_ns=r["worst_start_ns"], t_end_ns=r["worst_end_ns"]))
    return findings
