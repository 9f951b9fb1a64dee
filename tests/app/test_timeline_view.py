"""The timeline: its window query (nesting depth, merging that depends on the span, launch -> GPU
flows, thread labels, clamped windows), its chart, its Chrome-trace export and the page itself."""
from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from analyzers.read import queries
from analyzers.store.database import connect
from app import charts
from tests.support.app_store import MS, add_event, add_finding, add_run
from tests.support.paths import REPO_ROOT

US = 1_000  # ns
RUN = "run_timeline_01"


def add_metadata(con, run_id: str, rank: int, name: str, pid: str, tid: str, value: str) -> None:
    con.execute("INSERT INTO events (run_id, rank, kind, ph, name, pid, tid, args) "
                "VALUES (?, ?, 'metadata', 'M', ?, ?, ?, ?)", [run_id, rank, name, pid, tid, json.dumps({"name": value})])


def add_launch_pair(con, run_id: str, correlation: int, launch_ns: int, kernel_ns: int, kernel: str,
                    tid: str = "100") -> None:
    """A cudaLaunchKernel on CPU thread tid and the kernel it started on GPU 0, stream 7."""
    con.execute("INSERT INTO events (run_id, rank, kind, ph, name, ts_ns, dur_ns, pid, tid, correlation, args) "
                "VALUES (?, 0, 'runtime', 'X', 'cudaLaunchKernel', ?, ?, '100', ?, ?, '{}')",
                [run_id, launch_ns, 50 * US, tid, correlation])
    con.execute("INSERT INTO events (run_id, rank, kind, ph, name, ts_ns, dur_ns, pid, tid, device, stream, "
                "correlation, args) VALUES (?, 0, 'kernel', 'X', ?, ?, ?, '0', '7', 0, 7, ?, '{}')",
                [run_id, kernel, kernel_ns, 20 * US, correlation])


def fill_run(con) -> None:
    """Rank 0 over [0, 100) ms. Main thread 100 (pid 100), named by metadata: an op tree
    aten::linear [10, 30) > aten::addmm [11, 20) > aten::mm [12, 15) > cudaLaunchKernel [13 ms, +50 us),
    and aten::relu [21, 25) at depth 1. A thread Kineto wrote as a signed tid, without a name, runs
    ten 1 us ops every 10 us from 50 ms. Two launch -> kernel pairs (correlation 7 and 8)."""
    add_run(con, RUN, "timeline", [0])
    add_event(con, RUN, 0, "cpu_op", "aten::linear", 10 * MS, 20 * MS, pid="100", tid="100")
    add_event(con, RUN, 0, "cpu_op", "aten::addmm", 11 * MS, 9 * MS, pid="100", tid="100")
    add_event(con, RUN, 0, "cpu_op", "aten::mm", 12 * MS, 3 * MS, pid="100", tid="100")
    add_event(con, RUN, 0, "cpu_op", "aten::relu", 21 * MS, 4 * MS, pid="100", tid="100")
    add_event(con, RUN, 0, "cpu_op", "whole_trace", 0, 100 * MS, pid="100", tid="7")   # a thread whose tid sorts first
    add_metadata(con, RUN, 0, "thread_name", "100", "100", "thread 100 (pt_main_thread)")
    for i in range(10):
        add_event(con, RUN, 0, "cpu_op", f"tiny_{i}", 50 * MS + i * 10 * US, 1 * US, pid="100", tid="-1029147072")
    add_launch_pair(con, RUN, 7, 13 * MS, 16 * MS, "void gemm<float, 128>(float*)")
    add_launch_pair(con, RUN, 8, 60 * MS, 61 * MS, "void relu_kernel<float>(float*)")


@pytest.fixture()
def con():
    connection = connect(":memory:")
    fill_run(connection)
    yield connection
    connection.close()


