"""AnalysisContext: what every analysis needs to know about a run (per-rank steps, thresholds,
whether it has GPU activity) and the plain-words caveats about what the analyses could look at.

Cost is one unit everywhere: GPU time lost per step (ns), and that time as a % of the rank's mean
step time (`cost_pct`). Severity follows cost_pct (thresholds.severity: >= 20% high, >= 10%
medium, else low).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import duckdb

from analyzers.analysis.metrics import rank_breakdown_rows
from analyzers.common import thresholds as th
from analyzers.common.contract import clip_strings
from analyzers.common.model import Finding
from analyzers.common.safe_text import SUMMARY_LIMIT, clip


@dataclass(frozen=True)
class RankInfo:
    """What every analysis needs to know about one rank to cost a finding."""
    rank: int
    n_steps: int              # steps (ProfilerStep windows, else inferred iterations; 0 = none)
    steps_divisor: int        # n_steps, or 1 when there are none: totals / this = per step
    mean_step_ns: float | None  # mean step time; the GPU span without steps; None if neither
    has_gpu: bool


@dataclass
class AnalysisContext:
    run_id: str
    thresholds: dict[str, float]
    ranks: dict[int, RankInfo]
    notes: list[str] = field(default_factory=list)
    cache: dict[Any, Any] = field(default_factory=dict)   # query results analyses share
    mean_step_ns: float | None = None   # the run's (metrics/rank_breakdown.sql run_mean_step)
    # what the run does (workload_facts): workload, engine, evidence, job_ranks
    workload: dict[str, Any] = field(default_factory=dict)
    # what its steps are (step_unit_facts): unit ('step', 'decode step', 'iteration', ...), source, ...
    step_unit: dict[str, Any] = field(default_factory=dict)

    @property
    def has_gpu(self) -> bool:
        return any(r.has_gpu for r in self.ranks.values())

    def gpu_ranks(self) -> list[int]:
        return sorted(r.rank for r in self.ranks.values() if r.has_gpu)

    def cost_pct(self, rank: int | None, cost_ns: float) -> float:
        """cost_ns as % of the rank's mean step time (of the run's, run_mean_step, when rank is None)."""
        step = self.ranks[rank].mean_step_ns if rank is not None and rank in self.ranks else self.mean_step_ns
        return 100.0 * cost_ns / step if step else 0.0

    def make(self, kind: str, finding_id: str, *, rank: int | None, cost_ns: float, summary: str,
             metrics: Mapping[str, Any] | None = None, step: int | None = None,
             stream: int | None = None, t_start_ns: int | None = None,
             t_end_ns: int | None = None) -> Finding:
        """A Finding with cost_pct and severity filled in from the shared rules."""
        pct = self.cost_pct(rank, cost_ns)
        unit = self.step_unit.get("unit", "step")
        if unit != "step":      # an inference run's iteration: its texts say what a step is there
            summary = summary.replace(" per step", f" per {unit}")
        return Finding(finding_id=finding_id, kind=kind, severity=th.severity(pct, self.thresholds),
                       rank=rank, step=step, stream=stream, t_start_ns=t_start_ns, t_end_ns=t_end_ns,
                       cost_ns=int(round(cost_ns)), cost_pct=round(pct, 3),
                       # trace names (op, kernel, call names) inside are clipped where they enter
                       summary=clip(summary, SUMMARY_LIMIT), metrics=clip_strings(jsonable(dict(metrics or {}))))


def jsonable(value: Any) -> Any:
    """Metrics must survive json.dumps: numpy/decimal scalars to float, tuples to lists."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def build_context(con: duckdb.DuckDBPyConnection, run_id: str,
                  thresholds: Mapping[str, Any] | None = None) -> AnalysisContext:
    rows = rank_breakdown_rows(con, run_id)
    ranks = {
        row["rank"]: RankInfo(rank=row["rank"], n_steps=row["n_steps"], steps_divisor=row["steps_divisor"],
                              mean_step_ns=row["mean_step_ns"], has_gpu=row["gpu_events"] > 0)
        for row in rows
    }
    mean_step_ns = con.execute("SELECT mean_step_ns FROM run_mean_step(?)", [run_id]).fetchone()[0]
    ctx = AnalysisContext(run_id=run_id, thresholds=th.resolve(thresholds), ranks=ranks, mean_step_ns=mean_step_ns)
    left_out = set()
    if any(not r.has_gpu for r in ranks.values()) and any(r.n_steps for r in ranks.values()):
        # GPU work is counted only when launched inside the rank's steps (HTA's rule), so a
        # rank with GPU work but no steps, in a run whose other ranks have steps, counts none
        left_out = {row[0] for row in con.execute(
            "SELECT DISTINCT rank FROM events WHERE run_id = ? AND kind IN ('kernel', 'memcpy', 'memset')",
            [run_id]).fetchall()}
    # ranks whose steps were inferred from a repeating marker (lib/steps.sql inferred_steps)
    inferred = {rank: InferredSteps(source, marker, count) for rank, source, marker, count in con.execute(
        "SELECT rank, any_value(source), any_value(marker), count(*) FROM steps(?) "
        "WHERE starts_with(source, 'inferred:') GROUP BY rank", [run_id]).fetchall()}
    ctx.notes.extend(run_notes_from_ranks(ranks, left_out, inferred))
    ctx.workload = workload_facts(con, run_id)
    if ctx.workload["workload"] == "inference":
        engine = ENGINE_NAMES.get(ctx.workload["engine"], ctx.workload["engine"])
        ctx.notes.append(f"An inference run{f' under {engine}' if engine else ''} ({ctx.workload['evidence']}): a "
                         "step here is one iteration of its loop (a ProfilerStep: a forward pass, a decode or prefill "
                         "step, an engine step, a denoising pass), not a training step; fixes for training only are "
                         "ruled out.")
    ctx.step_unit = step_unit_facts(con, run_id, ctx.workload)
    if ctx.step_unit.get("note"):
        ctx.notes.append(ctx.step_unit["note"])
    return ctx


