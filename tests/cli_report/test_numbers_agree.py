"""Every number the dashboard shows for a step, a rank or a finding is the number the CLI JSON or
the shared views (analyzers/sql/metrics) give for the same thing, on every bundled sample run;
and the step breakdown's parts add up to the step on the real traces in ../shared/traces."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from analyzers.read import queries
from analyzers.execution.pipeline import analyze_run
from analyzers.ingest import ingest_paths
from analyzers.read.report import build_report
from analyzers.store.database import connect
from tests.support.analysis import shared_trace_runs
from tests.support.paths import REPO_ROOT

HOME = str(REPO_ROOT / "app" / "Home.py")
MANIFEST = REPO_ROOT / "sample_traces" / "manifest.json"


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """A store holding every sample run, analysed: (store path, {run_id: CLI JSON report},
    {run_id: rank_breakdown frame})."""
    db = tmp_path_factory.mktemp("agree") / "store.duckdb"
    con = connect(db)
    reports, per_rank = {}, {}
    for entry in json.loads(MANIFEST.read_text()):
        result = ingest_paths(con, [str(MANIFEST.parent / p) for p in entry["paths"]], name=entry["name"])
        assert result.run_id, result.errors
        analyze_run(con, result.run_id)
        reports[result.run_id] = build_report(con, result.run_id)
        per_rank[result.run_id] = queries.rank_breakdown(con, result.run_id)
    con.close()
    return db, reports, per_rank


def _open(db: Path, run_id: str, page: str | None = None) -> AppTest:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRACEDOCTOR_DB", str(db))
        patch.setenv("TRACEDOCTOR_SAMPLES", "none")
        at = AppTest.from_file(HOME, default_timeout=120)
        at.session_state["run_id"] = run_id
        at.run()
        if page is not None:
            at.switch_page(page)
            at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _figures(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def _values(array) -> list:
    """A plotly JSON array: a list, or numpy's typed {"dtype", "bdata"} encoding."""
    if isinstance(array, dict) and "bdata" in array:
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


def test_overview_step_time_is_what_its_bars_add_up_to(samples):
    db, reports, per_rank = samples
    for run_id, report in reports.items():
        at = _open(db, run_id)
        frame = per_rank[run_id]
        shown = {m.label: m.value for m in at.metric}
        if all(r["idle_pct"] is None for r in report["ranks"]):   # CPU-only: host steps, no breakdown
            host = [r["step_time_ms"] for r in report["ranks"] if r["step_time_ms"] is not None]
            assert shown["Mean step time"] == f"{sum(host) / len(host):,.2f} ms", run_id
            continue
        assert shown["Mean step time (GPU clock)"] == f"{frame['step_ms'].mean():,.2f} ms", run_id
        bars = next(f for f in _figures(at) if "goes" in f["layout"]["title"]["text"])
        totals: dict[str, float] = {}
        for trace in bars["data"]:
            for x, y in zip(_values(trace["x"]), _values(trace["y"])):
                totals[x] = totals.get(x, 0.0) + y
        assert sorted(totals.values()) == pytest.approx(sorted(frame["step_ms"]), rel=1e-9), run_id
        assert sum(totals.values()) / len(totals) == pytest.approx(frame["step_ms"].mean(), rel=1e-9)


def test_findings_page_costs_are_the_cli_costs(samples):
    db, reports, _ = samples
    for run_id, report in reports.items():
        if not report["findings"]:
            continue
        at = _open(db, run_id, "views/findings.py")
        shown = sorted((m.value, m.delta) for m in at.metric if m.label == "Cost per step")
        expected = sorted((f"{f['cost_ms_per_step']:,.2f} ms", f"{f['cost_pct']:.1f} % of step")
                          for f in report["findings"])
        assert shown == expected, run_id


def test_communication_page_bandwidth_is_the_findings_bandwidth(samples):
    db, reports, _ = samples
    compared = 0
    for run_id, report in reports.items():
        comm = [f for f in report["findings"] if f["kind"] == "comm_exposed"
                 and any(e.get("busbw_gbps") is not None for e in f["metrics"].get("by_collective") or [])]
        if not comm:    # no NCCL bandwidth to compare (a CPU run's gloo collectives carry no sizes)
            continue
        at = _open(db, run_id, "views/communication.py")
        table = next(d.value for d in at.dataframe if "instances" in d.value.columns)
        for finding in comm:
            for entry in finding["metrics"]["by_collective"]:
                if entry["busbw_gbps"] is None:
                    continue
                row = table[(table["rank"] == finding["rank"]) & (table["collective"] == entry["collective"])]
                assert len(row) == 1, (run_id, finding["rank"], entry["collective"])
                assert row.iloc[0]["busbw_gbps"] == pytest.approx(entry["busbw_gbps"], rel=1e-3)
                compared += 1
    assert compared, "no sample run has a communication finding with bandwidth"


def test_comm_evidence_chart_says_how_it_differs_from_the_cost(samples):
    db, reports, _ = samples
    for run_id, report in reports.items():
        comm = [f for f in report["findings"] if f["kind"] == "comm_exposed"
                and (f["metrics"].get("imbalance_wait_ms_per_step") or 0) > 0]
        if not comm:
            continue
        at = _open(db, run_id, "views/findings.py")
        captions = "\n".join(str(c.value) for c in at.caption)
        for finding in comm:
            wait = f"{finding['metrics']['imbalance_wait_ms_per_step']:.2f}"
            assert f"Of this, {wait} ms/step is waiting for later ranks" in captions.replace("\\", ""), run_id
        return
    pytest.skip("no sample run has a communication finding with straggler waiting")


def _shared_traces() -> list[Path]:
    return [inputs[0] for inputs in shared_trace_runs()]


@pytest.mark.skipif(not _shared_traces(), reason="../shared/traces is absent")
@pytest.mark.parametrize("trace", _shared_traces(), ids=lambda p: p.name)
def test_step_parts_add_up_to_the_step_on_real_traces(trace, run_store):
    con = run_store
    result = ingest_paths(con, [str(trace)])
    assert result.run_id
    steps = queries.step_breakdown(con, result.run_id)
    parts = steps[["compute_ms", "comm_exposed_ms", "memory_ms", "idle_ms"]].sum(axis=1)
    assert parts.to_numpy() == pytest.approx(steps["step_ms"].to_numpy(), abs=1e-6)
    assert (steps[["compute_ms", "comm_exposed_ms", "memory_ms", "idle_ms"]] >= -1e-9).all().all()
    per_rank = queries.rank_breakdown(con, result.run_id)
    mean_parts = per_rank[["compute_ms", "comm_exposed_ms", "memory_ms", "idle_ms"]].sum(axis=1)
    assert mean_parts.to_numpy() == pytest.approx(per_rank["step_ms"].to_numpy(), rel=1e-9)


def test_the_cli_notes_show_on_overview_and_findings(samples):
    db, reports, _ = samples
    noted = {run_id: report["notes"] for run_id, report in reports.items() if report["notes"]}
    assert noted, "no sample run has a caveat to show"
    for run_id, notes in noted.items():
        for page in (None, "views/findings.py"):
            at = _open(db, run_id, page)
            shown = "\n".join(str(e.value) for e in at.info).replace("\\", "")
            for note in notes:
                assert note.replace("\\", "") in shown, (run_id, page, note)
