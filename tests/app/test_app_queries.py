"""analyzers.read.queries on hand-built runs whose every number is known (see tests/support/app_store.py)."""
from __future__ import annotations

import json

import pytest

from analyzers.read import queries
from analyzers.store.database import connect
from tests.support.app_store import AFTER_RUN, BEFORE_RUN, MS, add_event, fill_after_run, fill_before_run


@pytest.fixture()
def con():
    connection = connect(":memory:")
    fill_before_run(connection)
    fill_after_run(connection)
    yield connection
    connection.close()


def test_step_breakdown_parts_add_up_and_match_the_planted_intervals(con):
    steps = queries.step_breakdown(con, BEFORE_RUN)
    assert len(steps) == 3
    step1 = steps[(steps["rank"] == 0) & (steps["step"] == 1)].iloc[0]
    assert step1["step_ms"] == pytest.approx(10.0)
    assert step1["compute_ms"] == pytest.approx(3.5)        # [1,4) + [9.5,10): the crossing kernel is clipped
    assert step1["comm_exposed_ms"] == pytest.approx(2.0)   # all-reduce [3,6) minus the 1 ms under compute
    assert step1["comm_ms"] == pytest.approx(3.0)
    assert step1["memory_ms"] == pytest.approx(1.0)
    assert step1["idle_ms"] == pytest.approx(3.5)
    step2 = steps[(steps["rank"] == 0) & (steps["step"] == 2)].iloc[0]
    assert step2["compute_ms"] == pytest.approx(1.0 + 10e-6)  # [10,11) + ten 1 ns kernels
    parts = steps[["compute_ms", "comm_exposed_ms", "memory_ms", "idle_ms"]].sum(axis=1)
    assert parts.to_numpy() == pytest.approx(steps["step_ms"].to_numpy())


def test_rank_without_profiler_steps_gets_one_pseudo_step_over_its_gpu_span(con):
    steps = queries.step_breakdown(con, BEFORE_RUN)
    rank1 = steps[steps["rank"] == 1]
    assert len(rank1) == 1 and rank1["step"].isna().all()
    assert rank1.iloc[0]["step_ms"] == pytest.approx(6.0)
    assert rank1.iloc[0]["compute_ms"] == pytest.approx(3.0)
    assert rank1.iloc[0]["idle_ms"] == pytest.approx(3.0)


def test_rank_breakdown_is_the_mean_over_steps(con):
    per_rank = queries.rank_breakdown(con, BEFORE_RUN).set_index("rank")
    assert per_rank.loc[0, "steps"] == 2
    assert per_rank.loc[0, "step_ms"] == pytest.approx(10.0)
    assert per_rank.loc[0, "compute_ms"] == pytest.approx((3.5 + 1.00001) / 2)
    assert per_rank.loc[0, "comm_exposed_ms"] == pytest.approx(1.0)


def test_timeline_merges_short_events_and_reads_only_the_window(con):
    bars = queries.timeline_window(con, BEFORE_RUN, 10 * MS, 20 * MS, ranks=[0])
    merged = bars[bars["kind"] == "merged"]
    assert len(merged) == 1 and merged.iloc[0]["n_events"] == 10
    assert merged.iloc[0]["name"] == "10 short events"
    names = set(bars["name"])
    assert "gemm_kernel" not in names           # ends at 4 ms, outside the window
    assert "elementwise_kernel" in names        # crosses into the window
    assert set(bars["rank"]) == {0}
    assert bars[bars["name"] == "ProfilerStep#2"]["is_gpu"].tolist() == [False]


def test_timeline_labels_communication_kernels_and_caps_bars(con):
    bars = queries.timeline_window(con, BEFORE_RUN, 0, 20 * MS)
    assert bars[bars["name"].str.startswith("ncclKernel")]["kind"].tolist() == ["communication"]
    assert bars["lane"].str.startswith("rank ").all()    # several ranks: lanes carry the rank
    capped = queries.timeline_window(con, BEFORE_RUN, 0, 20 * MS, max_events=2)
    assert (capped["kind"] != "merged").sum() == 2
    assert set(capped.loc[capped["kind"] != "merged", "name"]) == {"ProfilerStep#1", "ProfilerStep#2"}


