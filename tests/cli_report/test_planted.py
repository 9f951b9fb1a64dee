"""End to end, every finding kind: synthesize a job with one planted problem of known size,
ingest it, analyze_run, and the finding must be there with the right kind, rank and cost.

Ground truth comes from the synthesizer's model (sample_traces/synthesize.py), measured on its own
timeline, not from the analyzers. A kind whose analysis module is not installed is skipped.
"""
from __future__ import annotations

import pytest

from analyzers.read.fixes import computed_finding_contract
from analyzers.analysis.kinds import analysis_modules
from analyzers.execution.pipeline import analyze_run
from analyzers.ingest import ingest_paths
from analyzers.store.database import connect
from sample_traces.synthesize import synthesize

COST_TOLERANCE = 0.15      # the task's bar: within 15% of the planted cost
# The framework reports findings from MIN_FINDING_PCT (5%) of the step; planted problems close to
# it could fall on either side, so only those clearly above are required.
REQUIRED_PCT = 6.0
SINGLE_PROBLEM_SCENARIOS = ["launch_bound", "host_sync", "h2d_stall", "dataloader", "straggler",
                            "exposed_comm", "allocator_churn", "fp32_matmul"]


def _installed_kinds() -> set[str]:
    return {m.KIND for m in analysis_modules()}


def _run(tmp_path_factory, scenario: str, **thresholds):
    truth = synthesize(tmp_path_factory.mktemp(scenario), scenario, steps=4, seed=11)
    con = connect(":memory:")
    result = ingest_paths(con, truth["files"])
    assert result.run_id and not result.errors
    findings = analyze_run(con, result.run_id, thresholds or None)
    stored = con.execute("SELECT count(*) FROM findings WHERE run_id = ?", [result.run_id]).fetchone()[0]
    assert stored == len(findings)
    return truth, findings


def _cost_by_kind_and_rank(findings) -> dict[tuple[str, int | None], tuple[float, float]]:
    """Per (kind, rank): cost per step (ns, %). A finding covering several ranks (one cause) carries
    each rank's figures in metrics.per_rank."""
    out: dict[tuple[str, int | None], tuple[float, float]] = {}
    for f in findings:
        rows = f.metrics.get("per_rank") or [{"rank": f.rank, "cost_ms_per_step": f.cost_ns / 1e6,
                                             "cost_pct": f.cost_pct}]
        for row in rows:
            ns, pct = out.get((f.kind, row["rank"]), (0.0, 0.0))
            out[(f.kind, row["rank"])] = (ns + row["cost_ms_per_step"] * 1e6, pct + row["cost_pct"])
    return out


@pytest.fixture(scope="module", params=SINGLE_PROBLEM_SCENARIOS)
def planted(request, tmp_path_factory):
    return request.param, *_run(tmp_path_factory, request.param)


def test_planted_problem_found_with_true_cost(planted):
    scenario, truth, findings = planted
    required = [p for p in truth["problems"] if p["cost_pct"] >= REQUIRED_PCT]
    assert required, f"{scenario}: the scenario must plant something reportable"
    missing = {p["kind"] for p in required} - _installed_kinds()
    if missing:
        pytest.skip(f"analysis not installed yet: {', '.join(sorted(missing))}")
    got = _cost_by_kind_and_rank(findings)
    for p in required:
        key = (p["kind"], p["rank"])
        assert key in got, f"{scenario}: no {p['kind']} finding on rank {p['rank']}; got {sorted(got)}"
        cost_ns, cost_pct = got[key]
        assert cost_ns == pytest.approx(p["cost_ns_per_step"], rel=COST_TOLERANCE), (scenario, key)
        assert cost_pct == pytest.approx(p["cost_pct"], rel=COST_TOLERANCE), (scenario, key)


def test_nothing_reported_that_was_not_planted(planted):
    scenario, truth, findings = planted
    planted_keys = {(p["kind"], p["rank"]) for p in truth["problems"]}
    extra = [(kind, rank, pct) for (kind, rank), (_, pct) in _cost_by_kind_and_rank(findings).items()
             if (kind, rank) not in planted_keys]
    assert not extra, f"{scenario}: findings nobody planted: {extra}"


def test_findings_carry_fixes_and_a_window(planted):
    _scenario, _truth, findings = planted
    for f in findings:
        assert computed_finding_contract(f)["fixes"], f"{f.finding_id} has no fix"
        assert f.summary and f.severity in {"high", "medium", "low"}
        if f.t_start_ns is not None:
            assert f.t_end_ns is not None and f.t_start_ns <= f.t_end_ns


def test_control_reports_nothing_significant(tmp_path_factory):
    # thresholds off: every analysis reports whatever it measures, and all of it must be small
    truth, findings = _run(tmp_path_factory, "control", MIN_FINDING_PCT=0.0)
    assert truth["problems"] == []
    assert [(f.kind, f.rank, f.cost_pct) for f in findings if f.cost_pct > 2.0] == []


def test_all_scenario_finds_every_planted_kind(tmp_path_factory):
    truth, findings = _run(tmp_path_factory, "all")
    got = _cost_by_kind_and_rank(findings)
    installed = _installed_kinds()
    for p in truth["problems"]:
        if p["kind"] not in installed or (p["kind"] != "rank_imbalance" and p["cost_pct"] < REQUIRED_PCT):
            continue
        key = (p["kind"], p["rank"])
        assert key in got, f"no {p['kind']} finding on rank {p['rank']}; got {sorted(got)}"
        if p["kind"] == "rank_imbalance":
            # Problems interact here: fixing the straggler alone saves little (the truth is the
            # counterfactual run), because the fast ranks' own loader stalls, hidden behind the
            # wait today, would surface. The finding reports the wait: an upper bound.
            [finding] = [f for f in findings if f.kind == "rank_imbalance"]
            held_ns = finding.metrics["host_held_ms_per_step"] * 1e6
            assert held_ns <= p["cost_ns_per_step"] <= got[key][0]
            assert held_ns < 0.5 * got[key][0] and "hidden" in finding.summary
        else:
            assert got[key][0] == pytest.approx(p["cost_ns_per_step"], rel=COST_TOLERANCE), key
