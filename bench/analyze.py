"""Analysis benchmark: every TraceDoctor analysis (ingest included) against HTA's equivalents.

    python bench/analyze.py                          # 100mb, 1gb, 8x128mb; HTA on 100mb only
    python bench/analyze.py --sizes 100mb
    python bench/analyze.py --sizes 1gb --hta-sizes 1gb   # HTA at 1 GB: ~20 GB RAM, 10+ min here

Inputs are bench/ingest.py's generated traces (bench/data/, built on first use by replicating
the real events of ../shared/traces/nccl_allreduce_with_sizes.json.gz). Each side runs in a fresh
child process (peak RSS from os.wait4):
- TraceDoctor: ingest_paths into a DuckDB file store, then analyze_run (every analysis in
  analyzers/analysis/kinds: launch gaps with causes, host syncs, data loader, H2D copies, rank
  imbalance, exposed communication) and rank_summary (temporal breakdown, comm/comp overlap).
- HTA 0.5.0: TraceAnalysis(trace_dir) parse, then get_temporal_breakdown, get_idle_time_breakdown,
  get_comm_comp_overlap and get_cuda_kernel_launch_stats for every rank (visualize=False).
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


def _child_tracedoctor(folder: str, memory_limit: str | None) -> dict:
    sys.path.insert(0, str(REPO))
    from analyzers.execution.pipeline import analyze_run
    from analyzers.read.fixes import computed_finding_contract
    from analyzers.ingest import ingest_paths
    from analyzers.analysis.metrics import rank_summary
    from analyzers.store.database import connect

    with tempfile.TemporaryDirectory() as tmp:
        con = connect(Path(tmp) / "bench.duckdb")
        if memory_limit:
            con.execute(f"SET memory_limit = '{memory_limit}'")
        t0 = time.perf_counter()
        res = ingest_paths(con, [folder])
        t1, c1 = time.perf_counter(), time.process_time()
        findings = analyze_run(con, res.run_id, contract_of=computed_finding_contract)
        ranks = rank_summary(con, res.run_id)
        t2, c2 = time.perf_counter(), time.process_time()
        events = con.execute("SELECT count(*) FROM events").fetchone()[0]
        con.close()
    assert not res.errors, res.errors
    return {"load_s": t1 - t0, "analyze_s": t2 - t1, "analyze_cpu_s": c2 - c1, "events": events, "findings": len(findings),
            "idle_pct_r0": ranks[0]["idle_pct"]}


def _child_hta(folder: str) -> dict:
    import logging
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    t0 = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=folder, include_last_profiler_step=True)
    t1, c1 = time.perf_counter(), time.process_time()
    ranks = sorted(analysis.t.get_ranks())
    temporal = analysis.get_temporal_breakdown(visualize=False)
    analysis.get_idle_time_breakdown(ranks=ranks, visualize=False)
    analysis.get_comm_comp_overlap(visualize=False)
    analysis.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
    t2, c2 = time.perf_counter(), time.process_time()
    events = sum(len(analysis.t.get_trace(r)) for r in ranks)
    return {"load_s": t1 - t0, "analyze_s": t2 - t1, "analyze_cpu_s": c2 - c1, "events": events,
            "idle_pct_r0": float(temporal.sort_values("rank")["idle_time_pctg"].iloc[0])}


def measure(kind: str, folder: Path, memory_limit: str | None) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, str(folder)]
    if memory_limit:
        cmd += ["--memory-limit", memory_limit]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    out, err = proc.stdout.read(), proc.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{kind} failed:\n{err[-2000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result.update(peak_rss_mib=usage.ru_maxrss / 1024, cpu_s=usage.ru_utime + usage.ru_stime)
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100mb,1gb,8x128mb", help="comma list of " + ", ".join(bench_ingest.SIZES))
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--hta-sizes", default="100mb",
                    help="run HTA only for these sizes (default 100mb: at 1 GB HTA needs ~20 GB of RAM and "
                         "10+ minutes on this VM, see ## Ingest)")
    ap.add_argument("--memory-limit", default="1GB", help="DuckDB memory_limit of the bench store ('' for default)")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, folder = args.child
        out = _child_tracedoctor(folder, args.memory_limit or None) if kind == "tracedoctor" else _child_hta(folder)
        print(json.dumps(out))
        return
    print(f"# analysis benchmark, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}, memory_limit={args.memory_limit or 'default'}")
    print("| input | tool | load s | analyses s | total s | analyses CPU s | CPU s | events | peak RSS MiB | idle % r0 | total vs HTA | analyses vs HTA |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in [s for s in args.sizes.split(",") if s]:
        folder = bench_ingest.generate(name)
        mb = sum(p.stat().st_size for p in folder.glob("*.json")) / 1e6
        ours = measure("tracedoctor", folder, args.memory_limit or None)
        run_hta = not args.skip_hta and name in args.hta_sizes.split(",")
        hta = measure("hta", folder, None) if run_hta else None
        for tool, r in [("TraceDoctor", ours)] + ([("HTA 0.5.0", hta)] if hta else []):
            total = r["load_s"] + r["analyze_s"]
            vs = "| |"
            if hta and tool == "TraceDoctor":
                vs = (f"| {(hta['load_s'] + hta['analyze_s']) / total:.0f}x faster "
                      f"| {hta['analyze_s'] / r['analyze_s']:.1f}x |")
            print(f"| {name} ({mb:.0f} MB) | {tool} | {r['load_s']:.2f} | {r['analyze_s']:.2f} | {total:.2f} | {r['analyze_cpu_s']:.1f} | {r['cpu_s']:.1f} | "
                  f"{r['events']:,} | {r['peak_rss_mib']:.0f} | {r['idle_pct_r0']:.2f} {vs}", flush=True)


if __name__ == "__main__":
    main()
