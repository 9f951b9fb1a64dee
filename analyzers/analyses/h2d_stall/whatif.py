"""Fix model: host-to-device copies from pinned memory, issued non-blocking: the copy call returns at
once, and a pageable copy moves PINNED_OVER_PAGEABLE_SPEEDUP times faster. The copies stay in
stream order: the kernels that use the data still wait for them."""
from __future__ import annotations

import numpy as np

from analyzers.whatif.graph import COPY
from analyzers.whatif.models import FixModel, Touched, apply_per_rank


def _transform(run, finding, t):
    call_ns = int(t["ASYNC_CALL_NS"])
    speedup = float(t["PINNED_OVER_PAGEABLE_SPEEDUP"])

    def change(g):
        htod_call = (g.h_type == COPY) & np.array([d == "HtoD" for d in g.h_copy_dir], dtype=bool)
        htod_op = np.array([d == "HtoD" for d in g.g_copy_dir], dtype=bool)
        pageable = htod_op & g.g_pageable
        if not (htod_call & g.h_blocking).any() and not pageable.any():
            return None
        blocking = g.h_blocking & ~htod_call
        h_dur = np.where(htod_call & g.h_blocking, np.minimum(g.h_dur, call_ns), g.h_dur)
        g_dur = np.where(pageable, (g.g_dur / speedup).astype(np.int64), g.g_dur)
        return (g.replace(h_blocking=blocking, h_dur=h_dur, g_dur=g_dur),
                Touched(host=htod_call & g.h_blocking, gpu=pageable))

    return apply_per_rank(run, finding, change, [
        "host-to-device copies come from pinned memory and are issued with non_blocking=True",
        f"a pageable copy becomes PINNED_OVER_PAGEABLE_SPEEDUP={speedup:g}x faster; the call costs "
        f"ASYNC_CALL_NS={call_ns / 1e3:g} us",
        "the kernels that use a copy still wait for it (same stream)"])


FIX_MODEL = FixModel(fix="pinned, non-blocking host-to-device copies", transform=_transform)
