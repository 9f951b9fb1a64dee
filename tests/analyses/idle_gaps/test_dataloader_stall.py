"""Real-trace truth for the input pipeline: ResNet-50 with num_workers=0 is input-bound, the same
job with 4 workers is not (../shared/traces, skipped without them).

Measured on these traces: with 0 workers the loop waits 46.6 ms per step in
_SingleProcessDataLoaderIter.__next__ and the GPU, after draining its queue, idles 29.4 ms of
that: 19.0% of the 154.75 ms step. With 4 workers the mean step is 128.25 ms, i.e. 26.5 ms
shorter, which is what the data-loader finding predicted a fix would save (within 15%).
Their host-to-device copies are h2d_stall's (test_h2d_stall.py).
"""
from __future__ import annotations

import pytest

from analyzers.read.fixes import computed_finding_contract
from analyzers.execution.pipeline import run_analyses
from tests.support.analysis import by_kind


def test_zero_workers_is_input_bound(resnet):
    findings = resnet[0]["default"]
    # the input stall and the FP32 convolutions (a V100 without AMP: fp32_matmul's upper bound)
    # are the two costliest findings, close to each other
    assert {f.kind for f in findings[:2]} == {"dataloader_stall", "fp32_matmul"}
    top = by_kind(findings)["dataloader_stall"]
    assert top.cost_ns / 1e6 == pytest.approx(29.4, abs=0.3)
    assert top.cost_pct == pytest.approx(19.0, abs=0.3)
    assert top.metrics["num_workers"] == 0
    assert top.metrics["wait_ms_per_step"] == pytest.approx(46.6, abs=0.3)
    assert "dataloader_tuning" in computed_finding_contract(top)["fixes"]


def test_predicted_saving_matches_the_four_worker_run(resnet):
    step_0 = resnet[0]["ranks"][0]["step_time_ms"]
    step_4 = resnet[4]["ranks"][0]["step_time_ms"]
    assert step_0 == pytest.approx(154.75, abs=0.01) and step_4 == pytest.approx(128.25, abs=0.01)
    predicted_ms = by_kind(resnet[0]["default"])["dataloader_stall"].cost_ns / 1e6
    assert predicted_ms == pytest.approx(step_0 - step_4, rel=0.15)


def test_four_workers_has_no_input_finding(resnet):
    kinds = {f.kind for f in resnet[4]["default"]}
    assert "dataloader_stall" not in kinds and "h2d_stall" not in kinds
    # even with no reporting threshold the loader is below its own 5%-of-step floor
    assert "dataloader_stall" not in by_kind(resnet[4]["all"])


def test_cpu_only_rank_costs_the_loader_wait_itself():
    """No GPU: the cost is the time the loop waits in the DataLoader, per step (here 3 of 10 ms)."""
    from tests.support.analysis import hand_written_store
    from tests.support.events import LOADER, ev
    rows = [ev("user_annotation", "ProfilerStep#1", 0, 10000), ev("user_annotation", "ProfilerStep#2", 10000, 20000),
            ev("cpu_op", LOADER, 100, 3100), ev("cpu_op", LOADER, 10100, 13100),
            ev("cpu_op", "aten::mm", 3100, 9950), ev("cpu_op", "aten::mm", 13100, 19950)]   # the step's compute
    con = hand_written_store(rows, name="cpu", file_name="cpu.json")
    findings, notes = run_analyses(con, "syn")
    assert [f.kind for f in findings] == ["dataloader_stall"]
    f = findings[0]
    assert f.cost_ns == 3_000_000 and f.cost_pct == pytest.approx(30.0) and f.severity == "high"
    assert f.metrics["gpu"] is False and f.metrics["num_workers"] == 0
    assert any("no GPU activity" in n for n in notes)
    con.close()
