"""rank_summary agrees with Holistic Trace Analysis on the real traces.

Expected figures are HTA 0.5.0's own output, as listed in ../shared/traces/README.md
(get_temporal_breakdown and get_comm_comp_overlap, include_last_profiler_step=True). Tolerance:
0.5 points, except on nccl_allreduce_with_sizes whose sub-microsecond timestamps HTA truncates
to whole microseconds (we keep nanoseconds): 1 point there.
"""
from __future__ import annotations

import pytest

from analyzers.ingest import ingest_paths
from analyzers.analysis.metrics import rank_summary
from analyzers.store.database import connect

# trace, rank, idle %, compute %, non-compute %, comm/comp overlap % (None: no communication)
HTA_FIGURES = [
    ("nccl2rank", 0, 55.21, 17.20, 27.59, 14.95),
    ("nccl2rank", 1, 52.89, 22.09, 25.02, 19.93),
    ("nccl_allreduce_with_sizes", 0, 76.68, 17.11, 6.21, 15.14),
    ("resnet50_num_workers_0", 0, 29.89, 68.62, 1.49, None),
    ("resnet50_num_workers_4", 0, 10.82, 86.33, 2.85, None),
    ("alexnet_single_gpu", 0, 99.49, 0.08, 0.43, None),
    ("rocm_mi250_minitoy", 0, 98.53, 1.08, 0.39, None),
    ("triton_single_kernel", 0, 0.00, 100.00, 0.00, None),
]
MICROSECOND_TRUNCATED = {"nccl_allreduce_with_sizes"}


def trace_path(shared, name):
    return shared / name if (shared / name).is_dir() else shared / f"{name}.json.gz"


@pytest.fixture(scope="module")
def summaries(shared_traces):
    """rank_summary of every trace of the table, keyed by (trace, rank)."""
    con = connect(":memory:")
    out = {}
    for name in sorted({row[0] for row in HTA_FIGURES}):
        result = ingest_paths(con, [trace_path(shared_traces, name)], name=name)
        assert result.run_id is not None, result.errors
        for row in rank_summary(con, result.run_id):
            out[(name, row["rank"])] = row
    con.close()
    return out


@pytest.mark.parametrize("trace,rank,idle,compute,non_compute,overlap", HTA_FIGURES,
                         ids=[f"{r[0]}-r{r[1]}" for r in HTA_FIGURES])
def test_temporal_breakdown_and_overlap_match_hta(summaries, trace, rank, idle, compute, non_compute, overlap):
    tol = 1.0 if trace in MICROSECOND_TRUNCATED else 0.5
    got = summaries[(trace, rank)]
    assert got["idle_pct"] == pytest.approx(idle, abs=tol)
    assert got["compute_pct"] == pytest.approx(compute, abs=tol)
    assert got["non_compute_pct"] == pytest.approx(non_compute, abs=tol)
    # the three parts tile the span
    assert got["idle_pct"] + got["compute_pct"] + got["non_compute_pct"] == pytest.approx(100.0, abs=1e-6)
    if overlap is None:
        assert got["comm_time_ms"] == 0.0
        assert got["comm_overlap_pct"] is None
    else:
        assert got["comm_overlap_pct"] == pytest.approx(overlap, abs=tol)
        assert got["comm_time_ms"] > 0


@pytest.mark.parametrize("name,rank", [("cpu_only_rank34", 34), ("no_distributed_info_cpu_ops", 0)])
def test_traces_without_gpu_activity_give_empty_gpu_figures_and_gloo_comm(shared_traces, name, rank):
    con = connect(":memory:")
    result = ingest_paths(con, [trace_path(shared_traces, name)], name=name)
    rows = rank_summary(con, result.run_id)
    assert [r["rank"] for r in rows] == [rank]
    row = rows[0]
    assert row["steps"] == 1 and row["step_time_ms"] > 0
    for key in ("idle_pct", "compute_pct", "non_compute_pct", "comm_overlap_pct", "h2d_time_ms"):
        assert row[key] is None, key
    # comm per step on a CPU rank: its gloo collectives in flight inside the steps, as rank_balance
    # counts them (cpu_only_rank34 all-reduces with gloo; the other trace has no collective)
    balance = con.execute("SELECT comm_ns_per_step / 1e6 FROM rank_balance(?, 0)", [result.run_id]).fetchone()
    if name == "cpu_only_rank34":
        assert 0 < row["comm_time_ms"] < row["step_time_ms"]
        assert row["comm_time_ms"] == pytest.approx(balance[0], rel=1e-9)
    else:
        assert row["comm_time_ms"] is None
