"""Plain data objects shared by ingest, the analyzers, the CLI, the fix library and the app."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class FileError:
    """A file (or archive member) that could not be loaded, and why, in plain words."""
    file: str
    error: str

    def to_dict(self) -> dict[str, str]:
        return {"file": self.file, "error": self.error}


@dataclass
class IngestResult:
    """What one ingest call produced: the run (None when nothing loaded) and per-file errors."""
    run_id: str | None
    errors: list[FileError] = field(default_factory=list)
    warnings: list[FileError] = field(default_factory=list)  # loaded, but the user should know (unknown schemaVersion, dropped malformed events)
    reused: bool = False            # True when identical files were already stored
    files: list[str] = field(default_factory=list)   # files that loaded, in rank order
    ranks: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class EvidenceSeries:
    """What the Findings page charts step by step beside a finding of a kind.

    column: a column of metrics/step_breakdown.sql (as analyzers.read.queries.step_breakdown names it,
    in ms); label: the chart's title; differs: how the charted quantity differs from the
    finding's cost, in words, with {metric} fields filled from the finding's metrics (empty when
    the chart shows the cost itself)."""
    column: str
    label: str
    differs: str = ""
    per_rank: bool = False     # one bar per rank (its mean per step) instead of one per step


# Metric keys every kind's findings may carry besides their own: the per-rank figures of a finding
# that covers several ranks (analyzers.analysis.root_causes.group_across_ranks).
ACROSS_RANKS_METRIC_KEYS = frozenset({"per_rank"})


@dataclass(frozen=True)
class AnalysisSpec:
    """One finding kind, declared once by its analysis (analyzers/analysis/kinds/<kind>/); the kinds
    list, the titles the app and reports show and the evidence charts all derive from it."""
    kind: str
    title: str
    evidence: EvidenceSeries
    metric_keys: frozenset[str]      # every key its findings' metrics may carry
    measured_without_gpu: bool = False   # costed on CPU-only traces too (absence there means 0)
    # the idle-gap cause (lib/gaps.sql) whose GPU idle this kind costs, for the kinds that cost
    # one: a rank's own stall of such a kind can make it the straggler
    gap_cause: str | None = None
    # what the finding costs: "time" (GPU time lost per step, cost_ns / cost_pct) or "memory"
    # (bytes, in metrics cost_bytes and cost_pct_of_device_memory; cost_ns 0: it adds no time)
    cost_unit: str = "time"


@dataclass
class Finding:
    """One costed problem. Cost is GPU time lost per step, the unit every finding shares."""
    finding_id: str
    kind: str
    severity: str                   # high | medium | low
    rank: int | None
    step: int | None
    stream: int | None
    t_start_ns: int | None
    t_end_ns: int | None
    cost_ns: int                    # per step; the upper bound of what fixing it saves
    cost_pct: float                 # of mean step time
    summary: str
    metrics: dict[str, Any] = field(default_factory=dict)
    ranks: list[int] = field(default_factory=list)   # every rank it shows on (rank: the worst); [] = whole run
    caused_by: str | None = None    # a consequence: its cause's finding_id; its cost is not counted again

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
