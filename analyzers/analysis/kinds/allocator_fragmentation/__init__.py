"""allocator_fragmentation: the caching allocator reserves far more than is allocated, in free
pieces too small or misplaced to serve the next request (what ends in "CUDA out of memory" with
plenty "reserved but unallocated").

From each allocator snapshot stored with the run (memory_snapshot_summary: reserved = the
segments' total_size, allocated = the active_allocated blocks, the largest free block) and from
the trace's [memory] events on GPUs (reserved minus allocated at the moment allocated peaks: the
cache between steps holds freed activations on purpose; at the peak it should be in use).
Reported from FRAGMENTATION_MIN_PCT of reserved and FRAGMENTATION_MIN_BYTES. Cost: reserved -
allocated, in bytes and % of the device. A snapshot taken at OOM names the request that failed.
It reads the snapshots of every rank at once, so it runs across ranks.
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
    kind="allocator_fragmentation",
    title="Allocator fragmentation: reserved far above allocated",
    evidence=memory_evidence(),
    metric_keys=MEMORY_METRIC_KEYS | frozenset({"source", "file", "reserved_bytes", "allocated_bytes",
                                                "fragmentation_bytes", "fragmentation_pct", "segments",
                                                "largest_free_block_bytes", "expandable_segments",
                                                "oom_requested_bytes"}),
    measured_without_gpu=True,
    cost_unit="memory",
)
KIND = SPEC.kind
ACROSS_RANKS = True

_EVENTS_SQL = """
    WITH e AS (SELECT * FROM memory_events(?) WHERE device_type <> 0)
    SELECT e.rank, e.device_type, e.device_id, any_value(e.device) AS device,
           arg_max(e.total_reserved, (e.total_allocated, -e.seq)) AS reserved_bytes,
           arg_max(e.total_allocated, (e.total_allocated, -e.seq)) AS allocated_bytes,
           arg_max(e.ts_ns, (e.total_allocated, -e.seq)) AS ts_ns
    FROM e GROUP BY ALL ORDER BY e.rank, e.device_type, e.device_id
"""


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> list[Finding]:
    t = ctx.thresholds
    totals = {(r["rank"], r["device_type"], r["device_id"]): r for r in
              query(con, "SELECT * FROM memory_device_summary(?)", [run_id])}
    candidates = []
    for s in query(con, "SELECT * FROM memory_snapshot_summary(?) ORDER BY snapshot_id", [run_id]):
        device_total = next((d["device_total_bytes"] for (rank, dtype, _), d in totals.items()
                             if rank == s["rank"] and dtype == 1 and d["device_total_bytes"]), None)
        candidates.append(dict(source="snapshot", rank=s["rank"], file=s["file_name"], device="snapshot",
                               reserved=s["reserved_bytes"], allocated=s["allocated_bytes"],
                               segments=s["segments"], largest_free=s["largest_free_block_bytes"],
                               expandable=s["expandable_segments"], oom=s["oom_requested_bytes"],
                               device_total=device_total, peak=s["allocated_bytes"], ts=None))
    for e in query(con, _EVENTS_SQL, [run_id]):
        d = totals.get((e["rank"], e["device_type"], e["device_id"])) or {}
        candidates.append(dict(source="trace", rank=e["rank"], file=None, device=e["device"],
                               reserved=e["reserved_bytes"], allocated=e["allocated_bytes"], segments=None,
                               largest_free=None, expandable=None, oom=None,
                               device_total=d.get("device_total_bytes"), peak=d.get("peak_allocated_bytes"),
                               ts=e["ts_ns"]))
    worst_by_rank: dict[int, dict[str, Any]] = {}
    for c in candidates:
        frag = (c["reserved"] or 0) - (c["allocated"] or 0)
        pct = 100.0 * frag / c["reserved"] if c["reserved"] else 0.0
        if frag < t["FRAGMENTATION_MIN_BYTES"] or pct < t["FRAGMENTATION_MIN_PCT"]:
            continue
        c.update(frag=frag, pct=pct)
        if c["rank"] not in worst_by_rank or frag > worst_by_rank[c["rank"]]["frag"]:
            worst_by_rank[c["rank"]] = c
    findings = []
    for rank, c in sorted(worst_by_rank.items()):
        metrics = {"source": c["source"], "file": c["file"], "reserved_bytes": c["reserved"],
                   "allocated_bytes": c["allocated"], "fragmentation_bytes": int(c["frag"]),
                   "fragmentation_pct": round(c["pct"], 2), "segments": c["segments"],
                   "largest_free_block_bytes": c["largest_free"], "expandable_segments": c["expandable"],
                   "oom_requested_bytes": c["oom"]}
        where = f"snapshot {c['file']}" if c["source"] == "snapshot" else f"{c['device']} at its peak"
        summary = (f"Rank {rank} ({where}): the allocator reserves {human_bytes(c['reserved'])} but only "
                   f"{human_bytes(c['allocated'])} is allocated: {human_bytes(c['frag'])} ({c['pct']:.0f}% of "
                   f"reserved){of_device(c['frag'], c['device_total'])} sits in cached free blocks"
                   + (f" across {c['segments']} segments, the largest free block {human_bytes(c['largest_free'])}"
                      if c["segments"] is not None else "") + "."
                   + (f" The allocation that failed asked for {human_bytes(c['oom'])}." if c["oom"] else "")
                   + (" Expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) let one segment "
                      "grow instead of caching many; steady tensor shapes and fewer empty_cache() calls help too."
                      if not c["expandable"] else " Its segments are expandable already: look for changing "
                      "tensor shapes and tensors held across steps."))
        findings.append(memory_finding(ctx, KIND, rank=rank, cost_bytes=c["frag"], device=c["device"],
                                       device_total_bytes=c["device_total"], peak_allocated_bytes=c["peak"],
                                       summary=summary, metrics=metrics, t_start_ns=c["ts"], t_end_ns=c["ts"]))
    return findings
