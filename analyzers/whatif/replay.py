"""Replay a RunGraph: every node's time from its dependencies and durations, vectorised.

Per rank, the host chain is cut at its blocking nodes into epochs. Within an epoch the host is a
cumulative sum (each node starts after the CPU time before it, `gap`); the GPU work launched in it
is, per stream, the max-plus scan end_j = max(ready_j + d_j, end_{j-1} + G + d_j) with
ready_j = launch end + L (numpy maximum.accumulate); the blocking node then ends when what it waits
for has ended, plus its own overhead. Collectives couple ranks: a matched collective ends at
(the last rank's arrival + its transfer); the ranks are replayed again with those ends until they
stop moving (a monotone fixpoint).

Every node remembers which dependency decided its time; following those back from the last step's
end gives the critical path.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analyzers.whatif.graph import (COMM_ISSUE, G_COMM, G_COMPUTE, G_MEMORY, G_WAIT, LAUNCH, CALL, COPY, LOADER,
                                    COMM_WAIT, NEVER, STEP, SYNC, T_COLL, T_DEVICE, T_NONE, T_OP, T_STREAM,
                                    RankGraph, RunGraph)

# who decided a node's time
P_NONE, P_HOST, P_GPU = 0, 1, 2
MAX_CROSS_RANK_ROUNDS = 50


@dataclass
class RankReplay:
    rank: int
    h_start: np.ndarray
    h_end: np.ndarray
    h_pred_kind: np.ndarray
    h_pred: np.ndarray
    g_start: np.ndarray
    g_end: np.ndarray
    g_pred_kind: np.ndarray
    g_pred: np.ndarray
    g_coll_wait: np.ndarray          # time a collective waited for other ranks
    step_ns: np.ndarray              # replayed step durations


@dataclass
class RunReplay:
    ranks: list[RankReplay]
    coll_arrival: np.ndarray         # per collective: the last rank's replayed arrival
    rounds: int
    converged: bool
    notes: list[str] = field(default_factory=list)

    def mean_step_ns(self) -> float:
        steps = [r.step_ns for r in self.ranks if len(r.step_ns)]
        return float(np.mean(np.concatenate(steps))) if steps else 0.0


def replay_run(run: RunGraph, start_arrival: np.ndarray | None = None) -> RunReplay:
    """Replay every rank; collectives matched across ranks end when their last rank arrives.
    The ranks are replayed again with the last arrivals of the round before until they settle
    (Jacobi rounds: each settles at least one more collective of the chain); start_arrival, the
    arrivals to start from (a baseline replay's), saves rounds."""
    n_coll = run.n_coll
    coll_arrival = (np.full(n_coll, NEVER, dtype=np.int64) if start_arrival is None
                    else np.asarray(start_arrival, dtype=np.int64).copy())
    results: list[RankReplay] = []
    rounds = 0
    converged = True
    coupled = bool(run.coll_matched.any()) and len(run.ranks) > 1
    while True:
        rounds += 1
        arrival = np.full(n_coll, NEVER, dtype=np.int64)
        results = []
        for graph in run.ranks:
            result, arrive = replay_rank(graph, coll_arrival)
            results.append(result)
            np.maximum(arrival, arrive, out=arrival)
        arrival = np.where(run.coll_matched, arrival, NEVER)   # an unmatched one waits for its own rank only
        settled = np.all(np.abs(arrival - coll_arrival) <= 1_000)
        coll_arrival = arrival
        if not coupled or settled:
            break
        if rounds >= MAX_CROSS_RANK_ROUNDS:
            converged = False
            break
    notes = [] if converged else [f"The ranks' collectives had not settled after {rounds} replay rounds: "
                                  "the replayed waits are a lower bound."]
    return RunReplay(ranks=results, coll_arrival=coll_arrival, rounds=rounds, converged=converged, notes=notes)


def _scan(ready, dur, gap, carry):
    """end_j = max(ready_j + dur_j, end_{j-1} + gap_j + dur_j) along one stream, end_{-1} = carry."""
    a = gap + dur
    acc = np.cumsum(a)
    x = ready + dur - acc
    x[0] = max(x[0], carry)
    return acc + np.maximum.accumulate(x)


def replay_rank(g: RankGraph, coll_arrival: np.ndarray):
    """One rank's replay given the collectives' last arrivals so far; returns (RankReplay, this rank's
    arrivals per collective)."""
    n = g.n_host
    h_start = np.zeros(n, dtype=np.int64)
    h_end = np.zeros(n, dtype=np.int64)
    h_pred_kind = np.full(n, P_HOST, dtype=np.int8)
    h_pred = np.arange(-1, n - 1, dtype=np.int64)
    m = len(g.g_stream)
    g_start = np.full(m, NEVER, dtype=np.int64)
    g_end = np.full(m, NEVER, dtype=np.int64)
    g_pred_kind = np.full(m, P_NONE, dtype=np.int8)
    g_pred = np.full(m, -1, dtype=np.int64)
    g_coll_wait = np.zeros(m, dtype=np.int64)
    arrival = np.full(len(coll_arrival), NEVER, dtype=np.int64)

    # GPU ops per stream, ordered; an op belongs to the epoch of its (running max) launch index
    streams = np.unique(g.g_stream)
    bounds = np.searchsorted(g.g_stream, streams, side="left")
    ends_ = np.searchsorted(g.g_stream, streams, side="right")
    epoch_key = [np.maximum.accumulate(g.g_launch[b:e]) for b, e in zip(bounds, ends_)]
    done = [0] * len(streams)        # ops of each stream replayed so far
    carry = [NEVER] * len(streams)
    last_op = [-1] * len(streams)
    stream_pos = {int(s): k for k, s in enumerate(streams)}
    is_coll_op = g.g_coll >= 0
    dur = g.g_dur.copy()
    dur[is_coll_op] = g.g_coll_tail[is_coll_op]
    latency = g.launch_latency_ns
    queue = np.where(g.g_cat == G_WAIT, 0, g.queue_gap_ns).astype(np.int64)

    blocking = np.flatnonzero(g.h_blocking)
    step_cuts = np.append(blocking, n)
    cursor = int(g.h_start[0])
    owner = -1                          # the node that set the host's progress
    a = 0
    increments = np.maximum(g.h_gap + g.h_dur, 0)
    for b in step_cuts:
        if b > a:
            seg = slice(a, b)
            inc = increments[seg]
            cum = cursor + np.cumsum(inc)
            prev = np.concatenate([[cursor], cum[:-1]])
            h_start[seg] = prev + g.h_gap[seg]
            h_end[seg] = h_start[seg] + g.h_dur[seg]
            # who set the progress before each node: the last earlier node with a positive increment
            moved = np.flatnonzero(inc > 0) + a
            idx = np.arange(a, b)
            k = np.searchsorted(moved, idx, side="left") - 1
            h_pred[seg] = np.where(k >= 0, moved[np.clip(k, 0, None)], owner) if len(moved) else owner
            if len(moved):
                owner = int(moved[-1])
            cursor = int(cum[-1])
        # GPU work launched before node b (cross-stream waits: repeat until the streams agree)
        passes = 2 if (g.g_dep >= 0).any() else 1
        start_done = list(done)
        start_carry = list(carry)
        start_last = list(last_op)
        for _ in range(passes):
            for k_s in range(len(streams)):
                lo = start_done[k_s]
                hi = int(np.searchsorted(epoch_key[k_s], b, side="left"))
                if hi <= lo:
                    continue
                sl = slice(bounds[k_s] + lo, bounds[k_s] + hi)
                launch = g.g_launch[sl]
                has = g.g_has_launch[sl]
                launch_ready = np.where(has, h_end[launch] + latency, NEVER)
                dep = g.g_dep[sl]
                dep_end = np.where(dep >= 0, g_end[np.clip(dep, 0, None)], NEVER)
                ready = np.maximum(launch_ready, dep_end)
                colls = g.g_coll[sl]
                d = dur[sl]
                q = queue[sl]
                floor_end = (np.where(colls >= 0, np.maximum(coll_arrival[np.clip(colls, 0, None)], ready) + d, NEVER)
                             if len(coll_arrival)
                             else np.full(len(colls), NEVER, dtype=np.int64))
                end = _scan(np.maximum(ready, floor_end - d), d, q, start_carry[k_s])
                prev_end = np.concatenate([[start_carry[k_s]], end[:-1]])
                start = np.maximum(ready, prev_end + q)
                g_start[sl] = start
                g_end[sl] = end
                g_coll_wait[sl] = end - (start + d)
                # who decided the start: the launch, the awaited op on another stream, or the op before
                by_ready = ready >= prev_end + q
                dep_bound = (dep >= 0) & (dep_end >= launch_ready)
                prev_idx = np.concatenate([[start_last[k_s]], np.arange(sl.start, sl.stop - 1)])
                pred = np.where(by_ready, np.where(dep_bound, dep, np.where(has, launch, -1)), prev_idx)
                kind = np.where(by_ready & ~dep_bound, P_HOST, P_GPU)
                g_pred[sl] = pred
                g_pred_kind[sl] = np.where(pred < 0, P_NONE, kind)
                done[k_s] = hi
                carry[k_s] = int(g_end[sl.stop - 1])
                last_op[k_s] = sl.stop - 1
        if b == n:
            break
        # the blocking node
        start_b = cursor + int(g.h_gap[b])
        issued = np.flatnonzero((g.h_type[:b] == COMM_ISSUE) & (g.h_coll[:b] >= 0)) if g.h_target_kind[b] == T_COLL else ()
        if len(issued):
            np.maximum.at(arrival, g.h_coll[issued], h_start[issued])
        target_end, target = _target(g, b, g_end, carry, last_op, stream_pos, coll_arrival, arrival)
        h_start[b] = start_b
        if target_end > start_b:
            h_end[b] = target_end + int(g.h_own[b])
            h_pred_kind[b] = P_GPU if target >= 0 else P_NONE
            h_pred[b] = target
            if g.h_target_kind[b] == T_COLL:
                # waits for the last rank: the rank's own path goes on from its progress before
                # (the wait itself is the path's comm_wait)
                h_pred_kind[b] = P_HOST
                h_pred[b] = owner
        else:
            h_end[b] = start_b + int(g.h_own[b])
            h_pred[b] = owner
        if h_end[b] > cursor:
            cursor = int(h_end[b])
            owner = int(b)
        a = b + 1

    # arrivals at collectives: GPU kernels' starts, CPU ranks' comm_issue nodes
    coll_ops = np.flatnonzero(is_coll_op)
    if len(coll_ops):
        np.maximum.at(arrival, g.g_coll[coll_ops], g_start[coll_ops])
    issue = np.flatnonzero((g.h_type == COMM_ISSUE) & (g.h_coll >= 0))
    if len(issue):
        np.maximum.at(arrival, g.h_coll[issue], h_start[issue])
    step_ns = h_end[g.step_end_node] - h_end[g.step_start_node]
    return RankReplay(rank=g.rank, h_start=h_start, h_end=h_end, h_pred_kind=h_pred_kind, h_pred=h_pred,
                      g_start=g_start, g_end=g_end, g_pred_kind=g_pred_kind, g_pred=g_pred,
                      g_coll_wait=g_coll_wait, step_ns=step_ns), arrival


def _target(g: RankGraph, b: int, g_end, carry, last_op, stream_pos, coll_arrival, own_arrival):
    """(when what blocking node b waits for ends, the op that ends it or -1)."""
    kind = g.h_target_kind[b]
    if kind == T_DEVICE:
        if not carry:
            return NEVER, -1
        k = int(np.argmax(carry))
        return int(carry[k]), int(last_op[k])
    if kind == T_STREAM:
        k = stream_pos.get(int(g.h_target[b]))
        return (NEVER, -1) if k is None else (int(carry[k]), int(last_op[k]))
    if kind == T_OP:
        j = int(g.h_target[b])
        return int(g_end[j]), j
    if kind == T_COLL:
        c = int(g.h_target[b])
        last = max(int(coll_arrival[c]), int(own_arrival[c]))   # this rank's own arrival is this round's
        if last == NEVER:       # first round, or a collective no rank issued in the graph
            return NEVER, -1
        return last + int(g.h_coll_tail[b]), -1
    return NEVER, -1