def test_ops_are_drawn_at_their_nesting_depth(con):
    bars = queries.timeline_window(con, RUN, 9 * MS, 31 * MS)
    depth = dict(zip(bars["name"], bars["depth"]))
    assert depth["aten::linear"] == 0 and depth["aten::addmm"] == 1 and depth["aten::mm"] == 2
    assert depth["cudaLaunchKernel"] == 3      # the runtime call inside aten::mm
    assert depth["aten::relu"] == 1            # a sibling of addmm, not under it
    assert depth["void gemm<float, 128>(float*)"] == 0
    capped = queries.timeline_window(con, RUN, 9 * MS, 31 * MS, max_depth=1)
    assert set(capped.loc[capped["name"].isin(["aten::mm", "cudaLaunchKernel"]), "depth"]) == {1}


def test_an_op_starting_before_the_window_still_counts_as_a_parent(con):
    bars = queries.timeline_window(con, RUN, 14 * MS, 16 * MS)
    assert dict(zip(bars["name"], bars["depth"]))["aten::mm"] == 2


def test_short_events_separate_in_a_narrow_span_and_merge_in_a_wide_one(con):
    narrow = queries.timeline_window(con, RUN, 50 * MS, 50 * MS + 100 * US)
    tiny = narrow[narrow["name"].str.startswith("tiny_")]
    assert len(tiny) == 10 and (tiny["n_events"] == 1).all()      # a pixel is 67 ns: each its own bar
    assert "merged" not in set(narrow["kind"])
    wide = queries.timeline_window(con, RUN, 0, 100 * MS)
    merged = wide[wide["kind"] == "merged"]
    assert not wide["name"].str.startswith("tiny_").any()
    assert merged["n_events"].sum() == 10 + 2 + 2   # at 67 us a pixel: the ten ops, two launches, two kernels


def test_flows_join_each_launch_to_its_own_kernel_in_the_window(con):
    flows = queries.timeline_flows(con, RUN, 12 * MS, 20 * MS)
    assert len(flows) == 1
    flow = flows.iloc[0]
    assert flow["correlation"] == 7 and flow["launch_name"] == "cudaLaunchKernel"
    assert flow["gpu_name"] == "void gemm<float, 128>(float*)"
    assert flow["launch_start_ns"] == 13 * MS and flow["gpu_start_ns"] == 16 * MS
    assert (flow["launch_tid"], flow["stream"]) == ("100", 7)
    # only lines drawn whole: a window holding the kernel but not its launch has none
    assert queries.timeline_flows(con, RUN, 59 * MS, 62 * MS)["correlation"].tolist() == [8]
    assert queries.timeline_flows(con, RUN, 61 * MS, 62 * MS).empty
    assert len(queries.timeline_flows(con, RUN, 0, 100 * MS, max_flows=1)) == 1


def test_threads_are_named_readably_main_thread_first(con):
    bars = queries.timeline_window(con, RUN, 0, 100 * MS)
    lanes = bars.drop_duplicates("lane_order").sort_values("lane_order")["lane"].tolist()
    assert lanes == ["GPU 0 · stream 7", "CPU · thread 100 (pt_main_thread)", "CPU · thread 7",
                     "CPU · thread 3265820224"]                  # -1029147072 as the unsigned tid it is
    con.execute("DELETE FROM events WHERE kind = 'metadata'")
    bars = queries.timeline_window(con, RUN, 0, 100 * MS)
    assert "CPU · thread 100" in set(bars["lane"])


def test_a_window_is_clamped_to_the_trace():
    bounds = (1_000 * MS, 2_000 * MS)
    assert queries.clamp_window(995 * MS, 1_010 * MS, bounds) == (1_000 * MS, 1_010 * MS)
    assert queries.clamp_window(1_990 * MS, 2_100 * MS, bounds) == (1_990 * MS, 2_000 * MS)
    start, end = queries.clamp_window(2_500 * MS, 2_600 * MS, bounds)
    assert bounds[0] <= start < end <= bounds[1]


def test_hover_names_are_clipped_with_templates_collapsed_and_escaped():
    long_name = ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_" + "x" * 300
                 + "<float, 4>>(Params<float>) <script>")
    short = charts.short_name(long_name)
    assert len(short) <= 200 and "x" * 50 not in short
    assert short.startswith("void cutlass::Kernel&lt;...&gt;(Params&lt;...&gt;)")
    assert "<script>" not in charts.short_name("<script>" * 40)
    assert charts.short_name("aten::add") == "aten::add"
    assert charts.collapse_templates("operator<") == "operator<"    # unbalanced: left as it is


