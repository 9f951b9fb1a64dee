"""Fix model: host-to-device copies prefetched (cuda_prefetcher: pinned memory, non_blocking=True, on a
side stream, one batch ahead). The copy call returns at once, and the copy of the next batch runs
on the copy engine while this step computes: the compute stream waits only for the part of a copy
that a step cannot hide (pinned, it takes 1/PINNED_OVER_PAGEABLE_SPEEDUP of a pageable copy's time)."""
from __future__ import annotations

import numpy as np

from analyzers.analysis.whatif.graph import COPY, SYNC, T_DEVICE, T_STREAM
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
        # a pageable .to() is a copy call and then a sync of the copy's stream (the next host node);
        # prefetched with non_blocking=True neither waits. A sync of another stream, or of an event,
        # waits for other work and stays; one whose stream the trace does not record reads as the
        # device's and is taken as the copy's.
        copy_stream = np.full(g.n_host, -1, dtype=np.int64)
        launched = np.flatnonzero(g.g_has_launch & htod_op)
        copy_stream[g.g_launch[launched]] = g.g_stream[launched]
        after_copy = np.concatenate([[False], htod_call[:-1]])
        stream_before = np.concatenate([[-1], copy_stream[:-1]])
        copy_sync = (g.h_type == SYNC) & after_copy & (
            ((g.h_target_kind == T_STREAM) & (g.h_target == stream_before) & (stream_before >= 0))
            | (g.h_target_kind == T_DEVICE))
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
        f"ASYNC_CALL_NS={call_ns / 1e3:g} us",
        "a sync right after a copy waits for that copy when it syncs the copy's stream or the device (a stream "
        "sync whose stream the trace does not record included); one of another stream or an event stays"])


FIX_MODEL = FixModel(fix="prefetched, pinned, non-blocking host-to-device copies (cuda_prefetcher)",
                     transform=_transform, fix_ids=("cuda_prefetcher",))
