"""What a fix model is: a transform of the run's graph (analysis/kinds/<kind>/whatif.py declares one per
finding kind as `FIX_MODEL`), and the helpers the transforms share.

A transform returns the changed graph, the nodes it changed per rank (their time on the critical
path is the finding's `on_critical_path_ms`) and its assumptions in words, each naming the
thresholds.py parameter it rests on. Transforms only shorten or unblock work, so a replay after
any set of fixes is never slower than before.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from analyzers.analysis.whatif.graph import RankGraph, RunGraph


@dataclass
class Touched:
    """The nodes a fix changes on one rank."""
    host: np.ndarray            # bool per host node: its own time
    gpu: np.ndarray             # bool per GPU op
    host_lead: np.ndarray | None = None   # bool per host node: the CPU time before it too
    host_lead_cap: np.ndarray | None = None  # int64 per host node: at most this much of it (None: all)


@dataclass
class FixEffect:
    graph: RunGraph
    touched: dict[int, Touched]
    assumptions: list[str] = field(default_factory=list)


# (run graph, the finding as the CLI contract has it, thresholds) -> FixEffect, or None: no prediction
Transform = Callable[[RunGraph, Mapping[str, Any], Mapping[str, float]], "FixEffect | None"]


@dataclass(frozen=True)
class FixModel:
    """A kind's fix model: the fix it stands for, in words, its transform, and the accel fix ids whose
    effect the transform predicts (a demo checks the prediction only against those). With
    by_first_fix the transform follows the finding's first fix, so it predicts that one alone."""
    fix: str
    transform: Transform
    fix_ids: tuple[str, ...] = ()
    by_first_fix: bool = False

    def predicts(self, finding: Mapping[str, Any]) -> list[str]:
        """The fix ids this model's prediction stands for on this finding."""
        if not self.by_first_fix:
            return list(self.fix_ids)
        first = next(iter(finding.get("fixes") or []), None)
        return [first] if first in self.fix_ids else []


def finding_ranks(run: RunGraph, finding: Mapping[str, Any]) -> list[int]:
    """The ranks of the graph a finding covers (every rank when it names none)."""
    named = set(finding.get("ranks") or ([] if finding.get("rank") is None else [finding["rank"]]))
    return [g.rank for g in run.ranks if not named or g.rank in named]


def apply_per_rank(run: RunGraph, finding: Mapping[str, Any],
                   change: Callable[[RankGraph], "tuple[RankGraph, Touched] | None"],
                   assumptions: list[str]) -> FixEffect | None:
    """Apply `change` to each rank the finding covers; None when it changed nothing anywhere."""
    ranks = set(finding_ranks(run, finding))
    graphs, touched = [], {}
    for g in run.ranks:
        result = change(g) if g.rank in ranks else None
        if result is None:
            graphs.append(g)
            continue
        new, hit = result
        graphs.append(new)
        touched[g.rank] = hit
    if not touched:
        return None
    return FixEffect(graph=run.replace(ranks=graphs), touched=touched, assumptions=assumptions)


def none_touched(g: RankGraph) -> Touched:
    return Touched(host=np.zeros(g.n_host, dtype=bool), gpu=np.zeros(len(g.g_stream), dtype=bool))
