"""Trace integrity notes (analyzers/analysis/integrity.py, sql/lib/integrity.sql): each condition on a small
hand-built Kineto trace that has it, checked for its note and for the finding it must not fake."""
from __future__ import annotations

import gzip
import json

import pytest

from analyzers.execution.pipeline import analyze_run
from analyzers.ingest import ingest_paths
from analyzers.analysis.integrity import integrity_notes
from analyzers.sql.engine import ensure_loaded
from analyzers.store.database import connect

STEP_US = 1000          # every hand-built step lasts 1 ms
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
TINY = "vectorized_elementwise_kernel<4, add>"


class Trace:
    """One rank's Kineto trace, built event by event (times in µs, as Kineto writes them)."""

    def __init__(self, rank: int = 0, world_size: int | None = None, shift_us: float = 0.0):
        self.rank, self.world_size, self.shift = rank, world_size, shift_us
        self.events: list[dict] = []
        self.meta: dict = {}
        self.correlation = 100

    def _x(self, cat: str, name: str, start: float, end: float, **args) -> dict:
        event = {"ph": "X", "cat": cat, "name": name, "ts": start + self.shift, "dur": end - start,
                 "pid": 1, "tid": 1, "args": args}
        self.events.append(event)
        return event

    def step(self, n: int, start: float, end: float | None = None) -> None:
        self._x("user_annotation", f"ProfilerStep#{n}", start, start + STEP_US if end is None else end)

    def runtime(self, name: str, start: float, end: float, correlation: int | None = None) -> None:
        self._x("cuda_runtime", name, start, end, **({} if correlation is None else {"correlation": correlation}))

    def gpu(self, name: str, start: float, end: float, correlation: int, cat: str = "kernel", **args) -> None:
        event = self._x(cat, name, start, end, device=0, stream=7, correlation=correlation, **args)
        event["pid"], event["tid"] = 0, 7

    def launch(self, call_start: float, gpu_start: float, gpu_end: float, name: str = GEMM,
               call: str = "cudaLaunchKernel", **args) -> int:
        """A launch call of 5 µs and the GPU work it starts; returns the correlation id."""
        self.correlation += 1
        self.runtime(call, call_start, call_start + 5, self.correlation)
        self.gpu(name, gpu_start, gpu_end, self.correlation, **args)
        return self.correlation

    def graph_launch(self, call_start: float, call_end: float, work: list[tuple]) -> None:
        """One cudaGraphLaunch call and the work it replays: (name, start, end[, cat]) tuples, all
        sharing the call's correlation id as Kineto records them."""
        self.correlation += 1
        self.runtime("cudaGraphLaunch", call_start, call_end, self.correlation)
        for name, start, end, *cat in work:
            self.gpu(name, start, end, self.correlation, cat=cat[0] if cat else "kernel")

    def write(self, path) -> str:
        doc = {"schemaVersion": 1, "traceEvents": self.events, **self.meta}
        if self.world_size:
            doc["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": self.world_size}
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))
        return str(path)


def load(tmp_path, *traces: Trace):
    """Ingest the traces as one run; (connection, run_id, findings with default thresholds, notes)."""
    con = connect(":memory:")
    paths = [t.write(tmp_path / f"rank{t.rank}.json.gz") for t in traces]
    result = ingest_paths(con, paths)
    assert result.run_id and not result.errors
    ensure_loaded(con)
    findings = analyze_run(con, result.run_id)
    return con, result.run_id, findings, integrity_notes(con, result.run_id)


def busy_steps(t: Trace, first: int, count: int, origin: float = 0.0) -> None:
    """`count` steps whose GPU is busy: one GEMM per step, launched early, running 10-990 µs in."""
    for i in range(count):
        start = origin + i * STEP_US
        t.step(first + i, start, start + STEP_US)
        t.launch(start + 2, start + 10, start + 990)


def kinds(findings) -> set[str]:
    return {f.kind for f in findings}


# --- CUDA graphs ------------------------------------------------------------------------------

def graph_replay_trace() -> Trace:
    """Three steps, each a GEMM then one cudaGraphLaunch replaying 50 tiny kernels with 3 µs between
    them: had each been launched on its own, that would be 15% of the step idle between launches."""
    t = Trace()
    for i in range(3):
        start = i * STEP_US
        t.step(i + 1, start, start + STEP_US)
        t.launch(start + 2, start + 10, start + 400)
        t.graph_launch(start + 10, start + 30, [(TINY, start + 400 + 8 * k, start + 405 + 8 * k) for k in range(50)])
        t.launch(start + 35, start + 800, start + 990)
    return t


