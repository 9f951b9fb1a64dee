"""Fix model: the straggler's work set to the ranks' mean (balanced_sampler): its CPU time between
waits and its compute kernels shrink by mean work / its work, per the finding's
mean_work_ms_per_step and straggler_work_ms_per_step."""
from __future__ import annotations

import numpy as np

from analyzers.whatif.graph import G_COMPUTE, LOADER, STEP, COMM_WAIT, COMM_ISSUE
from analyzers.whatif.models import FixEffect, FixModel, Touched


def _transform(run, finding, t):
    metrics = finding.get("metrics") or {}
    straggler = metrics.get("straggler_rank", finding.get("rank"))
    mean_work = metrics.get("mean_work_ms_per_step")
    its_work = metrics.get("straggler_work_ms_per_step")
    if straggler is None or not mean_work or not its_work or its_work <= mean_work:
        return None
    factor = float(mean_work) / float(its_work)
    graphs, touched = [], {}
    for g in run.ranks:
        if g.rank != straggler:
            graphs.append(g)
            continue
        own_work = ~np.isin(g.h_type, (STEP, COMM_WAIT, COMM_ISSUE, LOADER)) & ~g.h_blocking
        h_gap = np.where(g.h_gap > 0, (g.h_gap * factor).astype(np.int64), g.h_gap)
        h_dur = np.where(own_work, (g.h_dur * factor).astype(np.int64), g.h_dur)
        compute = g.g_cat == G_COMPUTE
        g_dur = np.where(compute, (g.g_dur * factor).astype(np.int64), g.g_dur)
        graphs.append(g.replace(h_gap=h_gap, h_dur=h_dur, g_dur=g_dur))
        touched[g.rank] = Touched(host=own_work, gpu=compute, host_lead=np.ones(g.n_host, dtype=bool))
    if not touched:
        return None
    return FixEffect(graph=run.replace(ranks=graphs), touched=touched, assumptions=[
        f"rank {straggler}'s work (CPU time between waits, compute kernels) scaled by {factor:.3f}: the ranks' "
        "mean work over its own (the finding's mean_work_ms_per_step / straggler_work_ms_per_step)"])



FIX_MODEL = FixModel(fix="the straggler's work balanced to the mean (balanced_sampler)", transform=_transform)
