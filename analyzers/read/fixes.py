"""The fixes a finding gets, chosen when it is read (the CLI, reports, pages), not when it is
analysed: the registry's fixes for its kind (accel/registry.py ranked_fixes) judged on the finding's
stored metrics and on what the trace can show (CUDA, several ranks). A finding stores measurements
only, so a change to the registry shows at once, without analysing a run again. Without accel/ a
finding has no fixes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from analyzers.common import thresholds as th
from analyzers.common.contract import finding_contract
from analyzers.common.model import Finding


def _registry():
    try:
        from accel import registry
    except ImportError:
        return None
    return registry


def unmet_needs(needs: Iterable[str], has_gpu: bool, ranks: int) -> str | None:
    """Why a fix needing `needs` (accel.registry.NEEDS) cannot apply to this trace, or None."""
    if not has_gpu and ({"cuda", "triton", "multi_gpu"} & set(needs)):
        return "it needs a CUDA GPU and this trace has no GPU activity"
    if ranks < 2 and ({"multi_rank", "multi_gpu"} & set(needs)):
        return "it needs several ranks and this run has one"
    return None


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
        return unmet_needs(fix.needs, bool(trace.get("has_gpu", True)), int(trace.get("ranks") or 1))

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
    return finding_contract({
        "id": finding.finding_id, "kind": finding.kind, "severity": finding.severity, "rank": finding.rank,
        "ranks": finding.ranks, "caused_by": finding.caused_by,
        "step": finding.step, "stream": finding.stream, "start_ns": finding.t_start_ns, "end_ns": finding.t_end_ns,
        "cost_ms_per_step": finding.cost_ns / 1e6, "cost_pct": finding.cost_pct, "summary": finding.summary,
        "metrics": finding.metrics, "fixes": fixes.ids,
        "fixes_ruled_out": fixes.ruled_out, "fixes_unknown": fixes.unknown,
        "mark_status": None, "mark_note": None,
    })
