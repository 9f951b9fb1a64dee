"""Memory: real CPU jobs profiled with profile_memory=True (a leak, a giant transient, activation
checkpointing, a control), allocator snapshots built here (fragmentation checked against the
blocks directly, an OOM, a malicious pickle), memory timelines, and a GPU-shaped trace (Device
Type 1, deviceProperties) for headroom and churn.
"""
from __future__ import annotations

import gzip
import json
import pickle

import pytest

from analyzers.api import ingest_and_analyze
from analyzers.ingest import ingest_paths
from analyzers.ingest.memory_files import MemoryFileError, MemoryLimits, load_snapshot, sniff
from analyzers.read.memory_queries import op_stats, rank_memory, snapshot_summaries
from analyzers.store.database import connect

from tests.support.memory_jobs import LEAK_BYTES, SPIKE_BYTES, run_job
from tests.support.memory_inputs import _gpu_trace, _snapshot
from tests.support.paths import REPO_ROOT

torch = pytest.importorskip("torch")

# the checkpointing pair: 6 blocks of 3 Linear+ReLU; activations (2 MiB per layer output)
# dominate the parameters, and a checkpointed block keeps 1 of its 3
CHECKPOINT_JOB = dict(depth=6, width=256, batch=2048, block_layers=3)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory_jobs")
    return {
        "control": run_job(root / "control"),
        "leak": run_job(root / "leak", leak=True),
        "spike": run_job(root / "spike", spike=True),
        "no_checkpoint": run_job(root / "no_checkpoint", **CHECKPOINT_JOB),
        "checkpoint": run_job(root / "checkpoint", checkpoint=True, **CHECKPOINT_JOB),
    }


def _analyse(paths):
    con = connect(":memory:")
    outcome = ingest_and_analyze(con, [str(p) for p in paths])
    assert outcome.report is not None, outcome.errors
    return con, outcome.report


def _kinds(report):
    return {f["kind"]: f for f in report["findings"]}


@pytest.mark.parametrize("name", ["control", "leak", "spike", "no_checkpoint", "checkpoint"])
def test_reported_peak_is_what_torch_reports(jobs, name):
    _, report = _analyse([jobs[name]["trace"]])
    memory = report["ranks"][0]["memory"]
    assert memory["device"] == "cpu"
    assert memory["peak_allocated_bytes"] == pytest.approx(jobs[name]["torch_peak_bytes"], rel=0.05)


def test_a_growing_tensor_list_is_a_leak_and_the_control_is_quiet(jobs):
    _, leak = _analyse([jobs["leak"]["trace"]])
    growth = _kinds(leak)["memory_growth"]
    assert growth["cost_bytes"] == pytest.approx(LEAK_BYTES, rel=0.05)
    assert growth["metrics"]["held_by_op"][0]["op"] == "aten::randn"     # what keeps the memory
    assert growth["cost_ms_per_step"] == 0 and growth["cost_pct"] == 0     # bytes, never step time
    assert "memory_spike" not in _kinds(leak)
    _, control = _analyse([jobs["control"]["trace"]])
    assert not {"memory_growth", "memory_spike"} & set(_kinds(control))


def test_a_giant_transient_is_a_spike(jobs):
    _, report = _analyse([jobs["spike"]["trace"]])
    spike = _kinds(report)["memory_spike"]
    assert spike["cost_bytes"] == pytest.approx(SPIKE_BYTES, rel=0.05)
    assert spike["metrics"]["op"] == "aten::mul"
    assert spike["metrics"]["steps_with_spike"] >= 5
    assert "memory_growth" not in _kinds(report)


def test_checkpointing_lowers_the_peak_and_both_agree_with_torch(jobs):
    plain, recomputed = jobs["no_checkpoint"], jobs["checkpoint"]
    _, before = _analyse([plain["trace"]])
    _, after = _analyse([recomputed["trace"]])
    ours = before["ranks"][0]["memory"]["peak_allocated_bytes"], after["ranks"][0]["memory"]["peak_allocated_bytes"]
    theirs = plain["torch_peak_bytes"], recomputed["torch_peak_bytes"]
    assert ours[1] < 0.6 * ours[0]
    assert ours[1] / ours[0] == pytest.approx(theirs[1] / theirs[0], rel=0.05)
    for report in (before, after):
        assert not {"memory_growth", "memory_spike"} & set(_kinds(report))


