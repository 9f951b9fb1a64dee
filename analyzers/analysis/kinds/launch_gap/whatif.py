"""Fix model: CUDA graphs. The launches of each stretch between blocking points (syncs, loader waits,
blocking copies, step boundaries) are captured once and replayed: the Python and launch calls
between them disappear, each kernel costs the host CUDA_GRAPH_HOST_NS_PER_KERNEL, and the GPU runs
them CUDA_GRAPH_NODE_GAP_NS apart."""
from __future__ import annotations

import numpy as np

from analyzers.analysis.whatif.graph import CALL, LAUNCH
from analyzers.analysis.whatif.models import FixModel, Touched, apply_per_rank


def _transform(run, finding, t):
    per_kernel = int(t["CUDA_GRAPH_HOST_NS_PER_KERNEL"])
    node_gap = int(t["CUDA_GRAPH_NODE_GAP_NS"])

    def change(g):
        launch = g.h_type == LAUNCH
        if not launch.any():
            return None
        # CPU time before a launch whose previous host node is also a launch or a plain call: inside
        # a captured stretch (the first launch after a blocking point keeps its CPU time)
        prev_type = np.concatenate([[-1], g.h_type[:-1]])
        captured_gap = launch & ((prev_type == LAUNCH) | (prev_type == CALL)) & ~g.h_blocking
        h_gap = np.where(captured_gap, np.minimum(g.h_gap, 0), g.h_gap)
        h_dur = np.where(launch & ~g.h_blocking, np.minimum(g.h_dur, per_kernel), g.h_dur)
        return (g.replace(h_gap=h_gap, h_dur=h_dur, queue_gap_ns=min(g.queue_gap_ns, node_gap)),
                Touched(host=launch, gpu=np.zeros(len(g.g_stream), dtype=bool), host_lead=captured_gap))

    return apply_per_rank(run, finding, change, [
        "the step's launches between syncs, loader waits and blocking copies are captured in CUDA graphs "
        "(static shapes, no host sync inside)",
        f"a replayed kernel costs the host CUDA_GRAPH_HOST_NS_PER_KERNEL={per_kernel} ns and starts "
        f"CUDA_GRAPH_NODE_GAP_NS={node_gap} ns after the one before"])


FIX_MODEL = FixModel(fix="CUDA graphs (cuda_graph / torch.compile reduce-overhead)", transform=_transform)
