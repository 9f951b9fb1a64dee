"""comm_exposed: exposed collective time, sizes and bandwidths, no double counting of straggler waits."""
from __future__ import annotations

import gzip
import json

import pytest

from analyzers.common import thresholds as th
from analyzers.analysis.kinds import comm_exposed
from tests.support.analysis import ingest_clean, run_analysis
from sample_traces.synthesize import Workload, synthesize

EXPOSURE_THRESHOLDS = (th.COMM_SMALL_MESSAGE_BYTES, th.HOST_BLOCKED_MIN_NS)


def _find(con, run_id, **thresholds):
    return run_analysis(comm_exposed, con, run_id, **thresholds)


@pytest.fixture(scope="module")
def exposed_run(tmp_path_factory):
    truth = synthesize(tmp_path_factory.mktemp("exposed"), "exposed_comm", steps=3, seed=5)
    con, run_id = ingest_clean(truth["files"])
    return truth, con, run_id


def test_exposed_comm_found_per_rank_with_true_cost(exposed_run):
    truth, con, run_id = exposed_run
    found = {f.rank: f for f in _find(con, run_id)}
    assert set(found) == {p["rank"] for p in truth["problems"]} == {0, 1}
    for planted in truth["problems"]:
        f = found[planted["rank"]]
        assert f.kind == "comm_exposed"
        assert f.cost_ns == pytest.approx(planted["cost_ns_per_step"], rel=0.15)
        assert f.cost_pct == pytest.approx(planted["cost_pct"], rel=0.15)


def test_exposed_comm_metrics_describe_small_serialised_buckets(exposed_run):
    _truth, con, run_id = exposed_run
    finding = _find(con, run_id)[0]
    m = finding.metrics
    assert "Median message 2.0 MiB, 12% under " in finding.summary   # sizes in binary units, as everywhere
    assert m["collectives_per_step"] == 64
    assert m["serialized_after_compute"] is True and m["overlap_pct"] < 5
    assert m["median_msg_bytes"] == 2 * 1024 * 1024          # 4M-element layers split 8 ways, fp32
    assert m["small_msg_share"] == pytest.approx(8 / 64)      # layer 0's 256 KiB pieces
    assert m["world_size"] == 2 and m["group_size"] == 2
    # bandwidth from the model's link: each all-reduce takes latency + bytes x 2(n-1)/n / busbw
    wl = Workload()
    sizes = [2 * 1024 * 1024] * 56 + [256 * 1024] * 8
    seconds = sum(wl.nccl_latency_ns + b / wl.busbw_gbps for b in sizes)
    expected_algbw = sum(sizes) / seconds
    assert m["algbw_gbps"] == pytest.approx(expected_algbw, rel=0.02)
    assert m["busbw_gbps"] == pytest.approx(m["algbw_gbps"])  # n = 2: factor 2(n-1)/n = 1


def test_straggler_waiting_not_counted_as_exposed_comm(tmp_path):
    truth = synthesize(tmp_path, "straggler", steps=3)
    con, run_id = ingest_clean(truth["files"])
    # the waiting ranks' comm is mostly exposed, but it is waiting for rank 2 ...
    rows = {r[0]: r[1:] for r in con.execute(
        "SELECT rank, exposed_ns_per_step, imbalance_wait_ns_per_step, cost_ns, mean_step_ns "
        "FROM comm_exposure(?, ?, ?)", [run_id, *EXPOSURE_THRESHOLDS]).fetchall()}
    lost = dict(con.execute("SELECT rank, lost_ns_per_step FROM rank_balance(?, ?)", [run_id, th.HOST_BLOCKED_MIN_NS]).fetchall())
    for rank in (0, 1, 3):
        exposed, waiting, cost, step = rows[rank]
        assert exposed > 0.15 * step
        assert waiting == pytest.approx(lost[rank])
        assert cost == pytest.approx(exposed - waiting)
    # ... so what is left is the last bucket's transfer, as the model says, and no finding
    for planted in truth["ranks"]:
        assert rows[planted["rank"]][2] == pytest.approx(
            truth["ranks"][2]["comm_exposed_ns_per_step"], rel=0.15)
    assert all(f.cost_pct < 1.0 for f in _find(con, run_id, MIN_FINDING_PCT=0.0))


