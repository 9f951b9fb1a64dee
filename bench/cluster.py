"""Cluster benchmark: one run's ingest + analyses in this process (events in the store), with its
events as Parquet partitions (in this process), and as per-rank tasks on a local Dask cluster.

    python bench/cluster.py --sizes 8x128mb,64x128mb,8x1gb [--workers 2]

Inputs are bench/ingest.py's generated traces (bench/data/). Each mode runs in a fresh child
process; a sampler thread there reads the RSS of the child and of every process it started (the
Dask scheduler, nanny and worker processes) every 0.1 s: "driver" is the child's own peak,
"tree" the peak of their sum. For the cluster, each phase's tasks are timed inside the task
(RankIngestOutcome.seconds, RankViews.seconds, PassResult.seconds) and the driver's own time is
the wall time less the phases' task maps: planning and the catalogue commit (ingest), the run
facts, the views across ranks, the context and the cross-rank analyses (analyses).
The findings JSON of every mode must be identical (else the script fails).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
import ingest as bench_ingest  # noqa: E402  (bench/ingest.py: the shared input generator)

MODES = ("in-process", "partitioned", "cluster")


class _TimedRunner:
    """Wraps an executor: each map's wall time, and the seconds its tasks report."""

    def __init__(self, runner):
        self.runner, self.maps = runner, []
        self.description = runner.description

    def map(self, fn, tasks, on_done=None):
        started = time.perf_counter()
        results = self.runner.map(fn, tasks, on_done)
        self.maps.append({"fn": fn.__name__, "wall_s": time.perf_counter() - started,
                          "task_s": [getattr(r, "seconds", 0.0) for r in results]})
        return results

    def close(self):
        self.runner.close()


def _sample_rss(stop: threading.Event, peaks: dict) -> None:
    import psutil

    me = psutil.Process()
    while not stop.is_set():
        try:
            own = me.memory_info().rss
            tree = own + sum(c.memory_info().rss for c in me.children(recursive=True))
        except psutil.Error:
            continue
        peaks["driver"] = max(peaks.get("driver", 0), own)
        peaks["tree"] = max(peaks.get("tree", 0), tree)
        stop.wait(0.1)


def _child(mode: str, folder: str, workers: int) -> dict:
    sys.path.insert(0, str(REPO))
    from analyzers.cluster import executor
    from analyzers.execution.pipeline import analyze_run
    from analyzers.read.fixes import computed_finding_contract
    from analyzers.ingest import ingest_paths
    from analyzers.read.report import build_report
    from analyzers.store.database import connect

    peaks: dict = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_rss, args=(stop, peaks), daemon=True)
    sampler.start()
    with tempfile.TemporaryDirectory(dir=str(BENCH / "data")) as tmp:
        con = connect(Path(tmp) / "bench.duckdb")
        root = None if mode == "in-process" else str(Path(tmp) / "events")
        t0 = time.perf_counter()
        with (executor(f"local:{workers}") if mode == "cluster" else _null_runner()) as base:
            runner = _TimedRunner(base) if base is not None else None
            started = time.perf_counter() - t0
            t1 = time.perf_counter()
            res = ingest_paths(con, [folder], events_root=root, runner=runner)
            t2 = time.perf_counter()
            assert res.run_id and not res.errors, res.errors
            analyze_run(con, res.run_id, runner=runner, contract_of=computed_finding_contract)
            t3 = time.perf_counter()
            report = build_report(con, res.run_id)
            t4 = time.perf_counter()
        events = con.execute("SELECT sum(n_events) FROM ranks WHERE run_id = ?", [res.run_id]).fetchone()[0]
        store_mb = os.path.getsize(Path(tmp) / "bench.duckdb") / 1e6
        con.close()
    stop.set()
    sampler.join()
    maps = runner.maps if runner is not None else []
    return {"mode": mode, "ranks": len(report["run"]["ranks"]), "events": events, "start_s": started,
            "ingest_s": t2 - t1, "analyses_s": t3 - t2, "report_s": t4 - t3, "store_mb": store_mb,
            "driver_mib": peaks.get("driver", 0) / 2**20, "tree_mib": peaks.get("tree", 0) / 2**20,
            "maps": maps, "findings": report["findings"], "ranks_json": report["ranks"]}


class _null_runner:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def measure(mode: str, folder: Path, workers: int) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, str(folder), "--workers", str(workers)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _phase(result: dict, fn: str) -> dict | None:
    return next((m for m in result["maps"] if m["fn"] == fn), None)


def table(name: str, results: list[dict]) -> str:
    lines = [f"#### {name}: {results[0]['ranks']} ranks, {results[0]['events']:,} events", "",
             "| mode | start s | ingest s | analyses s | driver peak MiB | all processes peak MiB |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r['mode']} | {r['start_s']:.1f} | {r['ingest_s']:.1f} | {r['analyses_s']:.1f} | "
                     f"{r['driver_mib']:,.0f} | {r['tree_mib']:,.0f} |")
    cluster = next((r for r in results if r["mode"] == "cluster"), None)
    if cluster:
        lines += ["", "| cluster phase | tasks | task s median (min-max) | phase wall s |", "| --- | --- | --- | --- |"]
        for fn in ("ingest_rank", "rank_views", "analyze_rank"):
            m = _phase(cluster, fn)
            if m:
                ts = m["task_s"]
                lines.append(f"| {fn} | {len(ts)} | {statistics.median(ts):.2f} ({min(ts):.2f}-{max(ts):.2f}) | "
                             f"{m['wall_s']:.1f} |")
        ingest_maps = sum(m["wall_s"] for m in cluster["maps"] if m["fn"] == "ingest_rank")
        analysis_maps = sum(m["wall_s"] for m in cluster["maps"] if m["fn"] != "ingest_rank")
        lines += ["", f"Driver alone: {cluster['ingest_s'] - ingest_maps:.1f} s of the ingest (planning, hashing, "
                      f"catalogue), {cluster['analyses_s'] - analysis_maps:.1f} s of the analyses (run facts, views "
                      f"across ranks, context, cross-rank analyses, root causes, storing)."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="8x128mb")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--child", nargs=2, metavar=("MODE", "FOLDER"))
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], args.child[1], args.workers), default=str))
        return
    for name in args.sizes.split(","):
        folder = bench_ingest.generate(name)
        results = [measure(mode, folder, args.workers) for mode in args.modes.split(",")]
        for r in results[1:]:
            assert r["findings"] == results[0]["findings"], f"{r['mode']}: findings differ from {results[0]['mode']}"
            assert r["ranks_json"] == results[0]["ranks_json"], f"{r['mode']}: ranks differ from {results[0]['mode']}"
        print(table(name, results), flush=True)
        print(f"(findings and ranks identical across modes; load average {os.getloadavg()[0]:.1f})\n", flush=True)


if __name__ == "__main__":
    main()