def test_graph_replay_is_gpu_work_not_launch_gaps(tmp_path):
    con, run_id, findings, notes = load(tmp_path, graph_replay_trace())
    assert "launch_gap" not in kinds(findings)
    # the holes between replayed kernels were queued work, not the CPU launching too slowly
    causes = {c for (c,) in con.execute("SELECT DISTINCT cause FROM gpu_idle_gaps(?, 0.5, 1000000) "
                                        "WHERE start_ns % 1000000 >= 400000 AND start_ns % 1000000 < 800000",
                                        [run_id]).fetchall()}
    assert causes == {"gpu_wait"}
    # the graph launch is no kernel launch in HTA's launch statistics: 2 GEMM launches per step
    assert con.execute("SELECT launches FROM launch_stats(?, 100000, 50000, 10000)", [run_id]).fetchone()[0] == 6
    assert len(notes) == 1
    assert notes[0].startswith("Rank 0 replays CUDA/HIP graphs: 3 graph launches ran 150 kernels and copies")


def test_graph_replayed_copy_is_no_blocking_h2d_copy(tmp_path):
    """A host-to-device copy node replayed by a graph: the GPU idles while cudaGraphLaunch runs,
    but the call is asynchronous, so the idle time is the CPU launching late, not a staging copy."""
    t = Trace()
    for i in range(3):
        start = i * STEP_US
        t.step(i + 1, start, start + STEP_US)
        t.launch(start + 2, start + 10, start + 300)
        t.graph_launch(start + 290, start + 500,
                       [("Memcpy HtoD (Pinned -> Device)", start + 500, start + 520, "gpu_memcpy"),
                        (GEMM, start + 520, start + 990)])
    con, run_id, findings, _ = load(tmp_path, t)
    causes = {c for (c,) in con.execute("SELECT DISTINCT cause FROM gpu_idle_gaps(?, 0.5, 1000000)",
                                        [run_id]).fetchall()}
    assert "h2d_copy" not in causes and "launch_bound" in causes
    assert "h2d_stall" not in kinds(findings)


def graph_capture_trace() -> Trace:
    """Three busy steps; in step 2 the host captures a graph (30 launch calls that only record
    work) and instantiates it while the GPU sits idle for 700 µs."""
    t = Trace()
    busy_steps(t, 1, 1)
    start = STEP_US
    t.step(2, start, start + STEP_US)
    t.launch(start + 2, start + 10, start + 100)
    t.runtime("cudaStreamBeginCapture", start + 110, start + 112)
    for k in range(30):
        t.correlation += 1
        t.runtime("cudaLaunchKernel", start + 115 + 9 * k, start + 120 + 9 * k, t.correlation)
    t.runtime("cudaStreamEndCapture", start + 400, start + 410)
    t.runtime("cudaGraphInstantiate", start + 410, start + 780)
    t.launch(start + 795, start + 800, start + 990)
    busy_steps(t, 3, 1, origin=2 * STEP_US)
    return t


def test_graph_capture_is_noted_and_diagnoses_no_gap(tmp_path):
    con, run_id, findings, notes = load(tmp_path, graph_capture_trace())
    assert not kinds(findings) & {"launch_gap", "runtime_stall", "host_sync"}
    gap = con.execute("SELECT cause, (end_ns - start_ns) // 1000 FROM gpu_idle_gaps(?, 0.5, 1000000) "
                      "ORDER BY end_ns - start_ns DESC LIMIT 1", [run_id]).fetchone()
    assert gap == ("graph_capture", 700)
    capture = [n for n in notes if "graph capture" in n]
    assert len(capture) == 1
    assert "1 CUDA/HIP graph capture" in capture[0] and "30 launch calls" in capture[0]
    assert "30 of them have no GPU work" in capture[0]


def test_without_the_capture_the_same_idle_is_a_launch_gap(tmp_path):
    """The control: the same 700 µs hole with the host busy in ordinary calls is a launch gap."""
    t = graph_capture_trace()
    for event in t.events:
        if event["name"] in ("cudaStreamBeginCapture", "cudaStreamEndCapture"):
            event["name"] = "cudaEventRecord"
    _, _, findings, notes = load(tmp_path, t)
    assert "launch_gap" in kinds(findings)
    assert not any("graph capture" in n for n in notes)


# --- NCCL / RCCL names ------------------------------------------------------------------------

def comm_trace(names: list[str]) -> Trace:
    t = Trace()
    for i, name in enumerate(names):
        start = i * STEP_US
        t.step(i + 1, start, start + STEP_US)
        t.launch(start + 2, start + 10, start + 500)
        t.launch(start + 10, start + 500, start + 990, name=name)
    return t


NAMED_VARIANTS = ["ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                  "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                  "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"]