def test_per_op_table_accounts_for_every_allocation(jobs):
    con, report = _analyse([jobs["spike"]["trace"]])
    rows = op_stats(con, report["run"]["run_id"])
    totals = rank_memory(con, report["run"]["run_id"])[0]
    assert sum(r["self_allocated_bytes"] for r in rows) == totals["allocated_bytes"]
    mul = next(r for r in rows if r["op"] == "aten::mul")
    # the 32 MiB product, and where the peak falls after the sum, the small product scaling it
    assert SPIKE_BYTES <= mul["peak_bytes"] <= 1.01 * SPIKE_BYTES and mul["calls"] >= 6


def test_the_timeline_file_beside_the_trace_loads_by_content(jobs, tmp_path):
    # a name saying nothing: it is recognised by what it holds
    odd = tmp_path / "categories.bin"
    odd.write_bytes(jobs["leak"]["timeline"].read_bytes())
    con, report = _analyse([jobs["leak"]["trace"], odd])
    rows = con.execute("SELECT category, bytes, peak_total_bytes FROM memory_timeline_peak(?)",
                       [report["run"]["run_id"]]).fetchall()
    assert {r[0] for r in rows} >= {"parameter", "gradient"}
    assert sum(r[1] for r in rows) == rows[0][2]


# --- allocator snapshots ----------------------------------------------------------------------


def _direct(snapshot: dict) -> dict:
    blocks = [b for s in snapshot["segments"] for b in s["blocks"]]
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    reserved = sum(s["total_size"] for s in snapshot["segments"])
    return {"allocated_bytes": allocated, "reserved_bytes": reserved, "fragmentation_bytes": reserved - allocated,
            "largest_free_block_bytes": max(b["size"] for b in blocks if b["state"] == "inactive"),
            "segments": len(snapshot["segments"]), "blocks": len(blocks)}


def test_snapshot_figures_equal_a_direct_computation_from_the_blocks(tmp_path):
    snap = _snapshot(oom=True)
    path = tmp_path / "rank2_oom_snapshot.pickle"
    path.write_bytes(pickle.dumps(snap))
    con, report = _analyse([path])             # alone: a run of its own
    (summary,) = report["memory_snapshots"]
    direct = _direct(snap)
    assert {k: summary[k] for k in direct} == direct
    assert summary["rank"] == 2 and summary["file"] == path.name
    assert summary["oom_requested_bytes"] == 96 << 20 and summary["oom_device_free_bytes"] == 5 << 20
    frag = _kinds(report)["allocator_fragmentation"]
    assert frag["cost_bytes"] == direct["fragmentation_bytes"] and frag["rank"] == 2
    assert "96.00 MiB" in frag["summary"]       # the failed allocation is named


def test_a_snapshot_beside_a_trace_belongs_to_its_rank_and_gzip_is_looked_through(jobs, tmp_path):
    path = tmp_path / "memory_dump"
    path.write_bytes(gzip.compress(pickle.dumps(_snapshot(), protocol=4)))
    con, report = _analyse([jobs["control"]["trace"], path])
    (summary,) = report["memory_snapshots"]
    assert summary["rank"] == 0 and summary["reserved_bytes"] == _direct(_snapshot())["reserved_bytes"]
    assert report["run"]["ranks"] == [0]


def test_the_torch_npu_sample_snapshot(shared_traces):
    con, report = _analyse([shared_traces / "memory" / "torch_npu_snapshot_expandable.pkl.gz"])
    (summary,) = report["memory_snapshots"]
    raw = pickle.loads(gzip.decompress((shared_traces / "memory" / "torch_npu_snapshot_expandable.pkl.gz").read_bytes()))
    assert {k: summary[k] for k in _direct(raw)} == _direct(raw)
    assert summary["expandable_segments"] == 2 and summary["trace_entries"] == 8092


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    evil = tmp_path / "snapshot.pickle"
    evil.write_bytes(pickle.dumps({"segments": [], "x": _RunsCode(marker)}))
    assert sniff(evil) == "allocator_snapshot"
    with pytest.raises(MemoryFileError, match="refused: the pickle names a class or function"):
        load_snapshot(evil)
    con = connect(":memory:")
    result = ingest_paths(con, [str(evil)])
    assert result.run_id is None and "refused" in result.errors[0].error
    assert not marker.exists()


