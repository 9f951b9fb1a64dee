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

from analyzers.analysis.whatif.graph import (COMM_ISSUE, G_COMM, G_COMPUTE, G_MEMORY, G_WAIT, LAUNCH, CALL, COPY, LOADER,
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
    gpu_work_per_step_ns: float = 0.0   # the floor of the rank's mean step (_gpu_work_per_step)


@dataclass
class RunReplay:
    ranks: list[RankReplay]
    coll_arrival: np.ndarray         # per collective: the last rank's replayed arrival
    rounds: int
    converged: bool
    notes: list[str] = field(default_factory=list)

    def mean_step_ns(self) -> float:
        """The mean replayed step over the ranks' steps; a rank's mean is at least its GPU work per
        step: over many steps a host that no longer waits still cannot outrun its GPU."""
        ranks = [r for r in self.ranks if len(r.step_ns)]
        if not ranks:
            return 0.0
        total = sum(max(float(np.mean(r.step_ns)), r.gpu_work_per_step_ns) * len(r.step_ns) for r in ranks)
        return total / sum(len(r.step_ns) for r in ranks)


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
    arrivals per collective). The loop runs once per epoch (per blocking host node) with a few numpy
    calls; who decided each time (the critical path's edges) is worked out after it, vectorised."""
    n = g.n_host
    h_start = np.zeros(n, dtype=np.int64)
    h_end = np.zeros(n, dtype=np.int64)
    m = len(g.g_stream)
    g_start = np.full(m, NEVER, dtype=np.int64)
    g_end = np.full(m, NEVER, dtype=np.int64)
    arrival = np.full(len(coll_arrival), NEVER, dtype=np.int64)

    # GPU ops per stream, ordered; an op belongs to the epoch of its (running max) launch index
    streams = np.unique(g.g_stream)
    bounds = np.searchsorted(g.g_stream, streams, side="left").tolist()
    stream_ends = np.searchsorted(g.g_stream, streams, side="right").tolist()
    blocking = np.flatnonzero(g.h_blocking)
    cuts = np.append(blocking, n)
    # per stream, how many of its ops are launched before each cut (the epochs' slices, computed once)
    upto = [(np.searchsorted(np.maximum.accumulate(g.g_launch[b:e]), cuts, side="left") + b).tolist()
            for b, e in zip(bounds, stream_ends)]
    done = list(bounds)              # next op of each stream to replay
    carry = [NEVER] * len(streams)
    last_op = [-1] * len(streams)
    stream_pos = {int(s): k for k, s in enumerate(streams)}
    is_coll_op = g.g_coll >= 0
    dur = g.g_dur.copy()
    dur[is_coll_op] = g.g_coll_tail[is_coll_op]
    launch_ready_offset = np.where(g.g_has_launch, g.launch_latency_ns, NEVER).astype(np.int64)
    has_launch = g.g_has_launch
    queue = np.where(g.g_cat == G_WAIT, 0, g.queue_gap_ns).astype(np.int64)
    has_deps = bool((g.g_dep >= 0).any())
    floor_active = bool(is_coll_op.any()) and len(coll_arrival) > 0
    coll_floor = np.where(is_coll_op, coll_arrival[np.clip(g.g_coll, 0, None)] if len(coll_arrival) else NEVER,
                          NEVER) if floor_active else None
    blocked_pred: dict[int, tuple[int, int]] = {}     # blocking node -> (P_*, index) when it waited
    increments = np.maximum(g.h_gap + g.h_dur, 0)
    cursor = int(g.h_start[0])
    a = 0
    for cut_no, b in enumerate(cuts.tolist()):
        if b > a:
            cum = cursor + np.cumsum(increments[a:b])
            h_start[a] = cursor
            h_start[a + 1:b] = cum[:-1]
            h_start[a:b] += g.h_gap[a:b]
            h_end[a:b] = h_start[a:b] + g.h_dur[a:b]
            cursor = int(cum[-1])
        # GPU work launched before node b (cross-stream waits: a second pass once the other streams ran)
        for _ in range(2 if has_deps else 1):
            for k_s, lo in enumerate(done):
                hi = upto[k_s][cut_no]
                if hi <= lo:
                    continue
                sl = slice(lo, hi)
                launch = g.g_launch[sl]
                early = g.g_early[sl]
                ready = np.where(early >= 0, h_start[launch] + early, h_end[launch] + launch_ready_offset[sl])
                ready[~has_launch[sl]] = NEVER
                if has_deps:
                    dep = g.g_dep[sl]
                    ready = np.maximum(ready, np.where(dep >= 0, g_end[np.clip(dep, 0, None)], NEVER))
                d = dur[sl]
                if floor_active:    # a collective starts its tail once the last rank has arrived
                    ready = np.maximum(ready, coll_floor[sl])
                end = _scan(ready, d, queue[sl], carry[k_s])
                g_end[sl] = end
                if not has_deps:
                    done[k_s] = hi
                    carry[k_s] = int(end[-1])
                    last_op[k_s] = hi - 1
            if has_deps:
                for k_s, lo in enumerate(done):
                    hi = upto[k_s][cut_no]
                    if hi > lo:
                        done[k_s], carry[k_s], last_op[k_s] = hi, int(g_end[hi - 1]), hi - 1
        if b == n:
            break
        # the blocking node
        start_b = cursor + int(g.h_gap[b])
        kind = g.h_target_kind[b]
        if kind == T_COLL:
            issued = np.flatnonzero((g.h_type[:b] == COMM_ISSUE) & (g.h_coll[:b] >= 0))
            if len(issued):
                np.maximum.at(arrival, g.h_coll[issued], h_start[issued])
        target_end, target = _target(g, b, g_end, carry, last_op, stream_pos, coll_arrival, arrival)
        h_start[b] = start_b
        if target_end > start_b:
            h_end[b] = target_end + int(g.h_own[b])
            if kind != T_COLL and target >= 0:      # (a collective wait: the path goes on on this rank)
                blocked_pred[b] = (P_GPU, target)
        else:
            h_end[b] = start_b + int(g.h_own[b])
        cursor = max(cursor, int(h_end[b]))
        a = b + 1

    # GPU starts, and who decided each op: its launch, the op it waits for on another stream, the op before
    same = np.zeros(m, dtype=bool)
    if m:
        same[1:] = g.g_stream[1:] == g.g_stream[:-1]
    prev_end = np.where(same, np.concatenate([[NEVER], g_end[:-1]]), NEVER)
    launch_ready = np.where(has_launch, np.where(g.g_early >= 0, h_start[g.g_launch] + g.g_early,
                                                 h_end[g.g_launch] + launch_ready_offset), NEVER)
    dep_end = np.where(g.g_dep >= 0, g_end[np.clip(g.g_dep, 0, None)], NEVER) if m else prev_end
    ready = np.maximum(launch_ready, dep_end)
    g_start = np.maximum(ready, np.where(same, prev_end + queue, NEVER))
    g_coll_wait = np.maximum(g_end - (g_start + dur), 0)
    by_ready = ready >= np.where(same, prev_end + queue, NEVER)
    dep_bound = (g.g_dep >= 0) & (dep_end >= launch_ready)
    prev_idx = np.where(same, np.arange(m) - 1, -1)
    g_pred = np.where(by_ready, np.where(dep_bound, g.g_dep, np.where(has_launch, g.g_launch, -1)), prev_idx)
    g_pred_kind = np.where(g_pred < 0, P_NONE, np.where(by_ready & ~dep_bound, P_HOST, P_GPU)).astype(np.int8)
    # host: each node follows the node that last moved the host's progress before it
    progress = np.maximum.accumulate(h_end) if n else h_end
    moved = np.concatenate([[True], h_end[1:] > progress[:-1]]) if n else np.zeros(0, dtype=bool)
    owner = np.maximum.accumulate(np.where(moved, np.arange(n), -1)) if n else moved
    h_pred = np.concatenate([[-1], owner[:-1]]).astype(np.int64) if n else owner
    h_pred_kind = np.full(n, P_HOST, dtype=np.int8)
    for b, (kind_p, target) in blocked_pred.items():
        h_pred_kind[b], h_pred[b] = kind_p, target

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
                      g_coll_wait=g_coll_wait, step_ns=step_ns,
                      gpu_work_per_step_ns=_gpu_work_per_step(g)), arrival


def _gpu_work_per_step(g: RankGraph) -> float:
    """The busiest stream's work (kernels, copies, collectives) launched inside the rank's steps,
    per step: the launch queue fills, so the host's steps cannot be shorter than this on average."""
    n_steps = len(g.step_start_node)
    if not n_steps or not len(g.g_stream):
        return 0.0
    counted = (g.g_launch >= 0) & (g.g_cat != G_WAIT)
    counted[counted] = g.host_step()[g.g_launch[counted]] >= 0
    if not counted.any():
        return 0.0
    _, stream = np.unique(g.g_stream[counted], return_inverse=True)
    return float(np.bincount(stream, weights=g.g_dur[counted]).max()) / n_steps


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
