"""Operator and kernel views (sql/metrics/operators.sql, queries.top_ops / top_kernels /
top_modules / operator_diff, `python -m analyzers top`, the "Operators & kernels" page): self time
from nesting, GPU time from launches, tensor-core flags, windows, the run diff, and that their
totals agree with the breakdowns every other page reads."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from analyzers import cli
from analyzers.read import queries
from analyzers.common import thresholds as th
from analyzers.ingest import ingest_paths
from analyzers.sql.engine import ensure_loaded
from analyzers.store.database import connect
from tests.support.paths import REPO_ROOT

SAMPLES = REPO_ROOT / "sample_traces"
MS = 1_000_000


def _ingest(con, path: Path) -> str:
    result = ingest_paths(con, [str(path)])
    assert result.run_id, result.errors
    return result.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with the FP32-matmul sample (2 ranks, FP32 sgemm), the control sample (4 ranks,
    TF32 tensor-core GEMMs) and the CPU-only data-loader demo."""
    db = tmp_path_factory.mktemp("ops") / "store.duckdb"
    con = connect(str(db))
    runs = {name: _ingest(con, SAMPLES / name)
            for name in ("synthetic_fp32_matmul", "synthetic_control", "cpu_dataloader_tuning_before")}
    ensure_loaded(con)
    yield con, db, runs
    con.close()


# --------------------------------------------------------------------------- nesting, by hand

def _hand_built_nesting(con) -> str:
    """One rank, one thread: A [0, 10) ms holds B [1, 4) which holds C [2, 3); D [5, 6) follows
    inside A. C's launch call at 2.5 ms starts a 5 ms kernel (correlation 7), D's at 5.5 ms a 2 ms
    one (correlation 8), and a launch outside every op at 20 ms a 1 ms kernel."""
    run = "nesting_run"
    con.execute("INSERT INTO runs (run_id, name, created_at, content_hash, world_size) "
                "VALUES (?, 'nesting', now(), ?, 1)", [run, run])
    con.execute("INSERT INTO ranks (run_id, rank, file_name, file_hash) VALUES (?, 0, 'r0.json', 'h')", [run])
    rows = [("cpu_op", "A", 0, 10, None), ("cpu_op", "B", 1, 3, None), ("cpu_op", "C", 2, 1, None),
            ("cpu_op", "D", 5, 1, None), ("runtime", "cudaLaunchKernel", 2.5, 0.1, 7),
            ("runtime", "cudaLaunchKernel", 5.5, 0.1, 8), ("runtime", "cudaLaunchKernel", 20, 0.1, 9),
            ("kernel", "ampere_sgemm_128x64_nn", 11, 5, 7), ("kernel", "cutlass_80_tensorop_s1688gemm", 17, 2, 8),
            ("kernel", "elementwise", 21, 1, 9)]
    for kind, name, start_ms, dur_ms, corr in rows:
        gpu = kind == "kernel"
        con.execute("INSERT INTO events (run_id, rank, kind, name, ts_ns, dur_ns, pid, tid, device, stream, correlation) "
                    "VALUES (?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [run, kind, name, int(start_ms * MS), int(dur_ms * MS), "0" if gpu else "1",
                     "7" if gpu else "1", 0 if gpu else None, 7 if gpu else None, corr])
    return run


def test_self_time_and_gpu_time_follow_nesting(store):
    con, _, _ = store
    run = _hand_built_nesting(con)
    ops = queries.top_ops(con, run, limit=None).set_index("name")
    assert ops.loc["A", "self_ms"] == pytest.approx(10 - 3 - 1)       # B and D are its children, C is B's
    assert ops.loc["B", "self_ms"] == pytest.approx(2)
    assert ops.loc["C", "self_ms"] == pytest.approx(1)
    assert ops.loc["C", "gpu_self_ms"] == pytest.approx(5) and ops.loc["B", "gpu_self_ms"] == 0
    assert ops.loc["B", "gpu_total_ms"] == pytest.approx(5)
    assert ops.loc["A", "gpu_total_ms"] == pytest.approx(7) and ops.loc["A", "gpu_self_ms"] == 0
    assert ops.loc["D", "tc_pct"] == pytest.approx(100)                # the s1688 tensor-op GEMM
    assert ops.loc["A", "tc_pct"] == pytest.approx(100 * 2 / 7)
    # a window holding only B (and C inside it): A and D start outside
    inside = queries.top_ops(con, run, window=(1 * MS, 4 * MS), limit=None)
    assert sorted(inside["name"]) == ["B", "C"]
    assert inside.set_index("name").loc["B", "self_ms"] == pytest.approx(2)
    # a window cutting B's end off still finds C inside it (children after the window's end count)
    cut = queries.top_ops(con, run, window=(int(0.5 * MS), int(1.5 * MS)), limit=None).set_index("name")
    assert list(cut.index) == ["B"] and cut.loc["B", "self_ms"] == pytest.approx(2)


