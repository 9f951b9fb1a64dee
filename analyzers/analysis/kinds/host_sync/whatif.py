"""Fix model: the host syncs removed (the value read a step later, or copied without blocking): the
calls stop waiting for the GPU and cost only their call."""
from __future__ import annotations

import numpy as np

from analyzers.analysis.whatif.graph import COPY, SYNC
from analyzers.analysis.whatif.models import FixModel, Touched, apply_per_rank


def _transform(run, finding, t):
    call_ns = int(t["ASYNC_CALL_NS"])

    def change(g):
        dtoh = np.array([d == "DtoH" for d in g.h_copy_dir], dtype=bool)
        hit = g.h_blocking & ((g.h_type == SYNC) | ((g.h_type == COPY) & dtoh))
        if not hit.any():
            return None
        blocking = g.h_blocking & ~hit
        dur = np.where(hit, np.minimum(g.h_dur, call_ns), g.h_dur)
        return g.replace(h_blocking=blocking, h_dur=dur), Touched(host=hit, gpu=np.zeros(len(g.g_stream), dtype=bool))

    return apply_per_rank(run, finding, change, [
        "every blocking sync and device-to-host copy of the finding's ranks stops waiting for the GPU",
        f"each call still costs the host ASYNC_CALL_NS={call_ns / 1e3:g} us"])


FIX_MODEL = FixModel(fix="no host sync in the step (read values later, non-blocking copies)", transform=_transform)
