"""Run a workload's steps under torch.profiler and time them with the wall clock.

Two separate passes on purpose: step times come from an unprofiled pass (profiling adds overhead
per op, which would flatter fixes that cut op counts), the trace from a short profiled pass.
"""
from __future__ import annotations

import gc
import gzip
import json
import statistics
import time
import warnings
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


def profile_memory_from_start(step_fn: Callable[[int], object], steps: int, trace_path: Path,
                              device: str) -> int:
    """Profile `steps` calls of step_fn(i) with profile_memory=True from the very first call into
    trace_path, and return the peak of torch's own memory timeline (export_memory_timeline) on
    `device`: bytes allocated while profiling, the figure TraceDoctor's peak is checked against.

    From the first call, with no warm-up: on CPU the profiler sees only memory allocated while it
    records, so what a step keeps from the step before (gradients, optimizer state) must be
    allocated in view to be counted.
    """
    trace_path = Path(trace_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU]
    if str(device).startswith("cuda") and torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with warnings.catch_warnings():   # no profiler warm-up on purpose (see above)
        warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
        plan = schedule(wait=0, warmup=0, active=steps, repeat=1)
    with profile(activities=activities, record_shapes=True, with_stack=True, profile_memory=True,
                 schedule=plan) as prof:
        for i in range(steps):
            step_fn(i)
            if i == steps - 1:
                synchronize(device)
            prof.step()
    prof.export_chrome_trace(str(trace_path))
    timeline = trace_path.parent / (trace_path.name.split(".")[0] + "_memory_timeline.raw.json.gz")
    return memory_timeline_peak(prof, timeline, "cuda:0" if str(device).startswith("cuda") else "cpu")


def memory_timeline_peak(prof: profile, timeline_path: Path, device: str) -> int:
    """Write torch's memory timeline of a finished profile (its raw rows: [ts, action, bytes,
    category]) to timeline_path (ending .raw.json.gz) and return its peak of memory allocated
    while profiling (rows before profiling, ts < 0, are left out: [memory] events never see them)."""
    prof.export_memory_timeline(str(timeline_path), device=device)
    rows = json.loads(gzip.decompress(Path(timeline_path).read_bytes()))
    total = peak = 0
    for ts, _action, nbytes, _category in rows:
        if ts < 0:
            continue
        total += nbytes
        peak = max(peak, total)
    return peak


def trace_rank_memory(trace: Path) -> list[dict]:
    """Each rank's memory in a trace (a file or a folder of rank files) as TraceDoctor reports it
    (ranks[].memory: peak_allocated_bytes, peak_reserved_bytes, ...), in rank order."""
    from analyzers.ingest import ingest_paths
    from analyzers.read.memory_queries import rank_memory
    from analyzers.store.database import connect

    con = connect(":memory:")
    try:
        result = ingest_paths(con, [str(trace)])
        memory = rank_memory(con, result.run_id) if result.run_id else {}
        return [memory[rank] for rank in sorted(memory)]
    finally:
        con.close()


MIB = float(1 << 20)


def profile_memory_pair(step_factories: dict[str, Callable[[], Callable[[int], object]]], steps: int,
                        out_dir: Path, device: str) -> tuple[list[Path], dict[str, object]]:
    """Profile each side (before, after) with profile_memory_from_start into out_dir/<side>.json.gz,
    building its model and step function from its factory only then and freeing them after: a GPU
    trace's allocated total counts every live tensor of the process, so the other side's model
    must not be alive. Returns the traces and the checks every memory demo reports: each trace's
    peak as TraceDoctor reads it and as torch's memory timeline gives it, in MiB, the drop and the
    ratio (None where the trace holds no memory events)."""
    traces, ours, theirs = [], [], []
    for side, factory in step_factories.items():
        trace = Path(out_dir) / f"{side}.json.gz"
        release_device_memory(device)
        theirs.append(profile_memory_from_start(factory(), steps, trace, device))
        ranks = trace_rank_memory(trace)
        ours.append(ranks[0]["peak_allocated_bytes"] if ranks else None)
        traces.append(trace)
    before, after = ours
    return traces, {
        "peak_allocated_mib_before": None if before is None else round(before / MIB, 2),
        "peak_allocated_mib_after": None if after is None else round(after / MIB, 2),
        "peak_drop_mib": None if None in ours else round((before - after) / MIB, 2),
        "peak_ratio": None if not before or after is None else round(after / before, 3),
        "torch_timeline_peak_mib_before": round(theirs[0] / MIB, 2),
        "torch_timeline_peak_mib_after": round(theirs[1] / MIB, 2),
    }


def release_device_memory(device: str) -> None:
    """Collect unreachable objects and, on CUDA, return the caching allocator's free blocks, so the
    next profile's allocated totals start from what is alive."""
    gc.collect()
    if str(device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


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
