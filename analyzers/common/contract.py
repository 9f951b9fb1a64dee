"""The CLI contract's shape of a finding (README: `analyze --format json`): the one serializer,
used for stored findings (the report, the CLI) and for findings just computed
(analyzers.read.fixes.computed_finding_contract).

Trace names inside are clipped (analyzers.common.safe_text): a 200 KB op name must not make a 200 KB
report, nor a finding stored by an older version that did not clip them.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from analyzers.common.safe_text import SUMMARY_LIMIT, clip


def clip_strings(value: Any) -> Any:
    """value with every string inside (op and kernel names in a finding's metrics) clipped."""
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, Mapping):
        return {k: clip_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clip_strings(v) for v in value]
    return value


def rank_list(ranks: Iterable[int]) -> str:
    """Ranks as runs: [0, 1, 2, 3, 7] -> "0-3, 7"."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def ranks_text(finding: Mapping[str, Any]) -> str | None:
    """Which ranks a finding covers, in words: "rank 1", "ranks 0-7 (worst: rank 3)"; None for
    a finding about the whole run."""
    rank, ranks = finding.get("rank"), sorted(finding.get("ranks") or [])
    if len(ranks) > 1:
        listed = rank_list(ranks)
        return f"ranks {listed} (worst: rank {rank})" if rank is not None else f"ranks {listed}"
    return None if rank is None else f"rank {rank}"


def where_text(finding: Mapping[str, Any], origin_ns: int | None = None, separator: str = " · ") -> str:
    """ranks · step · stream · window of a finding as queries.findings reads it (start_ns, end_ns),
    the window in ms after origin_ns (the run's first event) when known."""
    parts = [ranks_text(finding) or "all ranks"]
    if finding.get("step") is not None:
        parts.append(f"step {finding['step']}")
    if finding.get("stream") is not None:
        parts.append(f"stream {finding['stream']}")
    if finding.get("start_ns") is not None and finding.get("end_ns") is not None:
        if origin_ns is None:
            parts.append(f"window of {(finding['end_ns'] - finding['start_ns']) / 1e6:,.3f} ms")
        else:
            parts.append(f"window {(finding['start_ns'] - origin_ns) / 1e6:,.3f}–"
                         f"{(finding['end_ns'] - origin_ns) / 1e6:,.3f} ms into the trace")
    return separator.join(parts)


def computed_contract(finding: Any, fixes: Iterable[str] = (), ruled_out: Mapping[str, str] | None = None,
                      unknown: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Finding (analyzers.common.model) an analysis just made, not yet stored (so not reviewed), in
    the contract's shape with the fixes given (analyzers.read.fixes chooses them)."""
    return finding_contract({
        "id": finding.finding_id, "kind": finding.kind, "severity": finding.severity, "rank": finding.rank,
        "ranks": finding.ranks, "caused_by": finding.caused_by,
        "step": finding.step, "stream": finding.stream, "start_ns": finding.t_start_ns, "end_ns": finding.t_end_ns,
        "cost_ms_per_step": finding.cost_ns / 1e6, "cost_pct": finding.cost_pct, "summary": finding.summary,
        "metrics": finding.metrics, "fixes": list(fixes),
        "fixes_ruled_out": dict(ruled_out or {}), "fixes_unknown": dict(unknown or {}),
        "mark_status": None, "mark_note": None,
    })


def finding_contract(f: Mapping[str, Any]) -> dict[str, Any]:
    """A finding as analyzers.read.queries.findings(raw=True) reads it, in the contract's shape."""
    return {
        "id": f["id"], "kind": f["kind"], "severity": f["severity"], "rank": f["rank"],
        # every rank the cause shows on (rank is the worst); per-rank figures in metrics.per_rank
        "ranks": list(f.get("ranks") or ([] if f["rank"] is None else [f["rank"]])),
        # a consequence names its cause's id; its cost is that cause's again, not to be added
        "caused_by": f.get("caused_by"),
        "step": f["step"], "stream": f["stream"],
        "start_us": None if f["start_ns"] is None else f["start_ns"] / 1000.0,
        "end_us": None if f["end_ns"] is None else f["end_ns"] / 1000.0,
        "cost_ms_per_step": f["cost_ms_per_step"], "cost_pct": f["cost_pct"],
        # memory findings cost bytes, not time (cost_ms_per_step 0): their bytes and share of the device
        "cost_bytes": (f["metrics"] or {}).get("cost_bytes"),
        "cost_pct_of_device_memory": (f["metrics"] or {}).get("cost_pct_of_device_memory"),
        "summary": None if f["summary"] is None else clip(f["summary"], SUMMARY_LIMIT),
        "metrics": clip_strings(f["metrics"]), "fixes": list(f["fixes"]),
        # fixes the finding's own metrics rule out, with the reason (still listed in `fixes`)
        "fixes_ruled_out": {fix: clip(reason, SUMMARY_LIMIT) for fix, reason in f["fixes_ruled_out"].items()},
        # fixes whose check needs a figure the finding does not measure: neither applies nor ruled out
        "fixes_unknown": {fix: clip(reason, SUMMARY_LIMIT) for fix, reason in f.get("fixes_unknown", {}).items()},
        # the team's review mark (to_fix / fixed / wont_fix and a note), None when unmarked
        "review": {"status": f["mark_status"], "note": f["mark_note"]} if f.get("mark_status") else None,
    }
