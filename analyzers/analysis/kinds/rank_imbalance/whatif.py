"""Fix model, by the imbalance's cause (the finding's imbalance_source and lateness_pattern):
uneven data ('input') or work that moves between ranks from step to step is balanced
(balanced_sampler): in every step, a rank that works more than the ranks' mean for that step
works the mean, total work unchanged. Extra work of one rank's own (the same work slower on one
rank, a 'stall', 'periodic' eval or checkpoint work) is removed: in every step, a rank that works
more than the median of the other ranks works that median (the host or stall fixed, the periodic
work made asynchronous). Work is a rank's own time between waits: on a
GPU rank its compute kernels, on a CPU rank its CPU time outside collective and loader waits. Which
rank is late may change from step to step, so the change is per step, not per rank."""
from __future__ import annotations

import numpy as np

from analyzers.analysis.whatif.graph import COMM_ISSUE, COMM_WAIT, G_COMPUTE, LOADER, STEP
from analyzers.analysis.whatif.models import FixEffect, FixModel, Touched


def _own_work(g):
    """(host mask of own work, GPU mask of compute) and the rank's work per step (ns)."""
    host_own = ~np.isin(g.h_type, (STEP, COMM_WAIT, COMM_ISSUE, LOADER)) & ~g.h_blocking
    compute = g.g_cat == G_COMPUTE
    host_step = g.host_step()
    gpu_step = host_step[g.g_launch] if len(g.g_launch) else np.zeros(0, dtype=np.int64)
    n = len(g.step_start_node)
    host_ns = np.maximum(g.h_gap, 0) + np.where(host_own, g.h_dur, 0)
    per_step = np.zeros(n, dtype=np.float64)
    if compute.any():
        np.add.at(per_step, gpu_step[compute & (gpu_step >= 0)], g.g_dur[compute & (gpu_step >= 0)])
    else:
        inside = host_step >= 0
        np.add.at(per_step, host_step[inside], host_ns[inside])
    return host_own, compute, host_step, gpu_step, per_step


def _transform(run, finding, t):
    if len(run.ranks) < 2:
        return None
    works = {g.rank: _own_work(g) for g in run.ranks}
    n_steps = min(len(w[4]) for w in works.values())
    if n_steps == 0:
        return None
    # steps are matched across ranks by position (every rank runs the same schedule)
    table = np.array([w[4][:n_steps] for w in works.values()])
    metrics = finding.get("metrics") or {}
    removed = metrics.get("imbalance_source") != "input" and metrics.get("lateness_pattern") != "moving"
    mean = table.mean(axis=0)
    graphs, touched = [], {}
    for index, g in enumerate(run.ranks):
        host_own, compute, host_step, gpu_step, per_step = works[g.rank]
        target = np.median(np.delete(table, index, axis=0), axis=0) if removed else mean
        factor = np.ones(len(per_step))
        factor[:n_steps] = np.where(per_step[:n_steps] > target, target / np.maximum(per_step[:n_steps], 1), 1.0)
        if (factor >= 1).all():
            graphs.append(g)
            continue
        f_host = np.where(host_step >= 0, factor[np.clip(host_step, 0, None)], 1.0)
        f_gpu = np.where(gpu_step >= 0, factor[np.clip(gpu_step, 0, None)], 1.0)
        if compute.any():
            g_dur = np.where(compute, (g.g_dur * f_gpu).astype(np.int64), g.g_dur)
            new = g.replace(g_dur=g_dur)
            hit = Touched(host=np.zeros(g.n_host, dtype=bool), gpu=compute & (f_gpu < 1))
        else:
            h_gap = np.where(g.h_gap > 0, (g.h_gap * f_host).astype(np.int64), g.h_gap)
            h_dur = np.where(host_own, (g.h_dur * f_host).astype(np.int64), g.h_dur)
            new = g.replace(h_gap=h_gap, h_dur=h_dur)
            hit = Touched(host=host_own & (f_host < 1), gpu=np.zeros(len(g.g_stream), dtype=bool),
                          host_lead=f_host < 1)
        graphs.append(new)
        touched[g.rank] = hit
    if not touched:
        return None
    work = "own work (compute kernels on a GPU rank, CPU time outside waits on a CPU rank)"
    change = (f"in every step, a rank whose {work} is above the other ranks' median for that step does that median "
              "(its own extra work removed: the host or stall fixed, periodic work made asynchronous)" if removed else
              f"in every step, a rank whose {work} is above the ranks' mean for that step does the mean (a balanced "
              "sampler); total work is unchanged")
    return FixEffect(graph=run.replace(ranks=graphs), touched=touched,
                     assumptions=[change, "steps are matched across ranks by their order"])


FIX_MODEL = FixModel(fix="the straggler's extra work balanced over the ranks (uneven data) or removed (the same "
                         "work slower on one rank, a stall, periodic work)", transform=_transform,
                     fix_ids=("balanced_sampler",), by_first_fix=True)