# Diffusion pipelines: their recurring forward is a denoising step.
DIFFUSION_ENGINES = {"xdit", "diffusers"}


def step_unit_facts(con: duckdb.DuckDBPyConnection, run_id: str, workload: Mapping[str, Any]) -> dict[str, Any]:
    """What the run's steps are, from lib/steps.sql step_units (its lowest rank with steps; the
    others counted alike or not): {unit, source, marker, count, mean_step_ms, phases, ranks_alike,
    note}. unit is 'step' except on an inference run whose steps are its engine's iterations:
    'decode step' / 'prefill step' (every step's phase), 'engine step' (both phases), 'denoising
    step' (a diffusion pipeline), else 'iteration'. note: the Overview's words, on inference runs."""
    rows = con.execute("SELECT * FROM step_units(?) ORDER BY rank", [run_id]).fetchall()
    inference = workload.get("workload") == "inference"
    if not rows:
        return {"unit": "step", "source": None, "marker": None, "count": 0, "mean_step_ms": None,
                "phases": {}, "ranks_alike": 0,
                "note": "Steps: none (no ProfilerStep#N ranges, and nothing recurs to mark the engine's iterations "
                        "or infer a loop's): costs are per whole trace." if inference else None}
    _, source, marker, count, mean_ns, prefill, decode, mixed = rows[0]
    alike = sum(1 for row in rows if row[1] == source)
    phases = {"prefill": prefill, "decode": decode, "mixed": mixed, "unknown": count - prefill - decode - mixed}
    unit = "step"
    if source.startswith("engine:"):
        unit = ("decode step" if decode == count else "prefill step" if prefill == count
                else "engine step" if prefill or decode or mixed
                else "denoising step" if workload.get("engine") in DIFFUSION_ENGINES else "iteration")
    facts = {"unit": unit, "source": source, "marker": marker, "count": count,
             "mean_step_ms": None if mean_ns is None else round(mean_ns / 1e6, 3),
             "phases": {k: v for k, v in phases.items() if v}, "ranks_alike": alike, "note": None}
    if not inference:
        return facts
    said_phases = ", ".join(f"{n} {phase}" for phase, n in facts["phases"].items())
    where = f"rank {rows[0][0]}" + (f" and {alike - 1} more alike" if alike > 1 else "")
    if source.startswith("engine:"):
        how = ("ranges named as the engine's iteration, e.g. " if source == "engine:step"
               else "the range that recurs through the ProfilerSteps, ")
        facts["note"] = (f"Steps: {unit}s ({how}{clip(marker, 60)!r}; {count} of them on {where}, "
                         f"{mean_ns / 1e6:.2f} ms each on average; phases: {said_phases}). Each runs from one "
                         f"occurrence's start to the next one's; per-step figures are per {unit}, and time "
                         "outside them (set-up, encoders, a VAE) is in no step.")
    else:
        what = "ProfilerStep#N ranges" if source == "profiler_step" else "iterations inferred where the trace repeats"
        facts["note"] = (f"Steps: {what} ({count} on {where}; phases: {said_phases}): no range on the main thread "
                         "recurs more often than the ProfilerSteps and through most of them (an engine's "
                         "execute_model / run_batch / decode ranges, a compiled region, a forward) to mark the "
                         "engine's iterations, so each of these is a step.")
    return facts


# Engines that serve requests (they own batching, CUDA graphs and compile settings): an inference run
# under one of them is 'serving'; other inference (a forward loop, a diffusion pipeline) is 'inference'.
SERVING_ENGINES = {"vllm": "vLLM", "sglang": "SGLang", "tensorrt_llm": "TensorRT-LLM"}
# The names a run's engine is shown by (lib/workload.sql run_workload's engine column).
ENGINE_NAMES = {**SERVING_ENGINES, "xdit": "xDiT", "diffusers": "Diffusers", "hf_generate": "Hugging Face generate"}