def test_chart_rows_follow_depth_and_the_axis_is_ms_into_the_trace(con):
    bars = queries.timeline_window(con, RUN, 9 * MS, 31 * MS)
    flows = queries.timeline_flows(con, RUN, 9 * MS, 31 * MS)
    fig = charts.timeline(bars, 9 * MS, 31 * MS, origin_ns=0, flows=flows)
    assert fig.layout.xaxis.title.text == "ms into the trace"
    assert tuple(fig.layout.xaxis.range) == (9.0, 31.0)
    cpu = next(t for t in fig.data if t.name == "cpu_op")
    rows = dict(zip([h.split("</b>")[0][3:] for h in cpu.hovertext], cpu.y))
    # the GPU lane has one row (0); the main thread's ops start at row 1, one row per depth
    assert (rows["aten::linear"], rows["aten::addmm"], rows["aten::mm"]) == (1, 2, 3)
    arrow = next(t for t in fig.data if t.name == "launch → GPU")
    assert list(arrow.x[:2]) == [13.0, 16.0] and list(arrow.y[:2]) == [4.0, 0.0]   # launch at depth 3 -> stream


def test_export_names_threads_and_keeps_flows(con):
    con.execute("INSERT INTO events (run_id, rank, kind, ph, name, ts_ns, pid, tid, correlation) VALUES "
                "(?, 0, 'flow', 's', 'ac2g', ?, '100', '100', 7), (?, 0, 'flow', 'f', 'ac2g', ?, '0', '7', 7)",
                [RUN, 13 * MS, RUN, 16 * MS])
    data = json.loads(queries.export_window_trace(con, RUN, 9 * MS, 60 * MS))
    threads = {e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
    assert {"thread 100 (pt_main_thread)", "thread 3265820224", "stream 7"} <= threads
    flows = [e for e in data["traceEvents"] if e["ph"] in ("s", "f")]
    assert sorted(e["ph"] for e in flows) == ["f", "s"] and {e["id"] for e in flows} == {7}


@pytest.fixture()
def page(tmp_path, monkeypatch):
    db = tmp_path / "store.duckdb"
    store = connect(db)
    try:
        fill_run(store)
        # a finding at the very start of the trace: its padded window would start before it
        add_finding(store, RUN, "launch_gap:r0", "launch_gap", 3.0, 30.0, t0_ns=0, t1_ns=20 * MS)
    finally:
        store.close()
    monkeypatch.setenv("TRACEDOCTOR_DB", str(db))
    monkeypatch.setenv("TRACEDOCTOR_SAMPLES", "none")
    at = AppTest.from_file(str(REPO_ROOT / "app" / "Home.py"), default_timeout=120)
    at.session_state["run_id"] = RUN
    at.run()
    at.switch_page("views/timeline.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def window_caption(at: AppTest) -> str:
    return next(c.value for c in at.caption if "bars drawn" in c.value)


def test_page_clamps_the_window_zooms_and_draws_flows(page):
    at = page
    caption = window_caption(at)
    assert caption.startswith("Window 0.000–24.000 ms into the trace")   # not -4.000
    assert at.slider[0].value == pytest.approx((0.0, 24.0))
    [c for c in at.checkbox if c.label == "Launch → GPU arrows"][0].check()
    at.run()
    assert not at.exception
    assert "1 launch arrows" in window_caption(at)        # 13 ms -> 16 ms; the other pair is at 60 ms
    [b for b in at.button if b.help == "Zoom in ×4 around the middle"][0].click()
    at.run()
    assert not at.exception
    assert "showing 9.000–15.000 ms (6.000 ms)" in window_caption(at)
    assert "0 launch arrows" in window_caption(at)        # its kernel is out of view now
    at.slider[0].set_value((12.0, 12.1))
    at.run()
    assert "every event its own bar" in window_caption(at)
    [b for b in at.button if b.help == "Show the whole window"][0].click()
    at.run()
    assert at.slider[0].value == pytest.approx((0.0, 24.0))
