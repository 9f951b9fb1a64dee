"""rank_imbalance: the straggler, what the others lose, CPU-only (gloo) runs, single ranks, real traces."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzers.common import thresholds as th
from analyzers.analysis.kinds import rank_imbalance
from tests.support.analysis import find_in_run_cache, ingest_clean, run_analysis
from analyzers.analysis.context import build_context
from sample_traces.synthesize import synthesize


# what is measured however small: no reporting floor, no noise floor
UNDER_THE_FLOOR = {"MIN_FINDING_PCT": 0.0, "RANK_LATENESS_MIN_STEP_FRACTION": 0.0, "STRAGGLER_MIN_LATENESS_SIGMAS": 0.0,
                   "MOVING_LATENESS_MIN_WORK_SHARE": 0.0}


def _find(con, run_id, **thresholds):
    return run_analysis(rank_imbalance, con, run_id, **thresholds)


@pytest.fixture(scope="module")
def straggler_run(tmp_path_factory):
    truth = synthesize(tmp_path_factory.mktemp("straggler"), "straggler", steps=4, seed=2)
    con, run_id = ingest_clean(truth["files"])
    return truth, con, run_id


def test_straggler_found_with_its_true_cost(straggler_run):
    truth, con, run_id = straggler_run
    [planted] = truth["problems"]
    [finding] = _find(con, run_id)
    assert finding.kind == "rank_imbalance" and finding.rank == planted["rank"] == 2
    assert finding.cost_ns == pytest.approx(planted["cost_ns_per_step"], rel=0.15)
    assert finding.cost_pct == pytest.approx(planted["cost_pct"], rel=0.15)
    m = finding.metrics
    assert m["imbalance_pct"] == pytest.approx(planted["imbalance_pct"], abs=1.0)
    assert m["collectives_matched"] is True and m["measured_on"] == "gpu"
    assert set(m["lost_ms_per_step_by_rank"]) == {"0", "1", "2", "3"}
    assert m["lost_ms_per_step_by_rank"]["2"] == 0
    # the straggler got longer sequences: its shapes differ and the cause says so
    assert m["shape_differs"] is True and m["imbalance_source"] == "input"
    assert m["shape_examples"][0]["straggler_dims"] != m["shape_examples"][0]["other_dims"]
    assert finding.step in {int(s) for s in m["wait_ms_by_step"]}
    assert finding.t_start_ns < finding.t_end_ns
    # the waiting ranks' hosts are held up by most of the wait (they run ahead of their GPUs)
    held_ns = m["host_held_ms_per_step"] * 1e6
    assert 0.6 * planted["cost_ns_per_step"] < held_ns <= planted["cost_ns_per_step"]
    assert "hidden" not in finding.summary


def test_matched_instances_wait_on_every_rank_but_the_straggler(straggler_run):
    _truth, con, run_id = straggler_run
    rows = con.execute("""
        SELECT rank, count(*) AS n, bool_and(matched) AS all_matched, sum(wait_ns) AS wait,
               count(*) FILTER (WHERE wait_ns = 0) AS shortest
        FROM collective_instances(?) GROUP BY rank ORDER BY rank""", [run_id]).fetchall()
    assert [r[0] for r in rows] == [0, 1, 2, 3]
    assert all(n == 8 * 4 and matched for _, n, matched, _, _ in rows)
    by_rank = {r[0]: r for r in rows}
    assert by_rank[2][3] == 0 and by_rank[2][4] == 32          # rank 2 never waits
    assert all(by_rank[r][3] > 0 for r in (0, 1, 3))


def test_control_has_no_meaningful_imbalance(tmp_path):
    truth = synthesize(tmp_path, "control", world_size=3, steps=3)
    con, run_id = ingest_clean(truth["files"])
    found = _find(con, run_id, MIN_FINDING_PCT=0.0)
    assert all(f.cost_pct < 1.0 for f in found)


def _gloo_rank_file(path: Path, rank: int, world: int, compute_us: list[int], allreduce_true_us: int,
                    arrivals: list[list[int]]) -> None:
    """A CPU-only gloo trace: per step, compute then a blocking gloo:all_reduce that ends when the
    last rank has arrived (arrivals[step][rank] = when each rank reaches it, µs into the step)."""
    events, t = [], 1_700_000_000_000_000
    for step, compute in enumerate(compute_us):
        last = max(arrivals[step])
        start, end = t + arrivals[step][rank], t + last + allreduce_true_us
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}", "pid": 1, "tid": 1,
             "ts": t, "dur": end - t + 5},
            {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": t + 1,
             "dur": compute, "args": {"Input Dims": [[64, 128], [128, 128], [128]]}},
            {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 1,
             "ts": start, "dur": end - start, "args": {"Input Dims": [[16384]], "Input type": ["float"]}},
        ]
        t = end + 5
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": rank,
                                                                        "world_size": world},
                                "traceEvents": events}))


def test_cpu_only_gloo_ranks_get_imbalance_from_time_in_collectives(tmp_path):
    # rank 2 computes 30 ms more per step; the others wait for it inside gloo:all_reduce
    world, steps = 3, 2
    compute = {0: 50_000, 1: 50_000, 2: 80_000}
    arrivals = [[compute[r] + 10 for r in range(world)] for _ in range(steps)]
    for rank in range(world):
        _gloo_rank_file(tmp_path / f"rank{rank}.json", rank, world, [compute[rank]] * steps, 2_000, arrivals)
    con, run_id = ingest_clean(sorted(tmp_path.glob("*.json")))
    [finding] = _find(con, run_id)
    assert finding.rank == 2
    assert finding.metrics["measured_on"] == "cpu"
    assert finding.cost_ns == pytest.approx(30_000_000, rel=0.01)    # 30 ms per step, each other rank
    assert finding.metrics["collectives_matched"] is True
    assert finding.metrics["shape_differs"] is False


def test_single_rank_gives_nothing(shared_traces):
    for name in ("nccl_allreduce_with_sizes.json.gz", "cpu_only_rank34.json.gz",
                 "no_distributed_info_cpu_ops.json.gz"):
        con, run_id = ingest_clean([shared_traces / name])
        assert _find(con, run_id, MIN_FINDING_PCT=0.0) == []


def test_one_rank_of_a_gloo_job_gets_a_plain_note(shared_traces):
    path = shared_traces / "cpu_only_rank34.json.gz"
    con, run_id = ingest_clean([path])
    ctx = build_context(con, run_id)
    assert find_in_run_cache(rank_imbalance, con, run_id, ctx) == []
    [note] = [n for n in ctx.notes if "rank imbalance" in n]
    # independent figure: gloo:all_reduce time inside the ProfilerStep, over the step
    import gzip
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    [step] = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    spans = sorted((max(e["ts"], step["ts"]), min(e["ts"] + e["dur"], step["ts"] + step["dur"]))
                   for e in events if e.get("name") == "gloo:all_reduce")
    covered, reach = 0.0, step["ts"]
    for s, e in spans:
        if e > max(s, reach):
            covered += e - max(s, reach)
            reach = e
    assert "Only rank 34 of 300" in note
    assert f"{100 * covered / step['dur']:.0f}% of its step time" in note


def test_nccl2rank_collectives_matched_pipeline_shapes_not_blamed(shared_traces):
    con, run_id = ingest_clean([shared_traces / "nccl2rank"])
    rows = con.execute("SELECT rank, matched_instances, p2p_instances, is_straggler FROM rank_balance(?, ?) "
                       "ORDER BY rank", [run_id, th.HOST_BLOCKED_MIN_NS]).fetchall()
    assert [r[0] for r in rows] == [0, 1]
    assert all(r[1] == 10 and r[2] == 10 for r in rows)      # 5 send/recv per step, 2 steps, all matched
    assert sum(r[3] for r in rows) == 1
    assert _find(con, run_id) == []    # 2 steps, each rank late once: within the ranks' jitter
    found = _find(con, run_id, **UNDER_THE_FLOOR)
    assert len(found) == 1 and found[0].rank == 1
    # send/recv: the ranks are pipeline stages running different layers, not uneven batches
    assert found[0].metrics["shapes_compared"] is False and found[0].metrics["shape_differs"] is False
    assert 0 < found[0].cost_pct < 5


def test_a_missing_collective_unmatches_its_step_only(straggler_run, tmp_path):
    truth, _con, _run_id = straggler_run
    # drop rank 1's third all-reduce kernel of step 11 (a profiler buffer overflow does this)
    paths = []
    for path in truth["files"]:
        trace = json.loads(Path(path).read_text())
        if trace["distributedInfo"]["rank"] == 1:
            steps = {e["name"]: e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
            launches = {e["args"]["correlation"]: e["ts"] for e in trace["traceEvents"]
                        if e.get("cat") == "cuda_runtime" and "correlation" in e["args"]}
            s11 = steps["ProfilerStep#11"]
            nccl = sorted((e for e in trace["traceEvents"] if e.get("cat") == "kernel"
                           and e["name"].startswith("nccl")
                           and s11["ts"] <= launches[e["args"]["correlation"]] < s11["ts"] + s11["dur"]),
                          key=lambda e: e["ts"])
            trace["traceEvents"].remove(nccl[2])
        out = tmp_path / Path(path).name
        out.write_text(json.dumps(trace))
        paths.append(out)
    con, run_id = ingest_clean(paths)
    rows = dict(((step, matched), n) for step, matched, n in con.execute(
        "SELECT step, matched, count(*) FROM collective_instances(?) GROUP BY ALL", [run_id]).fetchall())
    assert rows.get((11, True), 0) == 0 and rows[(11, False)] == 4 * 8 - 1
    assert all(rows.get((s, False), 0) == 0 for s in (10, 12, 13))
    [finding] = _find(con, run_id)
    assert finding.rank == 2
    assert finding.cost_ns == pytest.approx(truth["problems"][0]["cost_ns_per_step"], rel=0.15)


# --- persistence: a straggler is late in most steps; a spike is a step outlier --------------------

def _gloo_run(tmp_path: Path, compute_us: list[list[int]]):
    """A 3-rank gloo run from compute_us[step][rank]: each rank reaches the all-reduce when its
    compute is done, and every rank leaves it 2 ms after the last one arrived."""
    world = len(compute_us[0])
    arrivals = [[c + 10 for c in step] for step in compute_us]
    for rank in range(world):
        _gloo_rank_file(tmp_path / f"rank{rank}.json", rank, world, [step[rank] for step in compute_us],
                        2_000, arrivals)
    return ingest_clean(sorted(tmp_path.glob("*.json")))


def _find_with_notes(con, run_id, **thresholds):
    ctx = build_context(con, run_id, thresholds or None)
    return find_in_run_cache(rank_imbalance, con, run_id, ctx), ctx.notes


def test_one_spike_is_a_step_outlier_not_a_straggler(tmp_path):
    # issue #17's control: equal work; rank 1 is last by 1 ms in 4 of 6 steps (jitter), rank 2
    # by 42 ms in step 4 only
    base = 50_000
    compute = [[base, base + 1_000, base] for _ in range(6)]
    compute[1] = [base + 1_000, base, base]
    compute[4] = [base, base, base + 1_000]
    compute[3] = [base, base + 1_000, base + 42_000]
    con, run_id = _gloo_run(tmp_path, compute)
    findings, notes = _find_with_notes(con, run_id)
    assert findings == []
    [note] = [n for n in notes if "step outlier" in n]
    # ranks 0 and 1 wait 42 and 41 ms in step 4; the median step's wait is 1 ms
    assert note.startswith("In step 4 the other ranks waited 40.5 ms longer than in the median step for rank 2,")
    # nothing hidden under the floor names rank 2 either: the spike is out of the cost
    [small] = _find(con, run_id, **UNDER_THE_FLOOR)
    assert small.rank == 1 and small.cost_pct < 5.0
    assert small.metrics["step_outliers"] == [{"step": 4, "rank": 2, "extra_ms": 40.5}]


def test_persistent_straggler_keeps_its_cost_beside_another_ranks_spike(tmp_path):
    # rank 1 is 20 ms late every step; rank 0 is 60 ms late once (its spike would have made it
    # the rank that waited least over the run)
    base = 50_000
    compute = [[base, base + 20_000, base] for _ in range(6)]
    compute[2] = [base + 80_000, base + 20_000, base]
    con, run_id = _gloo_run(tmp_path, compute)
    [finding] = _find(con, run_id)
    m = finding.metrics
    assert finding.rank == 1 and m["straggler_persistent"] is True
    assert (m["late_steps"], m["steps_compared"]) == (5, 5)
    assert finding.cost_ns == pytest.approx(20_000_000, rel=0.01)     # the spike step is left out
    assert [(o["step"], o["rank"]) for o in m["step_outliers"]] == [(3, 0)]
    assert "one-off spikes (step outliers): step 3 (rank 0" in finding.summary


def test_imbalance_moving_between_ranks_is_costed_per_step(tmp_path):
    # uneven batches: each step a different rank has 30 ms more work. No rank is a straggler, yet
    # every step the other two wait 30 ms (per-rank averages over the run would hide it)
    base = 50_000
    compute = [[base + (30_000 if rank == step % 3 else 0) for rank in range(3)] for step in range(6)]
    con, run_id = _gloo_run(tmp_path, compute)
    [finding] = _find(con, run_id)
    m = finding.metrics
    assert m["straggler_persistent"] is False and m["step_outliers"] == []
    assert m["late_rank_by_step"] == {str(s + 1): s % 3 for s in range(6)}
    assert finding.cost_ns == pytest.approx(30_000_000, rel=0.01)
    assert m["imbalance_source"] == "compute" and "No rank is a persistent straggler" in finding.summary


def test_synthesized_spike_step_is_reported_as_nothing_else(tmp_path):
    from analyzers.execution.pipeline import analyze_run
    truth = synthesize(tmp_path, "spike_step", steps=6, seed=4)
    [spike] = truth["planted"]
    assert truth["problems"] == [] and spike["kind"] == "step_outlier"
    con, run_id = ingest_clean(truth["files"])
    assert analyze_run(con, run_id) == []          # no analysis reports the spike as a problem
    findings, notes = _find_with_notes(con, run_id, MIN_FINDING_PCT=0.0)
    assert all(f.cost_pct < 1.0 and f.metrics["step_outliers"] for f in findings)
    [note] = [n for n in notes if "step outlier" in n]
    assert note.startswith(f"In step {spike['step']} ") and f"for rank {spike['rank']}," in note
    waited_ms = float(note.split("waited ")[1].split(" ms")[0])
    assert waited_ms == pytest.approx(spike["design_ns"] / 1e6, rel=0.15)
