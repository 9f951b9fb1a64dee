"""accel.gpu_session: the one command a GPU session runs (plan, rows for BENCHMARKS.md, sample runs)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from accel import gpu_session, registry
from tests.support.paths import REPO_ROOT as REPO


def test_plan_is_every_single_gpu_demo():
    plan = gpu_session.single_gpu_fixes()
    assert {"cuda_graph", "compile_reduce_overhead", "triton_fused_elementwise", "cuda_prefetcher",
            "fused_optimizer", "dataloader_tuning", "allocator_tuning", "tf32_matmul",
            "amp_autocast"} <= set(plan)
    assert not any({"multi_rank", "multi_gpu"} & set(registry.FIXES[i].needs) for i in plan)
    assert gpu_session.single_gpu_fixes(["cuda_graph", "balanced_sampler"]) == ["cuda_graph"]
    with pytest.raises(SystemExit, match="no_such_fix"):
        gpu_session.single_gpu_fixes(["no_such_fix"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the session would really run")
def test_without_a_gpu_it_says_so_and_runs_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "accel.gpu_session", "--out", str(tmp_path / "s")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "No CUDA GPU here: nothing measured" in proc.stdout and "cuda_graph" in proc.stdout
    assert not (tmp_path / "s").exists()


def test_workloads_come_from_the_gpu_table():
    work = gpu_session.workloads()
    assert "launch-bound" in work["cuda_graph"] and "allocator_tuning" in work


def _session(tmp_path, big_after=False):
    out = tmp_path / "out"
    for fix in ("cuda_graph", "allocator_tuning"):
        (out / fix).mkdir(parents=True)
        (out / fix / "before.json.gz").write_bytes(b"before")
        (out / fix / "after.json.gz").write_bytes(b"x" * (gpu_session.MAX_SAMPLE_BYTES + 1 if big_after else 5))
    return out, {
        "device": {"name": "NVIDIA H100 80GB HBM3"}, "date": "2026-12-01",
        "results": [
            {"fix": "cuda_graph", "result": {"fix": "cuda_graph", "speedup": 3.4, "step_ms_before": 1.7,
                                             "step_ms_after": 0.5, "finding_kind": "launch_gap",
                                             "cost_pct_before": 61.0, "cost_pct_after": 3.0, "skipped": None},
             "details": {"checks": {"max_abs_param_diff": 0.0}}},
            {"fix": "allocator_tuning", "result": {"fix": "allocator_tuning", "skipped": "needs a CUDA GPU"}},
            {"fix": "triton_fused_elementwise", "failed": "timed out after 300 s"},
        ]}


def test_rows_carry_numbers_only_for_what_ran(tmp_path):
    _, session = _session(tmp_path)
    rows = gpu_session.benchmark_rows(session)
    assert rows[0].startswith("| cuda_graph | launch-bound")
    assert "| NVIDIA H100 80GB HBM3 | 2026-12-01 | 1.700 | 0.500 | 3.40x | launch_gap: 61.0% → 3.0% |" in rows[0]
    assert "max_abs_param_diff 0.0" in rows[0]
    assert "not measured: needs a CUDA GPU" in rows[1] and "not measured: timed out after 300 s" in rows[2]


def test_samples_are_listed_first_and_oversized_traces_left_out(tmp_path):
    out, session = _session(tmp_path, big_after=True)
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "manifest.json").write_text(json.dumps([{"name": "old", "paths": ["old"], "label": "x"}]))
    added = gpu_session.add_samples(session, out, samples)
    assert added == ["GPU demo: cuda_graph, before the fix (NVIDIA H100 80GB HBM3)"]
    manifest = json.loads((samples / "manifest.json").read_text())
    assert [m["name"] for m in manifest] == added + ["old"]
    assert "NVIDIA H100 80GB HBM3, 2026-12-01" in manifest[0]["label"]
    assert (samples / "gpu_cuda_graph_before" / "rank-0.json.gz").read_bytes() == b"before"
    # run again on another GPU: the folder's entry is replaced, not duplicated or left mislabelled
    session["device"]["name"] = "NVIDIA H200"
    gpu_session.add_samples(session, out, samples)
    manifest = json.loads((samples / "manifest.json").read_text())
    assert [m["name"] for m in manifest] == ["GPU demo: cuda_graph, before the fix (NVIDIA H200)", "old"]