def test_snapshot_caps_and_junk(tmp_path):
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(_snapshot()))
    with pytest.raises(MemoryFileError, match="more than 3 blocks"):
        from analyzers.ingest.memory_files import snapshot_rows
        snapshot_rows(load_snapshot(path), MemoryLimits(max_blocks=3))
    with pytest.raises(MemoryFileError, match="objects"):
        load_snapshot(path, MemoryLimits(max_items=10))
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(pickle.dumps(_snapshot())[:200])
    with pytest.raises(MemoryFileError, match="not a readable pickle"):
        load_snapshot(cut)
    other = tmp_path / "list.pickle"
    other.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(MemoryFileError, match="not an allocator snapshot"):
        load_snapshot(other)


# --- a GPU-shaped trace: device memory, headroom, churn -------------------------------------------


def test_gpu_memory_headroom_and_percentages(tmp_path):
    _, report = _analyse([_gpu_trace(tmp_path / "gpu.json")])
    memory = report["ranks"][0]["memory"]
    gib = 1 << 30
    assert memory["device"] == "cuda:0" and memory["device_total_bytes"] == 80 * gib
    assert memory["peak_allocated_bytes"] == 14 * gib and memory["peak_reserved_bytes"] == 16 * gib
    assert memory["peak_pct_of_device"] == pytest.approx(20.0)
    headroom = _kinds(report)["memory_headroom"]
    assert headroom["cost_bytes"] == 64 * gib and headroom["cost_pct_of_device_memory"] == pytest.approx(80.0)
    assert headroom["metrics"]["batch_could_grow_pct"] == 1600      # 64 GiB free over 4 GiB per step
    assert "allocator_churn" not in _kinds(report) and "allocator_fragmentation" not in _kinds(report)


def test_gpu_allocator_churn(tmp_path):
    _, report = _analyse([_gpu_trace(tmp_path / "churn.json", churn=True)])
    churn = _kinds(report)["allocator_churn"]
    # two changes a step; the trace's first event shows no change (nothing before it to compare)
    assert churn["metrics"]["reserved_changes_per_step"] == pytest.approx(11 / 6, abs=0.01)
    assert churn["cost_bytes"] == pytest.approx((11 / 6) * (1 << 30), rel=0.01)


# --- real H100 fixtures (tests/fixtures/gpu_h100, recorded by accel.gpu_fixtures) -------------------

H100 = REPO_ROOT / "tests" / "fixtures" / "gpu_h100"


def test_h100_memory_profile_and_snapshots_match_what_torch_recorded():
    if not (H100 / "fixtures.json").exists():
        pytest.skip("no H100 fixtures")
    recorded = json.loads((H100 / "fixtures.json").read_text())
    con, report = _analyse([H100 / "memory_profiled.json.gz", H100 / "allocator_snapshot.pickle"])
    memory = report["ranks"][0]["memory"]
    profile = recorded["memory_profile"]
    assert memory["device"] == "cuda:0" and memory["device_total_bytes"] == profile["device_total_bytes"]
    assert memory["peak_allocated_bytes"] == max(s["peak_allocated_bytes"] for s in profile["steps"])
    assert memory["peak_reserved_bytes"] == max(s["peak_reserved_bytes"] for s in profile["steps"])
    steps = con.execute("SELECT peak_allocated_bytes, peak_reserved_bytes FROM memory_steps(?) "
                        "WHERE device = 'cuda:0' ORDER BY step", [report["run"]["run_id"]]).fetchall()
    assert steps == [(s["peak_allocated_bytes"], s["peak_reserved_bytes"]) for s in profile["steps"]]
    (snapshot,) = report["memory_snapshots"]
    assert snapshot["allocated_bytes"] == profile["allocated_bytes_at_snapshot"]
    assert snapshot["reserved_bytes"] == profile["reserved_bytes_at_snapshot"]
    assert "memory_headroom" in _kinds(report)      # 232 MiB of an 80 GB H100
    _, oom = _analyse([H100 / "oom_snapshot.pickle"])
    assert oom["memory_snapshots"][0]["oom_requested_bytes"] == recorded["oom"]["chunk_bytes"]   # "Tried to allocate 64.00 MiB"
