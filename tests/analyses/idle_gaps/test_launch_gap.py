"""GPU idle gaps split by cause (lib/gaps.sql) and the launch_gap / host_sync /
dataloader_stall / h2d_stall findings built on them, on a hand-written trace whose every gap has
a known cause, then on the real traces."""
from __future__ import annotations

import json

import pytest

from tests.support.analysis import hand_written_store
from analyzers.execution.pipeline import analyze_run, run_analyses
from analyzers.analysis.metrics import rank_breakdown_rows
from tests.support.events import US, ev, launch, synthetic_events


@pytest.fixture()
def syn():
    con = hand_written_store(synthetic_events())
    yield con
    con.close()


def _steps_with_a_hole(hole_in: set[int], n_steps: int = 4) -> list[dict]:
    """n 10 ms steps: a kernel, then the CPU 2 ms outside every op (in the steps in hole_in) or in
    an op, then the launch of the next kernel."""
    rows = []
    for i in range(n_steps):
        t = i * 10000
        rows += [ev("user_annotation", f"ProfilerStep#{i + 1}", t, t + 10000)]
        rows += launch(10 * i + 1, t + 10, t + 15, t + 20, t + 1000)
        rows += [ev("cpu_op", "aten::add", t + 15, t + 1000)]
        if i not in hole_in:
            rows += [ev("cpu_op", "aten::mul", t + 1000, t + 3000)]
        rows += launch(10 * i + 2, t + 3000, t + 3005, t + 3010, t + 9000, name="vectorized_elementwise_kernel")
        rows += [ev("cpu_op", "aten::sum", t + 3005, t + 10000)]
    return rows


@pytest.mark.parametrize("hole_in,cause", [({0, 1, 2, 3}, "untraced"), ({0, 2}, "untraced"), ({1}, "launch_bound")])
def test_a_recurring_hole_outside_every_op_is_untraced_host_time(hole_in, cause):
    # every step (or half of them): work the loop does; one step of four: the process descheduled
    con = hand_written_store(_steps_with_a_hole(hole_in))
    try:
        got = con.execute("SELECT step, cause FROM gpu_idle_gaps('syn', 0.5, 1000000) "
                          "WHERE (start_ns // 1000) % 10000 = 1000 ORDER BY step").fetchall()
        findings, _ = run_analyses(con, "syn")
    finally:
        con.close()
    assert got == [(i + 1, cause if i in hole_in else "launch_bound") for i in range(4)]
    kinds = {f.kind: f for f in findings}
    if cause == "untraced":
        f = kinds["untraced_host_time"]
        assert f.metrics["before_op"] == "aten::add" and f.metrics["after_op"] == "cudaLaunchKernel"
        assert f.cost_ns == pytest.approx(2_010_000 * len(hole_in) / 4)   # the GPU idle, per step
    else:
        assert "untraced_host_time" not in kinds


