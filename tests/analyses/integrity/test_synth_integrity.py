"""Trace integrity end to end on synthesized jobs: CUDA-graph replays and captures, NCCL kernel-name
variants, clock skew between ranks and a one-step spike are each planted by sample_traces/synthesize.py
(whose ground truth is measured on its own model, not by the analyzers), ingested and analysed. None
of them may be reported as a problem it is not: each gets its note where it has one, and the figures
it could fake stay those of its control.
"""
from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from analyzers.read import queries
from analyzers.execution.pipeline import analyze_run
from analyzers.ingest import ingest_paths
from analyzers.sql.engine import ensure_loaded
from analyzers.store.database import connect
from sample_traces import synthesize as syn

STEPS, SEED = 4, 11
MIN_COVER, RUNTIME_MIN_NS = 0.5, 1_000_000      # gpu_idle_gaps' arguments (the default thresholds')
NO_FLOOR = {"MIN_FINDING_PCT": 0.0}             # every analysis reports whatever it measures
# What a condition may add to a figure of its control, in % of the step: jitter between two seeds'
# worth of timing, far under the 5% reporting floor and under what each condition would fake
SAME_AS_CONTROL_PCT = 0.5


class Job:
    """One synthesized scenario, ingested and analysed (default thresholds, and without a floor)."""

    def __init__(self, out: Path, scenario: str, **kwargs):
        self.truth = syn.synthesize(out, scenario, steps=STEPS, seed=SEED, **kwargs)
        self.con = connect(":memory:")
        result = ingest_paths(self.con, self.truth["files"])
        assert result.run_id and not result.errors
        self.run_id = result.run_id
        ensure_loaded(self.con)
        self.all_findings = analyze_run(self.con, self.run_id, NO_FLOOR)
        self.findings = analyze_run(self.con, self.run_id)
        self.notes = queries.run_notes(self.con, self.run_id)

    def sql(self, text: str, *params) -> list[tuple]:
        return self.con.execute(text, [self.run_id, *params]).fetchall()

    def cost_pct(self, kind: str) -> float:
        """Summed cost of `kind`'s findings without a floor (% of the step; 0 when none)."""
        return sum(f.cost_pct for f in self.all_findings if f.kind == kind)

    def idle_ns_by_cause(self, rank: int) -> dict[str, int]:
        rows = self.sql("SELECT cause, sum(dur_ns) FROM gpu_idle_gaps(?, ?, ?) WHERE rank = ? GROUP BY cause",
                        MIN_COVER, RUNTIME_MIN_NS, rank)
        return {cause: int(ns) for cause, ns in rows}

    def kernel_names(self) -> set[str]:
        names = set()
        for path in self.truth["files"]:
            events = json.loads(Path(path).read_text())["traceEvents"]
            names |= {e["name"] for e in events if e.get("cat") == "kernel"}
        return names


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    cache: dict[tuple, Job] = {}

    def get(scenario: str, **kwargs) -> Job:
        key = (scenario, tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = Job(tmp_path_factory.mktemp(scenario), scenario, **kwargs)
        return cache[key]
    return get


def kinds(findings) -> set[str]:
    return {f.kind for f in findings}


# --- CUDA graphs ------------------------------------------------------------------------------

def test_graph_replayed_kernels_are_gpu_work_not_launch_gaps(job):
    graph = job("cuda_graph")
    assert graph.truth["problems"] == []
    [planted] = graph.truth["planted"]
    replayed_per_step = planted["kernels_per_step"]
    assert graph.findings == []
    assert graph.cost_pct("launch_gap") == 0.0
    for truth in graph.truth["ranks"]:
        rank, steps = truth["rank"], truth["steps"]
        # every replayed kernel is in the trace, each paired with the one cudaGraphLaunch of its step
        assert graph.sql("SELECT count(*), count(DISTINCT correlation) FROM launches(?) "
                         "WHERE rank = ? AND launch_name = 'cudaGraphLaunch'", rank)[0] == (replayed_per_step * steps,
                                                                                             steps)
        # the holes between them (2 us each, 7% of the step) are queued work: all gpu_wait, none a
        # launch gap or any other cause
        idle = graph.idle_ns_by_cause(rank)
        replay_idle_ns = truth["idle_ns_per_step_by_cause"]["graph_replay"] * steps
        assert replay_idle_ns > 0.05 * truth["step_time_ns"] * steps
        assert set(idle) == {"gpu_wait"}
        assert idle["gpu_wait"] == pytest.approx(replay_idle_ns, rel=0.01)
        # GPU busy and compute count them: the model's compute time, replayed kernels included
        compute_ns, busy_ns, n_steps = graph.sql("SELECT compute_ns, busy_ns, steps_divisor FROM rank_breakdown(?) "
                                                 "WHERE rank = ?", rank)[0]
        assert compute_ns / n_steps == pytest.approx(truth["compute_ns_per_step"], rel=0.005)
        assert busy_ns >= compute_ns
    [note] = [n for n in graph.notes if "replay" in n and "graph" in n]
    assert note.startswith(f"Ranks 0-1 replay CUDA/HIP graphs: {2 * STEPS} graph launches ran "
                           f"{2 * STEPS * replayed_per_step} kernels and copies")


def test_graph_capture_is_noted_and_its_idle_is_no_finding(job):
    capture = job("graph_capture")
    assert capture.truth["problems"] == []
    [planted] = capture.truth["planted"]
    assert capture.findings == []
    for kind in ("launch_gap", "host_sync", "runtime_stall"):
        assert capture.cost_pct(kind) == 0.0, kind
    for truth in capture.truth["ranks"]:
        steps = truth["steps"]
        # the GPU idles while the host captures (after a device sync) and instantiates the graph:
        # 15% of a step on average, enough to be a finding were it diagnosed
        capture_idle_ns = truth["idle_ns_per_step_by_cause"]["graph_capture"] * steps
        assert capture_idle_ns > 0.10 * truth["step_time_ns"] * steps
        idle = capture.idle_ns_by_cause(truth["rank"])
        assert set(idle) == {"graph_capture", "gpu_wait"}
        assert idle["graph_capture"] == pytest.approx(capture_idle_ns, rel=0.01)
    [note] = [n for n in capture.notes if "graph capture" in n]
    launches = 2 * planted["launches_captured"]
    assert note.startswith("The trace of ranks 0-1 records 2 CUDA/HIP graph captures")
    assert f"the {launches} launch calls inside only recorded work" in note
    assert f"({launches} of them have no GPU work in the trace" in note


# --- NCCL kernel names ------------------------------------------------------------------------

def comm_figures(j: Job) -> dict:
    return {
        "breakdown": j.sql("SELECT rank, comm_ns, comm_overlap_ns, compute_ns, busy_ns FROM rank_breakdown(?) "
                           "ORDER BY rank"),
        "by_collective": j.sql("SELECT rank, collective, instances, sized_instances, total_bytes, true_ns, wait_ns, "
                               "round(busbw_gbps, 6) FROM comm_by_collective(?) ORDER BY rank, collective"),
        "comm_exposed": sorted((row["rank"], row["cost_ms_per_step"], row["cost_pct"])
                               for f in j.all_findings if f.kind == "comm_exposed" for row in per_rank(f)),
    }


def per_rank(finding) -> list[dict]:
    """A finding's per-rank figures (one finding may cover several ranks, one cause)."""
    return finding.metrics.get("per_rank") or [{"rank": finding.rank, "cost_ms_per_step": finding.cost_ns / 1e6,
                                                "cost_pct": finding.cost_pct}]


def test_classic_and_new_nccl_kernel_names_are_both_communication(job):
    new, classic = job("exposed_comm"), job("exposed_comm_classic_nccl")
    assert {n.split("(")[0] for n in new.kernel_names() if n.startswith("nccl")} == {
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL"}
    assert {n.split("(")[0] for n in classic.kernel_names() if n.startswith("nccl")} == {
        "ncclKernel_AllReduce_RING_LL_Sum_float"}
    figures = comm_figures(classic)
    assert figures == comm_figures(new)
    # ... and they are the planted ones: 64 all-reduces a step, exposed as the model measured
    assert all(instances == 64 * STEPS for _, _, instances, *_ in figures["by_collective"])
    got = {rank: ms * 1e6 for rank, ms, _ in figures["comm_exposed"]}
    assert classic.truth["problems"]
    for p in classic.truth["problems"]:
        assert got[p["rank"]] == pytest.approx(p["cost_ns_per_step"], rel=0.15)
    assert not [n for n in classic.notes if "NCCL/RCCL" in n or "communication kernel" in n]


# --- clock skew -------------------------------------------------------------------------------

def test_clock_skew_is_noted_and_fakes_no_straggler_or_exposed_comm(job):
    skew = job("clock_skew")
    control = job("control", world_size=skew.truth["world_size"])
    [planted] = skew.truth["planted"]
    rank, offset_ms = planted["rank"], planted["offset_ns"] / 1e6
    assert skew.truth["problems"] == [] and control.truth["problems"] == []
    [note] = [n for n in skew.notes if "clocks disagree" in n]
    assert f"rank {rank}'s clock runs ahead of rank" in note
    # at least the offset minus one all-reduce (~1 ms): "by at least 29.34 ms (median ..."
    skew_ms = float(note.split("by at least ")[1].split(" ms")[0])
    assert offset_ms - 2.0 < skew_ms <= offset_ms
    assert not [n for n in control.notes if "clocks disagree" in n]
    # nothing the offset could fake: no finding, and no more imbalance or exposed comm than the
    # control's, though every collective "starts" 30 ms later on rank 2 than elsewhere
    assert skew.findings == []
    for kind in ("rank_imbalance", "comm_exposed"):
        assert skew.cost_pct(kind) <= control.cost_pct(kind) + SAME_AS_CONTROL_PCT, kind
    assert not [f for f in skew.all_findings if f.kind == "rank_imbalance" and f.rank == rank
                and f.cost_pct > SAME_AS_CONTROL_PCT]


# --- a one-step spike -------------------------------------------------------------------------

def test_spike_step_is_a_note_not_a_straggler(job):
    spike = job("spike_step")
    [planted] = spike.truth["planted"]
    assert spike.truth["problems"] == [] and planted["kind"] == "step_outlier"
    assert spike.findings == []
    # without a floor, what rank_imbalance measures leaves the spike step out of its cost
    assert spike.cost_pct("rank_imbalance") < 1.0
    [note] = [n for n in spike.notes if n.startswith(f"In step {planted['step']} ")]
    assert "step outlier" in note and f"for rank {planted['rank']}," in note
    waited_ms = float(note.split("waited ")[1].split(" ms")[0])
    assert waited_ms == pytest.approx(planted["design_ns"] / 1e6, rel=0.15)


# --- the synthesizer: new scenarios leave the others' output alone -----------------------------

def test_integrity_scenarios_change_nothing_but_what_they_plant(tmp_path):
    control = syn.synthesize(tmp_path / "control", "control", steps=2, seed=3, world_size=4)
    skew = syn.synthesize(tmp_path / "skew", "clock_skew", steps=2, seed=3)
    rank = skew["planted"][0]["rank"]
    for r, (a, b) in enumerate(zip(control["files"], skew["files"])):
        # exact decimals: epoch-scale microseconds with 3 decimals do not fit a float
        ea, eb = (json.loads(Path(p).read_text(), parse_float=Decimal) for p in (a, b))
        ts_a = [e["ts"] for e in ea["traceEvents"] if "ts" in e]
        ts_b = [e["ts"] for e in eb["traceEvents"] if "ts" in e]
        shift = Decimal(syn.CLOCK_SKEW_NS) / 1000 if r == rank else 0
        assert len(ts_a) == len(ts_b) and all(y - x == shift for x, y in zip(ts_a, ts_b))
    assert control["ranks"] == skew["ranks"]
