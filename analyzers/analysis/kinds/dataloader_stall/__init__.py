"""dataloader_stall: the training loop waits for its next batch and the GPU starves.

Cost: per step, the GPU idle time in gaps the CPU mostly spent inside
`enumerate(DataLoader)...__next__` (lib/gaps.sql, cause 'dataloader'): loader time the GPU
did not hide behind queued work. On a rank without GPU activity (a CPU-only trace) the cost is
the loader wait itself, per step. A loader holding the loop for less than DATALOADER_MIN_PCT
of the step is not reported.
"""
from __future__ import annotations

from typing import Any

import duckdb

from analyzers.analysis.kinds import cause_row, gap_causes, query, rounded, to_ms
from analyzers.common.model import AnalysisSpec, EvidenceSeries, Finding

SPEC = AnalysisSpec(
    kind="dataloader_stall",
    title="The data loader starves the training loop",
    evidence=EvidenceSeries("idle_ms", "GPU idle per step, every cause",
                            "This finding counts {idle_ms_per_step:.2f} ms/step of it: the gaps while the training loop waited for the DataLoader."),
    metric_keys=frozenset({"gpu", "idle_ms_per_step", "loader", "longest_wait_ms", "num_workers",
                           "step_time_ms", "wait_ms_per_step", "wait_pct_of_step"}),
    measured_without_gpu=True,
    gap_cause="dataloader",
)
KIND = SPEC.kind

_LOADER_SQL = """
    SELECT rank, count(*) AS spans, sum(end_ns - start_ns) AS wait_ns, max(end_ns - start_ns) AS longest_ns,
           bool_or(contains(name, 'SingleProcess')) AS single_process,
           bool_or(contains(name, 'MultiProcessing')) AS multi_process,
           arg_max(step, end_ns - start_ns) AS worst_step,
           arg_max(start_ns, end_ns - start_ns) AS worst_start_ns, arg_max(end_ns, end_ns - start_ns) AS worst_end_ns
    FROM dataloader_spans(?)
    -- on a rank with steps, only waits inside them (the first batch of start-up is no step's)
    WHERE step IS NOT NULL OR rank NOT IN (SELECT rank FROM steps(?))
    GROUP BY rank
"""


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> list[Finding]:
    loaders = {r["rank"]: r for r in query(con, _LOADER_SQL, [run_id, run_id])}
    if not loaders:
        return []
    causes = gap_causes(con, run_id, ctx) if ctx.has_gpu else []
    findings = []
    for rank, ld in sorted(loaders.items()):
        info = ctx.ranks.get(rank)
        if info is None:
            continue
        per_step = info.steps_divisor
        wait_ns = ld["wait_ns"] / per_step
        wait_pct = ctx.cost_pct(rank, wait_ns)
        if wait_pct < ctx.thresholds["DATALOADER_MIN_PCT"]:
            continue
        if info.has_gpu:
            row = cause_row(causes, rank, SPEC.gap_cause)
            if row is None:
                continue    # the GPU had queued work through every wait: nothing lost
            cost_ns = row["idle_ns"] / per_step
            step, t0, t1 = row["worst_step"], row["worst_start_ns"], row["worst_end_ns"]
        else:
            cost_ns = wait_ns
            step, t0, t1 = ld["worst_step"], ld["worst_start_ns"], ld["worst_end_ns"]
        # _SingleProcessDataLoaderIter means num_workers=0; with workers the count is not in the trace
        num_workers = 0 if ld["single_process"] and not ld["multi_process"] else None
        metrics = {
            "idle_ms_per_step": to_ms(cost_ns) if info.has_gpu else None,
            "wait_ms_per_step": to_ms(wait_ns),
            "wait_pct_of_step": rounded(wait_pct, 2),
            "step_time_ms": to_ms(info.mean_step_ns),
            "longest_wait_ms": to_ms(ld["longest_ns"]),
            "num_workers": num_workers,
            "loader": "single-process (num_workers=0)" if num_workers == 0 else
                      ("multi-process" if ld["multi_process"] else "unknown"),
            "gpu": info.has_gpu,
        }
        if info.has_gpu:
            summary = (f"Rank {rank}: the GPU idles {metrics['idle_ms_per_step']:.2f} ms per step while the "
                       f"training loop waits for the DataLoader ({metrics['wait_ms_per_step']:.2f} ms per step, "
                       f"{wait_pct:.0f}% of the step")
        else:
            summary = (f"Rank {rank} (no GPU activity): the training loop waits "
                       f"{metrics['wait_ms_per_step']:.2f} ms per step for the DataLoader ({wait_pct:.0f}% of the step")
        summary += ", num_workers=0)." if num_workers == 0 else ")."
        findings.append(ctx.make(KIND, f"{KIND}:r{rank}", rank=rank, cost_ns=cost_ns, summary=summary,
                                 metrics=metrics, step=step, t_start_ns=t0, t_end_ns=t1))
    return findings
