"""Run a workload's steps under torch.profiler and time them with the wall clock.

Two separate passes on purpose: step times come from an unprofiled pass (profiling adds overhead
per op, which would flatter fixes that cut op counts), the trace from a short profiled pass.
"""
from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def synchronize(device: str) -> None:
    """Wait for queued GPU work so wall-clock times cover it (no-op on CPU)."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()


def time_steps(step_fn: Callable[[int], object], steps: int, device: str,
               warmup: int = 3) -> list[float]:
    """Run warmup + steps calls of step_fn(i); return the wall-clock ms of each timed step.

    Each step is synchronised on both ends so a step's time includes its GPU work and nothing
    queued by the step before.
    """
    for i in range(warmup):
        step_fn(i)
    synchronize(device)
    times_ms = []
    for i in range(warmup, warmup + steps):
        start = time.perf_counter()
        step_fn(i)
        synchronize(device)
        times_ms.append((time.perf_counter() - start) * 1e3)
    return times_ms


def time_steps_interleaved(step_fns: list[Callable[[int], object]], steps: int, device: str,
                           warmup: int = 3) -> list[list[float]]:
    """Like time_steps for several variants, alternating them step by step (A B A B ...).

    On a shared or throttling machine the load changes over seconds; alternating exposes every
    variant to the same conditions, so their ratio stays fair even when absolute times drift.
    Only for variants that do no work between their steps (no background loader workers).
    """
    for i in range(warmup):
        for fn in step_fns:
            fn(i)
    synchronize(device)
    times_ms: list[list[float]] = [[] for _ in step_fns]
    for i in range(warmup, warmup + steps):
        for fn, times in zip(step_fns, times_ms):
            start = time.perf_counter()
            fn(i)
            synchronize(device)
            times.append((time.perf_counter() - start) * 1e3)
    return times_ms


def median_ms(times_ms: list[float]) -> float:
    return float(statistics.median(times_ms))


def profile_steps(step_fn: Callable[[int], object], steps: int, trace_path: Path, device: str,
                  warmup: int = 2, record_shapes: bool = True, profile_memory: bool = False) -> Path:
    """Profile `steps` calls of step_fn(i) (after `warmup` unprofiled ones) into trace_path.

    Each step is marked with prof.step(), so the trace has ProfilerStep#N windows. No sync
    between steps (a training loop has none; one here would show up as a host sync in every
    trace) except at the end of the last one, so its GPU work is in the trace. A path ending
    in .gz is written gzipped. profile_memory: also record [memory] events (allocations, frees,
    allocated and reserved totals).
    """
    trace_path = Path(trace_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    for i in range(warmup):
        step_fn(i)
    synchronize(device)
    activities = [ProfilerActivity.CPU]
    if str(device).startswith("cuda") and torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    # The schedule records exactly `steps` ProfilerStep windows (one profiler warm-up step
    # first, whose startup overhead stays out of the trace) and no trailing partial window.
    plan = schedule(wait=0, warmup=1, active=steps, repeat=1)
    with profile(activities=activities, record_shapes=record_shapes, schedule=plan,
                 profile_memory=profile_memory) as prof:
        for i in range(warmup, warmup + steps + 1):
            step_fn(i)
            if i == warmup + steps:
                synchronize(device)   # the last step's GPU work lands inside its window
            prof.step()
    prof.export_chrome_trace(str(trace_path))
    return trace_path


@contextmanager
def intra_op_threads(count: int, device: str):
    """On CPU, run torch ops with `count` intra-op threads for the duration (restored after).

    The CPU demos use 1: their small ops gain nothing from more threads, while OpenMP barrier
    spinning, on a machine whose cores are also busy with loader workers or other jobs, makes
    a step several times slower and the timings erratic. No effect on CUDA runs.
    """
    previous = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def resolve_device(requested: str | None) -> str:
    """'cuda' when asked for (or not specified) and present, else 'cpu'."""
    if requested in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested
