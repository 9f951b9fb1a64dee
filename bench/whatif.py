"""What-if replay checks: the replay's error on every sample run and shared trace, and predicted vs
measured savings on measured before/after pairs.

    python bench/whatif.py [--demos DIR]    # --demos: also run the CPU accel demos into DIR

Prints two Markdown tables (bench/README.md "What-if replay" keeps the figures). Pairs: the
bundled CPU demo traces (sample_traces/cpu_*_before/after), ../shared/traces resnet50_num_workers_0
vs _4, and with --demos every accel demo that runs on CPU (python -m accel.demo FIX --out DIR).
For a pair, the finding the fix addresses is read from the before run; predicted saving = measured
before-step - its whatif.step_ms_after; naive = the finding's cost taken as the saving.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzers.api import analyze_paths  # noqa: E402

SHARED = ROOT.parent / "shared" / "traces"
SAMPLES = ROOT / "sample_traces"

REPLAY_INPUTS = [
    *sorted(SAMPLES.glob("gpu_*")),
    *(SAMPLES / name for name in ("synthetic_all", "synthetic_control", "synthetic_allocator_churn",
                                  "synthetic_fp32_matmul", "cpu_dataloader_tuning_before",
                                  "cpu_dataloader_tuning_after", "cpu_balanced_sampler_before",
                                  "cpu_balanced_sampler_after")),
    *(SHARED / name for name in ("resnet50_num_workers_0.json.gz", "resnet50_num_workers_4.json.gz",
                                 "alexnet_single_gpu.json.gz", "nccl2rank", "nccl_allreduce_with_sizes.json.gz",
                                 "rocm_mi250_minitoy.json.gz", "triton_single_kernel.json.gz",
                                 "cpu_only_rank34.json.gz", "no_distributed_info_cpu_ops.json.gz")),
    *sorted((SHARED / "critical_path").glob("*input*.json.gz")),
    *sorted((SHARED / "critical_path").glob("cuda_event_sync*.json.gz")),
]

# (label, before, after, the finding kind the fix addresses)
PAIRS = [
    ("resnet50 num_workers 0 -> 4 (V100, shared)", SHARED / "resnet50_num_workers_0.json.gz",
     SHARED / "resnet50_num_workers_4.json.gz", "dataloader_stall"),
    *((f"H100 demo {fix} (bundled)", SAMPLES / f"gpu_{fix}_before", SAMPLES / f"gpu_{fix}_after", kind)
      for fix, kind in (("cuda_graph", "launch_gap"), ("tf32_matmul", "fp32_matmul"), ("cuda_prefetcher", "h2d_stall"),
                        ("allocator_tuning", "runtime_stall"), ("dataloader_tuning", "dataloader_stall"))),
    ("CPU demo dataloader_tuning (bundled)", SAMPLES / "cpu_dataloader_tuning_before",
     SAMPLES / "cpu_dataloader_tuning_after", "dataloader_stall"),
    ("CPU demo balanced_sampler, 2 gloo ranks (bundled)", SAMPLES / "cpu_balanced_sampler_before",
     SAMPLES / "cpu_balanced_sampler_after", "rank_imbalance"),
]
CPU_DEMOS = {"dataloader_tuning": "dataloader_stall", "balanced_sampler": "rank_imbalance",
             "no_sync_accumulation": "comm_exposed", "ddp_bucket_tuning": "comm_exposed",
             "comm_compression": "comm_exposed", "fused_optimizer": "launch_gap",
             "preprocess_in_workers": "untraced_host_time"}


def analyse(path: Path, db: str) -> dict:
    return analyze_paths([str(path)], db_path=db)


def replay_rows(db: str) -> list[dict]:
    rows = []
    for path in REPLAY_INPUTS:
        if not path.exists():
            continue
        started = time.perf_counter()
        report = analyse(path, db)
        seconds = time.perf_counter() - started
        whatif = (report.get("run") or {}).get("whatif") or {}
        rows.append({"trace": path.name, "measured": whatif.get("measured_step_ms"),
                     "replayed": whatif.get("replayed_step_ms"), "error_pct": whatif.get("replay_error_pct"),
                     "steps": _step_errors(db, report), "analyse_s": seconds})
    return rows


def _step_errors(db: str, report: dict) -> list[float]:
    import duckdb

    from analyzers.analysis.whatif import stored_whatif

    run = report.get("run") or {}
    with duckdb.connect(db, read_only=True) as con:
        doc = stored_whatif(con, run.get("run_id")) or {}
    return [abs(s["error_pct"]) for s in doc.get("steps") or []]


def pair_row(label: str, before: Path, after: Path, kind: str, db: str) -> dict | None:
    if not before.exists() or not after.exists():
        return None
    b, a = analyse(before, db), analyse(after, db)
    bw, aw = (b["run"] or {}).get("whatif") or {}, (a["run"] or {}).get("whatif") or {}
    finding = next((f for f in b["findings"] if f["kind"] == kind), None)
    measured_before, measured_after = bw.get("measured_step_ms"), aw.get("measured_step_ms")
    if finding is None or measured_before is None or measured_after is None:
        return {"pair": label, "note": f"no {kind} finding in the before run" if finding is None else "no steps"}
    saving = measured_before - measured_after
    predicted_after = (finding.get("whatif") or {}).get("step_ms_after")
    predicted = None if predicted_after is None else measured_before - predicted_after
    return {"pair": label, "kind": kind, "before": measured_before, "after": measured_after, "saving": saving,
            "predicted_saving": predicted, "predicted_after": predicted_after,
            "naive_saving": finding["cost_ms_per_step"]}


def _err(predicted: float | None, measured: float) -> str:
    if predicted is None:
        return "no prediction"
    if abs(measured) < 1e-9:
        return f"{predicted - measured:+.2f} ms"
    return f"{100 * (predicted - measured) / abs(measured):+.0f}% ({predicted - measured:+.2f} ms)"


def speed(size: str) -> None:
    """Time the what-if on bench/ingest.py's generated trace of `size` (1 rank of replicated real
    events), in this process, on a store file: as analyze_run runs it (its graph built while the
    analysis's views are cached, then the replays) and on its own (analyse_whatif on the stored run)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import ingest as bench_ingest

    from analyzers.execution import pipeline as findings_module
    from analyzers.ingest import ingest_paths
    from analyzers.store.database import connect
    from analyzers.analysis.whatif import analyse_whatif, whatif_graph
    from analyzers.read.fixes import computed_finding_contract

    folder = bench_ingest.generate(size)
    with tempfile.TemporaryDirectory() as tmp:
        con = connect(str(Path(tmp) / "speed.duckdb"))
        started = time.perf_counter()
        run_id = ingest_paths(con, [str(folder)]).run_id
        ingest_s = time.perf_counter() - started
        built = {}

        def build(cached):
            at = time.perf_counter()
            built["graph"] = whatif_graph(cached, run_id)
            built["s"] = time.perf_counter() - at

        started = time.perf_counter()
        found, _, costs = findings_module.analyze_root_causes(con, run_id, while_cached=build)
        analyse_s = time.perf_counter() - started - built["s"]
        contracts = [computed_finding_contract(f, costs.to_dict()) for f in found]
        started = time.perf_counter()
        result = analyse_whatif(con, run_id, contracts, graph=built["graph"])
        replays_s = time.perf_counter() - started
        started = time.perf_counter()
        alone = analyse_whatif(con, run_id, contracts)
        alone_s = time.perf_counter() - started
        assert alone.run == result.run and alone.findings == result.findings, "the cached graph replays differently"
        n_events = con.execute("SELECT count(*) FROM events WHERE run_id = ?", [run_id]).fetchone()[0]
        con.close()
    print(f"| {size} | {n_events:,} | {ingest_s:.1f} | {analyse_s:.1f} | {built['s']:.2f} | {replays_s:.2f} | "
          f"{built['s'] + replays_s:.2f} | {alone_s:.2f} | {len([v for v in result.findings.values() if v])} | "
          f"{result.run.get('replay_error_pct')} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demos", help="also run the CPU accel demos into this folder and check them")
    parser.add_argument("--speed", help="only time analyze with and without the what-if on bench/ingest.py's "
                                        "generated trace of this size (100mb, 1gb)")
    args = parser.parse_args()
    if args.speed:
        print("| trace | events | ingest s | analyse s (no what-if) | graph s (views cached) | replays s | "
              "what-if s (in analyze) | what-if s (alone) | predictions | replay error % |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for size in args.speed.split(","):
            speed(size)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "whatif.duckdb")
        print("## Replay error (mean step; worst step)\n")
        print("| trace | measured step ms | replayed ms | error | worst step error | analyze s |")
        print("| --- | --- | --- | --- | --- | --- |")
        all_steps = []
        for r in replay_rows(db):
            worst = max(r["steps"], default=None)
            all_steps.extend(r["steps"])
            fmt = (lambda v: "–" if v is None else f"{v:.2f}")
            error = "–" if r["error_pct"] is None else f"{r['error_pct']:+.2f}%"
            worst_text = "–" if worst is None else f"{worst:.2f}%"
            print(f"| {r['trace']} | {fmt(r['measured'])} | {fmt(r['replayed'])} | {error} | {worst_text} | "
                  f"{r['analyse_s']:.1f} |")
        if all_steps:
            print(f"\nEvery step: median |error| {statistics.median(all_steps):.2f}%, worst {max(all_steps):.2f}% "
                  f"({len(all_steps)} steps)\n")
        critical = SHARED / "critical_path"
        if (critical / "end_to_end__simple_add__input__trace.json.gz").exists():
            import duckdb

            from analyzers.sql.engine import ensure_loaded
            from analyzers.analysis.whatif.hta_check import compare, hta_critical, our_critical

            report = analyse(critical / "end_to_end__simple_add__input__trace.json.gz", db)
            with duckdb.connect(db, read_only=True) as con:
                ensure_loaded(con)
                rows = compare(our_critical(con, report["run"]["run_id"]),
                               hta_critical(critical / "end_to_end__simple_add__output__overlaid_critical_path_trace.json.gz"))
            print("## Critical path against HTA's (critical_path/end_to_end__simple_add)\n")
            print("| events | on HTA's path | on ours | on both | recall | precision |")
            print("| --- | --- | --- | --- | --- | --- |")
            for kind, row in rows.items():
                print(f"| {kind} | {row['hta']} | {row['ours']} | {row['both']} | {row['recall']} | {row['precision']} |")
            print()
        pairs = list(PAIRS)
        if args.demos:
            out = Path(args.demos)
            for fix, kind in CPU_DEMOS.items():
                target = out / fix
                subprocess.run([sys.executable, "-m", "accel.demo", fix, "--out", str(target), "--device", "cpu"],
                               cwd=ROOT, check=False, capture_output=True)
                befores = sorted(target.glob("*before*"))
                afters = sorted(target.glob("*after*"))
                if befores and afters:
                    pairs.append((f"CPU demo {fix} (run now)", befores[0], afters[0], kind))
        print("## Predicted vs measured saving (ms per step)\n")
        print("| pair | finding | before | after | measured saving | predicted saving (error) | predicted after "
              "(error) | naive cost = saving (error) |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for label, before, after, kind in pairs:
            row = pair_row(label, before, after, kind, db)
            if row is None:
                continue
            if "note" in row:
                print(f"| {label} | {kind} | | | | {row['note']} | | |")
                continue
            after_err = ("–" if row["predicted_after"] is None
                         else f"{row['predicted_after']:.2f} ({100 * (row['predicted_after'] - row['after']) / row['after']:+.1f}%)")
            print(f"| {label} | {kind} | {row['before']:.2f} | {row['after']:.2f} | {row['saving']:.2f} | "
                  f"{'–' if row['predicted_saving'] is None else format(row['predicted_saving'], '.2f')} "
                  f"({_err(row['predicted_saving'], row['saving'])}) | {after_err} | "
                  f"{row['naive_saving']:.2f} ({_err(row['naive_saving'], row['saving'])}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
