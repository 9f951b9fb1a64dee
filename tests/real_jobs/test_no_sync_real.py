"""Fix verdicts from evidence on a real CPU DDP job (2 gloo ranks): gradient accumulation over 4
micro-batches without no_sync all-reduces 4 times per optimizer step.

The workload is the no_sync demo's (accel.demos.dist_no_sync_accumulation): "before" accumulates
naively, "after" under model.no_sync. comm_exposed on "before" must show 4 all-reduce rounds per
optimizer step, rank no_sync_accumulation first and rule hierarchical_allreduce out (one host),
and its cost must drop with the fix; "after" must rule no_sync out (one round per optimizer step).
"""
from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")

from accel.demos.dist_common import run_ranks  # noqa: E402
from accel.demos.dist_no_sync_accumulation import CONFIG  # noqa: E402
from tests.support.analysis import assert_report_costs_within_the_step  # noqa: E402
from analyzers.api import analyze_paths  # noqa: E402

@pytest.fixture(scope="module")
def job(tmp_path_factory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("no_sync")
    results = run_ranks("accel.demos.dist_ddp_workload", ["before", "after"], 2, out, 12,
                        {**CONFIG, "profile_steps": 6, "nice": -10})
    measured = {}
    for variant, result in results.items():
        report = analyze_paths([str(result.trace_dir)])
        assert report["run"], report.get("errors")
        assert_report_costs_within_the_step(report)
        measured[variant] = {"step_ms": result.slowest_rank_ms,
                             "comm": [f for f in report["findings"] if f["kind"] == "comm_exposed"]}
    return measured


def test_accumulation_without_no_sync_ranks_no_sync_first(job):
    [finding] = job["before"]["comm"]
    m = finding["metrics"]
    assert m["allreduce_rounds_per_step"] == 4 and m["optimizer_steps_per_step"] == 1, m
    assert finding["fixes"][0] == "no_sync_accumulation", finding["fixes"]
    assert "hierarchical_allreduce" in finding["fixes_ruled_out"], finding["fixes_ruled_out"]
    assert "hosts = 1" in finding["fixes_ruled_out"]["hierarchical_allreduce"]


def test_the_fix_lowers_the_cost_it_was_ranked_for(job):
    # the finding's cost drops by most of the three all-reduces no_sync removes; the step drops
    # more on this CPU job (gloo's reductions compete with backward for the cores even where the
    # thread is not blocked, which exposure does not count): the ratio is printed, not bounded
    before = job["before"]["comm"][0]["cost_ms_per_step"]
    after = max((f["cost_ms_per_step"] for f in job["after"]["comm"]), default=0.0)
    saved_ms = job["before"]["step_ms"] - job["after"]["step_ms"]
    print(f"no_sync: cost {before:.2f} -> {after:.2f} ms, step {job['before']['step_ms']:.2f} -> "
          f"{job['after']['step_ms']:.2f} ms, cost drop / time saved {(before - after) / saved_ms:.2f}")
    assert saved_ms > 0 and after < 0.75 * before, (before, after, saved_ms)


def test_one_round_per_optimizer_step_rules_no_sync_out(job):
    for finding in job["after"]["comm"]:
        assert finding["metrics"]["allreduce_rounds_per_step"] == 1
        assert "allreduce_rounds_per_step = 1" in finding["fixes_ruled_out"]["no_sync_accumulation"]


def test_the_what_if_of_no_sync_predicts_the_exposed_communication_it_removes(job):
    # the replay removes three of the four rounds, their waits included however gloo splits them.
    # In 21 runs on a 2-CPU machine its saving was 0.87-1.09 of three quarters of the exposed
    # communication it starts from, and 0.84-1.29 of the drop the after-run measures (whose own
    # exposure varies run to run). The step drops more (0.44-0.85 of the timed saving; of the 6
    # profiled steps' 0.46-0.72, or nothing where this VM slowed the after-run): on the CPU the
    # hidden rounds also take cores from backward, which no dependency in the trace shows and the
    # replay's assumptions say
    [finding] = job["before"]["comm"]
    whatif = finding["whatif"]
    assert whatif["fix_ids"] == ["no_sync_accumulation"], whatif
    removed_rounds = 1 - finding["metrics"]["optimizer_steps_per_step"] / finding["metrics"]["allreduce_rounds_per_step"]
    exposed_drop = finding["cost_ms_per_step"] - max((f["cost_ms_per_step"] for f in job["after"]["comm"]), default=0.0)
    saved_ms = job["before"]["step_ms"] - job["after"]["step_ms"]
    print(f"no_sync what-if: saves {whatif['saving_ms']:.2f} ms of {finding['cost_ms_per_step']:.2f} ms exposed; "
          f"the after-run's exposure dropped {exposed_drop:.2f} ms, its timed step {saved_ms:.2f} ms")
    assert 0.75 <= whatif["saving_ms"] / (removed_rounds * finding["cost_ms_per_step"]) <= 1.3, whatif
    assert 0.7 <= whatif["saving_ms"] / exposed_drop <= 1.5, (whatif, exposed_drop)
    assert whatif["saving_ms"] <= 1.3 * saved_ms, (whatif, saved_ms)    # never promises more than the fix buys
    assert any("take cores" in a for a in whatif["assumptions"]), whatif["assumptions"]