# --------------------------------------------------------------------------- sample traces

def test_self_time_never_exceeds_total(store):
    con, _, runs = store
    for run in runs.values():
        ops = queries.top_ops(con, run, limit=None)
        assert len(ops), run
        assert (ops["self_ms"] <= ops["total_ms"] + 1e-9).all()
        assert (ops["self_ms"] >= 0).all() and (ops["calls"] > 0).all()
        assert (ops["gpu_self_ms"] <= ops["gpu_total_ms"] + 1e-9).all()


def test_kernel_totals_agree_with_the_breakdowns(store):
    con, _, runs = store
    for name in ("synthetic_fp32_matmul", "synthetic_control"):
        run = runs[name]
        kernels = queries.top_kernels(con, run, limit=None)
        counted = con.execute("SELECT sum(dur_ns) / 1e6, count(*) FROM gpu_activity(?) WHERE counted AND kind = 'kernel'",
                              [run]).fetchone()
        assert kernels["total_ms"].sum() == pytest.approx(counted[0])
        assert kernels["calls"].sum() == counted[1]
        # the whole run is its steps on the GPU clock: step_breakdown's busy and step time over all steps
        steps = queries.step_breakdown(con, run).dropna(subset=["step"])
        assert kernels["busy_ms"].iloc[0] == pytest.approx(steps["gpu_busy_ms"].sum())
        assert kernels["window_ms"].iloc[0] == pytest.approx(steps["step_ms"].sum())
        # per step, per rank: the busy time of a step's GPU window is step_breakdown's gpu_busy
        for _, row in steps.head(6).iterrows():
            one = queries.top_kernels(con, run, rank=int(row["rank"]), step=int(row["step"]), limit=None)
            assert one["busy_ms"].iloc[0] == pytest.approx(row["gpu_busy_ms"], abs=1e-6)
            assert one["window_ms"].iloc[0] == pytest.approx(row["step_ms"], abs=1e-6)
        # with no overlap between kernels of a rank's streams, the kernels and copies fill busy exactly
        per_rank = queries.top_kernels(con, run, by_rank=True, limit=None)
        assert set(per_rank["rank"]) == set(queries.rank_breakdown(con, run)["rank"])
        assert per_rank["total_ms"].sum() == pytest.approx(kernels["total_ms"].sum())


