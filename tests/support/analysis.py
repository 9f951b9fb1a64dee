"""Helpers shared by the analysis tests: load trace files into a throwaway store, ready to query."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from analyzers.analysis.context import build_context
from analyzers.ingest import ingest_paths
from analyzers.sql.engine import ensure_loaded, run_cache
from analyzers.store.database import connect
from tests.support.paths import REPO_ROOT, SHARED_TRACES


def sample_run_paths() -> list[Path]:
    """The first input of every sample run in sample_traces/manifest.json."""
    samples = REPO_ROOT / "sample_traces"
    manifest = json.loads((samples / "manifest.json").read_text(encoding="utf-8"))
    return [samples / entry["paths"][0] for entry in manifest]


def shared_trace_names() -> list[str]:
    """The real traces in ../shared/traces (single files, and the nccl2rank folder); [] without it."""
    names = sorted(p.name for p in SHARED_TRACES.glob("*.json.gz")) if SHARED_TRACES.is_dir() else []
    return names + (["nccl2rank"] if (SHARED_TRACES / "nccl2rank").is_dir() else [])


# The sweeps over every sample run and real trace (tests/test_cluster.py's layouts,
# tests/test_per_rank_passes.py's passes) run on these by default: together they hold every finding
# kind, note and event kind the whole sweep meets (1-4 ranks, a folder of ranks, GPU and CPU-only,
# ROCm, CUDA graphs, no ProfilerStep, a partial job), at a third of its time.
# TRACEDOCTOR_FULL_SWEEP=1 runs the sweeps on all of them (README.md, "Tests").
FULL_SWEEP_ENV = "TRACEDOCTOR_FULL_SWEEP"
SWEEP_SAMPLES = (
    "synthetic_all",                # 4 ranks: comm_exposed, dataloader_stall, h2d_stall, host_sync, rank_imbalance
    "gpu_allocator_tuning_before",  # real CUDA: fp32_matmul, runtime_stall, driver calls
    "gpu_cuda_graph_after",         # real CUDA graph replay; a trace that begins inside a step
    "gpu_tf32_matmul_before",       # the what-if replay misses a measured step (its note); memsets
    "cpu_balanced_sampler_before",  # 2 CPU ranks over gloo: comm_exposed, collectives reached apart, no GPU
)
SWEEP_SHARED = (
    "alexnet_single_gpu.json.gz",   # no ProfilerStep (inferred steps), inference only, cudaDeviceSynchronize
    "cpu_only_rank34.json.gz",      # rank 34 alone of 300 ranks
    "rocm_mi250_minitoy.json.gz",   # ROCm/HIP: h2d_stall, launch_gap, runtime_stall
    "nccl2rank",                    # a folder of 2 real NCCL ranks of a 128-rank job
)


def full_sweep() -> bool:
    """Whether the sweeps run on every sample run and real trace ($TRACEDOCTOR_FULL_SWEEP=1)."""
    return os.environ.get(FULL_SWEEP_ENV, "") not in ("", "0")


def sweep_sample_paths() -> list[Path]:
    """sample_run_paths(), or those of SWEEP_SAMPLES unless full_sweep()."""
    return [p for p in sample_run_paths() if full_sweep() or p.name in SWEEP_SAMPLES]


def sweep_shared_trace_names() -> list[str]:
    """shared_trace_names(), or those of SWEEP_SHARED unless full_sweep()."""
    return [n for n in shared_trace_names() if full_sweep() or n in SWEEP_SHARED]


# Folders of ../shared/traces whose files are each a run of their own (HTA's critical-path test
# data, TraceLens's modern traces); nccl2rank is one 2-rank run; memory/ holds no Kineto traces.
SHARED_FOLDERS_OF_RUNS = ("critical_path", "modern")


def shared_trace_runs() -> list[list[Path]]:
    """Every real trace in ../shared/traces as the inputs of one run each; [] without it."""
    if not SHARED_TRACES.is_dir():
        return []
    runs = [[p] for p in sorted(SHARED_TRACES.glob("*.json.gz"))]
    if (SHARED_TRACES / "nccl2rank").is_dir():
        runs.append([SHARED_TRACES / "nccl2rank"])
    for folder in SHARED_FOLDERS_OF_RUNS:
        runs += [[p] for p in sorted((SHARED_TRACES / folder).glob("*.json.gz"))]
    return runs


def ingest_clean(paths, store=None):
    """Ingest the files as one run into `store` (a test's run_store), else a new in-memory store;
    they must all load without error."""
    con = connect(":memory:") if store is None else store
    result = ingest_paths(con, [str(p) for p in paths])
    assert result.run_id and not result.errors
    ensure_loaded(con)
    return con, result.run_id


def by_kind(findings):
    return {f.kind: f for f in findings}


def run_analysis(module, con, run_id, **thresholds):
    """One analysis module's findings, with the framework's context (thresholds overridable)."""
    return find_in_run_cache(module, con, run_id, build_context(con, run_id, thresholds or None))


def find_in_run_cache(module, con, run_id, ctx):
    """module.find as the pipeline calls it: inside the run's cached views (engine.run_cache), which
    the product always has; outside it DuckDB plans every macro the kind's SQL nests afresh (a
    6-step rank_imbalance query: 7-9 s instead of 0.1 s)."""
    with run_cache(con, run_id, ctx.thresholds):
        return module.find(con, run_id, ctx)


EVENT_COLUMNS = ("run_id", "rank", "kind", "cat", "ph", "name", "ts_ns", "dur_ns", "device", "stream", "correlation",
                 "external_id", "bytes", "args")


def hand_written_store(rows, run_id="syn", name=None, file_name=None):
    """An in-memory store holding one single-rank run made of hand-written event rows (dicts
    keyed by EVENT_COLUMNS; missing keys are NULL), macros loaded."""
    con = ensure_loaded(connect(":memory:"))
    con.execute("INSERT INTO runs (run_id, name, created_at, content_hash, world_size) VALUES (?, ?, now(), 'x', 1)",
                [run_id, name or run_id])
    con.execute("INSERT INTO ranks (run_id, rank, file_name, file_hash) VALUES (?, 0, ?, 'x')",
                [run_id, file_name or f"{run_id}.json"])
    con.executemany(f"INSERT INTO events ({', '.join(EVENT_COLUMNS)}) VALUES ({', '.join('?' * len(EVENT_COLUMNS))})",
                    [[r.get(c) for c in EVENT_COLUMNS] for r in rows])
    return con


def split_trace_by_variant(trace_file: Path, out_dir: Path, variants: tuple[str, ...], mark: str) -> None:
    """Write out_dir/<variant>/<trace_file's name> for a gzipped trace whose steps alternate
    between variants, each step tagged by a record_function named `mark` + variant: the trace with
    only the events inside that variant's ProfilerSteps (plus the metadata events every trace keeps)."""
    trace = json.loads(gzip.decompress(trace_file.read_bytes()))
    events = trace["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    marks = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith(mark)]
    windows: dict[str, list[tuple[float, float]]] = {variant: [] for variant in variants}
    for s in steps:
        inside = {m["name"][len(mark):] for m in marks if s["ts"] <= m["ts"] <= s["ts"] + s["dur"]}
        assert len(inside) == 1, (s["name"], inside)
        windows[inside.pop()].append((s["ts"], s["ts"] + s["dur"]))
    for variant, spans in windows.items():
        kept = [e for e in events if e.get("ph") == "M"
                or ("ts" in e and any(a <= e["ts"] <= b for a, b in spans))]
        target = out_dir / variant / trace_file.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(gzip.compress(json.dumps({**trace, "traceEvents": kept}).encode()))


def assert_report_costs_within_the_step(report: dict) -> None:
    """A report (analyzers.api) whose costs fit its step: no finding costs more than 100% of the
    step, and the root causes (findings no other finding causes) add up to at most the mean step."""
    findings = report["findings"]
    assert [f["cost_pct"] for f in findings if f["cost_pct"] > 100.0] == [], findings
    steps = [r["step_time_ms"] for r in report["ranks"] if r.get("step_time_ms")]
    if steps:
        root_ms = sum(f["cost_ms_per_step"] for f in findings if not f["caused_by"])
        assert root_ms <= max(steps) * 1.001, (root_ms, steps, [(f["kind"], f["cost_ms_per_step"]) for f in findings])
