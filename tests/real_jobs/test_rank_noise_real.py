"""rank_imbalance's noise floor and its periodic cause on real CPU DDP jobs (gloo on 127.0.0.1).

Controls: 2 and 3 ranks doing identical work, five profiled runs each, while busy loops compete
for the ranks' CPUs, the same load on each rank (ranks and loops pinned where there is a CPU per
rank; 3 ranks on 2 CPUs share them with one loop as the scheduler places them): the ranks arrive
at their all-reduces apart by the host's jitter, which is no imbalance (issue #23). Each rank notes
when it reaches each all-reduce (a DDP comm hook, the host's monotonic clock), so the test knows
without the profiler how evenly the host did load the ranks: a rank_imbalance finding above 5% of
the step must name the rank the clocks show last in most steps and cost 0.5-1.5x what the others
waited for it by the clocks (a CPU the host busies more makes a real straggler).

Periodic: on a 2-rank job, rank 1 evaluates the model and saves a checkpoint (then a blocking
upload, here a sleep) every second step.
The finding must name that pattern (rank 1, every 2 steps), rule balanced_sampler out (the data
is the same on every rank), and cost 0.75-1.3x the loss measured without the profiler: the mean
step of the periodic variant minus its control's (mean, since only every other step pays).
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402

from accel.demos.dist_common import RankWorkload, run_ranks  # noqa: E402
from tests.support.analysis import assert_report_costs_within_the_step  # noqa: E402
from analyzers.api import analyze_paths  # noqa: E402

WIDTH, LAYERS, BATCH = 256, 3, 16
BASE_SLEEP_S = 0.010                       # every step: this long asleep (data wait), then DDP work
CONTROL_RUNS = [f"run-{n}" for n in range(1, 6)]
CONTROL_MAX_PCT = 5.0
PROFILED_STEPS = 10
EVAL_RANK, EVAL_EVERY, EVAL_BATCHES = 1, 2, 2
UPLOAD_S = 0.040        # most of the periodic work waits on I/O, which a loaded CPU stretches little
RATIO_BOUNDS = (0.75, 1.3)


def _model() -> tuple[Any, Any]:
    from torch.nn.parallel import DistributedDataParallel
    torch.manual_seed(0)
    blocks: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        blocks += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = DistributedDataParallel(torch.nn.Sequential(*blocks))
    return model, torch.optim.SGD(model.parameters(), lr=0.001)


def _pin_every_thread(cpu: int) -> None:
    """Pin this process's threads (gloo's included) to one CPU; where the host refuses (a container
    without the right), they stay where the scheduler puts them."""
    for thread in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread), {cpu})
        except OSError:
            return


def build(rank: int, world_size: int, variant: str, config: dict[str, Any]) -> RankWorkload:
    """A DDP step; in the "periodic-N" variants, rank EVAL_RANK also evaluates and checkpoints every
    EVAL_EVERY-th step. With config["pin"], rank r runs on the r-th of _load_cpus(world_size).
    Checks: the wall-clock ms of every step run."""
    cpus = _load_cpus(world_size) if config.get("pin") else []
    if cpus:
        _pin_every_thread(cpus[rank])
    model, optimizer = _model()
    arrivals: list[list[int]] = []      # per step, when this rank's buckets were ready (monotonic ns)

    def timed_allreduce(state, bucket):    # unannotated: DDP checks a hook's annotations
        # the moment this rank arrives at the bucket's all-reduce, on the host's shared clock: the
        # ranks' lateness measured without the profiler
        arrivals[-1].append(time.monotonic_ns())
        return default_hooks.allreduce_hook(state, bucket)

    model.register_comm_hook(None, timed_allreduce)
    checkpoint = Path(tempfile.mkdtemp()) / "checkpoint.pt"
    held_out = torch.randn(EVAL_BATCHES, 64, WIDTH, generator=torch.Generator().manual_seed(99))
    step_ms: list[float] = []

    def step(i: int) -> None:
        arrivals.append([])
        start = time.perf_counter()
        time.sleep(BASE_SLEEP_S)
        x = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(i * world_size + rank))
        if variant.startswith("periodic") and rank == EVAL_RANK and i % EVAL_EVERY == 0:
            with torch.no_grad():
                for batch in held_out:          # an evaluation pass ...
                    model.module(batch).sum().item()
            torch.save(model.state_dict(), checkpoint)   # ... and a checkpoint, on one rank,
            time.sleep(UPLOAD_S)                # handed to remote storage (a blocking upload)
        model(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step_ms.append((time.perf_counter() - start) * 1e3)

    return RankWorkload(step=step, checks=lambda: {"step_ms": step_ms, "arrivals_ns": arrivals})


def _load_cpus(world_size: int) -> list[int]:
    """A CPU for each rank when the machine has as many; else none (the scheduler places them)."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[:world_size] if world_size <= len(cpus) else []