def workload_facts(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any]:
    """{workload, engine, evidence, job_ranks}: lib/workload.sql run_workload with its evidence in
    words, and the job's rank count where the trace declares more ranks than the run holds."""
    row = next(iter(con.execute("SELECT * FROM run_workload(?)", [run_id]).fetchall()), None)
    job = con.execute("SELECT world_size FROM missing_ranks(?)", [run_id]).fetchone()
    facts = {"workload": "unknown", "engine": None, "evidence": "", "job_ranks": job[0] if job else None}
    if row is None:
        return facts
    workload, engine, backward, optimizer, forward, frames, ranges, example_backward, example_range = row
    said = []
    if backward:
        said.append(f"{backward} backward ops" + (f", e.g. {clip(example_backward, 60)}" if example_backward else ""))
    if optimizer:
        said.append(f"{optimizer} optimizer steps")
    if workload == "inference":
        if engine:
            said.append(f"{ENGINE_NAMES.get(engine, engine)}'s code on the Python stack ({frames} frames)")
        if ranges:
            said.append(f"a range named {clip(example_range, 60)!r}")
        if forward and not engine and not ranges:
            said.append(f"forward only: {forward} model ops (matmul, convolution, attention, normalization) "
                        "and no backward or optimizer op")
    if workload == "unknown":
        said.append("no backward, optimizer, serving-engine or model op in the trace")
    return {**facts, "workload": workload, "engine": engine, "evidence": "; ".join(said)}


@dataclass(frozen=True)
class InferredSteps:
    """How a rank without ProfilerStep ranges got its steps (lib/steps.sql inferred_steps)."""
    source: str     # 'inferred:dataloader' | 'inferred:optimizer' | 'inferred:op'
    marker: str     # the repeating event's name
    count: int      # iterations counted as steps (start-up iterations excluded)

    def describe(self) -> str:
        """The marker in plain words, e.g. "DataLoader.__next__"."""
        if self.source == "inferred:dataloader":
            return "DataLoader.__next__"
        if self.source == "inferred:optimizer":
            return clip(self.marker)      # trace text: clipped where it enters a note
        return f"the top-level op {clip(self.marker)}"


def run_notes_from_ranks(ranks: Mapping[int, RankInfo], gpu_work_ranks: set[int] = frozenset(),
                         inferred: Mapping[int, InferredSteps] | None = None) -> list[str]:
    """Plain-words caveats about what the analyses could look at. gpu_work_ranks: ranks with
    GPU events at all (counted or not); a rank in it without counted activity had its work left out.
    inferred: the ranks without ProfilerStep ranges whose steps were inferred, and how."""
    notes = []
    inferred = inferred or {}
    no_counted = sorted(r.rank for r in ranks.values() if not r.has_gpu)
    left_out = [r for r in no_counted if r in gpu_work_ranks]
    cpu_only = [r for r in no_counted if r not in gpu_work_ranks]
    if ranks and len(cpu_only) == len(ranks):
        notes.append("The trace has no GPU activity (no kernels, copies or memsets): the GPU analyses (idle "
                     "time, launch gaps, copies, FP32 matmuls) were skipped; the data loader, rank balance, "
                     "communication and untraced host time are measured on the host (time the training "
                     "thread waits or spends outside every profiled op).")
    elif cpu_only:
        notes.append(f"Rank(s) {', '.join(map(str, cpu_only))} have no GPU activity; GPU analyses "
                     "skipped them.")
    if left_out:
        notes.append(f"Rank(s) {', '.join(map(str, left_out))} have GPU work but no ProfilerStep#N ranges while "
                     "other ranks have them: only GPU work launched inside the profiled steps counts (HTA's "
                     "rule), so GPU analyses skipped them. Profile every rank with the same schedule.")
    inferred_ranks = sorted(r for r in inferred if r in ranks and r not in left_out)
    if inferred_ranks:
        # ranks inferred alike share one clause: "ranks 0, 1: 11 iterations from DataLoader.__next__"
        alike: dict[tuple[int, str], list[int]] = {}
        for rank in inferred_ranks:
            alike.setdefault((inferred[rank].count, inferred[rank].describe()), []).append(rank)
        how = "; ".join(f"rank{'s' if len(group) > 1 else ''} {', '.join(map(str, group))}: {count} "
                        f"iteration{'s' if count != 1 else ''} inferred from {marker}"
                        for (count, marker), group in alike.items())
        notes.append(f"Rank(s) {', '.join(map(str, inferred_ranks))} have no ProfilerStep#N ranges: steps are "
                     f"the iterations where the trace repeats ({how}), each from one occurrence to the next. "
                     "Start-up is not counted: what comes before the second occurrence (CUDA context, lazy "
                     "loading, the first batch), nor the iterations right after it that still take over twice "
                     "the median; costs are per inferred iteration.")
    no_steps = sorted(r.rank for r in ranks.values()
                      if r.n_steps == 0 and r.rank not in left_out and r.rank not in inferred)
    if no_steps:
        notes.append(f"Rank(s) {', '.join(map(str, no_steps))} have no ProfilerStep#N ranges and nothing in them "
                     "repeats to infer iterations from: costs there are per whole trace (treated as one step), "
                     "not per step.")
    return notes


def run_notes(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """The notes analyze_run would produce for a stored run (for reports)."""
    return build_context(con, run_id).notes
