"""The critical path of a replay: from each rank's last step end, back along the dependency that
decided each node's time. Each element contributes (its end - its predecessor's end), split into
its own part (a kernel's duration, a sync's own overhead, a DataLoader wait) and what led to it (CPU
work before a host node, launch latency, queueing), so the path's parts add up to its length.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.whatif.graph import (CALL, COMM_ISSUE, COMM_WAIT, COPY, G_COMM, G_COMPUTE, G_MEMORY, G_WAIT, LAUNCH,
                                    LOADER, NEVER, STEP, SYNC, RankGraph)
from analyzers.whatif.replay import P_GPU, P_HOST, P_NONE, RankReplay

# path categories, in the order the pages show them
CATEGORIES = ("cpu", "launch", "runtime_stall", "sync", "copy", "loader", "comm_wait", "launch_latency",
              "gpu_queue", "gpu_compute", "gpu_comm", "gpu_memory", "collective_wait")
_HOST_OWN = {CALL: "launch", LAUNCH: "launch", SYNC: "sync", COPY: "copy", LOADER: "loader",
             COMM_WAIT: "comm_wait", COMM_ISSUE: "cpu", STEP: "cpu"}
_GPU_OWN = {G_COMPUTE: "gpu_compute", G_COMM: "gpu_comm", G_MEMORY: "gpu_memory", G_WAIT: "gpu_queue"}


@dataclass
class CriticalPath:
    """One rank's path. Elements in time order; own/lead split each element's contribution."""
    rank: int
    is_gpu: np.ndarray          # bool per element
    index: np.ndarray           # host node or GPU op index
    own_ns: np.ndarray          # the element's own part
    lead_ns: np.ndarray         # what came before it (CPU work, launch latency, queueing)
    end_ns: np.ndarray          # the element's replayed end (assigns it to a step)
    own_category: list[str]
    lead_category: list[str]

    def by_category(self) -> dict[str, int]:
        totals = dict.fromkeys(CATEGORIES, 0)
        for cat, v in zip(self.own_category, self.own_ns.tolist()):
            totals[cat] += v
        for cat, v in zip(self.lead_category, self.lead_ns.tolist()):
            totals[cat] += v
        return totals

    def touched_ns(self, host_mask: np.ndarray, gpu_mask: np.ndarray, host_lead_mask: np.ndarray | None = None) -> int:
        """Time on the path of the nodes a fix changes: their own parts (and, for host nodes in
        host_lead_mask, the CPU work before them)."""
        on_gpu = self.index[self.is_gpu]
        on_host = self.index[~self.is_gpu]
        own_gpu, own_host = self.own_ns[self.is_gpu], self.own_ns[~self.is_gpu]
        total = int(own_gpu[gpu_mask[on_gpu]].sum()) if len(gpu_mask) else 0
        total += int(own_host[host_mask[on_host]].sum()) if len(host_mask) else 0
        if host_lead_mask is not None and len(host_lead_mask):
            total += int(self.lead_ns[~self.is_gpu][host_lead_mask[on_host]].sum())
        return total


def critical_path(g: RankGraph, r: RankReplay) -> CriticalPath:
    """Walk back from the last step's end marker to the first step's start."""
    stop_time = int(r.h_end[g.step_start_node].min()) if len(g.step_start_node) else NEVER
    node = int(g.step_end_node[np.argmax(r.h_end[g.step_end_node])]) if len(g.step_end_node) else g.n_host - 1
    is_gpu = False
    elems_gpu, elems_idx, own, lead, ends, own_cat, lead_cat = [], [], [], [], [], [], []
    # plain lists: the walk reads one element at a time, which numpy scalars make ~10x slower
    h_end, h_start, g_end, g_start = r.h_end.tolist(), r.h_start.tolist(), r.g_end.tolist(), r.g_start.tolist()
    h_pred_kind, h_pred = r.h_pred_kind.tolist(), r.h_pred.tolist()
    g_pred_kind, g_pred = r.g_pred_kind.tolist(), r.g_pred.tolist()
    h_type, g_cat, h_stall = g.h_type.tolist(), g.g_cat.tolist(), g.h_stall.tolist()
    coll_wait = r.g_coll_wait.tolist()
    for _ in range(g.n_host + len(g.g_stream) + 1):
        if is_gpu:
            end = g_end[node]
            pk, p = g_pred_kind[node], g_pred[node]
            pred_end = h_end[p] if pk == P_HOST else g_end[p] if pk == P_GPU else g_start[node]
            cat = _GPU_OWN[g_cat[node]]
            wait = coll_wait[node]
            own_part = end - g_start[node] - wait
            lead_part = max(0, end - pred_end - own_part)
            elems_gpu.append(True)
            own_cat.append(cat)
            lead_cat.append("collective_wait" if wait > 0 else ("launch_latency" if pk == P_HOST else "gpu_queue"))
            own.append(own_part)
            lead.append(lead_part)
        else:
            end = h_end[node]
            pk, p = h_pred_kind[node], h_pred[node]
            if p < 0 and pk == P_HOST:
                pk = P_NONE
            pred_end = h_end[p] if pk == P_HOST else g_end[p] if pk == P_GPU else h_start[node]
            t = h_type[node]
            cat = "runtime_stall" if h_stall[node] else _HOST_OWN[t]
            if pk == P_GPU:     # a blocking node that waited: its own part is what followed the wait
                own_part = max(0, end - pred_end)
                lead_part = 0
            else:
                own_part = max(0, end - h_start[node])
                lead_part = max(0, end - pred_end - own_part)
            elems_gpu.append(False)
            own_cat.append(cat)
            lead_cat.append("cpu")
            own.append(own_part)
            lead.append(lead_part)
        elems_idx.append(node)
        ends.append(end)
        if pk == P_NONE or p < 0 or pred_end <= stop_time:
            break
        is_gpu = pk == P_GPU
        node = p
    order = slice(None, None, -1)
    return CriticalPath(rank=g.rank, is_gpu=np.array(elems_gpu[order], dtype=bool),
                        index=np.array(elems_idx[order], dtype=np.int64), own_ns=np.array(own[order], dtype=np.int64),
                        lead_ns=np.array(lead[order], dtype=np.int64), end_ns=np.array(ends[order], dtype=np.int64),
                        own_category=own_cat[order], lead_category=lead_cat[order])
