"""Fix model: the DataLoader's wait replaced by what its throughput with N workers leaves.

A loader without workers makes each batch on the training thread: its wait P is the batch's
production time; the fix (accel.data.tuned_dataloader) gives it N = ceil(P/T) + 1 workers, which
make a batch every P/N while the loop runs its T other ms, so the wait becomes max(handoff, P/N - T). A loader that already has workers is throughput-bound when it makes
the loop wait: P/N_now = T + wait, and DATALOADER_WORKER_SCALE times the workers give
(T + wait)/scale - T."""
from __future__ import annotations

import numpy as np

from analyzers.analysis.whatif.graph import LOADER
from analyzers.analysis.whatif.models import FixModel, Touched, apply_per_rank


def _transform(run, finding, t):
    fewest, most = int(t["DATALOADER_FIX_WORKERS"]), int(t["DATALOADER_FIX_MAX_WORKERS"])
    scale = float(t["DATALOADER_WORKER_SCALE"])
    handoff = int(t["DATALOADER_HANDOFF_NS"])

    def change(g):
        loader = g.h_type == LOADER
        if not loader.any() or not len(g.step_measured_ns):
            return None
        in_steps = loader & (g.host_step() >= 0)
        waits = g.h_dur[in_steps]
        other_ns = max(float(np.mean(g.step_measured_ns)) - waits.sum() / len(g.step_measured_ns), 0.0)
        new = g.h_dur.copy()
        main = loader & g.h_loader_in_main
        if main.any():
            wait_per_batch = float(np.mean(g.h_dur[main & in_steps])) if (main & in_steps).any() else 0.0
            workers = int(np.clip(np.ceil(wait_per_batch / max(other_ns, 1.0)) + 1, fewest, most))
            new[main] = np.maximum(handoff, g.h_dur[main] / workers - other_ns)
        pooled = loader & ~g.h_loader_in_main
        new[pooled] = np.maximum(handoff, (other_ns + g.h_dur[pooled]) / scale - other_ns)
        new = np.minimum(new, g.h_dur).astype(np.int64)
        return g.replace(h_dur=new), Touched(host=loader, gpu=np.zeros(len(g.g_stream), dtype=bool))

    return apply_per_rank(run, finding, change, [
        f"a loader without workers gets ceil(wait / other step time) + 1 workers, as accel's tuned_dataloader "
        f"sizes them, between DATALOADER_FIX_WORKERS={fewest} and DATALOADER_FIX_MAX_WORKERS={most}; one "
        f"with workers gets DATALOADER_WORKER_SCALE={scale:g}x as many",
        "the workers run beside the training loop without slowing it (enough CPU cores)",
        f"the loop still spends DATALOADER_HANDOFF_NS={handoff / 1e6:g} ms per batch receiving it"])


FIX_MODEL = FixModel(fix="more DataLoader workers (dataloader_tuning)", transform=_transform,
                     fix_ids=("dataloader_tuning",))
