"""One-call entry points used by the CLI, the fix library's demos and the dashboard."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import duckdb

from analyzers.common.model import FileError, IngestResult
from analyzers.store.database import connect

ProgressCallback = Callable[..., None]   # analyzers/common/progress.py


@dataclass
class AnalysisOutcome:
    """An ingest followed by analysis: the report (None when nothing loaded) and the ingest result."""
    ingest: IngestResult
    report: dict[str, Any] | None
    errors: list[FileError] = field(default_factory=list)


def ingest_and_analyze(con: duckdb.DuckDBPyConnection, paths: Iterable[str | os.PathLike],
                       name: str | None = None, progress: ProgressCallback | None = None,
                       events_root: str | None = None, runner=None, actor: str | None = None) -> AnalysisOutcome:
    """Ingest the files as one run (or reuse the identical stored run), analyse it, build its report.
    events_root: keep its events as Parquet partitions there; runner: an analyzers.cluster executor
    for the per-rank ingest and analyses (default: this process); actor: who the audit log names."""
    from analyzers.ingest import ingest_paths

    result = ingest_paths(con, [str(p) for p in paths], name=name, progress=progress, events_root=events_root,
                          runner=runner, actor=actor)
    if result.run_id is None:
        return AnalysisOutcome(ingest=result, report=None, errors=list(result.errors))
    report = analyze_stored_run(con, result.run_id, errors=result.errors + result.warnings, progress=progress,
                                runner=runner)
    return AnalysisOutcome(ingest=result, report=report, errors=list(result.errors))


def analyze_stored_run(con: duckdb.DuckDBPyConnection, run_id: str,
                       errors: Iterable[FileError] = (), progress: ProgressCallback | None = None,
                       runner=None) -> dict[str, Any]:
    """Re-run every analysis on a stored run (refreshing its findings) and return its report."""
    from analyzers.execution.pipeline import analyze_run
    from analyzers.read.fixes import computed_finding_contract
    from analyzers.read.queries import store_page_defaults
    from analyzers.read.report import build_report

    analyze_run(con, run_id, progress=progress, runner=runner, contract_of=computed_finding_contract,
                store_page_tables=store_page_defaults)
    return build_report(con, run_id, errors=tuple(errors))


def empty_report(errors: Iterable[FileError]) -> dict[str, Any]:
    """The report when nothing could be loaded: the contract's keys, no run, the errors."""
    return {"run": None, "errors": [e.to_dict() for e in errors], "ranks": [], "memory_snapshots": [], "findings": [], "notes": []}


def analyze_paths(paths: Iterable[str | os.PathLike], db_path: str | os.PathLike = ":memory:",
                  name: str | None = None) -> dict[str, Any]:
    """Ingest + analyse + report in one call; the report follows the CLI's JSON contract.

    When nothing could be loaded the report has an empty run and the errors.
    """
    return _analyze_paths(paths, db_path, name, kind_costs=False)[0]


def analyze_paths_with_kind_costs(paths: Iterable[str | os.PathLike], db_path: str | os.PathLike = ":memory:",
                                  name: str | None = None) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """analyze_paths' report and what each finding kind costs the run (queries.run_kind_costs, by
    kind; empty when nothing loaded)."""
    return _analyze_paths(paths, db_path, name, kind_costs=True)


def _analyze_paths(paths: Iterable[str | os.PathLike], db_path: str | os.PathLike, name: str | None,
                   kind_costs: bool) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    con = connect(db_path)
    try:
        outcome = ingest_and_analyze(con, paths, name=name)
        if outcome.report is None:
            return empty_report(outcome.errors), {}
        if not kind_costs:
            return outcome.report, {}
        from analyzers.read.queries import run_kind_costs

        return outcome.report, run_kind_costs(con, outcome.ingest.run_id)
    finally:
        con.close()