def test_tensor_core_flags_on_known_kernel_names(store):
    con, _, runs = store
    patterns = list(th.TENSOR_CORE_KERNEL_PATTERNS)
    expected = {
        "volta_h884gemm_64x64_ldg8_nn": (True, False),
        "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8": (True, False),
        "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas":
            (True, False),
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas":
            (False, True),                     # xmma names FP32 math too: on CUDA cores
        "ampere_sgemm_128x64_nn": (False, True),
        "volta_scudnn_128x64_relu_interior_nn_v1": (False, True),
        "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int)": (False, True),
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half> >(int)": (False, False),
        "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t> >": (True, False),
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)": (False, False),
    }
    for name, (tensor_core, fp32) in expected.items():
        got = con.execute("SELECT is_tensor_core_kernel(?, ?), is_fp32_simt_matmul(?)", [name, patterns, name]).fetchone()
        assert got == (tensor_core, fp32), name
    ops = list(th.TENSOR_CORE_ELIGIBLE_OPS)
    for name, eligible in {"aten::mm": True, "MmBackward0": True, "aten::convolution_backward": True,
                           "AddmmBackward0": True, "aten::add_": False, "aten::mmx": False}.items():
        assert con.execute("SELECT is_tensor_core_eligible_op(?, ?)", [name, ops]).fetchone()[0] is eligible, name
    # the kernel view's FP32 flag is the fp32_matmul finding's classification, kernel for kernel
    run = runs["synthetic_fp32_matmul"]
    finding_kernels = {r[0] for r in con.execute("SELECT DISTINCT name FROM fp32_matmul_kernels(?)", [run]).fetchall()}
    kernels = queries.top_kernels(con, run, limit=None)
    assert finding_kernels and set(kernels.loc[kernels["fp32_cuda_core"], "name"]) == finding_kernels
    assert not kernels["tensor_core"].any()
    control = queries.top_kernels(con, runs["synthetic_control"], limit=None)
    assert control["tensor_core"].any() and not control["fp32_cuda_core"].any()
    ops_fp32 = queries.top_ops(con, run, limit=None).set_index("name")
    assert ops_fp32.loc["aten::mm", "tensor_core_eligible"] and ops_fp32.loc["aten::mm", "tc_pct"] == 0


def test_window_and_rank_filters_restrict(store):
    con, _, runs = store
    run = runs["synthetic_control"]
    whole = queries.top_kernels(con, run, limit=None)
    step = int(queries.step_breakdown(con, run)["step"].dropna().iloc[0])
    one_step = queries.top_kernels(con, run, step=step, limit=None)
    assert 0 < one_step["calls"].sum() < whole["calls"].sum()
    one_rank = queries.top_kernels(con, run, rank=1, limit=None)
    assert 0 < one_rank["calls"].sum() < whole["calls"].sum()
    t0 = int(con.execute("SELECT min(start_ns) FROM gpu_activity(?)", [run]).fetchone()[0])
    window = (t0, t0 + 2 * MS)
    ops = con.execute("SELECT min(start_ns), max(start_ns), count(*) FROM cpu_op_instances(?, ?, ?, NULL, NULL, ?)",
                      [run, *window, list(th.TENSOR_CORE_KERNEL_PATTERNS)]).fetchone()
    assert ops[2] > 0 and window[0] <= ops[0] and ops[1] < window[1]
    in_window = queries.top_kernels(con, run, window=window, limit=None)
    assert in_window["total_ms"].sum() <= 4 * 2 + 1e-9          # 4 ranks x a 2 ms window, cut to it
    assert queries.top_ops(con, run, limit=3).shape[0] == 3


def test_modules_from_annotations_and_absent_without(store):
    con, _, runs = store
    modules = queries.top_modules(con, runs["synthetic_control"], limit=None)
    assert {"## forward ##", "## backward ##"} <= set(modules["path"])
    nested = modules[modules["depth"] > 1]
    assert len(nested) and all("/" in path for path in nested["path"])
    run = _hand_built_nesting_or_existing(con)
    assert queries.top_modules(con, run, limit=None).empty


def _hand_built_nesting_or_existing(con) -> str:
    exists = con.execute("SELECT count(*) FROM runs WHERE run_id = 'nesting_run'").fetchone()[0]
    return "nesting_run" if exists else _hand_built_nesting(con)


def test_diff_of_a_run_with_itself_is_zero_and_with_another_is_not(store):
    con, _, runs = store
    run = runs["synthetic_control"]
    for of_kind in ("kernels", "ops"):
        same = queries.operator_diff(con, run, run, of_kind, limit=None)
        assert len(same) and (same["delta_ms"].abs() < 1e-12).all() and (same["delta_calls"] == 0).all()
    diff = queries.operator_diff(con, run, runs["synthetic_fp32_matmul"], "kernels", limit=None).set_index("name")
    sgemm = [n for n in diff.index if "sgemm" in n]
    assert sgemm and diff.loc[sgemm[0], "before_ms"] == 0 and diff.loc[sgemm[0], "delta_ms"] > 0
    with pytest.raises(ValueError):
        queries.operator_diff(con, run, run, "modules")


