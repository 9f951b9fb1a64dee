"""Fix model for exposed communication, by the finding's first fix:
- no_sync_accumulation: one all-reduce round per optimizer step: where the trace counts more rounds
  than optimizer steps (gradient_sync_rounds), each transfer scales by optimizer steps / rounds;
  else one every NO_SYNC_ACCUMULATION_STEPS steps, amortised;
- comm_compression / powersgd: COMM_COMPRESSION_BYTES_FACTOR of the bytes, so of the transfer time;
- otherwise (bucket tuning, overlap with backward): the collectives of a step overlap the backward
  pass but its last one, which the optimizer still waits for: their transfer leaves the path.
Waiting for a late rank is not this finding's (rank_imbalance): what is left after the last rank
arrives (the transfer) is what changes."""
from __future__ import annotations

import numpy as np

from analyzers.analysis.whatif.graph import COMM_ISSUE, COMM_WAIT, G_COMM
from analyzers.analysis.whatif.models import FixModel, Touched, apply_per_rank


def _transform(run, finding, t):
    fixes = list(finding.get("fixes") or [])
    first = fixes[0] if fixes else ""
    metrics = finding.get("metrics") or {}
    rounds, optimizer_steps = metrics.get("allreduce_rounds_per_step"), metrics.get("optimizer_steps_per_step")
    if first == "no_sync_accumulation" and rounds and optimizer_steps and rounds > optimizer_steps:
        # the trace counts the rounds: no_sync keeps the last of them before each optimizer step
        words = [f"gradients all-reduced once per optimizer step (DDP no_sync): of the {rounds:g} all-reduce "
                 f"rounds per step measured, the last {optimizer_steps:g} stay as measured; the others, their "
                 "transfers and their waits for other ranks, are gone"]
        if not any((g.g_cat == G_COMM).any() for g in run.ranks):
            words.append("on CPU collectives (gloo) the rounds hidden behind compute also take cores from it: "
                         "the step gains that too, which the replay does not count (it predicts less than the fix buys)")
        return _fewer_rounds(run, finding, optimizer_steps / rounds, words)
    if first == "no_sync_accumulation":
        factor, words = 1.0 / float(t["NO_SYNC_ACCUMULATION_STEPS"]), (
            f"gradients all-reduced once every NO_SYNC_ACCUMULATION_STEPS={int(t['NO_SYNC_ACCUMULATION_STEPS'])} "
            "steps (DDP no_sync), the transfer amortised over them")
    elif first in ("comm_compression", "powersgd"):
        factor, words = float(t["COMM_COMPRESSION_BYTES_FACTOR"]), (
            f"gradients compressed to COMM_COMPRESSION_BYTES_FACTOR={t['COMM_COMPRESSION_BYTES_FACTOR']:g} of "
            "their bytes; transfer time in proportion")
    else:
        factor, words = None, ("the step's collectives overlap the backward pass except its last one "
                               "(smaller DDP buckets issued as gradients are ready)")

    def change(g):
        comm_op = g.g_cat == G_COMM
        wait = (g.h_type == COMM_WAIT) & g.h_blocking
        if not comm_op.any() and not wait.any():
            return None
        if factor is not None:
            scale_op, scale_wait = comm_op, wait
        else:     # overlap: all but each step's last collective
            scale_op = comm_op & ~_last_per_step(g, comm_op, gpu=True)
            scale_wait = wait & ~_last_per_step(g, wait, gpu=False)
        f = 0.0 if factor is None else factor
        g_dur = np.where(scale_op & (g.g_coll < 0), (g.g_dur * f).astype(np.int64), g.g_dur)
        g_tail = np.where(scale_op, (g.g_coll_tail * f).astype(np.int64), g.g_coll_tail)
        h_tail = np.where(scale_wait, (g.h_coll_tail * f).astype(np.int64), g.h_coll_tail)
        return (g.replace(g_dur=g_dur, g_coll_tail=g_tail, h_coll_tail=h_tail),
                Touched(host=scale_wait, gpu=scale_op))

    return apply_per_rank(run, finding, change, [words])


def _fewer_rounds(run, finding, keep_share: float, assumptions: list[str]):
    """Each step keeps the last keep_share of its collectives (host waits and comm kernels); the
    others neither transfer nor wait. On the host, a round is a collective's issue and every wait
    up to the next issue (gloo's waits are split by the ops between them, and a piece ending far
    from any collective's end is not matched to one); without issue nodes, the matched waits."""
    def change(g):
        comm_op = g.g_cat == G_COMM
        issue = g.h_type == COMM_ISSUE
        wait = (g.h_type == COMM_WAIT) & (g.h_blocking | issue.any())
        if not comm_op.any() and not wait.any():
            return None
        if issue.any():
            kept_issue = _last_per_step(g, issue, gpu=False, share=keep_share)
            # each host node's latest issue at or before it (-1: none yet)
            latest = np.maximum.accumulate(np.where(issue, np.arange(g.n_host), -1))
            gone_wait = wait & (latest >= 0) & ~kept_issue[np.maximum(latest, 0)]
        else:
            gone_wait = wait & ~_last_per_step(g, wait, gpu=False, share=keep_share)
        gone_op = comm_op & ~_last_per_step(g, comm_op, gpu=True, share=keep_share)
        return (g.replace(h_blocking=g.h_blocking & ~gone_wait, h_dur=np.where(gone_wait, 0, g.h_dur),
                          h_coll_tail=np.where(gone_wait, 0, g.h_coll_tail),
                          g_dur=np.where(gone_op, 0, g.g_dur), g_coll=np.where(gone_op, -1, g.g_coll),
                          g_coll_tail=np.where(gone_op, 0, g.g_coll_tail)),
                Touched(host=gone_wait, gpu=gone_op))

    return apply_per_rank(run, finding, change, assumptions)


def _last_per_step(g, mask, gpu: bool, share: float | None = None) -> np.ndarray:
    """The last of `mask`'s nodes in each step (by host position of their launch); with share, the
    last ceil(share x n) of the step's n."""
    position = g.g_launch if gpu else np.arange(g.n_host)
    last = np.zeros(len(mask), dtype=bool)
    idx = np.flatnonzero(mask)
    for a, b in zip(g.step_start_node, g.step_end_node):
        inside = idx[(position[idx] >= a) & (position[idx] <= b)]
        if len(inside):
            keep = 1 if share is None else int(np.ceil(share * len(inside) - 1e-9))
            last[inside[np.argsort(position[inside], kind="stable")[len(inside) - keep:]]] = True
    return last


FIX_MODEL = FixModel(fix="less exposed communication (no_sync, compression or overlap, by the first fix)",
                     transform=_transform, by_first_fix=True,
                     fix_ids=("no_sync_accumulation", "comm_compression", "powersgd", "ddp_bucket_tuning"))