def test_export_window_is_a_chrome_trace_with_escaped_untrusted_names(con):
    data = json.loads(queries.export_window_trace(con, BEFORE_RUN, 0, 10 * MS, ranks=[0]))
    events = [e for e in data["traceEvents"] if e["ph"] == "X"]
    by_name = {e["name"]: e for e in events}
    assert by_name["gemm_kernel"]["ts"] == pytest.approx(1000.0)      # µs
    assert by_name["gemm_kernel"]["dur"] == pytest.approx(3000.0)
    assert "aten::mm <script>alert(1)</script>" in by_name                # kept as text, JSON-escaped
    nccl = by_name["ncclKernel_AllReduce_RING_LL_Sum_float"]
    assert nccl["args"]["In msg nelems"] == 1_000_000
    assert "tiny_kernel" not in by_name and "ProfilerStep#2" not in by_name
    process_names = {e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"}
    assert process_names == {"rank 0 · 0", "rank 0 · 1"}


def test_export_of_an_empty_window_is_still_valid_json(con):
    data = json.loads(queries.export_window_trace(con, BEFORE_RUN, 100 * MS, 200 * MS))
    assert data["traceEvents"] == []


def test_collectives_bytes_and_bandwidth(con):
    coll = queries.collectives(con, BEFORE_RUN)
    assert len(coll) == 1
    row = coll.iloc[0]
    assert row["collective"] == "allreduce"   # one spelling everywhere: lib/collectives.sql, lower case
    assert row["bytes"] == 4_000_000
    assert row["duration_ms"] == pytest.approx(3.0)
    assert row["algbw_gbps"] == pytest.approx(4e6 / 3e6)
    assert row["busbw_gbps"] == pytest.approx(4e6 / 3e6 * 2 * (2 - 1) / 2)
    # no size metadata: the row is there, bytes and bandwidth are empty
    after = queries.collectives(con, AFTER_RUN)
    assert len(after) == 1 and after["bytes"].isna().all() and after["busbw_gbps"].isna().all()


def test_collectives_busbw_factor_for_all_gather(con):
    add_event(con, AFTER_RUN, 0, "kernel", "ncclDevKernel_AllGather_RING_LL(x)", 20 * MS, 2 * MS, stream=20,
              args={"Group size": 4, "In msg nelems": 500, "dtype": "BFloat16"})
    row = queries.collectives(con, AFTER_RUN).set_index("collective").loc["allgather"]
    assert row["bytes"] == 1000
    assert row["busbw_gbps"] == pytest.approx(1000 / 2e6 * 3 / 4)
    summary = queries.collective_summary(con, AFTER_RUN)
    assert set(summary["collective"]) == {"allgather", "allreduce"}


def test_findings_come_costliest_first_with_their_marks(con):
    from accel import registry
    from analyzers.store.runs import set_mark

    set_mark(con, BEFORE_RUN, "comm_exposed:r0", "to_fix", "try bucket_cap_mb=100")
    found = queries.findings(con, BEFORE_RUN)
    assert [f["id"] for f in found] == ["launch_gap:r0:s7", "comm_exposed:r0"]
    assert found[0]["cost_ms_per_step"] == pytest.approx(3.5)
    # fixes are chosen when read, from the kind and the stored metrics: this finding does not measure
    # syncs per step, which decides whether CUDA graphs fit, so the fixes that apply come first (the
    # run's workload is unknown, so serving_cuda_graphs is not ruled out: it applies, after the general one)
    fixes = found[0]["fixes"]
    assert fixes[0] == "compile_reduce_overhead" and "cuda_graph" in fixes
    before_cuda_graph = fixes[:fixes.index("cuda_graph")]
    assert before_cuda_graph and not set(before_cuda_graph) & (set(found[0]["fixes_unknown"]) |
                                                                set(found[0]["fixes_ruled_out"]))
    assert fixes == registry.fixes_for("launch_gap", found[0]["metrics"])
    assert list(found[0]["fixes_unknown"])[0] == "cuda_graph" and "syncs_per_step" in found[0]["fixes_unknown"]["cuda_graph"]
    assert found[1]["mark_status"] == "to_fix" and found[1]["mark_note"] == "try bucket_cap_mb=100"
    assert found[0]["mark_status"] is None


def test_compare_runs_cost_deltas_per_kind_and_step_delta(con):
    result = queries.compare_runs(con, BEFORE_RUN, AFTER_RUN)
    kinds = result["kinds"].set_index("kind")
    assert kinds.loc["launch_gap", "before_ms"] == pytest.approx(3.5)
    assert kinds.loc["launch_gap", "after_ms"] == 0
    assert kinds.loc["comm_exposed", "delta_ms"] == pytest.approx(-1.0)
    assert kinds.loc["comm_exposed", "after_pct"] == pytest.approx(12.5)
    delta = result["delta"]
    # the mean over ranks of each rank's mean step: rank 0's two 10 ms steps and rank 1's 6 ms
    # pseudo-step weigh one rank each (a mean over rank x step rows would give 26 / 3)
    assert delta["mean_step_ms_before"] == pytest.approx((10 + 6) / 2)
    assert delta["mean_step_ms_after"] == pytest.approx(8.0)
    assert delta["speedup"] == pytest.approx(1.0)
    assert delta["slowdown"] == pytest.approx(1.0)
    assert result["steps"].set_index("run").loc["before", "steps"] == 3


def test_queries_on_an_unknown_run_return_empty_results(con):
    assert queries.run_info(con, "nope") is None
    assert queries.step_breakdown(con, "nope").empty
    assert queries.findings(con, "nope") == []
    assert queries.time_bounds(con, "nope") is None
    assert queries.collectives(con, "nope").empty


def test_steps_move_onto_the_gpu_clock_through_their_launches():
    """The host runs ahead: step 1 launches a kernel that runs during host step 2. Its GPU window
    starts at its first launched activity and ends where step 2's starts; the last step ends where
    its host step does (its kernel ends earlier): no next step's work could start before that, and
    nothing says the GPU stayed idle longer."""
    from tests.support.app_store import add_run

    con = connect(":memory:")
    add_run(con, "lagging", "lagging", [0])
    add_event(con, "lagging", 0, "user_annotation", "ProfilerStep#1", 0, 10 * MS)
    add_event(con, "lagging", 0, "user_annotation", "ProfilerStep#2", 10 * MS, 10 * MS)
    for launch_ms, corr in ((1, 1), (11, 2)):
        add_event(con, "lagging", 0, "runtime", "cudaLaunchKernel", launch_ms * MS, 10_000)
        con.execute("UPDATE events SET correlation = ? WHERE name = 'cudaLaunchKernel' AND ts_ns = ?",
                    [corr, launch_ms * MS])
    add_event(con, "lagging", 0, "kernel", "gemm_kernel", 5 * MS, 7 * MS, stream=7)
    add_event(con, "lagging", 0, "kernel", "gemm_kernel", 14 * MS, 2 * MS, stream=7)
    con.execute("UPDATE events SET correlation = CASE WHEN ts_ns = ? THEN 1 ELSE 2 END WHERE kind = 'kernel'",
                [5 * MS])
    steps = queries.step_breakdown(con, "lagging").set_index("step")
    assert steps.loc[1, "t0_ns"] == 5 * MS and steps.loc[1, "t1_ns"] == 14 * MS
    assert steps.loc[1, "compute_ms"] == pytest.approx(7.0) and steps.loc[1, "idle_ms"] == pytest.approx(2.0)
    assert steps.loc[2, "t1_ns"] == 20 * MS
    assert steps.loc[2, "step_ms"] == pytest.approx(6.0) and steps.loc[2, "idle_ms"] == pytest.approx(4.0)


def test_timeline_widens_merge_bins_to_stay_under_the_bar_budget(con):
    for i in range(100):   # 1 ns kernels every 0.1 ms over [10, 20) ms: 100 separate pixels
        add_event(con, BEFORE_RUN, 0, "kernel", "tiny_spread", 10 * MS + i * MS // 10, 1, stream=9)
    lane = "GPU 0 · stream 9"
    fine = queries.timeline_window(con, BEFORE_RUN, 10 * MS, 20 * MS, ranks=[0])
    assert (fine["lane"] == lane).sum() == 100
    coarse = queries.timeline_window(con, BEFORE_RUN, 10 * MS, 20 * MS, ranks=[0], max_merged=6)
    merged = coarse[coarse["kind"] == "merged"]
    # 3 lanes in the window (streams 7 and 9, the CPU thread): bins of 10 ms * 3 / 6 = 5 ms -> 2 on stream 9
    assert (merged["lane"] == lane).sum() == 2
    assert merged.loc[merged["lane"] == lane, "n_events"].sum() == 100
