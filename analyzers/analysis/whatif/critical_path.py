"""The critical path of a replay: from each rank's last step end, back along the dependency that
decided each node's time. Each element contributes (its end - its predecessor's end), split into
its own part (a kernel's duration, a sync's own overhead, a DataLoader wait) and what led to it (CPU
work before a host node, launch latency, queueing), so the path's parts add up to its length.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.analysis.whatif.graph import (CALL, COMM_ISSUE, COMM_WAIT, COPY, G_COMM, G_COMPUTE, G_MEMORY, G_WAIT, HOST_TYPE_NAMES,
                                    LAUNCH, LOADER, NEVER, STEP, SYNC, RankGraph)
from analyzers.analysis.whatif.replay import P_GPU, P_HOST, P_NONE, RankReplay

# path categories, in the order the pages show them
CATEGORIES = ("cpu", "launch", "runtime_stall", "sync", "copy", "loader", "comm_wait", "launch_latency",
              "gpu_queue", "gpu_compute", "gpu_comm", "gpu_memory", "collective_wait")
_HOST_OWN = {CALL: "launch", LAUNCH: "launch", SYNC: "sync", COPY: "copy", LOADER: "loader",
             COMM_WAIT: "comm_wait", COMM_ISSUE: "cpu", STEP: "cpu"}
_GPU_OWN = {G_COMPUTE: "gpu_compute", G_COMM: "gpu_comm", G_MEMORY: "gpu_memory", G_WAIT: "gpu_queue"}
_CODE = {c: i for i, c in enumerate(CATEGORIES)}
_HOST_OWN_CODE = np.array([_CODE[_HOST_OWN[t]] for t in range(len(HOST_TYPE_NAMES))], dtype=np.int8)
_GPU_OWN_CODE = np.array([_CODE[_GPU_OWN[c]] for c in range(len(_GPU_OWN))], dtype=np.int8)


@dataclass
class CriticalPath:
    """One rank's path. Elements in time order; own/lead split each element's contribution."""
    rank: int
    is_gpu: np.ndarray          # bool per element
    index: np.ndarray           # host node or GPU op index
    own_ns: np.ndarray          # the element's own part
    lead_ns: np.ndarray         # what came before it (CPU work, launch latency, queueing)
    end_ns: np.ndarray          # the element's replayed end (assigns it to a step)
    own_code: np.ndarray        # int8, index into CATEGORIES of the own part
    lead_code: np.ndarray       # int8, index into CATEGORIES of the lead part

    @property
    def own_category(self) -> list[str]:
        return [CATEGORIES[c] for c in self.own_code.tolist()]

    @property
    def lead_category(self) -> list[str]:
        return [CATEGORIES[c] for c in self.lead_code.tolist()]

    def category_totals(self, inside: np.ndarray | None = None) -> np.ndarray:
        """ns per category (CATEGORIES order) of the path's elements (those in the `inside` mask)."""
        own, lead, own_code, lead_code = self.own_ns, self.lead_ns, self.own_code, self.lead_code
        if inside is not None:
            own, lead, own_code, lead_code = own[inside], lead[inside], own_code[inside], lead_code[inside]
        return _sum_by(own_code, own) + _sum_by(lead_code, lead)

    def by_category(self) -> dict[str, int]:
        return dict(zip(CATEGORIES, (int(v) for v in self.category_totals())))

    def touched_ns(self, host_mask: np.ndarray, gpu_mask: np.ndarray, host_lead_mask: np.ndarray | None = None,
                   host_lead_cap: np.ndarray | None = None) -> int:
        """Time on the path of the nodes a fix changes: their own parts (and, for host nodes in
        host_lead_mask, the CPU work before them, at most host_lead_cap of it per node)."""
        on_gpu = self.index[self.is_gpu]
        on_host = self.index[~self.is_gpu]
        own_gpu, own_host = self.own_ns[self.is_gpu], self.own_ns[~self.is_gpu]
        total = int(own_gpu[gpu_mask[on_gpu]].sum()) if len(gpu_mask) else 0
        total += int(own_host[host_mask[on_host]].sum()) if len(host_mask) else 0
        if host_lead_mask is not None and len(host_lead_mask):
            lead = self.lead_ns[~self.is_gpu][host_lead_mask[on_host]]
            if host_lead_cap is not None:
                lead = np.minimum(lead, host_lead_cap[on_host][host_lead_mask[on_host]])
            total += int(lead.sum())
        return total


