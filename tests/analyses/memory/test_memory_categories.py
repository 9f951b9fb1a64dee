"""Categories at the peak (lib/memory.sql memory_categories_at_peak) on real CPU Adam jobs profiled
from their first step: Adam's state is twice the parameters, gradients zeroed in place are the
parameters' size, and the categories add up to the peak, which is torch's own within 5%."""
from __future__ import annotations

import pytest

from analyzers.ingest import ingest_paths
from analyzers.read.memory_queries import categories_at_peak, rank_memory
from analyzers.store.database import connect

from tests.support.memory_jobs import run_optimizer_job

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory_categories")
    out = {}
    for set_to_none in (False, True):
        job = run_optimizer_job(root / str(set_to_none), set_to_none=set_to_none)
        con = connect(":memory:")
        run_id = ingest_paths(con, [str(job["trace"])]).run_id
        out[set_to_none] = {**job, "con": con, "run_id": run_id,
                            "categories": {r["category"]: r for r in categories_at_peak(con, run_id, 0, "cpu")}}
    return out


def test_kept_gradients_and_adam_state_at_the_peak_have_their_known_sizes(jobs):
    job = jobs[False]
    categories, params = job["categories"], job["param_bytes"]
    # exp_avg and exp_avg_sq per parameter, and one 4-byte step counter each (8 parameters)
    assert categories["optimizer_state"]["bytes"] == 2 * params + 8 * 4
    assert categories["gradient"]["bytes"] == params              # zeroed in place: kept through the forward
    assert categories["activation"]["bytes"] >= 4 * 4096 * 256 * 4   # at least one output per layer
    assert set(categories) <= {"optimizer_state", "gradient", "activation", "backward_temporary"}
    peak = rank_memory(job["con"], job["run_id"])[0]["peak_allocated_bytes"]
    assert sum(r["bytes"] for r in categories.values()) == peak    # every live byte has a category
    assert peak == pytest.approx(job["torch_peak_bytes"], rel=0.05)


def test_freed_gradients_are_not_held_at_the_peak(jobs):
    control, kept = jobs[True]["categories"], jobs[False]["categories"]
    assert "gradient" not in control            # the peak is early in the backward, before the gradients
    assert control["optimizer_state"]["bytes"] == kept["optimizer_state"]["bytes"]
    assert jobs[True]["torch_peak_bytes"] <= jobs[False]["torch_peak_bytes"] - jobs[False]["param_bytes"] * 0.9
