"""From per-rank findings to root causes: one finding per cause across ranks, consequences linked
to their cause, and the run's costs counted once.

The analyses report what they see rank by rank. A review needs one finding per cause: the same
cause on eight ranks is one finding (its cost is what the job loses per step: a synchronous step
waits for its worst rank, so the worst rank's cost, not the sum); a straggler whose own stall
(a slow loader, copies, syncs) explains why it is late is a consequence of that stall and names
it (`caused_by`) instead of being counted again.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from analyzers.analysis.kinds import analysis_specs
from analyzers.common.contract import rank_list
from analyzers.common.model import Finding

# Kinds already about the whole job (one finding across ranks by construction).
CROSS_RANK_KINDS = ("rank_imbalance",)


def gap_cause_kinds() -> dict[str, str]:
    """{idle-gap cause (lib/gaps.sql): the kind that costs it} (AnalysisSpec.gap_cause). A finding
    of such a kind on the straggler's own rank (its loader, copies, syncs, launches) can explain
    why it is late."""
    return {spec.gap_cause: kind for kind, spec in analysis_specs().items() if spec.gap_cause}


def per_rank_costs(finding: Finding) -> dict[int, float]:
    """{rank: cost ns per step} of a grouped finding (its own rank when it covers one)."""
    rows = finding.metrics.get("per_rank") or []
    if rows:
        return {int(r["rank"]): float(r["cost_ms_per_step"]) * 1e6 for r in rows}
    return {finding.rank: float(finding.cost_ns)} if finding.rank is not None else {}


def group_across_ranks(findings: list[Finding]) -> list[Finding]:
    """One finding per kind: the worst rank's finding, covering every rank of that kind, with the
    per-rank costs in metrics.per_rank. Its id is the kind (stable across re-analysis, so a review
    mark stays on it), its cost the worst rank's (what the job loses per step)."""
    by_kind: dict[str, list[Finding]] = {}
    for finding in findings:
        by_kind.setdefault(finding.kind, []).append(finding)
    grouped = []
    for kind, group in by_kind.items():
        if kind in CROSS_RANK_KINDS or len(group) == 1 and group[0].rank is None:
            for finding in group:
                finding.ranks = [] if finding.rank is None else [finding.rank]
                finding.finding_id = kind
            grouped.extend(group)
            continue
        group.sort(key=lambda f: (-f.cost_ns, -f.cost_pct, -(f.metrics.get("cost_bytes") or 0),
                                  f.rank if f.rank is not None else -1))
        worst = group[0]
        ranks = sorted(f.rank for f in group if f.rank is not None)
        worst.metrics = {**worst.metrics, "per_rank": [   # ACROSS_RANKS_METRIC_KEYS
            {"rank": f.rank, "cost_ms_per_step": round(f.cost_ns / 1e6, 3), "cost_pct": round(f.cost_pct, 2),
             **({"cost_bytes": f.metrics["cost_bytes"]} if "cost_bytes" in f.metrics else {})}
            for f in sorted(group, key=lambda f: f.rank if f.rank is not None else -1)]}
        if len(ranks) > 1:
            worst.summary = (f"On {len(ranks)} ranks ({rank_list(ranks)}); the worst is shown. " + worst.summary)
        worst.ranks, worst.finding_id = ranks, kind
        grouped.append(worst)
    return grouped


def link_consequences(findings: list[Finding], explained_fraction: float, titles: Mapping[str, str]) -> None:
    """Name the cause of the straggler finding when the straggler's own finding explains it: a
    kind of gap_cause_kinds() costing the straggler at least explained_fraction of the
    imbalance's cost more than it costs the other ranks on average (a stall every rank has does
    not make one rank late)."""
    straggler_findings = [f for f in findings if f.kind == "rank_imbalance" and f.rank is not None]
    stall_kinds = set(gap_cause_kinds().values())
    for straggler in straggler_findings:
        waiting = {int(r) for r in (straggler.metrics.get("lost_ms_per_step_by_rank") or {})} - {straggler.rank}
        best, best_excess = None, 0.0
        for candidate in findings:
            if candidate.kind not in stall_kinds:
                continue
            costs = per_rank_costs(candidate)
            if straggler.rank not in costs:
                continue
            others = [costs.get(r, 0.0) for r in (waiting or set(costs) - {straggler.rank})] or [0.0]
            excess = costs[straggler.rank] - sum(others) / len(others)
            if excess >= explained_fraction * straggler.cost_ns and excess > best_excess:
                best, best_excess = candidate, excess
        if best is not None:
            straggler.caused_by = best.finding_id
            straggler.summary += (f" Rank {straggler.rank}'s own finding explains why it is late: "
                                  f"{titles.get(best.kind, best.kind)} ({best_excess / 1e6:.2f} ms per step more "
                                  f"than on the other ranks). Fix that first; this wait is its consequence "
                                  f"and is not counted again.")


