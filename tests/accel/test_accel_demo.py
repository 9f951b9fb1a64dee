"""`python -m accel.demo`: listing, clean skips on CPU, and the CPU demos end to end.

No timing assertions here (speed figures live in accel/BENCHMARKS.md): the end-to-end tests
check that both traces are written with ProfilerStep windows, that step times are measured,
that the fix did not change results, and that the JSON line keeps its contract.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from accel import demo, registry
from accel.demos import DemoResult
from tests.support.demos import JSON_KEYS, _cli, _profiler_steps

CUDA = torch.cuda.is_available()
ANALYZERS = importlib.util.find_spec("analyzers.api") is not None


def test_list_json_names_every_fix():
    rc, lines = _cli("--list", "--format", "json")
    assert rc == 0
    listed = json.loads(lines[-1])
    assert [f["id"] for f in listed] == list(registry.FIXES)
    assert listed[0] == {"id": "cuda_graph", "title": registry.get("cuda_graph").title,
                         "addresses": ["launch_gap"], "needs": ["cuda"], "workloads": ["training"]}


def test_unknown_fix_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["warp_drive", "--out", "/tmp/x"])
    assert exit_info.value.code == 2
    assert "cuda_graph" in capsys.readouterr().err


@pytest.mark.skipif(CUDA, reason="checks the skip path on a machine without CUDA")
@pytest.mark.parametrize("fix_id", ["cuda_graph", "compile_reduce_overhead",
                                    "triton_fused_elementwise", "cuda_prefetcher",
                                    "allocator_tuning", "tf32_matmul", "amp_autocast"])
def test_gpu_demos_skip_cleanly_on_cpu(fix_id, tmp_path, capsys):
    assert demo.main([fix_id, "--out", str(tmp_path / "out"), "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert set(result) == JSON_KEYS
    assert result["fix"] == fix_id and result["device"] == "cpu"
    assert "needs a CUDA GPU" in result["skipped"]
    assert result["step_ms_before"] is None and result["speedup"] is None
    assert lines[0].startswith(f"{fix_id}: skipped:")
    assert not (tmp_path / "out").exists()          # nothing pretended, nothing written


@pytest.mark.skipif(CUDA, reason="checks --device cuda on a machine without CUDA")
def test_cpu_demo_asked_for_cuda_skips_with_the_reason(tmp_path, capsys):
    assert demo.main(["fused_optimizer", "--out", str(tmp_path), "--device", "cuda", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["device"] == "cuda"
    assert result["skipped"].startswith("--device cuda was chosen; this machine has no CUDA GPU")


def test_gpu_demo_on_explicit_cpu_device_skips():
    fix = registry.get("triton_fused_elementwise")
    reason = demo.missing_need(fix, "cpu")
    assert reason is not None and ("CUDA" in reason or "Triton" in reason)


def _check_end_to_end(result: dict, out: Path, fix_id: str, kind: str) -> None:
    assert set(result) == JSON_KEYS
    assert result["fix"] == fix_id and result["finding_kind"] == kind and result["skipped"] is None
    assert result["step_ms_before"] > 0 and result["step_ms_after"] > 0
    assert result["speedup"] == pytest.approx(result["step_ms_before"] / result["step_ms_after"])
    for side in ("before", "after"):
        trace = out / f"{side}.json.gz"
        assert _profiler_steps(trace), f"{trace} has no ProfilerStep windows"
        cost = result[f"cost_pct_{side}"]
        assert cost is None or cost >= 0.0
    saved = json.loads((out / "result.json").read_text())
    assert saved["step_ms_before"] == pytest.approx(result["step_ms_before"])
    return saved


def test_fused_optimizer_demo_end_to_end(tmp_path):
    out = tmp_path / "fused"
    rc, lines = _cli("fused_optimizer", "--out", str(out), "--device", "cpu", "--steps", "3",
                     "--json", timeout=120)
    assert rc == 0, lines
    saved = _check_end_to_end(json.loads(lines[-1]), out, "fused_optimizer", "launch_gap")
    assert saved["checks"]["parameters_match_after_5_steps"] is True
    if not CUDA:   # a CPU trace has no GPU time: the launch_gap cost is unknown, never 0
        assert saved["cost_pct_before"] is None and saved["cost_pct_after"] is None
    assert _profiler_steps(out / "before.json.gz") == [f"ProfilerStep#{i}" for i in range(1, 4)]
    assert any(line.startswith("step time (median, ms)") for line in lines)


def test_dataloader_tuning_demo_end_to_end(tmp_path):
    out = tmp_path / "loader"
    rc, lines = _cli("dataloader_tuning", "--out", str(out), "--device", "cpu", "--steps", "3",
                     "--json", timeout=120)
    assert rc == 0, lines
    result = json.loads(lines[-1])
    saved = _check_end_to_end(result, out, "dataloader_tuning", "dataloader_stall")
    assert saved["checks"]["same_batches"] is True
    if ANALYZERS and not saved["analysis_notes"]:
        # with num_workers=0 the loop waits >= 16 x 1.5 ms of reads every step: always a finding
        assert result["cost_pct_before"] > 0.0
        # the data-loader wait is host time, measured on a CPU trace too: no finding after the
        # fix is a cost of 0, not "n/a"
        assert result["cost_pct_after"] is not None
    assert any("num_workers" in note for note in saved["notes"])


def test_cost_of_a_kind_sums_per_rank_and_takes_the_worst_rank():
    from analyzers.read import queries
    from analyzers.store.database import connect

    con = connect(":memory:")
    try:
        for n, (kind, rank, pct) in enumerate([("launch_gap", 0, 10.0), ("launch_gap", 0, 5.5),
                                              ("launch_gap", 1, 12.0), ("h2d_stall", 1, 40.0),
                                              ("launch_gap", 2, None)]):
            con.execute("INSERT INTO findings (run_id, finding_id, kind, severity, rank, cost_ns, cost_pct) "
                        "VALUES ('run', ?, ?, 'high', ?, 1000000, ?)", [f"f{n}", kind, rank, pct])
        kind_costs = queries.run_kind_costs(con, "run")
    finally:
        con.close()
    assert demo.cost_pct_of_kind(kind_costs, "launch_gap") == pytest.approx(15.5)
    assert demo.cost_pct_of_kind(kind_costs, "comm_exposed") == 0.0
    assert demo.cost_pct_of_kind(None, "launch_gap") is None
    assert kind_costs["launch_gap"]["findings"] == 4 and kind_costs["launch_gap"]["cost_ns"] == pytest.approx(4e6)


def test_gpu_activity_is_read_from_the_rank_breakdown():
    assert not demo.has_gpu_activity({"ranks": [{"rank": 0, "idle_pct": None, "compute_pct": None}]})
    assert demo.has_gpu_activity({"ranks": [{"rank": 0, "idle_pct": 12.5, "compute_pct": 80.0}]})
    assert not demo.has_gpu_activity(None)


def test_analysis_failure_leaves_costs_none_and_says_why(tmp_path, monkeypatch):
    class FakeDemo:
        DEFAULT_STEPS = 1

        @staticmethod
        def run(out_dir, device, steps):
            bad = out_dir / "before.json.gz"
            bad.write_bytes(b"not gzip")
            return DemoResult(fix="fused_optimizer", device=device, finding_kind="launch_gap",
                              step_ms_before=2.0, step_ms_after=1.0, trace_before=bad,
                              trace_after=out_dir / "missing.json.gz")

    monkeypatch.setattr(demo.importlib, "import_module", lambda name: FakeDemo)
    data = demo.run_demo("fused_optimizer", tmp_path, "cpu", None)
    assert data["speedup"] == pytest.approx(2.0)
    assert data["cost_pct_before"] is None and data["cost_pct_after"] is None
    assert len(data["analysis_notes"]) == 2
    assert "2.00x" in demo.render_table(data)


def test_a_crashing_demo_is_reported_in_one_line_with_exit_1(tmp_path, monkeypatch, capsys):
    class BrokenDemo:
        @staticmethod
        def run(out_dir, device, steps):
            raise MemoryError("out of memory while building the model")

    monkeypatch.setattr(demo.importlib, "import_module", lambda name: BrokenDemo)
    assert demo.main(["dataloader_tuning", "--out", str(tmp_path), "--json"]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["skipped"] == "the demo failed: MemoryError: out of memory while building the model"
    assert lines[0].startswith("dataloader_tuning: skipped: the demo failed")


def test_profile_steps_records_exactly_the_asked_steps(tmp_path):
    from accel.profiling import profile_steps
    calls: list[int] = []
    weight = torch.ones(4, 4)

    def step(i: int) -> None:
        calls.append(i)
        (weight @ weight).sum()

    trace = profile_steps(step, 4, tmp_path / "t.json.gz", "cpu", warmup=2)
    assert _profiler_steps(trace) == [f"ProfilerStep#{i}" for i in range(1, 5)]
    # 2 unprofiled warm-up calls, 1 profiler warm-up step, then the 4 recorded ones
    assert calls == list(range(7))


def test_time_steps_and_interleaving_order():
    from accel.profiling import median_ms, time_steps, time_steps_interleaved
    calls: list[tuple[str, int]] = []
    times = time_steps(lambda i: calls.append(("a", i)), 3, "cpu", warmup=2)
    assert len(times) == 3 and all(t >= 0 for t in times)
    assert calls == [("a", i) for i in range(5)]
    calls.clear()
    both = time_steps_interleaved([lambda i: calls.append(("a", i)), lambda i: calls.append(("b", i))],
                                  2, "cpu", warmup=1)
    assert [len(t) for t in both] == [2, 2]
    assert calls == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    assert median_ms([3.0, 1.0, 2.0]) == 2.0


def test_a_what_if_counts_only_for_the_fixes_its_model_stands_for():
    # a real H100 launch-bound step: launch_gap's model captures the whole step in CUDA graphs;
    # fused_optimizer and compile_reduce_overhead address launch_gap too but capture less (on the
    # H100, 2026-11-27: predicted 5.1 and 0.8 ms against 24.1 and 6.8 ms traced after them)
    from analyzers.api import analyze_paths
    from tests.support.paths import REPO_ROOT
    report = analyze_paths([str(REPO_ROOT / "sample_traces" / "gpu_cuda_graph_before")])
    finding = next(f for f in report["findings"] if f["kind"] == "launch_gap")
    assert finding["whatif"]["fix_ids"] == ["cuda_graph", "serving_cuda_graphs"]
    graphed = demo.whatif_of_side(report, "before", "launch_gap", "cuda_graph")
    assert graphed["whatif_step_ms_after"] == finding["whatif"]["step_ms_after"]
    fused = demo.whatif_of_side(report, "before", "launch_gap", "fused_optimizer")
    assert fused["whatif_step_ms_after"] is None
    assert "models cuda_graph, serving_cuda_graphs, not fused_optimizer" in fused["whatif_models_other_fixes"]
