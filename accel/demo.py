"""`python -m accel.demo FIX_ID --out DIR [--device cuda|cpu] [--steps N] [--json]`

Runs a fix's demo (a small workload profiled before and after the fix), runs our analyzers on
both traces, and prints one table: step time before/after, speedup, and the cost of the finding
kind the fix addresses before/after. With --json the last stdout line is one JSON object:
{"fix","device","step_ms_before","step_ms_after","speedup","finding_kind","cost_pct_before",
 "cost_pct_after","skipped"}.

`python -m accel.demo --list [--format json]` lists the fixes.

Cost of a kind = the analyzers' run_kind_costs worst_rank_pct: the sum of cost_pct over that
kind's findings on each rank, the worst rank's (for single-rank demos: the plain sum). 0.0 when
the analyzers found none of the kind. None when the analyzers are not available or could not read
the trace, and when they found nothing in a trace without GPU activity (a CPU run cannot show
GPU-time costs: unknown, not 0).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from accel import registry
from accel.demos import skip


def missing_need(fix: registry.Fix, device: str) -> str | None:
    """The plain reason this machine (or the chosen device) lacks what the fix needs, else None."""
    needs = set(fix.needs)
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            return f"--device cuda was chosen; this machine has no CUDA GPU (torch {torch.__version__})"
    if needs & {"cuda", "multi_gpu"}:
        import torch
        if not torch.cuda.is_available():
            return f"{fix.id} needs a CUDA GPU; this machine has none (torch {torch.__version__})"
        if device != "cuda":
            return f"{fix.id} needs a CUDA GPU; --device {device} was chosen"
        if "multi_gpu" in needs and torch.cuda.device_count() < 2:
            return f"{fix.id} needs 2 or more GPUs; this machine has {torch.cuda.device_count()}"
    if "triton" in needs and importlib.util.find_spec("triton") is None:
        return f"{fix.id} needs Triton, which is not installed here"
    return None


def cost_pct_of_kind(kind_costs: dict[str, dict[str, Any]] | None, kind: str | None) -> float | None:
    """`kind`'s worst_rank_pct in the analyzers' run_kind_costs (by kind); 0.0 when they found none,
    None when there was no analysis."""
    if kind_costs is None or kind is None:
        return None
    return (kind_costs.get(kind) or {}).get("worst_rank_pct") or 0.0


def has_gpu_activity(report: dict[str, Any] | None) -> bool:
    """True when some rank of the report has GPU activity (its idle/compute split is known)."""
    return any(r.get("idle_pct") is not None or r.get("compute_pct") is not None
               for r in (report or {}).get("ranks") or [])


def whatif_of_side(report: dict[str, Any] | None, side: str, kind: str | None,
                   fix_id: str | None = None) -> dict[str, Any]:
    """The traced step of one side (the profiled step, which the what-if replays) and, before the
    fix, the what-if's predicted step after it: the prediction is checked against the after
    trace's traced step (both under the profiler), and its speedup against the timed one. A
    prediction counts only where its model stands for this demo's fix (whatif.fix_ids): the
    launch_gap model captures the whole step in CUDA graphs, which a fused optimizer does not."""
    run_whatif = ((report or {}).get("run") or {}).get("whatif") or {}
    out: dict[str, Any] = {f"traced_step_ms_{side}": run_whatif.get("measured_step_ms")}
    if side == "before":
        whatifs = [f.get("whatif") or {} for f in (report or {}).get("findings") or []
                   if f.get("kind") == kind and not f.get("caused_by")]
        fitting = [w for w in whatifs if fix_id is None or fix_id in (w.get("fix_ids") or [])]
        predicted = [w.get("step_ms_after") for w in fitting if isinstance(w.get("step_ms_after"), (int, float))]
        out["whatif_step_ms_after"] = min(predicted) if predicted else None
        others = sorted({i for w in whatifs if w not in fitting for i in w.get("fix_ids") or []})
        if not predicted and others:
            out["whatif_models_other_fixes"] = (f"the {kind} what-if models {', '.join(others)}, not {fix_id}: "
                                                "no prediction to check")
    return out


def analyze_trace(path: Path | None) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]] | None, str | None]:
    """Our analyzers' report for one trace (file or directory of rank files) and what each finding
    kind costs it (run_kind_costs, by kind), or (None, None, why)."""
    if path is None:
        return None, None, "no trace written"
    try:
        from analyzers.api import analyze_paths_with_kind_costs
    except ImportError as exc:
        return None, None, f"analyzers not available ({exc})"
    try:
        report, kind_costs = analyze_paths_with_kind_costs([str(path)])
    except Exception as exc:  # the demo's figures stay useful even if analysis fails
        return None, None, f"analysis of {path} failed: {type(exc).__name__}: {exc}"
    if not report.get("run"):
        problems = "; ".join(f"{e.get('file')}: {e.get('error')}" for e in report.get("errors") or [])
        return None, None, f"the analyzers could not load {path}: {problems or 'no reason given'}"
    return report, kind_costs, None


def run_demo(fix_id: str, out_dir: Path, device: str | None = None,
             steps: int | None = None) -> dict[str, Any]:
    """Run one demo end to end and return the result dict (the JSON line's fields and more)."""
    fix = registry.get(fix_id)
    from accel.profiling import resolve_device
    device = resolve_device(device)
    reason = missing_need(fix, device)
    if reason is not None:
        result = skip(fix.id, device, reason, fix.addresses[0])
    else:
        try:
            module = importlib.import_module(fix.demo_module)
        except ImportError as exc:
            result = skip(fix.id, device, f"demo module {fix.demo_module} is not available ({exc})",
                          fix.addresses[0])
        else:
            out_dir.mkdir(parents=True, exist_ok=True)
            steps = steps if steps is not None else getattr(module, "DEFAULT_STEPS", 20)
            try:
                result = module.run(out_dir, device, steps)
            except Exception as exc:  # e.g. out of GPU memory: say so in one line, exit 1
                result = skip(fix.id, device, f"the demo failed: {type(exc).__name__}: {exc}",
                              fix.addresses[0])
                result.checks["failed"] = True

    data = result.to_dict()
    data["cost_pct_before"] = data["cost_pct_after"] = None
    data["analysis_notes"] = []
    if result.skipped is None:
        for side, trace in (("before", result.trace_before), ("after", result.trace_after)):
            report, kind_costs, problem = analyze_trace(trace)
            data.update(whatif_of_side(report, side, result.finding_kind, result.fix))
            cost = cost_pct_of_kind(kind_costs, result.finding_kind)
            if cost == 0.0 and not has_gpu_activity(report) and not _measured_without_gpu(result.finding_kind):
                # Nothing found where nothing GPU-side could be measured: unknown, not zero.
                cost = None
                problem = (f"{side}: no GPU activity in the trace, so the analyzers cannot cost "
                           f"{result.finding_kind} here")
            data[f"cost_pct_{side}"] = cost
            if problem:
                data["analysis_notes"].append(problem)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "result.json").write_text(json.dumps(data, indent=2, default=str))
    return data