def test_control_comm_is_hidden(tmp_path):
    truth = synthesize(tmp_path, "control", steps=3)
    con, run_id = ingest_clean(truth["files"])
    assert all(f.cost_pct < 1.0 for f in _find(con, run_id, MIN_FINDING_PCT=0.0))
    overlap = [r[0] for r in con.execute("SELECT overlap_pct FROM comm_exposure(?, ?, ?)", [run_id, *EXPOSURE_THRESHOLDS]).fetchall()]
    assert len(overlap) == 2 and all(o > 95 for o in overlap)


def test_real_allreduce_sizes_and_bandwidth(shared_traces):
    path = shared_traces / "nccl_allreduce_with_sizes.json.gz"
    con, run_id = ingest_clean([path])
    # independent reading of the file: NCCL kernels launched by the CPU before the last step ended
    # (the ProfilerStep rule every figure uses), bytes = In msg nelems x element size
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    last_step_end = max(e["ts"] + e["dur"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
    launched = {e["args"]["correlation"] for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {}) and e["ts"] <= last_step_end}
    expected: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") == "kernel" and e["name"].startswith("nccl") and e["args"]["correlation"] in launched:
            acc = expected.setdefault(e["args"]["Collective name"], [0, 0.0, 0])
            acc[0] += e["args"]["In msg nelems"] * {"Float": 4, "Long": 8}[e["args"]["dtype"]]
            acc[1] += e["dur"] * 1000.0
            acc[2] += 1
    rows = con.execute("SELECT collective, instances, total_bytes, algbw_gbps, busbw_gbps, wait_ns "
                       "FROM comm_by_collective(?)", [run_id]).fetchall()
    assert {r[0] for r in rows} == set(expected) and "allreduce" in expected
    for collective, n, total_bytes, algbw, busbw, wait in rows:
        nbytes, dur_ns, count = expected[collective]
        assert n == count and total_bytes == nbytes
        assert algbw == pytest.approx(nbytes / dur_ns, rel=1e-3)     # one rank: true duration = own
        assert busbw == pytest.approx(algbw)                          # n = 2 (all-reduce 2(n-1)/n = 1)
        assert wait is None                                           # no other rank to match with
    [finding] = _find(con, run_id)
    assert finding.metrics["waiting_known"] is False
    assert finding.metrics["busbw_gbps"] == pytest.approx(
        sum(v[0] for v in expected.values()) / sum(v[1] for v in expected.values()), rel=1e-3)
    assert "missing" in finding.summary


def test_real_collectives_without_sizes(shared_traces):
    con, run_id = ingest_clean([shared_traces / "nccl2rank"])
    rows = con.execute("SELECT rank, sized_share, algbw_gbps, collectives_per_step, overlap_pct "
                       "FROM comm_exposure(?, ?, ?) ORDER BY rank", [run_id, *EXPOSURE_THRESHOLDS]).fetchall()
    assert [r[0] for r in rows] == [0, 1]
    for _, sized, algbw, per_step, overlap in rows:
        assert sized == 0 and algbw is None and per_step == 5
    # HTA's comm/comp overlap for these ranks: 14.95% and 19.93% (shared/traces/README.md)
    assert rows[0][4] == pytest.approx(14.95, abs=0.5) and rows[1][4] == pytest.approx(19.93, abs=0.5)
    found = _find(con, run_id)
    assert {f.rank for f in found} == {0, 1}
    assert all(f.metrics["busbw_gbps"] is None for f in found)


def test_cpu_only_gloo_rank_is_costed_by_its_blocked_training_thread(shared_traces):
    # rank 34 of a 300-rank gloo job: two all-reduces run on gloo threads through 179 ms of its
    # 210 ms step while the training thread runs nothing (see tests/real_jobs/test_gloo_comm.py for the
    # measure checked against step times)
    con, run_id = ingest_clean([shared_traces / "cpu_only_rank34.json.gz"])
    [finding] = _find(con, run_id)
    assert finding.rank == 34 and finding.metrics["comm_source"] == "cpu"
    assert finding.cost_ns == pytest.approx(178.78e6, rel=1e-3)
    assert finding.cost_pct == pytest.approx(100 * 178.78 / 210.11, rel=1e-3)
    assert finding.metrics["overlap_pct"] == pytest.approx(0.0, abs=0.1)
    assert finding.metrics["waiting_known"] is False and "missing" in finding.summary
    assert "training thread is blocked" in finding.summary
