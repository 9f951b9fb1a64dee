"""Ingest benchmark: TraceDoctor's loader against HTA's, on generated traces of real events.

    python bench/ingest.py                       # generate (once) and run every size, HTA included
    python bench/ingest.py --sizes 100mb --skip-hta
    python bench/ingest.py --sizes 1gb --hta-sizes 100mb     # HTA only where it is affordable

Traces are built in bench/data/ (gitignored) by replicating the events of
../shared/traces/nccl_allreduce_with_sizes.json.gz with shifted timestamps, keeping its head
(schemaVersion, deviceProperties, distributedInfo) and tail (INFO logs, traceName, baseTime).
`*-gz` inputs are those files gzipped (isal level 3; the JSON MB/s column counts inflated bytes).
Each measurement runs in a fresh child process; its peak RSS comes from os.wait4 on that child.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "bench" / "data"
SOURCE = Path(os.environ.get("TRACEDOCTOR_SHARED_TRACES", REPO.parent / "shared" / "traces")) / \
    "nccl_allreduce_with_sizes.json.gz"
SIZES = {  # name: (ranks, bytes per rank)
    "100mb": (1, 100 << 20),
    "1gb": (1, 1 << 30),
    "8x128mb": (8, 128 << 20),
    "64x16mb": (64, 16 << 20),     # a many-rank job: per-file costs show
    "64x128mb": (64, 128 << 20),   # many ranks as cluster tasks (bench/cluster.py)
    "8x1gb": (8, 1 << 30),         # memory must not grow with the ranks (issue: bounded memory)
    # the same events on an epoch clock with decimals ("ts": 1716458676522690.655), as recent
    # PyTorch writes them: float64 cannot hold these to the ns, so they take the text path
    "1gb-epoch": (1, 1 << 30),
    # the 100mb / 1gb / 8x128mb files gzipped (isal level 3), the way traces are usually uploaded
    "100mb-gz": (1, 100 << 20),
    "1gb-gz": (1, 1 << 30),
    "8x128mb-gz": (8, 128 << 20),
}
SHIFT_US = 20_000_000       # each copy of the source events starts 20 s after the previous one
EPOCH_US = 1_712_000_000_000_000   # added to the source's relative clock for the *-epoch inputs


def _split_source() -> tuple[bytes, bytes, bytes]:
    raw = gzip.open(SOURCE).read()
    start = raw.index(b"[", raw.index(b'"traceEvents"'))
    end = raw.rindex(b"]", 0, raw.index(b'"INFO"'))   # the INFO list follows the events here
    return raw[: start + 1], raw[start + 1: end].strip(), raw[end:]


def generate(name: str) -> Path:
    ranks, per_rank = SIZES[name]
    folder = DATA / name
    done = folder / ".complete"
    if done.exists():
        return folder
    if name.endswith("-gz"):
        return _gzipped(generate(name[:-len("-gz")]), folder)
    folder.mkdir(parents=True, exist_ok=True)
    head, body, tail = _split_source()
    ts = re.compile(rb'("ts": )(\d+)')
    copies = max(1, round(per_rank / len(body)))
    for rank in range(ranks):
        # the source is rank 0 of 2: give each copy its own rank and the run's world size
        rank_head = re.sub(rb'("distributedInfo": \{"backend": "nccl", "rank": )0(, "world_size": )2',
                           rb"\g<1>%d\g<2>%d" % (rank, ranks), head, count=1)
        assert rank_head != head or (rank, ranks) == (0, 2), "source head changed: cannot set the rank"
        with open(folder / f"rank{rank}.json", "wb") as out:
            out.write(rank_head + b"\n")
            for k in range(copies):
                offset = k * SHIFT_US + rank * 7 + (EPOCH_US if name.endswith("-epoch") else 0)
                if k:
                    out.write(b",\n")
                out.write(ts.sub(lambda m: m.group(1) + str(int(m.group(2)) + offset).encode(), body))
            out.write(b"\n" + tail)
    done.write_text("ok")
    return folder


def _gzipped(plain: Path, folder: Path) -> Path:
    from isal import igzip
    folder.mkdir(parents=True, exist_ok=True)
    for path in sorted(plain.glob("*.json")):
        with open(path, "rb") as src, igzip.open(folder / (path.name + ".gz"), "wb", compresslevel=3) as out:
            while chunk := src.read(8 << 20):
                out.write(chunk)
    (folder / ".complete").write_text("ok")
    return folder


def json_mb(name: str) -> float:
    """MB of JSON text in an input (for a gzipped one, once inflated)."""
    folder = DATA / (name[:-len("-gz")] if name.endswith("-gz") else name)
    return sum(p.stat().st_size for p in folder.glob("*.json")) / 1e6


def _child(kind: str, folder: str, memory_limit: str | None) -> dict:
    """Runs in the child process: one load, timed from inside (imports excluded)."""
    sys.path.insert(0, str(REPO))
    if kind.startswith("tracedoctor"):
        from analyzers.ingest import ingest_paths
        from analyzers.store.database import connect
        with tempfile.TemporaryDirectory() as tmp:
            con = connect(":memory:" if kind.endswith("memory") else Path(tmp) / "bench.duckdb")
            if memory_limit:
                con.execute(f"SET memory_limit = '{memory_limit}'")
            t0 = time.perf_counter()
            res = ingest_paths(con, [folder])
            seconds = time.perf_counter() - t0
            events = con.execute("SELECT count(*) FROM events").fetchone()[0]
            con.close()
        assert not res.errors, res.errors
        return {"seconds": seconds, "events": events}
    from hta.trace_analysis import TraceAnalysis
    t0 = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=folder)
    seconds = time.perf_counter() - t0
    events = sum(len(analysis.t.get_trace(r)) for r in analysis.t.get_ranks())
    return {"seconds": seconds, "events": events}


def measure(kind: str, folder: Path, memory_limit: str | None) -> dict:
    """Run one load in a fresh child; kind: tracedoctor (file store), tracedoctor-memory, hta."""
    cmd = [sys.executable, __file__, "--child", kind, str(folder)]
    if memory_limit:
        cmd += ["--memory-limit", memory_limit]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall0 = time.perf_counter()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - wall0
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{err[-2000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result.update(peak_rss_mib=usage.ru_maxrss / 1024, cpu_s=usage.ru_utime + usage.ru_stime, process_s=wall)
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=",".join(SIZES), help="comma list of " + ", ".join(SIZES))
    ap.add_argument("--skip-hta", action="store_true", help="do not run HTA at all")
    ap.add_argument("--hta-sizes", default=None, help="run HTA only for these sizes (default: all chosen)")
    ap.add_argument("--memory-limit", default="1GB", help="DuckDB memory_limit of the bench store ('' for default)")
    ap.add_argument("--store", choices=["file", "memory"], default="file",
                    help="where TraceDoctor writes: a DuckDB file (the app's default) or an in-memory store")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child[0], args.child[1], args.memory_limit or None)))
        return
    sizes = [s for s in args.sizes.split(",") if s]
    hta_sizes = set(sizes if args.hta_sizes is None else args.hta_sizes.split(","))
    print(f"# ingest benchmark, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}, memory_limit={args.memory_limit or 'default'}")
    print("| input | loader | seconds | MB/s | events/s | peak RSS MiB | CPU s | speed vs HTA | RSS vs HTA |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in sizes:
        folder = generate(name)
        mb = json_mb(name)
        ours = measure("tracedoctor" if args.store == "file" else "tracedoctor-memory", folder,
                       args.memory_limit or None)
        rows = [(f"TraceDoctor ({args.store} store)", ours)]
        hta = None
        if not args.skip_hta and name in hta_sizes:
            hta = measure("hta", folder, None)
            rows.append(("HTA 0.5.0", hta))
        for loader, r in rows:
            vs = ""
            if hta and loader.startswith("TraceDoctor"):
                vs = f"| {hta['seconds'] / r['seconds']:.0f}x faster | {r['peak_rss_mib'] / hta['peak_rss_mib']:.2f}x "
            else:
                vs = "| | "
            label = f"{mb:.0f} MB" + (f" JSON, {sum(p.stat().st_size for p in folder.glob('*.gz')) / 1e6:.0f} MB gz"
                                      if name.endswith("-gz") else "")
            print(f"| {name} ({label}) | {loader} | {r['seconds']:.2f} | {mb / r['seconds']:.0f} | "
                  f"{r['events'] / r['seconds']:,.0f} | {r['peak_rss_mib']:.0f} | {r['cpu_s']:.1f} {vs}|", flush=True)


if __name__ == "__main__":
    main()
