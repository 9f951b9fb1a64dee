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
    fix_ids: list[str] = field(default_factory=list)

    def to_contract(self) -> dict[str, Any]:
        """The CLI/JSON contract shape (see README: `analyze --format json`)."""
        from analyzers.findings import fixes_ruled_out   # findings imports this module
        return {
            "id": self.finding_id,
            "kind": self.kind,
            "severity": self.severity,
            "rank": self.rank,
            "step": self.step,
            "stream": self.stream,
            "start_us": None if self.t_start_ns is None else self.t_start_ns / 1000.0,
            "end_us": None if self.t_end_ns is None else self.t_end_ns / 1000.0,
            "cost_ms_per_step": self.cost_ns / 1e6,
            "cost_pct": self.cost_pct,
            "summary": self.summary,
            "metrics": self.metrics,
            "fixes": list(self.fix_ids),
            "fixes_ruled_out": fixes_ruled_out(list(self.fix_ids), self.metrics),
            "review": None,   # filled from the store's review marks by analyzers.report
        }

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
