"""Fix model: CUDA graphs. The step is cut at its blocking points (syncs, loader waits, copies,
collectives, slow runtime calls, step boundaries); each stretch between two of them that launches
GPU work is captured once and replayed: its Python (the CPU time before, between and after its
launches, and the runtime calls among them) runs at capture, not per step; each replayed kernel
costs the host CUDA_GRAPH_HOST_NS_PER_KERNEL, and the GPU runs them CUDA_GRAPH_NODE_GAP_NS apart."""
from __future__ import annotations

import numpy as np

from analyzers.analysis.whatif.graph import CALL, LAUNCH
from analyzers.analysis.whatif.models import FixModel, Touched, apply_per_rank


def captured_nodes(g) -> np.ndarray:
    """Host nodes inside a stretch that launches GPU work: launches and plain runtime calls between
    two blocking points (a blocking point itself, and every other kind of node, is a boundary)."""
    inside = ((g.h_type == LAUNCH) | (g.h_type == CALL)) & ~g.h_blocking & ~g.h_stall
    stretch = np.cumsum(~inside)                       # a new id after every boundary
    launches = np.bincount(stretch, weights=(g.h_type == LAUNCH) & inside, minlength=stretch.max() + 1)
    return inside & (launches[stretch] > 0)


def _transform(run, finding, t):
    per_kernel = int(t["CUDA_GRAPH_HOST_NS_PER_KERNEL"])
    node_gap = int(t["CUDA_GRAPH_NODE_GAP_NS"])

    def change(g):
        captured = captured_nodes(g)
        if not captured.any():
            return None
        launch = captured & (g.h_type == LAUNCH)
        # the CPU time before a captured node is the stretch's Python; so is the time after its last
        # node up to the boundary that ends it (the boundary keeps its own time)
        after_stretch = np.concatenate([[False], captured[:-1] & ~captured[1:]])
        lead = captured | after_stretch
        # untraced holes that recur every step (untraced_host_time: data preparation, logging) are
        # work of their own, no launch overhead: it still runs each step
        h_gap = np.where(lead, np.minimum(g.h_gap, g.h_untraced), g.h_gap)
        h_dur = np.where(launch, np.minimum(g.h_dur, per_kernel), np.where(captured, 0, g.h_dur))
        return (g.replace(h_gap=h_gap, h_dur=h_dur, queue_gap_ns=min(g.queue_gap_ns, node_gap)),
                Touched(host=captured, gpu=np.zeros(len(g.g_stream), dtype=bool), host_lead=lead,
                        host_lead_cap=np.maximum(g.h_gap - g.h_untraced, 0)))

    return apply_per_rank(run, finding, change, [
        "the step's GPU work between syncs, loader waits, copies and collectives is captured in CUDA graphs "
        "(static shapes, no host sync inside): the Python of each captured stretch runs once, at capture "
        "(CPU work there that launches nothing is taken as capturable too, except the untraced holes that "
        "recur every step, which untraced_host_time counts: that work still runs each step)",
        f"a replayed kernel costs the host CUDA_GRAPH_HOST_NS_PER_KERNEL={per_kernel} ns and starts "
        f"CUDA_GRAPH_NODE_GAP_NS={node_gap} ns after the one before"])


FIX_MODEL = FixModel(fix="the whole step captured in CUDA graphs (cuda_graph; torch.compile's reduce-overhead "
                          "captures only the compiled regions, not an eager optimizer)",
                     transform=_transform, fix_ids=("cuda_graph", "serving_cuda_graphs"))