def _measured_without_gpu(kind: str) -> bool:
    from analyzers.analysis.kinds import kinds_measured_without_gpu
    return kind in kinds_measured_without_gpu()


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.2f}{unit}"
    return f"{value}{unit}"


def render_table(data: dict[str, Any]) -> str:
    if data.get("skipped"):
        return f"{data['fix']}: skipped: {data['skipped']}"
    kind = data.get("finding_kind")
    rows = [
        ("", "before", "after"),
        ("step time (median, ms)", _fmt(data["step_ms_before"]), _fmt(data["step_ms_after"])),
        (f"{kind} cost (% of step)", _fmt(data["cost_pct_before"]), _fmt(data["cost_pct_after"])),
    ]
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{data['fix']} on {data['device']}"]
    lines += ["  ".join(cell.ljust(width[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.append(f"speedup: {_fmt(data.get('speedup'), 'x')}")
    predicted, traced_before, traced_after = (data.get(k) for k in (
        "whatif_step_ms_after", "traced_step_ms_before", "traced_step_ms_after"))
    if predicted and traced_before and traced_after:
        lines.append(f"what-if (profiled steps): {traced_before:.2f} ms before, predicted {predicted:.2f} ms after, "
                     f"traced {traced_after:.2f} ms after ({100 * (predicted - traced_after) / traced_after:+.1f}%); "
                     f"predicted speedup {traced_before / predicted:.2f}x")
    for name, value in (data.get("checks") or {}).items():
        lines.append(f"check {name}: {value}")
    lines += list(data.get("notes") or []) + list(data.get("analysis_notes") or [])
    lines.append(f"traces: {data.get('trace_before')}  {data.get('trace_after')}")
    return "\n".join(lines)


JSON_KEYS = ("fix", "device", "step_ms_before", "step_ms_after", "speedup", "finding_kind",
             "cost_pct_before", "cost_pct_after", "skipped")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m accel.demo", description=__doc__.split("\n\n")[1])
    parser.add_argument("fix_id", nargs="?", help="fix id (see --list)")
    parser.add_argument("--out", type=Path, help="directory for before/after traces and result.json")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None,
                        help="default: cuda when available, else cpu")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default per demo)")
    parser.add_argument("--json", action="store_true", help="last stdout line: the result as JSON")
    parser.add_argument("--list", action="store_true", help="list the fixes")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parser.parse_args(argv)

    if args.list:
        fixes = registry.list_fixes()
        if args.format == "json":
            print(json.dumps(fixes))
        else:
            for fix in fixes:
                print(f"{fix['id']:<26} {', '.join(fix['addresses']):<40} needs: "
                      f"{', '.join(fix['needs']) or '-'}")
        return 0
    if not args.fix_id or args.fix_id not in registry.FIXES:
        parser.error(f"give a fix id, one of: {', '.join(registry.FIXES)}")
    if args.out is None:
        parser.error("--out DIR is required")
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be at least 1")

    data = run_demo(args.fix_id, args.out, args.device, args.steps)
    print(render_table(data))
    if args.json:
        print(json.dumps({key: data.get(key) for key in JSON_KEYS}))
    return 1 if data.get("checks", {}).get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