def test_cli_top_prints_a_safe_table_and_json(tmp_path, capsys):
    db = tmp_path / "cli.duckdb"
    con = connect(str(db))
    run = _ingest(con, SAMPLES / "synthetic_fp32_matmul")
    # a kernel whose name tries to drive the terminal (OSC 52 clipboard write, a bidi override)
    con.execute("INSERT INTO events (run_id, rank, kind, name, ts_ns, dur_ns, pid, tid, device, stream, correlation) "
                "SELECT run_id, rank, kind, 'evil\x1b]52;c;aGk=\x07\u202ekernel', ts_ns + 1, dur_ns * 1000, pid, tid, "
                "device, stream, correlation FROM events WHERE run_id = ? AND kind = 'kernel' LIMIT 1", [run])
    con.close()
    assert cli.main(["top", run[:6], "--db", str(db), "--limit", "50"]) == 0
    out = capsys.readouterr().out
    assert "ampere_sgemm" in out and "FP32, could" in out and "total ms" in out
    assert "evil" in out and "\x1b" not in out and "\u202e" not in out and "\\x1b" in out
    assert cli.main(["top", run, "--ops", "--rank", "1", "--limit", "3", "--json", "--db", str(db)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["of"] == "ops" and data["rank"] == 1 and len(data["rows"]) == 3
    assert data["rows"][0]["self_ms"] >= data["rows"][-1]["self_ms"]
    assert cli.main(["top", "nosuchrun", "--db", str(db)]) != 0


# --------------------------------------------------------------------------- a real trace

def test_real_trace_agrees(shared_traces, tmp_path):
    con = connect(str(tmp_path / "real.duckdb"))
    run = _ingest(con, shared_traces / "resnet50_num_workers_0.json.gz")
    ensure_loaded(con)
    ops = queries.top_ops(con, run, limit=None)
    assert (ops["self_ms"] <= ops["total_ms"] + 1e-9).all()
    launched = con.execute("SELECT sum(gpu_dur_ns) / 1e6 FROM launches(?)", [run]).fetchone()[0]
    assert ops["gpu_self_ms"].sum() <= launched + 1e-6
    kernels = queries.top_kernels(con, run, limit=None)
    busy = con.execute("SELECT sum(busy_ns) / 1e6 FROM rank_breakdown(?)", [run]).fetchone()[0]
    assert kernels["busy_ms"].iloc[0] == pytest.approx(busy)
    assert kernels["fp32_cuda_core"].any()          # an FP32 V100 ResNet: cuDNN scudnn / sgemm kernels
    con.close()


# --------------------------------------------------------------------------- the page

@pytest.fixture(scope="module")
def app_store(tmp_path_factory):
    """A store with the FP32-matmul sample analysed (its fp32_matmul finding has a window) and the
    control sample, for the dashboard."""
    from analyzers.api import ingest_and_analyze

    db = tmp_path_factory.mktemp("ops_app") / "store.duckdb"
    con = connect(str(db))
    fp32 = ingest_and_analyze(con, [SAMPLES / "synthetic_fp32_matmul"]).ingest.run_id
    control = ingest_and_analyze(con, [SAMPLES / "synthetic_control"]).ingest.run_id
    finding_ranks = {f["id"]: f["ranks"] for f in queries.findings(con, fp32)}
    con.close()
    return db, fp32, control, finding_ranks


def _open_page(monkeypatch, db: Path, run_id: str):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TRACEDOCTOR_DB", str(db))
    monkeypatch.setenv("TRACEDOCTOR_SAMPLES", "none")
    at = AppTest.from_file(str(REPO_ROOT / "app" / "Home.py"), default_timeout=120)
    at.session_state["run_id"] = run_id
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_page_shows_ops_and_kernels_tables(app_store, monkeypatch):
    db, fp32, _, _ = app_store
    at = _open_page(monkeypatch, db, fp32)
    at.switch_page("views/kernels.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.label for t in at.tabs][:2] == ["Operators", "Kernels"] and "Modules" in [t.label for t in at.tabs]
    frames = [df.value for df in at.dataframe]
    assert len(frames) == 3
    ops, kernels = frames[0], frames[1]
    assert "aten::mm" in set(ops["name"]) and "ampere_sgemm_128x64_nn" in set(kernels["name"])
    assert set(kernels.loc[kernels["name"] == "ampere_sgemm_128x64_nn", "tc"]) == {"no, FP32: could"}
    # one rank, then one step: the tables follow
    at.selectbox(key="kernels_rank").set_value(1).run()
    assert not at.exception
    one_rank = at.dataframe[1].value
    assert one_rank["calls"].sum() < kernels["calls"].sum()
    at.radio(key="kernels_source").set_value("A step").run()
    assert not at.exception
    assert at.dataframe[1].value["calls"].sum() < one_rank["calls"].sum()


def test_finding_opens_the_page_on_its_window(app_store, monkeypatch):
    db, fp32, _, finding_ranks = app_store
    at = _open_page(monkeypatch, db, fp32)
    at.switch_page("views/findings.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    buttons = [b for b in at.button if b.label == "Kernels in this window"]
    assert buttons
    buttons[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.radio(key="kernels_source").value == "A finding's window"
    finding_id = at.selectbox(key="kernels_finding").value
    ranks = finding_ranks[finding_id]
    assert at.selectbox(key="kernels_rank").value == (ranks[0] if len(ranks) == 1 else None)
    assert len(at.dataframe) >= 2


def test_compare_shows_the_kernel_diff(app_store, monkeypatch):
    db, fp32, control, _ = app_store
    at = _open_page(monkeypatch, db, fp32)
    at.session_state["compare_before"] = control
    at.session_state["compare_after"] = fp32
    at.switch_page("views/compare.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Top changed kernels and ops" in [s.value for s in at.subheader]
    at.radio(key="compare_diff_kind").set_value("kernels").run()
    diff = at.dataframe[-1].value
    assert "ampere_sgemm_128x64_nn" in set(diff["name"])
    at.radio(key="compare_diff_kind").set_value("families").run()
    families = at.dataframe[-1].value.set_index("name")
    assert families.loc["gemm", "after_ms"] > families.loc["gemm", "before_ms"]   # FP32 sgemm, slower
    at.radio(key="compare_diff_kind").set_value("ops").run()
    assert not at.exception
    assert "aten::mm" in set(at.dataframe[-1].value["name"])


# --------------------------------------------------------------------------- whole run = its steps

PROFILER_STEP = re.compile(r"^ProfilerStep\s*#\s*\d+")
PER_STEP_REL_TOLERANCE = 0.01   # kernel view vs step_breakdown, whole run vs sum of its steps


def _without_profiler_steps(src: Path, dst: Path) -> Path:
    """A copy of the trace without its ProfilerStep#N events: its ranks infer their steps."""
    raw = src.read_bytes()
    trace = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    trace["traceEvents"] = [e for e in trace["traceEvents"] if not PROFILER_STEP.match(str(e.get("name", "")))]
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(trace))
    return dst


def _assert_whole_run_is_per_step(con, run: str) -> None:
    """The whole-run views count what lies inside the steps they divide by (inferred steps here):
    compute kernel time per step is step_breakdown's compute per step, kernel shares of the step
    time add up to at most 100%, operator_diff's per-step figures are the same, and the whole-run
    Operator view is the sum of its step views."""
    steps = con.execute("SELECT steps FROM run_step_count(?)", [run]).fetchone()[0]
    sources = {s for (s,) in con.execute("SELECT DISTINCT source FROM steps(?)", [run]).fetchall()}
    assert sources and "profiler_step" not in sources, sources
    breakdown = queries.step_breakdown(con, run)
    assert len(breakdown) == steps
    compute_per_step = breakdown["compute_ms"].mean()

    kernels = queries.top_kernels(con, run, limit=None)
    kernel_compute = kernels.loc[kernels["category"] == "compute", "total_ms"].sum() / steps
    assert kernel_compute == pytest.approx(compute_per_step, rel=PER_STEP_REL_TOLERANCE)
    assert kernels["window_ms"].iloc[0] == pytest.approx(breakdown["step_ms"].sum())
    assert kernels["step_pct"].sum() <= 100.0 + 1e-9

    diff = queries.operator_diff(con, run, run, "kernels", limit=None).set_index("name")
    diff_compute = diff.loc[kernels.loc[kernels["category"] == "compute", "name"], "before_ms"].sum()
    assert diff_compute == pytest.approx(compute_per_step, rel=PER_STEP_REL_TOLERANCE)

    ops = queries.top_ops(con, run, limit=None)
    step_numbers = [int(s) for s in breakdown["step"].dropna().unique()]
    self_in_steps = sum(queries.top_ops(con, run, step=s, limit=None)["self_ms"].sum() for s in step_numbers)
    assert ops["self_ms"].sum() == pytest.approx(self_in_steps, rel=PER_STEP_REL_TOLERANCE)
    op_diff = queries.operator_diff(con, run, run, "ops", limit=None)
    assert op_diff["before_ms"].sum() == pytest.approx(ops["total_ms"].sum() / steps)


def test_whole_run_counts_only_inferred_steps_on_a_synthesized_job(tmp_path):
    from sample_traces.synthesize import synthesize

    synthesize(tmp_path / "profiled", "h2d_stall", steps=8, seed=0)
    stripped = [_without_profiler_steps(p, tmp_path / "stripped" / p.name.removesuffix(".gz"))
                for p in sorted((tmp_path / "profiled").glob("*.json*"))]
    con = connect(str(tmp_path / "synth.duckdb"))
    result = ingest_paths(con, [str(p) for p in stripped])
    assert result.run_id and not result.errors
    ensure_loaded(con)
    _assert_whole_run_is_per_step(con, result.run_id)
    con.close()


def test_whole_run_counts_only_inferred_steps_on_resnet50(shared_traces, tmp_path):
    stripped = _without_profiler_steps(shared_traces / "resnet50_num_workers_0.json.gz", tmp_path / "resnet50.json")
    con = connect(str(tmp_path / "resnet.duckdb"))
    run = _ingest(con, stripped)
    ensure_loaded(con)
    _assert_whole_run_is_per_step(con, run)
    # one training thread: its ops' self time fits in the steps
    assert queries.top_ops(con, run, limit=None)["self_pct"].sum() <= 100.0 + 1e-9
    con.close()


def test_operator_shares_without_steps_are_of_the_host_span(store):
    con, _, _ = store
    run = _hand_built_nesting_or_existing(con)
    assert not con.execute("SELECT count(*) FROM steps(?)", [run]).fetchone()[0]
    ops = queries.top_ops(con, run, limit=None).set_index("name")
    # host span: A's start (0 ms) to the end of the last launch call (20.1 ms); every op counts
    assert ops["window_ms"].iloc[0] == pytest.approx(20.1)
    assert ops.loc["A", "self_pct"] == pytest.approx(100.0 * ops.loc["A", "self_ms"] / 20.1)
    assert ops["calls"].sum() == 4
    kernels = queries.top_kernels(con, run, limit=None)
    assert kernels["window_ms"].iloc[0] == pytest.approx(22 - 11)    # GPU span: first kernel start to last end


def test_operator_shares_without_steps_on_a_real_trace(shared_traces, tmp_path):
    con = connect(str(tmp_path / "alexnet.duckdb"))
    run = _ingest(con, shared_traces / "alexnet_single_gpu.json.gz")
    ensure_loaded(con)
    assert not con.execute("SELECT count(*) FROM steps(?)", [run]).fetchone()[0]
    ops = queries.top_ops(con, run, limit=None)
    span_ms = con.execute("SELECT (max(ts_ns + dur_ns) - min(ts_ns)) / 1e6 FROM events WHERE run_id = ? "
                          "AND kind IN ('cpu_op', 'user_annotation', 'python_function', 'runtime', 'driver')",
                          [run]).fetchone()[0]
    assert ops["window_ms"].iloc[0] == pytest.approx(span_ms)
    assert ops["self_pct"].notna().all() and 0 < ops["self_pct"].sum() <= 100.0 + 1e-9
    con.close()
