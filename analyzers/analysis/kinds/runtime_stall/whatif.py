"""Fix model: the slow runtime calls removed (allocator kept warm, no empty_cache, start-up left
out of the profile): they cost the host nothing."""
from __future__ import annotations

import numpy as np

from analyzers.analysis.whatif.models import FixModel, Touched, apply_per_rank


def _transform(run, finding, t):
    def change(g):
        hit = g.h_stall & ~g.h_blocking
        if not hit.any():
            return None
        return (g.replace(h_dur=np.where(hit, 0, g.h_dur)),
                Touched(host=hit, gpu=np.zeros(len(g.g_stream), dtype=bool)))

    return apply_per_rank(run, finding, change, [
        "the slow runtime calls (allocator cudaMalloc/cudaFree, calls over RUNTIME_STALL_MIN_NS) no longer happen "
        "in the step"])


FIX_MODEL = FixModel(fix="no slow runtime calls in the step (allocator_tuning)", transform=_transform,
                     fix_ids=("allocator_tuning", "drop_empty_cache"))
