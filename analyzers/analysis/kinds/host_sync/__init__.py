"""host_sync: the GPU idles because the CPU blocked in a synchronisation and then had to
refill the queue (`.item()`, `.cpu()`, `torch.cuda.synchronize()`, event waits, blocking copies).

Cost: per step, the GPU idle time in gaps that started while the CPU was blocked in such a call
(or that such calls mostly cover); see lib/gaps.sql. Those gaps are not in launch_gap.
Per-step figures count only what lies inside the rank's steps (gaps on the GPU clock, the sync
calls on the host clock: sync_calls_in_steps), so ProfilerSteps and inferred iterations give
the same figures and start-up is no step's cost.
"""
from __future__ import annotations

from typing import Any

import duckdb

from analyzers.analysis.kinds import cause_row, gap_causes, query, rounded, to_ms
from analyzers.common.model import AnalysisSpec, EvidenceSeries, Finding

SPEC = AnalysisSpec(
    kind="host_sync",
    title="Host synchronisation stalls the GPU",
    evidence=EvidenceSeries("idle_ms", "GPU idle per step, every cause",
                            "This finding counts {idle_ms_per_step:.2f} ms/step of it: the gaps that began while the CPU was blocked in a synchronisation."),
    metric_keys=frozenset({"gaps_per_step", "idle_ms_per_step", "longest_gap_ms", "syncs_per_step",
                           "top_callers"}),
    gap_cause="host_sync",
)
KIND = SPEC.kind

_CALLERS_SQL = """
    WITH ops AS (
        SELECT rank, external_id, any_value(name) AS op_name
        FROM events
        WHERE run_id = ? AND kind = 'cpu_op' AND external_id IS NOT NULL
        GROUP BY rank, external_id
    )
    -- per step: the calls inside the rank's steps, and their time inside (sync_calls_in_steps)
    SELECT s.rank, s.name AS call, coalesce(o.op_name, '(no aten op)') AS op, count(*) FILTER (WHERE s.counted) AS calls,
           sum(s.dur_ns) AS blocked_ns
    FROM sync_calls_in_steps(?) s LEFT JOIN ops o ON o.rank = s.rank AND o.external_id = s.external_id
    GROUP BY ALL
    ORDER BY s.rank, blocked_ns DESC
"""


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> list[Finding]:
    if not ctx.has_gpu:
        return []
    causes = gap_causes(con, run_id, ctx)
    callers = query(con, _CALLERS_SQL, [run_id, run_id])
    findings = []
    for rank in ctx.gpu_ranks():
        row = cause_row(causes, rank, SPEC.gap_cause)
        if row is None:
            continue
        per_step = ctx.ranks[rank].steps_divisor
        cost_ns = row["idle_ns"] / per_step
        mine = [c for c in callers if c["rank"] == rank]
        n_syncs = sum(c["calls"] for c in mine)
        top = [{"call": c["call"], "op": c["op"], "calls_per_step": rounded(c["calls"] / per_step, 2),
                "blocked_ms_per_step": to_ms(c["blocked_ns"] / per_step)} for c in mine[:5]]
        metrics = {
            "idle_ms_per_step": to_ms(cost_ns),
            "syncs_per_step": rounded(n_syncs / per_step, 2),
            "gaps_per_step": rounded(row["gaps"] / per_step, 2),
            "longest_gap_ms": to_ms(row["longest_gap_ns"]),
            "top_callers": top,
        }
        where = f" (mostly {top[0]['call']} from {top[0]['op']})" if top else ""
        summary = (f"Rank {rank}: the GPU idles {metrics['idle_ms_per_step']:.2f} ms per step after the CPU "
                   f"blocks on a synchronisation{where}; {metrics['syncs_per_step']:g} blocking calls per step.")
        findings.append(ctx.make(KIND, f"{KIND}:r{rank}", rank=rank, cost_ns=cost_ns, summary=summary,
                                 metrics=metrics, step=row["worst_step"], t_start_ns=row["worst_start_ns"],
                                 t_end_ns=row["worst_end_ns"]))
    return findings