def test_nccl_name_variants_are_communication_and_need_no_note(tmp_path):
    con, run_id, _, notes = load(tmp_path, comm_trace(NAMED_VARIANTS))
    got = con.execute("SELECT collective FROM collectives(?) ORDER BY start_ns", [run_id]).fetchall()
    assert got == [("allreduce",), ("allreduce",), ("allgather",)]
    assert notes == []


def test_unnamed_and_unrecognised_comm_kernels_are_noted(tmp_path):
    generic = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
    msccl = "mscclKernel_Sum_float_LL(ncclDevComm*, mscclAlgo*, mscclWork*)"
    setup = "rcclSetupKernel(ncclDevComm*)"
    con, run_id, _, notes = load(tmp_path, comm_trace([generic, generic, msccl, setup]))
    # the Generic kernel and RCCL's MSCCL executor are communication whose collective the name does
    # not say (lib/kernel_taxonomy.sql)
    assert con.execute("SELECT count(*) FROM collectives(?) WHERE collective IS NULL", [run_id]).fetchone()[0] == 3
    assert any(n.startswith("3 communication kernels (e.g. ncclDevKernel_Generic") for n in notes)
    assert any(n.startswith("1 kernel named like NCCL/RCCL (e.g. rcclSetupKernel") for n in notes)


# --- ranks: clock skew, missing ranks ---------------------------------------------------------

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


def two_rank_job(world_size: int, shift_us: float, collective: str = ALLREDUCE) -> list[Trace]:
    """Two identical ranks (compute, then a collective, each step); rank 1's clock shifted."""
    traces = []
    for rank in (0, 1):
        t = Trace(rank=rank, world_size=world_size, shift_us=shift_us if rank == 1 else 0.0)
        for i in range(4):
            start = i * STEP_US
            t.step(i + 1, start, start + STEP_US)
            t.launch(start + 2, start + 10, start + 700)
            t.launch(start + 10, start + 700, start + 990, name=collective,
                     **{"In msg nelems": 1 << 20, "dtype": "Float", "Group size": 2})
        traces.append(t)
    return traces


def test_clock_skew_is_noted_and_fakes_no_straggler(tmp_path):
    con, run_id, findings, notes = load(tmp_path, *two_rank_job(2, shift_us=5000))
    assert "rank_imbalance" not in kinds(findings)
    skew = [n for n in notes if "clocks disagree" in n]
    assert len(skew) == 1
    # each all-reduce (290 µs) starts on rank 1 4710 µs after it ended on rank 0
    assert "rank 1's clock runs ahead of rank 0's by at least 4.71 ms" in skew[0]
    assert "4 of its 4 matched collectives" in skew[0]
    assert "unreliable" in skew[0]


def test_point_to_point_transfers_show_no_skew(tmp_path):
    """Send/recv pairs two peers, which need not be the ranks matched by order: no clock evidence."""
    _, _, _, notes = load(tmp_path, *two_rank_job(2, shift_us=5000, collective=SENDRECV))
    assert notes == []


def test_synchronised_clocks_need_no_note(tmp_path):
    _, _, _, notes = load(tmp_path, *two_rank_job(2, shift_us=0))
    assert notes == []


def test_missing_ranks_are_noted(tmp_path):
    _, _, _, notes = load(tmp_path, *two_rank_job(8, shift_us=0))
    assert notes == ["The job has 8 ranks (distributedInfo.world_size) but the run holds 2 (ranks 0-1): rank "
                     "imbalance and communication figures compare only these, so a straggler among the other 6 "
                     "cannot be seen. Load every rank's file to compare them all."]


# --- traces that begin or end inside a step ---------------------------------------------------

def test_trace_beginning_mid_step_is_noted_and_costs_nothing(tmp_path):
    t = Trace()
    # the tail of a step launched before profiling began: GPU work without its launch call, then a
    # long hole before the first recorded step
    t.gpu(GEMM, 0, 300, correlation=7)
    t.runtime("cudaEventRecord", 0, 2)
    busy_steps(t, 5, 3, origin=1000)
    _, _, findings, notes = load(tmp_path, t)
    assert findings == []
    assert notes == ["The trace begins inside a step (rank 0: 1.00 ms before ProfilerStep#5): the GPU was running "
                     "work launched before profiling started. That partial step is no step's cost: costs count "
                     "only inside ProfilerSteps, and GPU work whose launch is not in the trace is not counted."]


def test_trace_ending_mid_step_is_noted(tmp_path):
    t = Trace()
    busy_steps(t, 1, 3)
    t.step(4, 3 * STEP_US, 3 * STEP_US + 200)       # the profiler stopped 200 µs into step 4
    t.launch(3 * STEP_US + 2, 3 * STEP_US + 10, 3 * STEP_US + 190)
    _, _, _, notes = load(tmp_path, t)
    assert len(notes) == 1
    assert notes[0].startswith("The trace ends inside a step (rank 0: ProfilerStep#4 lasts 0.20 ms against a "
                               "median 1.00 ms)")


