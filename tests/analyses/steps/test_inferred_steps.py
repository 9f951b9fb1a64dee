"""Traces without ProfilerStep#N ranges: steps are inferred where the trace repeats
(analyzers/sql/lib/steps.sql inferred_steps), the start-up iteration is no step's cost, and the
notes say so. Checked on hand-written events, and on real CPU workloads profiled without a
schedule (one `with profile(...)` around the whole loop): a data-loader-bound loop and a 2-rank
gloo job with a sleeping rank, each against its control. Every planted cause must be found on its
rank with a cost within 25% of the step time it adds, measured by the workload itself."""
from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import pytest

from analyzers.execution.pipeline import analyze_run, run_analyses
from analyzers.analysis.context import build_context
from analyzers.read.queries import findings as stored_findings
from analyzers.sql.engine import ensure_loaded
from analyzers.store.database import connect

from tests.support.analysis import hand_written_store, ingest_clean
from tests.support.event_table import ev, insert_events

ITERATIONS = 24            # loop iterations per workload: the first is start-up, no step
LOADER_SLEEP_S = 0.05      # the planted slow __getitem__ (one sample per batch)
RANK_SLEEP_S = 0.1         # the planted slow rank: its host sleeps before each all-reduce
DEVICE_WAIT_S = 0.06       # what every rank of the gloo job waits per iteration besides its compute
TOLERANCE = 0.25


# --- the inference rule on hand-written events ---------------------------------------------------

@pytest.fixture()
def con():
    """An empty in-memory store with the SQL library loaded."""
    store = ensure_loaded(connect(":memory:"))
    yield store
    store.close()