def test_the_autograd_engines_set_up_before_backward_is_no_untraced_python():
    # the same 2 ms hole every step, between the loss gradient's seed and the first backward function
    rows = _steps_with_a_hole({0, 1, 2, 3})
    for i in range(4):
        t = i * 10000
        rows = [r for r in rows if not (r["name"] == "aten::add" and r["ts_ns"] // 1000 == t + 15)]
        rows += [ev("cpu_op", "aten::ones_like", t + 15, t + 1000),
                 ev("cpu_op", "autograd::engine::evaluate_function: MseLossBackward0", t + 3000, t + 3008)]
    con = hand_written_store(rows)
    try:
        holes = con.execute("SELECT before_name, after_name, recurring FROM untraced_host_time('syn', 1000000)").fetchall()
        findings, _ = run_analyses(con, "syn")
    finally:
        con.close()
    assert holes and all(h == ("aten::ones_like", "autograd::engine::evaluate_function: MseLossBackward0", False)
                         for h in holes), holes
    assert "untraced_host_time" not in {f.kind for f in findings}


def test_every_gap_gets_its_planted_cause(syn):
    got = syn.execute("SELECT start_ns // 1000, end_ns // 1000, cause, step FROM gpu_idle_gaps('syn', 0.5, 1000000) "
                      "ORDER BY start_ns").fetchall()
    assert got == [(1000, 4010, "dataloader", 1), (5000, 5010, "launch_bound", 1), (6000, 6110, "host_sync", 1), (7000, 7210, "launch_bound", 1),
                   (8000, 8050, "gpu_wait", 1), (9000, 9400, "h2d_copy", 1), (9600, 10010, "launch_bound", 1)]
    # the gaps tile the idle time of the temporal breakdown: nothing lost, nothing counted twice
    idle = rank_breakdown_rows(syn, "syn")[0]["idle_ns"]
    assert idle == (3010 + 10 + 110 + 210 + 50 + 400 + 410) * US


def test_findings_cost_each_cause_once(syn):
    findings, notes = run_analyses(syn, "syn", {"MIN_FINDING_PCT": 0.0})
    by_kind = {f.kind: f for f in findings}
    assert set(by_kind) == {"dataloader_stall", "host_sync", "launch_gap", "h2d_stall"}
    # per step = total / 2 steps; % of the 10 ms mean step
    assert by_kind["dataloader_stall"].cost_ns == 3010 * US // 2
    assert by_kind["dataloader_stall"].cost_pct == pytest.approx(15.05)
    assert by_kind["dataloader_stall"].severity == "medium"
    assert by_kind["dataloader_stall"].metrics["num_workers"] == 0
    assert by_kind["host_sync"].cost_ns == 110 * US // 2
    assert by_kind["host_sync"].metrics["top_callers"][0]["op"] == "aten::item"
    assert by_kind["launch_gap"].cost_ns == (10 + 210 + 410) * US // 2
    # h2d: the 200 µs copy nothing overlaps + the 400 µs the GPU idled while the CPU staged it
    h2d = by_kind["h2d_stall"]
    assert h2d.cost_ns == (200 + 400) * US // 2
    assert h2d.metrics["pageable_share"] == 1.0
    assert h2d.metrics["achieved_gbps"] == pytest.approx(10.0)   # 2 MB in 200 µs
    assert h2d.metrics["h2d_overlap_pct"] == 0.0
    assert [f.cost_ns for f in findings] == sorted((f.cost_ns for f in findings), reverse=True)
    assert notes == []


def test_threshold_suppresses_small_findings_and_table_is_replaced(syn):
    first = analyze_run(syn, "syn", {"MIN_FINDING_PCT": 0.0})
    assert syn.execute("SELECT count(*) FROM findings WHERE run_id = 'syn'").fetchone()[0] == len(first) == 4
    default = analyze_run(syn, "syn")       # 5% of step: only the 15% data-loader stall stays
    assert [f.kind for f in default] == ["dataloader_stall"]
    stored = syn.execute("SELECT finding_id, kind, cost_ns, metrics FROM findings WHERE run_id = 'syn'").fetchall()
    assert [(r[0], r[1], r[2]) for r in stored] == [("dataloader_stall", "dataloader_stall", 1505 * US)]
    assert json.loads(stored[0][3])["wait_ms_per_step"] == pytest.approx(1.5)


def test_unknown_threshold_is_rejected(syn):
    with pytest.raises(ValueError, match="NO_SUCH"):
        analyze_run(syn, "syn", {"NO_SUCH": 1})


def test_launch_stats_follow_hta_definition(syn):
    row = syn.execute("SELECT * FROM launch_stats('syn', 100000, 50000, 10000)").fetchone()
    cols = [d[0] for d in syn.description]
    stats = dict(zip(cols, row))
    assert stats["launches"] == 8
    # delay = GPU start - end of the launch call, floored at 0: 5,5,5,5,5,745,0 (copy starts
    # before its call returns),5 µs
    assert stats["mean_launch_delay_ns"] == pytest.approx((5 * 6 + 745) * US / 8)
    assert stats["delay_outliers"] == 1            # the 745 µs one
    assert stats["runtime_outliers"] == 1          # the 500 µs copy call
    assert stats["short_kernel_share"] == 0.0      # every kernel outlasts its 5 µs launch


# --- real traces ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cpu_only_rank34", "no_distributed_info_cpu_ops"])
def test_cpu_only_traces_say_so_and_find_nothing_gpu(real, name):
    from analyzers.analysis.kinds import kinds_measured_without_gpu

    findings, notes = real[name]
    # only what the host shows (cpu_only_rank34's training thread waits on gloo: comm_exposed)
    assert {f.kind for f in findings} <= kinds_measured_without_gpu()
    assert any("no GPU activity" in n for n in notes)


def test_single_kernel_trace_has_no_idle(real):
    findings, _ = real["triton_single_kernel"]
    assert findings == []