def _steps_closed_by_the_optimizer(t: Trace, count: int) -> None:
    for i in range(count):
        start = i * STEP_US
        t.step(i + 1, start, start + STEP_US)
        t.launch(start + 2, start + 10, start + 900)
        t._x("cpu_op", "Optimizer.step#AdamW.step", start + 900, start + 980)


def test_a_short_last_step_that_ran_to_its_end_is_whole(tmp_path):
    # a schedule stops at a step boundary: the last step is quick (less work) but reached the
    # optimizer step that closes every other one
    t = Trace()
    _steps_closed_by_the_optimizer(t, 3)
    t.step(4, 3 * STEP_US, 3 * STEP_US + 200)
    t.launch(3 * STEP_US + 2, 3 * STEP_US + 10, 3 * STEP_US + 100)
    t._x("cpu_op", "Optimizer.step#AdamW.step", 3 * STEP_US + 110, 3 * STEP_US + 190)
    _, _, _, notes = load(tmp_path, t)
    assert notes == []


def test_a_short_last_step_without_the_op_closing_the_others_is_cut(tmp_path):
    t = Trace()
    _steps_closed_by_the_optimizer(t, 3)
    t.step(4, 3 * STEP_US, 3 * STEP_US + 200)       # stopped before its optimizer step
    t.launch(3 * STEP_US + 2, 3 * STEP_US + 10, 3 * STEP_US + 190)
    _, _, _, notes = load(tmp_path, t)
    assert len(notes) == 1 and notes[0].startswith("The trace ends inside a step (rank 0: ProfilerStep#4")


def test_a_short_last_step_followed_by_host_work_is_not_cut_off(tmp_path):
    t = Trace()
    busy_steps(t, 1, 3)
    t.step(4, 3 * STEP_US, 3 * STEP_US + 200)
    t._x("cpu_op", "aten::save", 3 * STEP_US + 300, 3 * STEP_US + 900)   # e.g. a checkpoint after the loop
    _, _, _, notes = load(tmp_path, t)
    assert notes == []


# --- the profiler's own log -------------------------------------------------------------------

def test_dropped_events_in_kinetos_log_are_noted(tmp_path):
    t = Trace()
    busy_steps(t, 1, 3)
    t.meta = {"INFO": ["INFO:2024-05-22 17:15:23 1:1 CuptiActivityProfiler.cpp:333] Record counts: Out-of-range = 0, "
                       "Blocklisted runtime = 3, Invalid ext correlations = 0, CPU GPU out-of-order = 0, "
                       "Unexpected CUDA events = 0, CUPTI stopped early? = 1"],
              "WARNING": ["WARNING:2024-05-22 17:15:23 1:1 CuptiActivityApi.cpp:266] Dropped 1234 activity records"]}
    _, _, _, notes = load(tmp_path, t)
    assert len(notes) == 1
    assert notes[0].startswith("The profiler's log in the trace of rank 0 says it dropped activity records and stopped "
                               "recording GPU activity early (1234 records in all)")
    assert "upper bounds" in notes[0]


def test_a_clean_log_needs_no_note(tmp_path):
    t = Trace()
    busy_steps(t, 1, 3)
    t.meta = {"INFO": ["INFO:2024-10-28 16:06:31 1:1 CuptiActivityProfiler.cpp:395] Record counts: Out-of-range = 0, "
                       "Blocklisted runtime = 9, Invalid ext correlations = 0, CPU GPU out-of-order = 0, "
                       "Unexpected CUDA events = 0, CUPTI stopped early? = 0"]}
    _, _, findings, notes = load(tmp_path, t)
    assert findings == [] and notes == []


# --- real traces ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["nccl_allreduce_with_sizes", "triton_single_kernel", "alexnet_single_gpu"])
def test_real_single_rank_traces_raise_no_integrity_note(shared_traces, name):
    """Clean public traces: their logs report no dropped records; the one-rank-of-two case is
    rank_imbalance's own note, not repeated here."""
    con = connect(":memory:")
    result = ingest_paths(con, [str(shared_traces / f"{name}.json.gz")])
    assert integrity_notes(con, result.run_id) == []


def test_real_two_of_128_ranks_are_noted(shared_traces):
    con = connect(":memory:")
    result = ingest_paths(con, [str(p) for p in sorted((shared_traces / "nccl2rank").glob("*.json.gz"))])
    notes = integrity_notes(con, result.run_id)
    assert any(n.startswith("The job has 128 ranks") and "other 126" in n for n in notes)
    # their send/recv kernels pair each rank with its pipeline peers, not with each other
    assert not any("clocks disagree" in n for n in notes)