def link_memory_churn(findings: list[Finding]) -> None:
    """allocator_churn names the GPU time its cudaMalloc/cudaFree calls stall: runtime_stall's
    allocator share on the same rank (counted there, not again)."""
    stall = next((f for f in findings if f.kind == "runtime_stall"), None)
    for churn in (f for f in findings if f.kind == "allocator_churn"):
        if stall is None or stall.metrics.get("allocator_share") is None:
            continue
        costs = per_rank_costs(stall)
        if churn.rank not in costs:
            continue
        ms = costs[churn.rank] / 1e6 * float(stall.metrics["allocator_share"])
        churn.metrics = {**churn.metrics, "runtime_stall_ms_per_step": round(ms, 3)}
        churn.summary += (f" Those calls stall the GPU ~{ms:.2f} ms per step: that time is the runtime_stall "
                          "finding's allocator share, counted there.")


def order_findings(findings: list[Finding]) -> list[Finding]:
    """Root causes costliest first, each consequence right after its cause."""
    by_id = {f.finding_id: f for f in findings}

    def key(f: Finding) -> tuple:
        cause = by_id.get(f.caused_by) if f.caused_by else None
        anchor = cause or f
        return (-anchor.cost_ns, -anchor.cost_pct, anchor.finding_id, cause is not None, f.finding_id)

    return sorted(findings, key=key)


@dataclass(frozen=True)
class RunCosts:
    """What a run's findings add up to, per (host) step, counted once, and what the trace can
    show (has_gpu, ranks: the fixes a finding offers must need nothing the trace lacks), and the
    thresholds the analysis ran with where they differ from the defaults (the fixes' verdicts use them).

    step_ms: mean host ProfilerStep over ranks (the denominator of cost_pct);
    root_cause_ms: the summed costs of the findings that are not consequences;
    saves_at_most_ms: root_cause_ms capped at step_ms (fixing everything cannot save more than
    the step); saves_at_most_pct: that, in % of step_ms (None without steps); unexplained_idle_ms: GPU idle per step in gaps whose cause no finding reports
    (mean over GPU ranks; None without GPU activity)."""
    step_ms: float | None
    root_cause_ms: float
    saves_at_most_ms: float
    unexplained_idle_ms: float | None
    saves_at_most_pct: float | None = None
    has_gpu: bool = True
    ranks: int = 1
    # the job's ranks where the trace declares more than the run holds (distributedInfo.world_size)
    job_ranks: int | None = None
    # what the run does (lib/workload.sql run_workload): 'training' | 'inference' | 'unknown', the
    # serving engine seen (or None) and the evidence in words; fixes for another workload are ruled out
    workload: str = "unknown"
    engine: str | None = None
    workload_evidence: str = ""
    # what its steps are (context.step_unit_facts): unit, source, marker, count, mean_step_ms, phases
    step_unit: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)   # the analysis' overrides of the defaults
    # the report's ranks table (metrics.rank_summary) computed from the analysis' cached views, stored
    # beside the findings (runs.rank_table): not part of the run-level figures
    rank_table: list[dict[str, Any]] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "rank_table"}


def run_costs(findings: list[Finding], step_ns: float | None, ranks: int,
              gap_rows: list[Mapping[str, Any]], steps_divisor: Mapping[int, int], has_gpu: bool) -> RunCosts:
    """RunCosts from the reported findings, the run's mean step (run_mean_step), its number of
    ranks and gap_causes' rows."""
    root = sum(f.cost_ns for f in findings if not f.caused_by)
    kind_of_cause = gap_cause_kinds()
    reported: dict[int, set[str]] = {}
    for f in findings:
        for rank in per_rank_costs(f):
            reported.setdefault(rank, set()).add(f.kind)
    unexplained: dict[int, float] = {}
    for row in gap_rows:
        rank = row["rank"]
        kind = kind_of_cause.get(row["cause"])
        if kind is None or kind not in reported.get(rank, set()):
            unexplained[rank] = unexplained.get(rank, 0.0) + row["idle_ns"] / max(steps_divisor.get(rank, 1), 1)
    gpu_ranks = {row["rank"] for row in gap_rows}
    unexplained_ms = (sum(unexplained.get(r, 0.0) for r in gpu_ranks) / len(gpu_ranks) / 1e6) if gpu_ranks else None
    saves_ns = root if step_ns is None else min(root, step_ns)
    return RunCosts(step_ms=None if step_ns is None else step_ns / 1e6, root_cause_ms=root / 1e6,
                    saves_at_most_ms=saves_ns / 1e6,
                    saves_at_most_pct=100.0 * saves_ns / step_ns if step_ns else None,
                    unexplained_idle_ms=unexplained_ms, has_gpu=has_gpu, ranks=ranks)
