"""Fix model: the step's recurring untraced host work (lib/host_time.sql's recurring holes: inline
tokenisation, augmentation, bookkeeping) moves off the training thread: into DataLoader workers
(preprocess_in_workers) or out of the loop (pre-tokenised data). The CPU time before each host node
loses its part in those holes (RankGraph.h_untraced); the loop receives the prepared batch in
DATALOADER_HANDOFF_NS once per step."""
from __future__ import annotations

import numpy as np

from analyzers.analysis.whatif.models import FixModel, Touched, apply_per_rank


def _transform(run, finding, t):
    handoff = int(t["DATALOADER_HANDOFF_NS"])

    def change(g):
        moved = g.h_untraced > 0
        if not moved.any():
            return None
        # what stays per step: one handoff, charged to the first moved node of each step
        keep = np.zeros(g.n_host, dtype=np.int64)
        for a, b in zip(g.step_start_node, g.step_end_node):
            first = np.flatnonzero(moved[a:b + 1])
            if len(first):
                keep[a + first[0]] = min(handoff, int(g.h_untraced[a + first[0]]))
        h_gap = g.h_gap - g.h_untraced + keep
        return (g.replace(h_gap=h_gap),
                Touched(host=np.zeros(g.n_host, dtype=bool), gpu=np.zeros(len(g.g_stream), dtype=bool),
                        host_lead=moved, host_lead_cap=g.h_untraced))

    return apply_per_rank(run, finding, change, [
        "the untraced work that recurs each step moves into DataLoader workers that keep up with the loop "
        "(enough CPU cores beside the training thread), or out of the loop altogether",
        f"the loop still spends DATALOADER_HANDOFF_NS={handoff / 1e6:g} ms per step receiving the prepared batch"])


FIX_MODEL = FixModel(fix="move the step's untraced Python into DataLoader workers (preprocess_in_workers)",
                     transform=_transform, fix_ids=("preprocess_in_workers",))
