"""Every single-GPU demo in one command, for the few minutes a GPU machine is at hand.

    python -m accel.gpu_session --out DIR [--only ID,ID] [--timeout S] [--samples] [--fixtures]

Runs `python -m accel.demo ID --device cuda --json` for each fix that can run on one GPU (every
fix but the multi-rank ones: NCCL refuses two ranks on one GPU, and their gloo runs are the CPU
figures already in BENCHMARKS.md), each in its own process under a time limit, and writes:
- DIR/session.json: the device (name, torch, CUDA, Triton), the date, each demo's result line,
  its result.json (checks, notes) and its wall time;
- DIR/benchmarks_rows.md: the results as rows of accel/BENCHMARKS.md's "Measured" tables
  (fix | workload | device | date | before | after | speedup | finding cost | correctness), to
  paste under the GPU heading; a demo that skipped or failed gets a row saying so, never numbers;
- with --samples: each demo's before/after traces as sample runs (sample_traces/gpu_<id>_before/
  rank-0.json.gz, ...), listed first in sample_traces/manifest.json with the device named, so the
  dashboard opens on real GPU traces;
- with --fixtures, first: DIR/fixtures/ from `python -m accel.gpu_fixtures` (a memory-profiled
  training trace, its allocator snapshot, an allocator snapshot taken at an OOM error).

Without a CUDA GPU it prints the plan and exits 2 without running anything. The analyzers
(duckdb, isal, orjson, blake3) must be importable on the GPU machine for the finding costs; where
packages cannot be fetched, carry wheels: `python -m accel.gpu_session --fetch-wheels .wheels`
here (Python 3.12 manylinux wheels, the GPU image's Python), then on the GPU machine
`pip install --no-index --find-links .wheels duckdb isal orjson blake3`.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from accel import registry
from accel.benchmarks import BENCHMARKS, table_rows

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
SINGLE_GPU_EXCLUDED_NEEDS = {"multi_rank", "multi_gpu"}
MAX_SAMPLE_BYTES = 4 << 20      # per trace file: sample_traces stays small enough to ship
WHEELS = ("duckdb==2.0.0", "isal==1.9.1", "orjson", "blake3==1.0.11")


def single_gpu_fixes(only: Sequence[str] | None = None) -> list[str]:
    """Fix ids whose demo runs on one GPU: in registry order, or only these in the order given."""
    ids = [fix.id for fix in registry.FIXES.values() if not SINGLE_GPU_EXCLUDED_NEEDS & set(fix.needs)]
    if only:
        unknown = [i for i in only if i not in registry.FIXES]
        if unknown:
            raise SystemExit(f"unknown fix id(s): {', '.join(unknown)}; see python -m accel.demo --list")
        ids = [i for i in only if i in ids]
    return ids


def device_facts() -> dict[str, Any] | None:
    """Name and versions of the first CUDA device, or None without one."""
    import torch
    if not torch.cuda.is_available():
        return None
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"name": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
            "triton": triton_version, "capability": ".".join(map(str, torch.cuda.get_device_capability(0)))}


def run_demo(fix_id: str, out: Path, timeout_s: float) -> dict[str, Any]:
    """One demo in its own process: its --json result line, result.json, wall time, or why not."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "accel.demo", fix_id, "--out", str(out), "--device", "cuda", "--json"]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"fix": fix_id, "failed": f"timed out after {timeout_s:.0f} s", "wall_s": timeout_s}
    entry: dict[str, Any] = {"fix": fix_id, "wall_s": round(time.perf_counter() - started, 1),
                             "returncode": proc.returncode}
    lines = proc.stdout.strip().splitlines()
    try:
        entry["result"] = json.loads(lines[-1]) if lines else None
    except ValueError:
        entry["result"] = None
    if proc.returncode != 0 or entry["result"] is None:
        entry["failed"] = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        entry["stderr_tail"] = proc.stderr[-2000:]
    details = out / "result.json"
    if details.exists():
        try:
            entry["details"] = json.loads(details.read_text())
        except ValueError:
            pass
    return entry


def workloads(text: str | None = None) -> dict[str, str]:
    """fix id -> the workload cell of BENCHMARKS.md's GPU table (what the demo runs)."""
    text = BENCHMARKS.read_text() if text is None else text
    gpu = text.split("## GPU", 1)[1] if "## GPU" in text else ""
    out: dict[str, str] = {}
    for header, cells in table_rows(gpu):
        if header[:2] == ["fix", "workload"] and len(cells) >= 2:
            out.setdefault(cells[0], cells[1])
    return out


