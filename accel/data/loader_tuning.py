"""Derive DataLoader settings from a dataloader_stall finding and the machine, and build it.

The arithmetic: with W ms of loading per batch (serial, in one process) and C ms of compute per
step, k workers load k batches in parallel, so the loop stops waiting once k * C >= W, i.e.
k = ceil(W / C). In a trace with num_workers=0, W is the time spent in DataLoader.__next__
per step and C the rest of the step. One extra worker absorbs jitter. Capped at the CPUs this
process may use: for CPU-bound decoding more workers than cores only contend (for loaders
waiting on I/O or the network more can help: pass max_workers).

    loader = tuned_dataloader(dataset, batch_size=64, shuffle=True, metrics=finding["metrics"])
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from accel.fix_predicates import num
from analyzers.common import thresholds as th


@dataclass(frozen=True)
class LoaderSettings:
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None     # None when num_workers == 0 (torch requires it)
    reason: str                     # how the numbers were derived, in one line

    def kwargs(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("reason")
        if self.num_workers == 0:
            data.pop("prefetch_factor")
            data["persistent_workers"] = False
        return data


def usable_cpus() -> int:
    """CPUs this process may run on (affinity-aware; containers often restrict it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def suggest_settings(metrics: Mapping[str, Any] | None = None, *, cpu_count: int | None = None,
                     cuda: bool | None = None, max_workers: int | None = None,
                     current_workers: int | None = None,
                     thresholds: Mapping[str, float] | None = None) -> LoaderSettings:
    """Loader settings for the machine, sized from the finding's metrics when they say enough.

    Reads metrics keys (all optional): wait_ms_per_step (time the loop waits for a batch),
    step_time_ms, num_workers (workers in the profiled run: absent means 0, None means "some,
    the trace does not say how many"), wait_cv (coefficient of variation of the wait: spiky
    loading wants a deeper prefetch queue from LOADER_SPIKY_WAIT_CV on; dataloader_stall does not
    measure it, pass it when you know). current_workers: the profiled run's num_workers when
    the trace does not record it (a loader with workers); never fewer are suggested.
    thresholds: overrides of analyzers.common.thresholds by name.
    """
    cpus = cpu_count if cpu_count is not None else usable_cpus()
    if cuda is None:
        try:
            import torch
            cuda = torch.cuda.is_available()
        except ImportError:
            cuda = False
    cap = max(1, max_workers if max_workers is not None else cpus)

    wait = num(metrics, "wait_ms_per_step", "dataloader_wait_ms", "wait_ms")
    step = num(metrics, "step_time_ms", "mean_step_ms")
    workers_seen = current_workers if current_workers is not None else num(metrics, "num_workers")
    count_unknown = workers_seen is None and bool(metrics) and "num_workers" in metrics
    workers_seen = int(workers_seen or 0)
    if count_unknown:
        # With k workers the serial load time is (compute + wait) * k: without k it cannot be
        # sized, and reading "unknown" as 0 advised fewer workers than the run already had.
        workers = cap
        reason = (f"the trace does not record how many workers the loader had (it had some): "
                  f"one per usable CPU ({cap}); pass current_workers=N for a sized suggestion")
    elif wait is not None and step is not None and step > wait > 0:
        compute = step - wait
        # Loading work per batch: all of the wait with 0 workers; with k workers already,
        # each supplies a batch per (C + wait) * k, so the serial load time is about that.
        load = wait if workers_seen == 0 else (compute + wait) * workers_seen
        needed = math.ceil(load / compute) + 1
        workers = max(min(cap, needed), workers_seen)   # never fewer than the run already had
        reason = (f"loading ~{load:.1f} ms/batch vs {compute:.1f} ms compute -> {needed} workers"
                  f"{'' if needed <= cap else f', capped at {cap}'}")
        if workers == workers_seen and needed > workers_seen:
            reason += (f"; the run already had {workers_seen}: more need more CPUs, or max_workers "
                       "when loading waits on storage or the network rather than the CPU")
    else:
        workers = cap
        reason = f"no wait/step metrics: one worker per usable CPU ({cap})"

    cv = num(metrics, "wait_cv")
    prefetch = 4 if cv is not None and cv > th.resolve(thresholds)["LOADER_SPIKY_WAIT_CV"] else 2
    return LoaderSettings(num_workers=workers, pin_memory=bool(cuda),
                          persistent_workers=workers > 0,
                          prefetch_factor=prefetch if workers > 0 else None, reason=reason)


def tuned_dataloader(dataset, batch_size: int = 1, *, metrics: Mapping[str, Any] | None = None,
                     settings: LoaderSettings | None = None, current_workers: int | None = None,
                     **loader_kwargs):
    """torch.utils.data.DataLoader with suggested settings; explicit loader_kwargs win.
    current_workers: the profiled loader's num_workers (see suggest_settings)."""
    from torch.utils.data import DataLoader

    settings = settings or suggest_settings(metrics, current_workers=current_workers)
    kwargs = {**settings.kwargs(), **loader_kwargs}
    if kwargs.get("num_workers", 0) == 0:
        kwargs.pop("prefetch_factor", None)
        kwargs["persistent_workers"] = False
    return DataLoader(dataset, batch_size=batch_size, **kwargs)
