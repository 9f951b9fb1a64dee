"""Real H100 traces (tests/fixtures/gpu_h100, made by `python -m accel.gpu_session --fixtures` on
an NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, 2026-11-26): the analyzers read a CUDA-graph replay,
a torch.compile(mode="reduce-overhead") step and a memory-profiled step as what they are."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from analyzers.api import analyze_paths
from tests.support.paths import REPO_ROOT as REPO

FIXTURES = REPO / "tests" / "fixtures" / "gpu_h100"
SAMPLES = REPO / "sample_traces"


def _report(path: Path) -> dict:
    report = analyze_paths([str(path)])
    assert not report["errors"], report["errors"]
    return report


def _kinds(report: dict) -> dict[str, float]:
    return {f["kind"]: f["cost_pct"] for f in report["findings"]}


def test_cuda_graph_replay_is_gpu_work_not_launch_gaps():
    eager = _report(SAMPLES / "gpu_cuda_graph_before" / "rank-0.json.gz")
    graphed = _report(FIXTURES / "cuda_graph_replay.json.gz")
    # The eager step is launch-bound (~600 short kernels); replaying one graph removes the gaps.
    assert _kinds(eager)["launch_gap"] > 80
    assert "launch_gap" not in _kinds(graphed)
    rank = graphed["ranks"][0]
    assert rank["steps"] == 10 and rank["compute_pct"] > 70
    assert rank["step_time_ms"] < eager["ranks"][0]["step_time_ms"] / 5
    assert any("replays CUDA/HIP graphs" in note for note in graphed["notes"])
    # What is left is real: the demo's FP32 Linear layers run SIMT sgemm (TF32 is off by default).
    assert set(_kinds(graphed)) <= {"fp32_matmul"}


def test_compiled_step_reads_inductor_kernels_and_the_busy_cpu():
    report = _report(FIXTURES / "compile_reduce_overhead.json.gz")
    trace = json.loads(gzip.open(FIXTURES / "compile_reduce_overhead.json.gz").read())
    triton_kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("triton_")]
    assert triton_kernels, "inductor's fused kernels are in the trace"
    assert report["ranks"][0]["steps"] == 10
    # The compiled model's kernels are tiny; the eager AdamW and Python between replays keep the
    # GPU idle: a launch_gap whose long gaps are the CPU doing other work, as the summary says.
    gap = next(f for f in report["findings"] if f["kind"] == "launch_gap")
    assert gap["cost_pct"] > 50 and "CPU was busy with other work" in gap["summary"]


def test_memory_profiled_trace_loads_with_its_memory_events():
    path = FIXTURES / "memory_profiled.json.gz"
    facts = json.loads((FIXTURES / "fixtures.json").read_text())
    trace = json.loads(gzip.open(path).read())
    memory = [e for e in trace["traceEvents"] if e.get("name") == "[memory]"]
    cuda = [e for e in memory if e["args"].get("Device Type") == 1]
    assert cuda and len(memory) > len(cuda)   # CUDA and CPU allocations both recorded
    # torch's own peak over the profiled steps is what a memory reader must reproduce
    peak = max(max(e["args"]["Total Allocated"] for e in cuda), 0)
    torch_peak = max(s["peak_allocated_bytes"] for s in facts["memory_profile"]["steps"])
    assert peak == pytest.approx(torch_peak, rel=0.05)
    report = _report(path)
    assert report["ranks"][0]["steps"] == 6


def test_allocator_snapshots_are_plain_data_pickles():
    # No class references: a loader that refuses every class can read them (issue: memory page).
    import pickletools
    for name in ("allocator_snapshot.pickle", "oom_snapshot.pickle"):
        ops = {op.name for op, _, _ in pickletools.genops((FIXTURES / name).read_bytes())}
        assert not ops & {"GLOBAL", "STACK_GLOBAL", "REDUCE", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX"}, name


def test_gradients_freed_between_steps_lower_the_device_peak_by_what_torch_measured():
    # accel.demo zero_grad_set_to_none on the H100 (2026-11-27, 22:35 UTC), each side profiled with
    # only its own model alive: torch's memory timeline put the peaks at 44 and 26 MiB (18 MiB of
    # the 24 MiB of gradients no longer held through the forward); the device's allocated totals
    # also count what was alive before profiling (weights, cuBLAS workspace), so the drop is compared
    peaks = [_report(FIXTURES / f"zero_grad_{side}.json.gz")["ranks"][0]["memory"]["peak_allocated_bytes"] / 2**20
             for side in ("before", "after")]
    assert peaks[0] - peaks[1] == pytest.approx(44.0 - 26.0, abs=0.5), peaks
