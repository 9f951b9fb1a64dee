"""Where a finding points and what it charges: only time inside the profiled steps is a step's
cost, and every finding names a window, also when copies carry no byte count or the trace has no
ProfilerSteps (planted traces with hand-computed answers)."""
from __future__ import annotations

from analyzers.api import analyze_paths
from tests.support.kineto_traces import BASE_US, Trace


def findings(report: dict) -> dict[str, dict]:
    return {f["id"]: f for f in report["findings"]}


def test_idle_before_the_first_step_is_no_steps_cost(tmp_path):
    # a warm-up kernel 100 ms before two 1 ms steps, each 800 us busy: the 99.9 ms hole before
    # step 1 was charged per step (50 ms, 5010% of a 1 ms step); only the idle inside the steps
    # counts, on the GPU clock (lib/gpu_steps.sql: a step runs from its first GPU work to the next
    # step's): [100900, 101100) = 200 us over 2 steps. The 100 us before step 1's first kernel
    # precede the first GPU step.
    t = Trace()
    t.gpu("void warmup", 0, 100, launch_ts=-10)
    t.step(1, 100_000, 1000)
    t.step(2, 101_000, 1000)
    for start in (100_000, 101_000):
        t.gpu("void gemm", start + 100, 800, launch_ts=start + 10)
    report = analyze_paths([t.write(tmp_path / "rank0.json")])
    gap = findings(report)["launch_gap"]
    assert gap["cost_ms_per_step"] == 0.1 and gap["cost_pct"] == 10.0
    assert (gap["start_us"], gap["end_us"]) == (BASE_US + 100_900, BASE_US + 101_100)
    assert all(f["cost_pct"] <= 100 for f in report["findings"])


def test_h2d_finding_without_byte_counts_points_at_the_longest_copy(tmp_path):
    # ROCm copies carry no 'bytes': the window used to be empty
    t = Trace()
    t.step(1, 0, 1000)
    t.gpu("Memcpy HtoD (Pinned -> Device)", 100, 200, cat="gpu_memcpy", stream=9, launch="cudaMemcpyAsync")
    t.gpu("Memcpy HtoD (Pinned -> Device)", 320, 50, cat="gpu_memcpy", stream=9, launch="cudaMemcpyAsync")
    t.gpu("void gemm", 400, 550)
    h2d = findings(analyze_paths([t.write(tmp_path / "rank0.json")]))["h2d_stall"]
    assert (h2d["start_us"], h2d["end_us"]) == (BASE_US + 100, BASE_US + 300)
    assert h2d["stream"] == 9 and h2d["cost_ms_per_step"] == 0.25


def test_comm_and_imbalance_findings_have_windows_without_steps(tmp_path):
    # two ranks, no ProfilerStep: rank 1 computes 300 us longer, so rank 0 waits in the
    # all-reduce; both findings used to have no window
    paths = []
    for rank, work in ((0, 400), (1, 700)):
        t = Trace(rank, 2)
        t.gpu("void gemm", 0, work)
        # each rank's all-reduce starts after its own compute and ends when the slower rank's does
        t.gpu("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", work, 800 - work,
              stream=20, **{"Collective name": "allreduce", "In msg nelems": 1 << 20, "dtype": "Float",
                            "Group size": 2})
        paths.append(t.write(tmp_path / f"rank{rank}.json"))
    found = findings(analyze_paths(paths))
    assert found["rank_imbalance"]["cost_ms_per_step"] == 0.3
    # rank 0 waited 300 us in its all-reduce [400, 800)
    assert (found["rank_imbalance"]["start_us"], found["rank_imbalance"]["end_us"]) == (BASE_US + 400, BASE_US + 800)
    for f in found.values():
        if f["kind"] in ("comm_exposed", "rank_imbalance"):
            assert f["start_us"] is not None and f["end_us"] > f["start_us"], f
    assert all(f["stream"] == 20 for f in found.values() if f["kind"] == "comm_exposed")


def test_a_rank_without_steps_beside_ranks_with_steps_is_explained(tmp_path):
    stepped = Trace(0, 2)
    stepped.step(1, 0, 1000)
    stepped.step(2, 1000, 1000)
    stepped.gpu("void gemm", 100, 800)
    stepped.gpu("void gemm", 1100, 800)
    bare = Trace(1, 2)
    bare.gpu("void gemm", 100, 400)
    bare.gpu("void gemm", 1000, 400)
    notes = analyze_paths([stepped.write(tmp_path / "rank0.json"), bare.write(tmp_path / "rank1.json")])["notes"]
    assert any("Rank(s) 1 have GPU work but no ProfilerStep#N ranges" in n for n in notes), notes
    assert not any("have no GPU activity" in n for n in notes), notes
    assert any("Only rank 0 of the 2 loaded ranks" in n for n in notes), notes


def test_a_host_ahead_of_the_gpu_waiting_at_the_end_adds_no_idle_to_the_last_gpu_step(tmp_path):
    # the host launches three 1 ms steps in 0.1 ms each, then waits in its last step until the
    # GPU is done (a synchronize): that host step lasts ~3 ms. On the GPU clock every step is its
    # 1 ms kernel; the last one ends where its host step does, not 3 ms after its GPU start.
    from analyzers.ingest import ingest_paths
    from analyzers.sql.engine import ensure_loaded
    from analyzers.store.database import connect

    t = Trace()
    for n, host_start in enumerate((0, 100, 200), 1):
        t.step(n, host_start, 100 if n < 3 else 3100)
        t.gpu("void gemm", 1000 * n, 1000, launch_ts=host_start + 10)
    con = connect(":memory:")
    run_id = ingest_paths(con, [str(t.write(tmp_path / "rank0.json"))]).run_id
    ensure_loaded(con)
    rows = con.execute("SELECT step, step_ns, idle_ns FROM step_breakdown(?) ORDER BY step", [run_id]).fetchall()
    assert rows == [(1, 1_000_000, 0), (2, 1_000_000, 0), (3, 1_000_000, 0)]     # was 3.1 ms, 2.1 idle
