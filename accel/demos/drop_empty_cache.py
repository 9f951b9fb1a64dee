"""Demo: a training step that ends with torch.cuda.empty_cache(), run with the call (before) and
with the line deleted (after): allocator_tuning's workload (an MLP, AdamW).

On a GPU: empty_cache hands the step's freed memory back to the driver (cudaFree, which
synchronises the device) and the next step cudaMallocs it again; the checks count the driver
allocations per step (torch.cuda.memory_stats) and the memory left reserved between steps, both
traces carry reserved over time (profile_memory=True), and the parameters are compared bitwise.

On CPU there is no caching allocator to empty: torch.cuda.empty_cache() returns at once when CUDA
was never initialised, and the profiler cannot show cudaFree/cudaMalloc churn. The demo measures
what is real there (the step time with and without the call, the call's own cost, the CPU peak
in both traces, where keeping or dropping the call changes nothing) and says that the GPU part
needs a GPU; it reports no GPU figure it did not measure.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from accel.demos import DemoResult
from accel.demos.allocator_tuning import CHECK_STEPS, build, compare, make_step
from accel.kernels.allocator import keep_cache_warm
from accel.profiling import intra_op_threads, median_ms, profile_steps, time_steps, time_steps_interleaved, trace_rank_memory

FIX, KIND = "drop_empty_cache", "runtime_stall"
DEFAULT_STEPS = 20
PROFILED_STEPS = 4
CPU_HIDDEN, CPU_BATCH = 512, 128      # the CPU run's size: the call is what is measured, not the MLP
MIB = float(1 << 20)


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    with intra_op_threads(1, device):      # one thread: CPU step times steady enough to compare
        return _run(Path(out_dir), device, steps)


def _run(out_dir: Path, device: str, steps: int) -> DemoResult:
    on_gpu = device == "cuda" and torch.cuda.is_available()
    size = {} if on_gpu else {"hidden": CPU_HIDDEN, "batch": CPU_BATCH}
    variants = [make_step(*build(device, **size), empty_cache=flag) for flag in (True, False)]
    if on_gpu:
        # one after the other: the before loop's empty_cache would also empty the after loop's cache
        times = [time_steps(variant, steps, device) for variant in variants]
    else:
        times = time_steps_interleaved(variants, steps, device)
    traces = [out_dir / "before.json.gz", out_dir / "after.json.gz"]
    memory = []
    for variant, trace in zip(variants, traces):
        profile_steps(variant, min(PROFILED_STEPS, steps), trace, device, profile_memory=True)
        ranks = trace_rank_memory(trace)
        memory.append(ranks[0] if ranks else {})

    with keep_cache_warm() as found:      # where the call comes from: the line to delete
        variants[0](0)
    checks = {"empty_cache_calls_per_step_before": found.calls, "empty_cache_calls_per_step_after": 0,
              "empty_cache_us_per_call_here": round(_call_us(), 3),
              "peak_allocated_mib_before": _mib(memory[0].get("peak_allocated_bytes")),
              "peak_allocated_mib_after": _mib(memory[1].get("peak_allocated_bytes"))}
    notes = [f"the call comes from {where} ({calls} per step)" for where, calls in found.callers.items()]
    if on_gpu:
        checks.update(compare(device, CHECK_STEPS, after="dropped"))
        checks["peak_reserved_mib_before"] = _mib(memory[0].get("peak_reserved_bytes"))
        checks["peak_reserved_mib_after"] = _mib(memory[1].get("peak_reserved_bytes"))
        notes.append(f"{torch.cuda.get_device_name()}: the same step with and without torch.cuda.empty_cache()")
    else:
        checks["device_allocations_per_step_before"] = checks["device_allocations_per_step_after"] = None
        notes.append("CPU: torch.cuda.empty_cache() is a no-op without CUDA, so the step times are equal within "
                     "noise; the cudaFree/cudaMalloc churn it causes and its cost need a CUDA GPU "
                     "(python -m accel.demo drop_empty_cache --device cuda): not measured here")
    return DemoResult(fix=FIX, device=device, finding_kind=KIND,
                      step_ms_before=median_ms(times[0]), step_ms_after=median_ms(times[1]),
                      trace_before=traces[0], trace_after=traces[1], checks=checks, notes=notes)


def _call_us(calls: int = 2000) -> float:
    """The median cost of one torch.cuda.empty_cache() call here, microseconds (batches of 100)."""
    per_batch = []
    for _ in range(calls // 100):
        start = time.perf_counter()
        for _ in range(100):
            torch.cuda.empty_cache()
        per_batch.append((time.perf_counter() - start) * 1e6 / 100)
    return median_ms(per_batch)


def _mib(value: int | None) -> float | None:
    return None if value is None else round(value / MIB, 2)