def _busy_loop(cpu: int | None) -> None:
    if cpu is not None:
        _pin_every_thread(cpu)
    while True:
        pass


@contextlib.contextmanager
def _loaded_machine(world_size: int):
    """A busy loop beside each rank, on the rank's own CPU: the same load on each rank (one loop
    left to the scheduler can settle beside one rank and make it the straggler it then is). With
    fewer CPUs than ranks no placement is even: one loop, the scheduler places it and the ranks."""
    spawn = multiprocessing.get_context("spawn")
    loops = [spawn.Process(target=_busy_loop, args=(cpu,), daemon=True) for cpu in _load_cpus(world_size)]
    if not loops:
        loops = [spawn.Process(target=_busy_loop, args=(None,), daemon=True)]
    for loop in loops:
        loop.start()
    try:
        yield
    finally:
        for loop in loops:
            loop.terminate()
            loop.join()


def _rank_imbalance(trace_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    report = analyze_paths([str(trace_dir)])
    assert report["run"], report.get("errors")
    assert_report_costs_within_the_step(report)
    return [f for f in report["findings"] if f["kind"] == "rank_imbalance"], report


def _measured_lateness(checks_per_rank: list[dict[str, Any]], profiled: int) -> dict[str, Any]:
    """From the ranks' own clocks over the profiled steps: per step, the rank that reached the last
    all-reduce last and what the others waited for it (its arrival minus theirs), and the rank last
    in most steps with its share."""
    arrivals = [[max(step) for step in c["arrivals_ns"][-profiled:]] for c in checks_per_rank]
    late, waits = [], []
    for per_rank in zip(*arrivals):
        last = max(range(len(per_rank)), key=per_rank.__getitem__)
        late.append(last)
        waits.append(statistics.mean(per_rank[last] - t for r, t in enumerate(per_rank) if r != last) / 1e6)
    step_ms = statistics.median(max(c["step_ms"][-profiled:][i] for c in checks_per_rank) for i in range(profiled))
    rank = statistics.mode(late)
    return {"rank": rank, "late_share": late.count(rank) / len(late), "wait_ms": statistics.mean(waits),
            "wait_ms_as_straggler": statistics.mean(w for w, r in zip(waits, late) if r == rank), "step_ms": step_ms}


COST_VS_CLOCKS = (0.5, 1.5)   # a finding's cost against the wait the ranks' clocks measured


@pytest.mark.parametrize("world_size", [2, 3])
def test_identical_work_on_a_loaded_machine_is_no_imbalance_beyond_what_the_ranks_clocks_show(tmp_path, world_size):
    # The ranks' own clocks (a DDP comm hook notes when each rank reaches each all-reduce) say
    # whether the host loaded them evenly. Jitter is no imbalance: a finding above CONTROL_MAX_PCT
    # of the step needs the clocks to show the rank it names last in most steps, the others
    # waiting more than CONTROL_MAX_PCT of the step for it, and costs what they waited. A host
    # that busies one rank's CPU more does make it a straggler (on this 2-CPU machine CPU 0 often
    # is: its rank last in 7-9 of 10 steps), which is the host's, not the input's.
    with _loaded_machine(world_size):
        results = run_ranks(__name__, CONTROL_RUNS, world_size, tmp_path, 2,
                            {"warmup": 2, "profile_steps": PROFILED_STEPS, "pin": True}, timeout_s=400)
    seen = []
    for run in CONTROL_RUNS:
        found, report = _rank_imbalance(results[run].trace_dir)
        measured = _measured_lateness(results[run].checks_per_rank, PROFILED_STEPS)
        seen.append((run, {k: round(v, 2) for k, v in measured.items()},
                     [(f["ranks"], f["cost_pct"], f["cost_ms_per_step"], f["metrics"]["lateness_pattern"]) for f in found]))
        print(*seen[-1], [n for n in report.get("notes", []) if "jitter" in n])
        for finding in (f for f in found if f["cost_pct"] > CONTROL_MAX_PCT):
            m = finding["metrics"]
            assert finding["ranks"] == [measured["rank"]] and measured["late_share"] > 0.5, seen
            assert measured["wait_ms"] > CONTROL_MAX_PCT / 100 * measured["step_ms"], seen
            ratio = finding["cost_ms_per_step"] / measured["wait_ms"]
            assert COST_VS_CLOCKS[0] <= ratio <= COST_VS_CLOCKS[1], (ratio, seen)
            assert m["imbalance_source"] != "input" and "balanced_sampler" in finding["fixes_ruled_out"], seen


PASSES = 3     # the median pass's ratio decides: one pass hit by the machine's load swings cannot


@pytest.fixture(scope="module")
def periodic_job(tmp_path_factory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("periodic")
    variants = [f"{kind}-{n}" for n in range(PASSES) for kind in ("control", "periodic")]
    # 8 evaluations in each pass's profiled steps and 16 in its timed ones: one evaluation's time
    # swings with the machine's load, their mean less
    results = run_ranks(__name__, variants, 2, out, 32,
                        {"interleave_variants": True, "warmup": 2, "profile_steps": 16, "nice": -10})
    passes = []
    for n in range(PASSES):
        measured = {}
        for kind in ("control", "periodic"):
            variant = f"{kind}-{n}"
            per_rank = [json.loads((out / "timings" / f"{variant}-rank-{r}.json").read_text())["step_ms"]
                        for r in range(2)]
            measured[kind] = {"mean_step_ms": max(statistics.mean(t) for t in per_rank),
                              "found": _rank_imbalance(results[variant].trace_dir)[0]}
        passes.append(measured)
    return passes


def test_eval_and_checkpoint_every_second_step_is_periodic_extra_work(periodic_job):
    # the median pass decides, as for the ratio: a pass whose load swamps the evaluation may miss it
    ratios, seen = [], []
    for measured in periodic_job:
        found = measured["periodic"]["found"]
        seen.append([(f["ranks"], f["metrics"]["lateness_pattern"], f["summary"][:100]) for f in found])
        if len(found) != 1:
            continue
        finding = found[0]
        m = finding["metrics"]
        if finding["ranks"] != [EVAL_RANK] or m["lateness_pattern"] != "periodic":
            continue
        assert m["period_steps"] == EVAL_EVERY and m["imbalance_source"] == "periodic", m
        assert f"every {EVAL_EVERY} steps" in finding["summary"] and "async_save" in finding["summary"]
        assert "balanced_sampler" in finding["fixes_ruled_out"]
        loss_ms = measured["periodic"]["mean_step_ms"] - measured["control"]["mean_step_ms"]
        ratios.append(finding["cost_ms_per_step"] / loss_ms)
        print(f"periodic: cost {finding['cost_ms_per_step']:.2f} ms, loss {loss_ms:.2f} ms, ratio {ratios[-1]:.2f}")
    assert len(ratios) > PASSES / 2, seen
    assert RATIO_BOUNDS[0] <= statistics.median(ratios) <= RATIO_BOUNDS[1], (ratios, seen)


def test_the_periodic_jobs_controls_are_quiet(periodic_job):
    worst = [max((f["cost_pct"] for f in measured["control"]["found"]), default=0.0) for measured in periodic_job]
    assert statistics.median(worst) <= CONTROL_MAX_PCT, worst
