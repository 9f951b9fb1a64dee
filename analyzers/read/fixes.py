"""The fixes a finding gets, chosen when it is read (the CLI, reports, pages), not when it is
analysed: the registry's fixes for its kind (accel/registry.py ranked_fixes) judged on the finding's
stored metrics and on what the trace can show (CUDA, several ranks) and on the run's workload (a
training-only fix is ruled out on an inference run). A finding stores measurements
only, so a change to the registry shows at once, without analysing a run again. Without accel/ a
finding has no fixes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from analyzers.analysis.context import SERVING_ENGINES
from analyzers.common import thresholds as th
from analyzers.common.contract import computed_contract
from analyzers.common.model import Finding


def _registry():
    try:
        from accel import registry
    except ImportError:
        return None
    return registry


def unmet_needs(needs: Iterable[str], has_gpu: bool, ranks: int, job_ranks: int | None = None) -> str | None:
    """Why a fix needing `needs` (accel.registry.NEEDS) cannot apply to this trace, or None. A run
    holding some ranks of a larger job (job_ranks, from distributedInfo) has several ranks."""
    if not has_gpu and ({"cuda", "triton", "multi_gpu"} & set(needs)):
        return "it needs a CUDA GPU and this trace has no GPU activity"
    if max(ranks, job_ranks or 0) < 2 and ({"multi_rank", "multi_gpu"} & set(needs)):
        return "it needs several ranks and this run has one"
    return None


# What each workload a fix may be for is, as a run's workload context (fix_workload_context).
WORKLOAD_CONTEXTS = ("training", "inference", "serving")


def fix_workload_context(workload: str, engine: str | None) -> str | None:
    """'training' | 'inference' | 'serving' for a run's workload and engine; None when unknown."""
    if workload == "training":
        return "training"
    if workload == "inference":
        return "serving" if engine in SERVING_ENGINES else "inference"
    return None


def workload_mismatch(fix_workloads: Iterable[str], workload: str, engine: str | None, evidence: str) -> str | None:
    """Why a fix for `fix_workloads` (of WORKLOAD_CONTEXTS) does not suit this run's workload, or
    None (it suits it, or the workload is unknown)."""
    context = fix_workload_context(workload, engine)
    allowed = set(fix_workloads)
    if context is None or context in allowed:
        return None
    because = f" ({evidence})" if evidence else ""
    if allowed == {"training"}:
        return (f"a training-only fix (it changes the training step, optimizer or gradient sync); this run is "
                f"{workload}{because}")
    if allowed == {"serving"}:
        return f"it configures a serving engine (vLLM, SGLang, TensorRT-LLM); this run is {workload}{because}"
    if context == "serving":
        return (f"{SERVING_ENGINES[engine]} runs this model and sets this itself (its launch flags are the fix); "
                f"this run is served{because}")
    return f"it is for {' or '.join(sorted(allowed))} runs; this run is {workload}{because}"


def trace_rules_out(fix, trace: Mapping[str, Any]) -> str | None:
    """Why the run (its stored costs: has_gpu, ranks, job_ranks, workload, engine, workload_evidence)
    cannot use `fix` (an accel.registry.Fix): it is for another workload (said first: no trace of this
    workload makes it apply), or what it needs is missing."""
    job_ranks = trace.get("job_ranks")
    return (workload_mismatch(getattr(fix, "workloads", ()) or WORKLOAD_CONTEXTS,
                              str(trace.get("workload") or "unknown"), trace.get("engine"),
                              str(trace.get("workload_evidence") or ""))
            or unmet_needs(fix.needs, bool(trace.get("has_gpu", True)), int(trace.get("ranks") or 1),
                           int(job_ranks) if isinstance(job_ranks, int) else None))


@dataclass(frozen=True)
class FixChoice:
    """A finding's fixes, best first; those the trace or the finding's metrics rule out (why) and
    those whose check needs a metric the finding does not measure (which). All stay in `ids`."""
    ids: list[str] = field(default_factory=list)
    ruled_out: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)


def choose_fixes(kind: str, metrics: Mapping[str, Any] | None, trace: Mapping[str, Any] | None = None) -> FixChoice:
    """The fixes of a finding of `kind` with these metrics; trace: its run's stored costs
    (queries.run_costs: has_gpu, ranks, the thresholds it was analysed with), None when unknown
    (then no fix is ruled out for what the trace lacks)."""
    registry = _registry()
    if registry is None:
        return FixChoice()
    thresholds = th.resolve(trace.get("thresholds") if isinstance(trace, Mapping) else None)

    def unmet(fix) -> str | None:
        if not isinstance(trace, Mapping):
            return None
        return trace_rules_out(fix, trace)

    try:
        ranked = registry.ranked_fixes(kind, metrics if isinstance(metrics, Mapping) else {}, thresholds, unmet)
    except Exception:  # a registry bug must not lose the findings
        return FixChoice()
    return FixChoice([fix_id for fix_id, _ in ranked],
                     {fix_id: v.reason for fix_id, v in ranked if v.status == registry.RULED_OUT},
                     {fix_id: v.reason for fix_id, v in ranked if v.status == registry.UNKNOWN})


def fix_card(fix_id: str, metrics: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a finding shows of one fix: id, title, description, needs, the code with the finding's
    metrics filled in (Fix.snippet_for), {name of the user's program it reads: what it stands
    for}, the demo command. An id the registry does not know (or no accel/) shows as itself."""
    registry = _registry()
    fix = registry.FIXES.get(fix_id) if registry is not None else None
    if fix is None:
        return {"id": str(fix_id), "title": str(fix_id), "description": "", "needs": [], "snippet": "", "code": "",
                "names": {}, "demo": registry.demo_command(fix_id) if registry is not None else ""}
    try:
        code, names = fix.snippet_for(metrics), fix.placeholders(metrics)
    except Exception:  # a snippet the free-name check cannot parse: shown as written
        code, names = fix.snippet, {}
    return {"id": fix.id, "title": fix.title, "description": fix.description, "needs": list(fix.needs),
            "snippet": fix.snippet, "code": code, "names": names, "demo": fix.demo}


def install_hint() -> str:
    """How to get `accel`, which the fixes' code imports (Markdown with code spans); "" without accel/."""
    registry = _registry()
    return registry.INSTALL_HINT if registry is not None else ""


def computed_finding_contract(finding: Finding, trace: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A Finding an analysis just made (not yet stored, so not reviewed), in the contract's shape;
    trace: its run's RunCosts as a dict (what the trace can show decides which fixes apply)."""
    fixes = choose_fixes(finding.kind, finding.metrics, trace)
    return computed_contract(finding, fixes.ids, fixes.ruled_out, fixes.unknown)
