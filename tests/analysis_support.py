"""Helpers shared by the analysis tests: load trace files into a throwaway store, ready to query."""
from __future__ import annotations

from analyzers.findings import build_context
from analyzers.ingest import ingest_paths
from analyzers.sqlrun import ensure_loaded
from analyzers.store import connect


def ingest_clean(paths):
    """Ingest the files as one run into an in-memory store; they must all load without error."""
    con = connect(":memory:")
    result = ingest_paths(con, [str(p) for p in paths])
    assert result.run_id and not result.errors
    ensure_loaded(con)
    return con, result.run_id


def run_analysis(module, con, run_id, **thresholds):
    """One analysis module's findings, with the framework's context (thresholds overridable)."""
    return module.find(con, run_id, build_context(con, run_id, thresholds or None))