def _loop_events(marker: str, n: int, period: int, *, tid: int = 1) -> list[dict]:
    """n iterations of `period` ns on one thread, each starting with `marker` and doing one op."""
    rows = []
    for i in range(n):
        start = 1000 + i * period
        rows.append(ev("user_annotation", marker, start, period // 4, tid=tid))
        rows.append(ev("cpu_op", "aten::mm", start + period // 2, period // 4, tid=tid))
    return rows


def test_iterations_run_from_one_loader_fetch_to_the_next_and_the_first_is_start_up(con):
    marker = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    insert_events(con, _loop_events(marker, 5, 100))
    assert con.execute("SELECT step, start_ns, end_ns, source, marker FROM steps('r') ORDER BY step").fetchall() == [
        (1, 1100, 1200, "inferred:dataloader", marker),
        (2, 1200, 1300, "inferred:dataloader", marker),
        (3, 1300, 1400, "inferred:dataloader", marker),
    ]


def test_slow_iterations_right_after_the_first_are_start_up_too(con):
    marker = "Optimizer.step#SGD.step"
    starts = [0, 100, 600, 1100, 1200, 1300, 1400, 1500]     # iterations 1 and 2 last 500, the rest 100
    insert_events(con, [ev("user_annotation", marker, t, 10, tid=1) for t in starts])
    assert con.execute("SELECT list(step ORDER BY step) FROM steps('r')").fetchone()[0] == [3, 4, 5, 6]


def test_the_loader_wins_over_the_optimizer_and_profiler_steps_win_over_both(con):
    rows = _loop_events("Optimizer.step#SGD.step", 6, 100) + _loop_events(
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 4, 150, tid=2)
    rows += [{**r, "rank": 1} for r in _loop_events("Optimizer.step#SGD.step", 6, 100)]
    rows += [ev("user_annotation", f"ProfilerStep#{n}", 1000 + n * 100, 100, rank=1) for n in (7, 8)]
    insert_events(con, rows)
    got = con.execute("SELECT rank, source, count(*) FROM steps('r') GROUP BY ALL ORDER BY rank").fetchall()
    assert got == [(0, "inferred:dataloader", 2), (1, "profiler_step", 2)]


def test_a_recurring_top_level_op_is_the_marker_when_nothing_is_named(con):
    rows = []
    for i in range(6):                     # per iteration: linear once, relu twice, each top-level
        start = 1000 + i * 100
        rows += [ev("cpu_op", "aten::linear", start, 20), ev("cpu_op", "aten::addmm", start + 5, 10),
                 ev("cpu_op", "aten::relu", start + 30, 10), ev("cpu_op", "aten::relu", start + 60, 10)]
    rows += [ev("cpu_op", "aten::empty", 10 + i, 1) for i in range(3)]    # set-up, before the loop
    insert_events(con, rows)
    got = con.execute("SELECT min(step), max(step), any_value(source), any_value(marker), min(dur_ns), max(dur_ns) "
                      "FROM steps('r')").fetchone()
    assert got == (1, 4, "inferred:op", "aten::linear", 100, 100)


def test_fewer_than_three_occurrences_infer_nothing_and_the_note_says_costs_are_per_trace(con):
    insert_events(con, _loop_events("Optimizer.step#SGD.step", 2, 100))
    con.execute("INSERT INTO ranks (run_id, rank, file_name, file_hash) VALUES ('r', 0, 'r.json', 'h')")
    assert con.execute("SELECT count(*) FROM steps('r')").fetchone()[0] == 0
    notes = build_context(con, "r").notes
    assert any("per whole trace" in n for n in notes), notes


def test_hta_s_counted_rule_reads_profiler_steps_only(con):
    # without ProfilerSteps every GPU activity counts, inferred iterations or not (HTA's rule)
    rows = _loop_events("Optimizer.step#SGD.step", 4, 100)
    rows += [ev("runtime", "cudaLaunchKernel", 1010, 5, correlation=1),
             ev("kernel", "k", 1020, 10, device=0, stream=7, correlation=1),
             ev("runtime", "cudaLaunchKernel", 1390, 5, correlation=2),
             ev("kernel", "k", 1400, 10, device=0, stream=7, correlation=2)]
    insert_events(con, rows)
    assert con.execute("SELECT count(*) FROM steps('r')").fetchone()[0] == 2
    assert con.execute("SELECT bool_and(counted), count(*) FROM gpu_activity('r')").fetchone() == (True, 2)


def _gpu_loop_with_cold_start() -> list[dict]:
    """A GPU rank without ProfilerSteps: a first kernel, then 40 ms of CUDA start-up (a cudaFree
    creating the context) that leaves the GPU idle, then 6 loader-driven 10 ms iterations that
    keep it busy."""
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    ms = 1_000_000
    rows = [ev("user_annotation", loader, 0, 50_000),
            ev("runtime", "cudaLaunchKernel", 60_000, 10_000, correlation=1),
            ev("kernel", "k_first", 80_000, 20_000, device=0, stream=7, correlation=1),
            ev("runtime", "cudaFree", 100_000, 40 * ms)]
    for i in range(6):
        start = 41 * ms + i * 10 * ms
        rows += [ev("user_annotation", loader, start, 50_000),
                 ev("runtime", "cudaLaunchKernel", start + 60_000, 10_000, correlation=i + 2),
                 ev("kernel", "k_step", start + 80_000, 9_800_000, device=0, stream=7, correlation=i + 2)]
    return rows


def test_cuda_start_up_before_the_steady_iterations_is_no_step_s_cost():
    con = hand_written_store(_gpu_loop_with_cold_start(), run_id="r")
    findings, notes = run_analyses(con, "r")
    assert con.execute("SELECT count(*), min(dur_ns) FROM steps('r')").fetchone() == (5, 10_000_000)
    assert [f.kind for f in findings if f.kind == "runtime_stall"] == [], findings
    assert any("5 iterations inferred from DataLoader.__next__" in n for n in notes), notes


# --- real workloads, profiled without a schedule ------------------------------------------------

def _profiled_loop(trace: Path, batches, step) -> float:
    """One epoch, `for batch in batches: step(batch)`, under one torch.profiler capture (no
    schedule, so no ProfilerStep#N); writes the Chrome trace and returns the median wall time of
    an iteration after the first (ms, fetch included), as the workload measured it (the median:
    a busy machine's one-off stalls are no step time the planted cause adds)."""
    from torch.profiler import ProfilerActivity, profile

    times = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for batch in batches:
            step(batch)
            now = time.perf_counter()
            times.append(now - start)
            start = now
    prof.export_chrome_trace(str(trace))
    return 1e3 * statistics.median(times[1:])


def _loader_bound_epoch(trace: Path, loader_sleep_s: float) -> float:
    """A seeded single-process training epoch whose DataLoader (num_workers=0) sleeps per sample;
    returns its measured ms per iteration."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    torch.manual_seed(0)
    data = torch.randn(ITERATIONS, 16, 512)

    class Samples(Dataset):
        def __len__(self) -> int:
            return ITERATIONS

        def __getitem__(self, index: int):
            if loader_sleep_s:      # (sleep(0) would yield the CPU: a busy machine makes that ms)
                time.sleep(loader_sleep_s)
            return data[index]      # made up front: the control's fetch is near-instant

    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(batch) -> None:        # a few ms of compute: the loader's wait dominates the step
        optimizer.zero_grad()
        model(batch).square().mean().backward()
        optimizer.step()
    return _profiled_loop(trace, DataLoader(Samples(), batch_size=None, num_workers=0), step)


def _analyze(paths: list[Path]):
    """The trace files as one analysed run: (connection, run id)."""
    con, run_id = ingest_clean(sorted(paths))
    analyze_run(con, run_id)
    return con, run_id


@pytest.fixture(scope="module")
def loader_runs(tmp_path_factory):
    """(slow loader, control): (connection, run id, measured ms per iteration) each."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    base = tmp_path_factory.mktemp("loader")
    runs = []
    for name, sleep_s in (("slow", LOADER_SLEEP_S), ("control", 0.0)):
        trace = base / f"{name}.json"
        step_ms = _loader_bound_epoch(trace, sleep_s)
        runs.append((*_analyze([trace]), step_ms))
    return runs


def test_a_loader_bound_loop_without_schedule_finds_the_loader_at_its_cost(loader_runs):
    (con, run_id, slow_ms), (control, control_id, control_ms) = loader_runs
    # ITERATIONS fetches and the one ending the epoch (StopIteration): ITERATIONS iterations; the
    # first is start-up, and so may be a few right after it on a busy machine
    n_steps, source = con.execute("SELECT count(*), any_value(source) FROM steps(?)", [run_id]).fetchone()
    assert source == "inferred:dataloader" and ITERATIONS // 2 <= n_steps <= ITERATIONS - 1
    found = {f["kind"]: f for f in stored_findings(con, run_id)}
    assert "dataloader_stall" in found, found
    assert found["dataloader_stall"]["rank"] == 0
    assert found["dataloader_stall"]["cost_ms_per_step"] == pytest.approx(slow_ms - control_ms, rel=TOLERANCE)
    assert not [f for f in stored_findings(control, control_id)
                if f["kind"] == "dataloader_stall" and f["cost_pct"] > 5]


def test_the_note_says_steps_were_inferred_and_start_up_is_not_counted(loader_runs):
    (con, run_id, _), _ = loader_runs
    notes = build_context(con, run_id).notes
    n_steps = con.execute("SELECT count(*) FROM steps(?)", [run_id]).fetchone()[0]
    inferred = [n for n in notes if f"{n_steps} iterations inferred from DataLoader.__next__" in n]
    assert inferred and "Start-up is not counted" in inferred[0], notes
    assert not any("per whole trace" in n for n in notes)


def _gloo_rank(rank: int, world_size: int, port: int, out_dir: str, slow_rank: int | None) -> None:
    """One rank of a seeded 2-rank gloo job profiled without a schedule; `slow_rank` sleeps
    before each all-reduce (the planted cause). Writes rank{N}.json and rank{N}.ms (its measured
    mean iteration time)."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    weight = torch.randn(512, 512) / 512 ** 0.5

    def step(batch) -> None:
        grad = batch @ weight
        for _ in range(10):
            grad = torch.tanh(grad @ weight)
        # every rank also waits as for a device or storage: the job is not all CPU, so other
        # processes on a busy machine do not make one rank late by chance (the control stays balanced)
        with torch.profiler.record_function("device_wait"):   # a traced wait
            time.sleep(DEVICE_WAIT_S)
            if rank == slow_rank:
                time.sleep(RANK_SLEEP_S)
        dist.all_reduce(grad)

    batches = DataLoader(torch.randn(ITERATIONS, 64, 512), batch_size=None, num_workers=0)
    step_ms = _profiled_loop(Path(out_dir) / f"rank{rank}.json", batches, step)
    (Path(out_dir) / f"rank{rank}.ms").write_text(str(step_ms))
    dist.destroy_process_group()
    from accel.demos.dist_common import leave_rank_process

    leave_rank_process()


def _gloo_job(out_dir: Path, slow_rank: int | None):
    """Run the 2-rank job into out_dir: (connection, run id, measured ms per iteration, the
    slower rank's)."""
    import torch.multiprocessing as mp

    from accel.demos.dist_common import free_port

    out_dir.mkdir(parents=True, exist_ok=True)
    mp.start_processes(_gloo_rank, args=(2, free_port(), str(out_dir), slow_rank), nprocs=2, join=True,
                       start_method="spawn")
    step_ms = max(float(p.read_text()) for p in out_dir.glob("rank*.ms"))
    return (*_analyze(list(out_dir.glob("rank*.json"))), step_ms)


@pytest.fixture(scope="module")
def sleeping_rank_runs(tmp_path_factory):
    """(rank 1 sleeps, control): (connection, run id, measured ms per iteration) each."""
    pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("gloo_no_schedule")
    return [_gloo_job(base / name, slow_rank) for name, slow_rank in (("slow", 1), ("control", None))]


def test_a_sleeping_rank_without_schedule_is_found_on_that_rank_at_its_cost(sleeping_rank_runs):
    (con, run_id, slow_ms), (control, control_id, control_ms) = sleeping_rank_runs
    per_rank = con.execute("SELECT rank, count(*) FROM steps(?) GROUP BY rank ORDER BY rank", [run_id]).fetchall()
    assert [rank for rank, _ in per_rank] == [0, 1]
    assert all(ITERATIONS // 2 <= n_steps <= ITERATIONS - 1 for _, n_steps in per_rank), per_rank
    found = stored_findings(con, run_id)
    straggler = [f for f in found if f["kind"] == "rank_imbalance"]
    assert straggler and straggler[0]["rank"] == 1, found
    assert straggler[0]["cost_ms_per_step"] == pytest.approx(slow_ms - control_ms, rel=TOLERANCE)
    assert not [f for f in stored_findings(control, control_id)
                if f["kind"] == "rank_imbalance" and f["cost_pct"] > 5]