def critical_path(g: RankGraph, r: RankReplay) -> CriticalPath:
    """Walk back from the last step's end marker to the first step's start. Nodes are numbered host
    first (0..n-1), then GPU ops (n..n+m-1); the walk jumps over runs of nodes that each follow the
    one numbered just before them (most of a host chain, queued kernels), so it loops once per run,
    and every element's contribution is worked out afterwards, vectorised."""
    n, m = g.n_host, len(g.g_stream)
    total = n + m
    sentinel = total
    end = np.concatenate([r.h_end, r.g_end, [NEVER]])
    start = np.concatenate([r.h_start, r.g_start, [NEVER]])
    pred = np.concatenate([
        np.where(r.h_pred_kind == P_HOST, r.h_pred, np.where(r.h_pred_kind == P_GPU, r.h_pred + n, -1)),
        np.where(r.g_pred_kind == P_HOST, r.g_pred, np.where(r.g_pred_kind == P_GPU, r.g_pred + n, -1)),
        [-1]]).astype(np.int64)
    pred = np.where(pred < 0, sentinel, pred)
    stop_time = int(r.h_end[g.step_start_node].min()) if len(g.step_start_node) else NEVER
    pred_end = end[pred]
    stops = (pred == sentinel) | (pred_end <= stop_time)
    idx = np.arange(total + 1)
    follows_previous = (pred == idx - 1) & (idx != n) & ~stops
    run_start = np.maximum.accumulate(np.where(follows_previous, 0, idx))
    node = int(g.step_end_node[np.argmax(r.h_end[g.step_end_node])]) if len(g.step_end_node) else n - 1
    pieces = []
    for _ in range(total + 1):
        first = int(run_start[node])
        piece = np.arange(node, first - 1, -1)
        pieces.append(piece)
        if stops[first]:
            break
        node = int(pred[first])
    ids = np.concatenate(pieces)[::-1] if pieces else np.zeros(0, dtype=np.int64)
    is_gpu = ids >= n
    index = np.where(is_gpu, ids - n, ids)
    e, st, pe, p = end[ids], start[ids], pred_end[ids], pred[ids]
    pe = np.where(p == sentinel, st, pe)
    p_is_gpu = (p >= n) & (p != sentinel)
    own = np.zeros(len(ids), dtype=np.int64)
    lead = np.zeros(len(ids), dtype=np.int64)
    # GPU ops: own = their duration (less any wait for other ranks), lead = latency/queue/wait before
    gi = np.flatnonzero(is_gpu)
    wait = r.g_coll_wait[index[gi]]
    own[gi] = e[gi] - st[gi] - wait
    lead[gi] = np.maximum(0, e[gi] - pe[gi] - own[gi])
    # host nodes: own = their duration, or (a blocking node that waited on the GPU) what followed the wait
    hi = np.flatnonzero(~is_gpu)
    waited = p_is_gpu[hi]
    own[hi] = np.where(waited, np.maximum(0, e[hi] - pe[hi]), np.maximum(0, e[hi] - st[hi]))
    lead[hi] = np.where(waited, 0, np.maximum(0, e[hi] - pe[hi] - own[hi]))
    own_code = np.empty(len(ids), dtype=np.int8)
    h_types = g.h_type[index[hi]]
    own_code[hi] = np.where(g.h_stall[index[hi]], _CODE["runtime_stall"], _HOST_OWN_CODE[h_types])
    own_code[gi] = _GPU_OWN_CODE[g.g_cat[index[gi]]]
    lead_code = np.full(len(ids), _CODE["cpu"], dtype=np.int8)
    lead_code[gi] = np.where(wait > 0, _CODE["collective_wait"],
                             np.where(p_is_gpu[gi], _CODE["gpu_queue"], _CODE["launch_latency"]))
    return CriticalPath(rank=g.rank, is_gpu=is_gpu, index=index, own_ns=own, lead_ns=lead, end_ns=e,
                        own_code=own_code, lead_code=lead_code)


def _sum_by(code: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Exact int64 sums of values per category code."""
    totals = np.zeros(len(CATEGORIES), dtype=np.int64)
    np.add.at(totals, code, values)
    return totals


def path_segments(g: RankGraph, path: CriticalPath) -> dict[str, list]:
    """Where the path runs in the trace's own time, for a timeline: each stretch of consecutive path
    elements on the host (its chain of calls and the CPU time between them) or on the GPU (ops, with
    the launch latency or queueing before them), end to end: a stretch runs from the end of the one
    before it (the first from its first element's start) to its last element's measured end (never
    before an earlier element's: a sync's measured end can precede the kernel it waited for by the
    replay's error). Columns (lists): on_gpu, start_ns, end_ns, elements (path elements in it)."""
    if not len(path.index):
        return {"on_gpu": [], "start_ns": [], "end_ns": [], "elements": []}
    on_gpu = path.is_gpu
    gi, hi = path.index[on_gpu], path.index[~on_gpu]
    end = np.empty(len(path.index), dtype=np.int64)
    end[on_gpu] = g.g_start[gi] + g.g_dur[gi]
    end[~on_gpu] = g.h_start[hi] + g.h_dur[hi]
    end = np.maximum.accumulate(end)
    first = np.flatnonzero(np.concatenate([[True], on_gpu[1:] != on_gpu[:-1]]))
    last = np.append(first[1:], len(on_gpu)) - 1
    seg_end = end[last]
    first_start = int(g.g_start[path.index[0]] if on_gpu[0] else g.h_start[path.index[0]])
    seg_start = np.concatenate([[min(first_start, int(seg_end[0]))], seg_end[:-1]])
    return {"on_gpu": on_gpu[first].tolist(), "start_ns": (seg_start + g.t0).tolist(),
            "end_ns": (seg_end + g.t0).tolist(), "elements": (last - first + 1).tolist()}
