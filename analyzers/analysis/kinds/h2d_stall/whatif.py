"""Fix model: host-to-device copies prefetched (cuda_prefetcher: pinned memory, non_blocking=True, on a
side stream, one batch ahead). The copy call returns at once, and the copy of the next batch runs
on the copy engine while this step computes: the compute stream waits only for the part of a copy
that a step cannot hide (pinned, it takes 1/PINNED_OVER_PAGEABLE_SPEEDUP of a pageable copy's time)."""
from __future__ import annotations

import numpy as np

from analyzers.analysis.whatif.graph import COPY, SYNC
from analyzers.analysis.whatif.models import FixModel, Touched, apply_per_rank


def _transform(run, finding, t):
    call_ns = int(t["ASYNC_CALL_NS"])
    speedup = float(t["PINNED_OVER_PAGEABLE_SPEEDUP"])

    def change(g):
        htod_call = (g.h_type == COPY) & np.array([d == "HtoD" for d in g.h_copy_dir], dtype=bool)
        htod_op = np.array([d == "HtoD" for d in g.g_copy_dir], dtype=bool)
        if not htod_call.any() and not htod_op.any():
            return None
        step_ns = float(np.mean(g.step_measured_ns)) if len(g.step_measured_ns) else 0.0
        pinned_ns = np.where(g.g_pageable, g.g_dur / speedup, g.g_dur)
        g_dur = np.where(htod_op, np.maximum(pinned_ns - step_ns, 0).astype(np.int64), g.g_dur)
        # a pageable .to() is a copy call and then a stream sync (the next host node); prefetched
        # with non_blocking=True neither waits
        copy_sync = (g.h_type == SYNC) & np.concatenate([[False], htod_call[:-1]])
        unblocked = htod_call | copy_sync
        blocking = g.h_blocking & ~unblocked
        h_dur = np.where(unblocked, np.minimum(g.h_dur, call_ns), g.h_dur)
        g_early = np.where(htod_op, -1, g.g_early)      # issued asynchronously: timed from its call's end
        return (g.replace(h_blocking=blocking, h_dur=h_dur, g_dur=g_dur, g_early=g_early),
                Touched(host=unblocked, gpu=htod_op))

    return apply_per_rank(run, finding, change, [
        "host-to-device copies are prefetched one batch ahead on a side stream from pinned memory "
        "(non_blocking=True): the compute stream waits only for what of a copy a step cannot hide",
        f"a pageable copy becomes PINNED_OVER_PAGEABLE_SPEEDUP={speedup:g}x faster pinned; the copy call costs "
        f"ASYNC_CALL_NS={call_ns / 1e3:g} us"])


FIX_MODEL = FixModel(fix="prefetched, pinned, non-blocking host-to-device copies (cuda_prefetcher)",
                     transform=_transform)
