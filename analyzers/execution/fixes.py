"""Which fixes of the registry (accel/registry.py) a finding gets, in which order, and which of
them the trace or the finding's own metrics rule out. Tolerates accel/'s absence (no fixes then).
"""
from __future__ import annotations

from typing import Any, Mapping

from analyzers.analysis.root_causes import RunCosts, unmet_needs
from analyzers.common import thresholds as th
from analyzers.common.contract import finding_contract
from analyzers.common.model import Finding


def fix_ids_for(kind: str, metrics: Mapping[str, Any], thresholds: Mapping[str, float]) -> list[str]:
    """accel.registry.fixes_for, tolerating its absence (the analyzers work without accel/)."""
    try:
        from accel.registry import fixes_for
    except ImportError:
        return []
    try:
        return list(fixes_for(kind, metrics, thresholds))
    except Exception:  # a registry bug must not lose the findings
        return []


def fix_needs_unmet(fix_id: str, trace: RunCosts | Mapping[str, Any] | None) -> str | None:
    """Why the trace cannot use this fix (it needs CUDA or several ranks the trace lacks), or None."""
    try:
        from accel.registry import FIXES
    except ImportError:
        return None
    fix = FIXES.get(fix_id)
    if fix is None or trace is None:
        return None
    facts = trace.to_dict() if isinstance(trace, RunCosts) else trace
    return unmet_needs(fix.needs, bool(facts.get("has_gpu", True)), int(facts.get("ranks") or 1))


def fix_verdicts(kind: str, fix_ids: list[str], metrics: Mapping[str, Any],
                 trace: Mapping[str, Any] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """({fix id: why it cannot help here}, {fix id: what the finding does not measure that its
    check needs}) for a finding's fixes: ruled out by the trace (a CUDA fix on a CPU trace, a
    multi-rank fix on one rank; `trace` is the run's stored RunCosts) or by the finding's own
    metrics. Both stay in its fixes list (ruled out last: the user may know better). Empty
    without accel/."""
    try:
        from accel.registry import fixes_ruled_out, fixes_unknown
    except ImportError:
        return {}, {}
    thresholds = th.resolve((trace or {}).get("thresholds") if isinstance(trace, Mapping) else None)
    ruled_out = fixes_ruled_out(fix_ids, metrics, kind=kind, thresholds=thresholds)
    for fix_id in fix_ids:
        unmet = fix_needs_unmet(fix_id, trace)
        if unmet:
            ruled_out[fix_id] = unmet
    unknown = {k: v for k, v in fixes_unknown(fix_ids, metrics, kind=kind, thresholds=thresholds).items()
               if k not in ruled_out}
    return ruled_out, unknown


def order_fixes(fix_ids: list[str], ruled_out: Mapping[str, str], unknown: Mapping[str, str]) -> list[str]:
    """fix_ids with the ones that apply first, then the unknown ones, then those ruled out, each
    part in the order given (the registry's fit): a fix whose precondition the trace does not show
    (ruled out by the finding's metrics or by the trace, as fix_verdicts says) is never first."""
    return sorted(fix_ids, key=lambda fix_id: 2 if fix_id in ruled_out else 1 if fix_id in unknown else 0)



def computed_finding_contract(finding: Finding, trace: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A Finding an analysis just made (not yet stored, so not reviewed), in the contract's shape;
    trace: its run's RunCosts as a dict (what the trace can show decides which fixes apply)."""
    ruled_out, unknown = fix_verdicts(finding.kind, list(finding.fix_ids), finding.metrics, trace)
    return finding_contract({
        "id": finding.finding_id, "kind": finding.kind, "severity": finding.severity, "rank": finding.rank,
        "ranks": finding.ranks, "caused_by": finding.caused_by,
        "step": finding.step, "stream": finding.stream, "start_ns": finding.t_start_ns, "end_ns": finding.t_end_ns,
        "cost_ms_per_step": finding.cost_ns / 1e6, "cost_pct": finding.cost_pct, "summary": finding.summary,
        "metrics": finding.metrics, "fixes": order_fixes(list(finding.fix_ids), ruled_out, unknown),
        "fixes_ruled_out": ruled_out, "fixes_unknown": unknown,
        "mark_status": None, "mark_note": None,
    })
