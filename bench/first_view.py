"""First-view times of the pages that read whole-run tables: what a reviewer waits for the first
time a page opens on a run (Streamlit's caches empty, the store's per-run views already built by
the analysis).

    python bench/first_view.py                       # 1gb (after) against 100mb (before)
    python bench/first_view.py --after 100mb --before 100mb-epoch

Inputs are bench/ingest.py's generated traces (bench/data/). Both runs are ingested and analysed
into one DuckDB file (as the dashboard does on upload), then each page's reads run in a fresh
child process, in the order the page issues them, with the functions the page calls
(analyzers.read.queries): "Operators & kernels" on the whole run (its default view) and "Compare"
(before vs after, its default kernel-family diff).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
import ingest as bench_ingest  # noqa: E402  (bench/ingest.py: the shared input generator)

PAGES = {
    # (label, call) in the order the page makes them; every call as the page passes its arguments
    "Operators & kernels": [
        ("findings", "queries.findings(con, after)"),
        ("step_breakdown", "queries.step_breakdown(con, after)"),
        ("run_info", "queries.run_info(con, after)"),
        ("time_bounds", "queries.time_bounds(con, after)"),
        ("top_ops", "queries.top_ops(con, after, window=None, rank=None, step=None, by_rank=False, limit=20)"),
        ("top_kernels", "queries.top_kernels(con, after, window=None, rank=None, step=None, by_rank=False, limit=20)"),
        ("top_modules", "queries.top_modules(con, after, window=None, rank=None, step=None, by_rank=False, limit=20)"),
        ("perf_by_name(kernels)", "queries.perf_by_name(con, after, 'kernels')"),
        ("op_perf", "queries.op_perf(con, after, limit=None)"),
    ],
    "Compare": [
        ("compare_runs", "queries.compare_runs(con, before, after)"),
        ("whatif_vs_measured", "queries.whatif_vs_measured(con, before, after)"),
        ("operator_diff(families)", "queries.operator_diff(con, before, after, 'families')"),
    ],
}


def _child(db: str, before: str, after: str, page: str) -> None:
    sys.path.insert(0, str(REPO))
    from analyzers.read import queries
    from analyzers.sql.engine import ensure_loaded
    from analyzers.store import partitions
    from analyzers.store.database import connect

    # as the dashboard reads: a cursor of the store's connection (StoreLease.acquire)
    con = partitions.attach(ensure_loaded(connect(db, ensure_schema=False)).cursor())
    rows = []
    for label, call in PAGES[page]:
        started = time.perf_counter()
        eval(call, {"queries": queries, "con": con, "before": before, "after": after})  # noqa: S307 (fixed strings above)
        rows.append((label, time.perf_counter() - started))
    print(json.dumps(rows))


def _ingest(db: str, folder: Path, name: str) -> str:
    sys.path.insert(0, str(REPO))
    from analyzers.api import ingest_and_analyze
    from analyzers.store.database import connect

    con = connect(db)
    try:
        outcome = ingest_and_analyze(con, [str(folder)], name=name)
        assert outcome.report is not None, outcome.errors
        return outcome.report["run"]["run_id"]
    finally:
        con.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--after", default="1gb", help="the run the pages open (bench/ingest.py size name)")
    parser.add_argument("--before", default="100mb", help="Compare's before run")
    parser.add_argument("--db", help="reuse this store (both runs already in it, by name)")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return 0
    db = args.db or str(Path(tempfile.mkdtemp(prefix="first_view_")) / "store.duckdb")
    ids = {}
    for side in ("before", "after"):
        size = getattr(args, side)
        started = time.perf_counter()
        ids[side] = _ingest(db, bench_ingest.generate(size), f"{side}-{size}")
        print(f"ingest + analysis of {size} ({side}): {time.perf_counter() - started:.1f} s", file=sys.stderr)
    print(f"| page | read | s ({args.after}; Compare: {args.before} -> {args.after}) |")
    print("| --- | --- | --- |")
    for page in PAGES:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--child", db, ids["before"], ids["after"], page],
                              capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        wall = time.perf_counter() - started
        rows = json.loads(done.stdout.strip().splitlines()[-1])
        for label, seconds in rows:
            print(f"| {page} | {label} | {seconds:.2f} |")
        print(f"| {page} | **all reads** | **{sum(s for _, s in rows):.2f}** (process {wall:.1f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
