"""Run bookkeeping: list, rename, tag, annotate, delete runs, and review marks on findings.

Every statement takes user text as parameters, never formatted into SQL.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import duckdb

MARK_STATUSES = ("to_fix", "fixed", "wont_fix")

# Tables holding per-run rows, deleted together in one transaction.
_RUN_TABLES = ("finding_marks", "findings", "events", "ranks", "runs")


def _rows_as_dicts(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]


def list_runs(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """All stored runs, newest first, with their rank count and event count."""
    cursor = con.execute(
        """
        SELECT r.run_id, r.name, r.created_at, r.source, r.world_size, r.tags, r.notes,
               count(k.rank) AS n_ranks, coalesce(sum(k.n_events), 0) AS n_events,
               list(k.rank ORDER BY k.rank) FILTER (WHERE k.rank IS NOT NULL) AS ranks
        FROM runs r LEFT JOIN ranks k USING (run_id)
        GROUP BY ALL
        ORDER BY r.created_at DESC, r.run_id
        """
    )
    return _rows_as_dicts(cursor)


def get_run(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    return next((r for r in list_runs(con) if r["run_id"] == run_id), None)


def run_exists(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    return con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0] > 0


def delete_run(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """Remove a run and everything derived from it. Returns False when there was no such run."""
    if not run_exists(con, run_id):
        return False
    con.execute("BEGIN TRANSACTION")
    try:
        for table in _RUN_TABLES:
            con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return True


def rename_run(con: duckdb.DuckDBPyConnection, run_id: str, name: str) -> None:
    name = name.strip()
    if not name:
        raise ValueError("a run name cannot be empty")
    con.execute("UPDATE runs SET name = ? WHERE run_id = ?", [name, run_id])


def set_tags(con: duckdb.DuckDBPyConnection, run_id: str, tags: list[str]) -> None:
    clean = sorted({t.strip() for t in tags if t and t.strip()})
    con.execute("UPDATE runs SET tags = ? WHERE run_id = ?", [clean, run_id])


def set_notes(con: duckdb.DuckDBPyConnection, run_id: str, notes: str) -> None:
    con.execute("UPDATE runs SET notes = ? WHERE run_id = ?", [notes, run_id])


def set_mark(con: duckdb.DuckDBPyConnection, run_id: str, finding_id: str, status: str | None,
             note: str = "") -> None:
    """Mark a finding in a review (to_fix / fixed / wont_fix) with a note; status None clears it.

    Marks are keyed by the finding's stable id, so they survive re-analysis of the run.
    """
    if status is None:
        con.execute("DELETE FROM finding_marks WHERE run_id = ? AND finding_id = ?", [run_id, finding_id])
        return
    if status not in MARK_STATUSES:
        raise ValueError(f"unknown mark {status!r}; expected one of {', '.join(MARK_STATUSES)}")
    con.execute(
        """
        INSERT INTO finding_marks (run_id, finding_id, status, note, updated_at) VALUES (?, ?, ?, ?, ?)
        ON CONFLICT (run_id, finding_id) DO UPDATE
        SET status = excluded.status, note = excluded.note, updated_at = excluded.updated_at
        """,
        [run_id, finding_id, status, note, datetime.now(timezone.utc).replace(tzinfo=None)],
    )


def get_marks(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, dict[str, Any]]:
    """finding_id -> {"status", "note", "updated_at"} for one run."""
    rows = con.execute(
        "SELECT finding_id, status, note, updated_at FROM finding_marks WHERE run_id = ?", [run_id]
    ).fetchall()
    return {fid: {"status": s, "note": n, "updated_at": u} for fid, s, n, u in rows}


def matching_run_ids(con: duckdb.DuckDBPyConnection, prefix: str) -> list[str]:
    """The stored run ids starting with prefix (none for a blank prefix, which would match all)."""
    prefix = prefix.strip()
    if not prefix:
        return []
    return [r[0] for r in con.execute("SELECT run_id FROM runs WHERE starts_with(run_id, ?) ORDER BY run_id",
                                      [prefix]).fetchall()]


def resolve_run_id(con: duckdb.DuckDBPyConnection, prefix: str) -> str | None:
    """A full run id from a unique prefix (as users type them from `runs` output)."""
    matches = matching_run_ids(con, prefix)
    return matches[0] if len(matches) == 1 else None
