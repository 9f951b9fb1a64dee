"""Memory views on a memory-profiled trace: 1,000,000 [memory] events (bench/README.md "Memory events").

    python bench/memory.py [--ops 500000] [--steps 10] [--dir /tmp/td_memory_bench] [--views a,b]

Writes (once; kept in --dir) one rank's Kineto trace: --steps ProfilerSteps, --ops cpu_ops in all,
each allocating a block and freeing it before it ends (one in 100
keeps its block to the end of the step), so 2 x --ops [memory] events; loads it into a DuckDB
file store there, then times each memory view of lib/memory.sql (count(*) over it) and the
Memory page's reads, each in a fresh connection, wall seconds.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzers.ingest import ingest_paths  # noqa: E402
from analyzers.read import memory_queries  # noqa: E402
from analyzers.sql.engine import ensure_loaded  # noqa: E402
from analyzers.store.database import connect  # noqa: E402

VIEWS = ["memory_events", "memory_event_ops", "memory_allocation_spans", "memory_allocations", "memory_steps",
         "memory_device_summary", "memory_categories_at_peak", "memory_op_stats"]
READS = ["op_stats", "memory_curve", "categories_at_peak", "live_at_peak"]


def write_trace(path: Path, ops: int, steps: int) -> None:
    """One rank, `steps` ProfilerSteps of ops/steps cpu_ops, each one allocation and its free."""
    pid = tid = 1
    per_step, t, ev_idx, total = ops // steps, 1_000_000.0, 0, 0
    free_addrs: list[int] = []
    next_addr = 1 << 32
    with path.open("w") as out:
        out.write('{"schemaVersion": 1, "profile_memory": 1, "traceEvents": [\n')
        first = True

        def emit(text: str) -> None:
            nonlocal first
            out.write(text if first else ",\n" + text)
            first = False

        for step in range(steps):
            step_start, kept = t, []
            for i in range(per_step):
                name = f"aten::op{i % 64}"
                nbytes = 4096 * (1 + i % 17)
                addr = free_addrs.pop() if free_addrs else next_addr
                if addr == next_addr:
                    next_addr += 1 << 20
                emit(f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": {pid}, "tid": {tid}, '
                     f'"ts": {t:.3f}, "dur": 8.0, "args": {{"Ev Idx": {ev_idx}}}}}')
                total += nbytes
                emit(f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": {pid}, '
                     f'"tid": {tid}, "ts": {t + 2:.3f}, "args": {{"Total Reserved": 0, "Total Allocated": {total}, '
                     f'"Bytes": {nbytes}, "Device Id": -1, "Device Type": 0, "Addr": {addr}, "Ev Idx": {ev_idx + 2}}}}}')
                if i % 100 == 99:
                    kept.append((addr, nbytes))
                else:
                    total -= nbytes
                    emit(f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": {pid}, '
                         f'"tid": {tid}, "ts": {t + 6:.3f}, "args": {{"Total Reserved": 0, "Total Allocated": {total}, '
                         f'"Bytes": {-nbytes}, "Device Id": -1, "Device Type": 0, "Addr": {addr}, "Ev Idx": {ev_idx + 3}}}}}')
                    free_addrs.append(addr)
                ev_idx += 4
                t += 10.0
            for addr, nbytes in kept:            # the kept blocks go at the step's end
                total -= nbytes
                emit(f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": {pid}, '
                     f'"tid": {tid}, "ts": {t:.3f}, "args": {{"Total Reserved": 0, "Total Allocated": {total}, '
                     f'"Bytes": {-nbytes}, "Device Id": -1, "Device Type": 0, "Addr": {addr}, "Ev Idx": {ev_idx}}}}}')
                free_addrs.append(addr)
                ev_idx += 1
            t += 1.0
            emit(f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": {pid}, '
                 f'"tid": {tid}, "ts": {step_start - 0.5:.3f}, "dur": {t - step_start:.3f}, "args": {{}}}}')
            t += 5.0
        out.write("\n]}\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=500_000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/td_memory_bench"))
    ap.add_argument("--views", default=",".join(VIEWS + READS), help="comma-separated views and reads to time")
    args = ap.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    trace, store = args.dir / f"memory_{args.ops}.json", args.dir / f"memory_{args.ops}.duckdb"
    if not trace.exists():
        start = time.perf_counter()
        write_trace(trace, args.ops, args.steps)
        print(f"wrote {trace} ({trace.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - start:.1f} s")
    if not store.exists():
        con = connect(str(store))
        start = time.perf_counter()
        ingest_paths(con, [str(trace)])
        print(f"ingest {time.perf_counter() - start:.1f} s")
        con.close()
    con = connect(str(store))
    run_id = con.execute("SELECT run_id FROM runs LIMIT 1").fetchone()[0]
    con.close()
    for name in args.views.split(","):
        con = connect(str(store))
        ensure_loaded(con)
        start = time.perf_counter()
        if name in READS:
            extra = [0, "cpu"] if name in ("live_at_peak",) else []
            rows = len(getattr(memory_queries, name)(con, run_id, *extra))
        else:
            rows = con.execute(f"SELECT count(*) FROM {name}(?)", [run_id]).fetchone()[0]
        print(f"{name}: {time.perf_counter() - start:.1f} s ({rows:,} rows)", flush=True)
        con.close()


if __name__ == "__main__":
    main()
