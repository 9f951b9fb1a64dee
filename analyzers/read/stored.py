"""What a run's last analysis stored beside its findings: whether it is current, its notes, its
ranks table."""
from __future__ import annotations

import json
from typing import Any

import duckdb

from analyzers.analysis.context import run_notes
from analyzers.analysis.version import analysis_version


def analysis_is_current(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """Whether the run's stored findings come from this code (False: never analysed, e.g. loaded
    with `python -m analyzers ingest`, or analysed by an older version)."""
    row = con.execute("SELECT analysis_version FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return row is None or row[0] == analysis_version()


def stored_rank_table(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]] | None:
    """The ranks table the run's current analysis stored (metrics.rank_summary's rows); None when it
    stored none or is not current (then compute it: metrics.rank_summary)."""
    try:
        row = con.execute("SELECT rank_table::VARCHAR, analysis_version FROM runs WHERE run_id = ?", [run_id]).fetchone()
    except duckdb.BinderException:     # an old store opened read-only, without the column
        return None
    if row is None or row[0] is None or row[1] != analysis_version():
        return None
    return json.loads(row[0])


def analysis_notes(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """The notes stored with the run's findings by its last analyze_run; for a run analysed by a
    version that did not store them, the caveats derivable without running the analyses."""
    try:
        rows = con.execute("SELECT note FROM analysis_notes WHERE run_id = ? ORDER BY seq", [run_id]).fetchall()
    except duckdb.CatalogException:    # an old store opened read-only, without the table
        rows = []
    if rows or analysis_is_current(con, run_id):
        return [r[0] for r in rows]
    return run_notes(con, run_id)


def all_run_notes(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """Every caveat of the run: the analyses' notes, then the what-if replay's (the CLI JSON's
    "notes", and what the pages show)."""
    from analyzers.analysis.whatif import stored_whatif

    return analysis_notes(con, run_id) + list((stored_whatif(con, run_id) or {}).get("notes") or [])


