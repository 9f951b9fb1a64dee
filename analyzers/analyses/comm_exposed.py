"""comm_exposed: collective time no compute hides, per rank, straggler waiting excluded.

The analysis is analyzers/sql/comm.sql (comm_exposure, one statement); this module only
turns its rows into Findings with the metrics accel.registry uses to pick fixes
(mean_msg_bytes, busbw_gbps, world_size, local_world_size).
"""
from __future__ import annotations

from typing import Any

import duckdb

from analyzers.analyses.rank_imbalance import context, ms, rows, threshold
from analyzers.model import Finding
from analyzers.sqlrun import ensure_loaded

KIND = "comm_exposed"


def _local_world_size(con: duckdb.DuckDBPyConnection, run_id: str) -> int | None:
    """GPUs per node, from deviceProperties (the GPUs the profiled process could see)."""
    row = con.execute("SELECT max(json_array_length(device_properties)) FROM ranks WHERE run_id = ?",
                      [run_id]).fetchone()
    return int(row[0]) if row and row[0] else None


def _link_class(busbw_gbps: float | None) -> str:
    """What the achieved bus bandwidth says about the link (nccl-tests busbw, large messages):
    PCIe Gen4 x16 ~25 GB/s practical and 100-200 Gb/s InfiniBand/RoCE 12-25 GB/s are "slow";
    NVLink (A100 ~230, H100 ~350-450 GB/s all-reduce busbw) is "fast"."""
    if busbw_gbps is None:
        return "unknown"
    return "slow" if busbw_gbps < 30 else "fast" if busbw_gbps >= 100 else "medium"


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "unknown size"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any = None) -> list[Finding]:
    ensure_loaded(con)
    ctx = context(con, run_id, ctx)
    min_pct = threshold(ctx, "MIN_FINDING_PCT")
    small_bytes = int(threshold(ctx, "COMM_SMALL_MESSAGE_BYTES"))
    exposure = rows(con, "SELECT * FROM comm_exposure(?, small_bytes := ?) ORDER BY rank",
                    [run_id, small_bytes])
    if not exposure:
        return []
    local_world = _local_world_size(con, run_id)
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
            "link_class": _link_class(r["busbw_gbps"]),
            "group_size": r["group_size"],
            "waiting_known": bool(r["matched"]),
            "collective_wait_ms_per_step": ms(r["wait_ns_per_step"]),
            "by_collective": [{"collective": c["collective"], "instances": c["instances"],
                               "total_bytes": c["total_bytes"], "mean_bytes": c["mean_bytes"],
                               "true_ms": ms(c["true_ns"]), "wait_ms": ms(c["wait_ns"]),
                               "algbw_gbps": c["algbw_gbps"], "busbw_gbps": c["busbw_gbps"]}
                              for c in types],
        }
        text = (f"Rank {rank}: {cost_ns / 1e6:.2f} ms per step of communication is exposed "
                f"({cost_pct:.1f}% of the step), {r['collectives_per_step']:.0f} collectives per step")
        if overlap is not None:
            text += f", {overlap:.0f}% of comm time overlapped with compute"
        text += "."
        if serialized:
            text += " Communication runs after the compute (serialised after backward) instead of during it."
        if r["median_msg_bytes"] is not None:
            text += f" Median message {_fmt_bytes(r['median_msg_bytes'])}"
            if (r["small_msg_share"] or 0) > 0:
                text += f", {100 * r['small_msg_share']:.0f}% under {_fmt_bytes(small_bytes)}"
            if r["busbw_gbps"] is not None:
                text += f"; bus bandwidth {r['busbw_gbps']:.1f} GB/s"
            text += "."
        if (r["imbalance_wait_ns_per_step"] or 0) > 0.01 * mean_step:
            text += (f" Another {r['imbalance_wait_ns_per_step'] / 1e6:.2f} ms per step is waiting for the "
                     "straggler (see rank_imbalance), not counted here.")
        if not r["matched"] and (r["world_size"] or 1) > 1:
            text += " Other ranks' traces are missing, so time spent waiting for them cannot be separated."
        if local_world and local_world > 1 and r["world_size"]:
            # deviceProperties lists the GPUs the process saw: the node's, unless visibility was
            # restricted per rank (then it is 1 and says nothing about nodes)
            metrics["nodes"] = -(-int(r["world_size"]) // local_world)
        findings.append(ctx.make(KIND, f"{KIND}:r{rank}", rank=rank, cost_ns=cost_ns, summary=text,
                                 metrics=metrics, step=r["worst_step"], stream=r["comm_stream"],
                                 t_start_ns=r["worst_start_ns"], t_end_ns=r["worst_end_ns"]))
    return findings