def _fmt(value: Any, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _checks(entry: dict[str, Any]) -> str:
    checks = (entry.get("details") or {}).get("checks") or {}
    return "; ".join(f"{k} {v}" for k, v in checks.items()) or "–"


def benchmark_rows(session: dict[str, Any]) -> list[str]:
    """BENCHMARKS.md rows (Measured-table columns) for the session's demos."""
    device, date = session["device"]["name"], session["date"]
    work = workloads()
    rows = []
    for entry in session["results"]:
        fix_id, result = entry["fix"], entry.get("result") or {}
        if entry.get("failed") or result.get("skipped"):
            why = entry.get("failed") or result.get("skipped")
            rows.append(f"| {fix_id} | {work.get(fix_id, '–')} | {device} | {date} | – | – | "
                        f"not measured: {why} | – | – |")
            continue
        speedup = result.get("speedup")
        cost = (f"{result.get('finding_kind')}: {_fmt(result.get('cost_pct_before'), 1)}% → "
                f"{_fmt(result.get('cost_pct_after'), 1)}%")
        details = entry.get("details") or {}
        if details.get("whatif_step_ms_after") is not None:
            cost += (f"; what-if: traced step {_fmt(details.get('traced_step_ms_before'))} ms, predicted after "
                     f"{_fmt(details.get('whatif_step_ms_after'))} ms, traced after "
                     f"{_fmt(details.get('traced_step_ms_after'))} ms")
        rows.append(f"| {fix_id} | {work.get(fix_id, '–')} | {device} | {date} | "
                    f"{_fmt(result.get('step_ms_before'), 3)} | {_fmt(result.get('step_ms_after'), 3)} | "
                    f"{_fmt(speedup)}x | {cost} | {_checks(entry)} |")
    return rows


def add_samples(session: dict[str, Any], out: Path, samples: Path = SAMPLES) -> list[str]:
    """Copy each measured demo's before/after trace into samples/gpu_<id>_<side>/rank-0.json.gz
    and list them first in samples/manifest.json; returns the run names added."""
    manifest_path = samples / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else []
    device, date = session["device"]["name"], session["date"]
    added: list[dict[str, Any]] = []
    for entry in session["results"]:
        result = entry.get("result") or {}
        if entry.get("failed") or result.get("skipped"):
            continue
        for side in ("before", "after"):
            trace = out / entry["fix"] / f"{side}.json.gz"
            if not trace.is_file() or trace.stat().st_size > MAX_SAMPLE_BYTES:
                continue
            folder = f"gpu_{entry['fix']}_{side}"
            (samples / folder).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(trace, samples / folder / "rank-0.json.gz")
            added.append({"name": f"GPU demo: {entry['fix']}, {side} the fix ({device})", "paths": [folder],
                          "label": f"real torch.profiler trace on {device}, {date}, made by python -m "
                                   f"accel.demo {entry['fix']} --device cuda ({side} side)"})
    # an entry naming the same folder is replaced (a later session on another GPU overwrote it)
    folders = {tuple(a["paths"]) for a in added}
    manifest = added + [m for m in manifest if tuple(m.get("paths") or ()) not in folders]
    manifest_path.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    return [a["name"] for a in added]


def fetch_wheels(dest: Path, python_version: str = "3.12") -> int:
    """Download manylinux wheels of the analyzers' compiled dependencies for the GPU image."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", python_version, "--platform", "manylinux2014_x86_64",
           "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux_2_28_x86_64",
           "-d", str(dest), *WHEELS]
    return subprocess.call(cmd)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="directory for the demos' traces and the session files")
    ap.add_argument("--only", default="", help="comma list of fix ids (default: every single-GPU demo)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per demo (default 300)")
    ap.add_argument("--samples", action="store_true", help="add the traces to sample_traces/ and its manifest")
    ap.add_argument("--fixtures", action="store_true",
                    help="first record the memory-profiled trace and allocator snapshots (accel.gpu_fixtures) "
                         "into OUT/fixtures")
    ap.add_argument("--fetch-wheels", type=Path, metavar="DIR", help="download the wheels to carry, then exit")
    args = ap.parse_args(argv)
    if args.fetch_wheels:
        return fetch_wheels(args.fetch_wheels)
    if args.out is None:
        ap.error("--out is required")
    plan = single_gpu_fixes([i for i in args.only.split(",") if i])
    device = device_facts()
    if device is None:
        print("No CUDA GPU here: nothing measured. On a GPU machine this would run: " + ", ".join(plan))
        return 2
    session: dict[str, Any] = {"device": device, "date": dt.date.today().isoformat(), "results": []}
    args.out.mkdir(parents=True, exist_ok=True)
    if args.fixtures:
        started = time.perf_counter()
        try:
            code = subprocess.call([sys.executable, "-m", "accel.gpu_fixtures", "--out",
                                    str(args.out / "fixtures")], cwd=REPO, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            code = f"timed out after {args.timeout:.0f} s"
        session["fixtures"] = {"returncode": code, "wall_s": round(time.perf_counter() - started, 1)}
        print(f"fixtures: rc {code} ({session['fixtures']['wall_s']} s)", flush=True)
    for fix_id in plan:
        entry = run_demo(fix_id, args.out / fix_id, args.timeout)
        session["results"].append(entry)
        result = entry.get("result") or {}
        state = entry.get("failed") or result.get("skipped") or f"{_fmt(result.get('speedup'))}x"
        print(f"{fix_id}: {state} ({entry.get('wall_s')} s)", flush=True)
        (args.out / "session.json").write_text(json.dumps(session, indent=1, default=str))
    rows = benchmark_rows(session)
    (args.out / "benchmarks_rows.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    if args.samples:
        for name in add_samples(session, args.out):
            print("sample run added:", name)
    return 0 if all(not e.get("failed") for e in session["results"]) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
