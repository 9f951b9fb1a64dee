"""Hand-built runs for the dashboard's tests, written straight into the store's tables.

The dashboard tests must not depend on ingest details, so they build small runs whose every
number is known: build_store(path) creates two runs (a "before" with a straggler and exposed
communication, an "after" where the fix halved it) and returns their ids.
"""
from __future__ import annotations

import json
from datetime import datetime

from analyzers.analysis.version import ANALYSIS_VERSION
from analyzers.store.database import connect

MS = 1_000_000  # ns

BEFORE_RUN = "run_before_0001"
AFTER_RUN = "run_after_0002"


def add_run(con, run_id: str, name: str, ranks: list[int]) -> None:
    # its findings are hand-made too (add_finding): marked as this version's, so the dashboard
    # does not analyse the run again and replace them
    con.execute("INSERT INTO runs (run_id, name, created_at, source, content_hash, world_size, analysis_version) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [run_id, name, datetime(2026, 1, 1), f"/traces/{name}", run_id * 2, len(ranks), ANALYSIS_VERSION])
    for rank in ranks:
        con.execute("INSERT INTO ranks (run_id, rank, file_name, file_hash, n_events) VALUES (?, ?, ?, ?, ?)",
                    [run_id, rank, f"{name}_rank{rank}.json", f"{run_id}{rank}", 0])


def add_event(con, run_id: str, rank: int, kind: str, name: str, ts_ns: int, dur_ns: int,
              stream: int | None = None, args: dict | None = None, pid: str = "1", tid: str = "1",
              nbytes: int | None = None) -> None:
    gpu = kind in ("kernel", "memcpy", "memset")
    con.execute(
        "INSERT INTO events (run_id, rank, kind, cat, ph, name, ts_ns, dur_ns, pid, tid, device, stream, bytes, args) "
        "VALUES (?, ?, ?, ?, 'X', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [run_id, rank, kind, kind, name, ts_ns, dur_ns, "0" if gpu else pid, str(stream) if gpu else tid,
         0 if gpu else None, stream, nbytes, json.dumps(args or {})],
    )


def add_finding(con, run_id: str, finding_id: str, kind: str, cost_ms: float, cost_pct: float, rank=0,
                step=1, t0_ns=0, t1_ns=10 * MS, summary="", metrics=None) -> None:
    con.execute(
        "INSERT INTO findings (run_id, finding_id, kind, severity, rank, step, stream, t_start_ns, t_end_ns, "
        "cost_ns, cost_pct, metrics, summary) VALUES (?, ?, ?, 'high', ?, ?, 7, ?, ?, ?, ?, ?, ?)",
        [run_id, finding_id, kind, rank, step, t0_ns, t1_ns, int(cost_ms * MS), cost_pct,
         json.dumps(metrics or {"gap_ms": cost_ms}), summary or f"{kind} costs {cost_ms} ms per step"],
    )


def fill_before_run(con, run_id: str = BEFORE_RUN, name: str = "before") -> None:
    """Rank 0: two 10 ms steps; rank 1: no ProfilerStep (one pseudo-step), every number known.

    Rank 0 step 1 [0, 10) ms: compute [1, 4) + [9.5, 10) (a kernel crossing into step 2),
    all-reduce [3, 6) (1 ms hidden, 2 ms exposed), memcpy [6, 7), so compute 3.5, exposed comm 2,
    memory 1, idle 3.5. Step 2 [10, 20): compute [10, 11) and ten 1 ns kernels at 15 ms.
    Rank 1: kernels [0, 2) and [5, 6): its pseudo-step [0, 6) has compute 3, idle 3.
    No launches are recorded, so the steps keep their host windows.
    """
    add_run(con, run_id, name, [0, 1])
    add_event(con, run_id, 0, "user_annotation", "ProfilerStep#1", 0, 10 * MS)
    add_event(con, run_id, 0, "user_annotation", "ProfilerStep#2", 10 * MS, 10 * MS)
    add_event(con, run_id, 0, "cpu_op", "aten::mm <script>alert(1)</script>", 0, 2 * MS)
    add_event(con, run_id, 0, "kernel", "gemm_kernel", 1 * MS, 3 * MS, stream=7)
    add_event(con, run_id, 0, "kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", 3 * MS, 3 * MS, stream=20,
              args={"Group size": 2, "In msg nelems": 1_000_000, "dtype": "Float"})
    add_event(con, run_id, 0, "memcpy", "Memcpy HtoD (Pageable -> Device)", 6 * MS, 1 * MS, stream=7, nbytes=1000)
    add_event(con, run_id, 0, "kernel", "elementwise_kernel", 9 * MS + MS // 2, 3 * MS // 2, stream=7)
    for i in range(10):
        add_event(con, run_id, 0, "kernel", "tiny_kernel", 15 * MS + i, 1, stream=7)
    add_event(con, run_id, 1, "kernel", "gemm_kernel", 0, 2 * MS, stream=7)
    add_event(con, run_id, 1, "kernel", "gemm_kernel", 5 * MS, 1 * MS, stream=7)
    add_finding(con, run_id, "comm_exposed:r0", "comm_exposed", 2.0, 20.0)
    add_finding(con, run_id, "launch_gap:r0:s7", "launch_gap", 3.5, 35.0)


def fill_after_run(con, run_id: str = AFTER_RUN, name: str = "after") -> None:
    """One rank, one 8 ms step: compute [0, 6), exposed all-reduce [6, 7)."""
    add_run(con, run_id, name, [0])
    add_event(con, run_id, 0, "user_annotation", "ProfilerStep#1", 0, 8 * MS)
    add_event(con, run_id, 0, "kernel", "gemm_kernel", 0, 6 * MS, stream=7)
    add_event(con, run_id, 0, "kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", 6 * MS, 1 * MS, stream=20)
    add_finding(con, run_id, "comm_exposed:r0", "comm_exposed", 1.0, 12.5)


def build_store(db_path) -> tuple[str, str]:
    con = connect(db_path)
    try:
        fill_before_run(con)
        fill_after_run(con)
    finally:
        con.close()
    return BEFORE_RUN, AFTER_RUN
