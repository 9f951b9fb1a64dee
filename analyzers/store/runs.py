"""Run bookkeeping: list, rename, tag, annotate runs, review marks on findings, the trash and the
audit log.

Deleting a run moves it to the trash (run_trash): it disappears from every list but keeps its
rows, so it can be restored, until purge_trash removes runs trashed longer ago than the retention
(the CLI's write commands and the dashboard call it). Every mutation records one audit_log row in
the same transaction, with the actor when the caller knows it (the CLI: the OS user; the
dashboard: the logged-in user).

Every statement takes user text as parameters, never formatted into SQL.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import duckdb

from analyzers.store import partitions
from analyzers.store.database import transaction
from analyzers.common.safe_text import is_utf8_text

MARK_STATUSES = ("to_fix", "fixed", "wont_fix")
# How the dashboard and the reports name a review mark (None: not marked yet).
MARK_LABELS = {None: "not reviewed", "to_fix": "to fix", "fixed": "fixed", "wont_fix": "won't fix"}
TRASH_RETENTION_DAYS = 7.0

# Tables holding per-run rows, deleted together in one transaction when a run is purged.
_RUN_TABLES = ("finding_marks", "findings", "analysis_notes", "whatif", "page_defaults", "events", "event_partitions",
               "memory_snapshots", "memory_segments", "memory_blocks", "memory_trace", "memory_timeline", "ranks",
               "run_trash", "runs")


class RunNotFound(LookupError):
    """No stored run has this id, or the run is in the trash."""

    def __init__(self, run_id: str):
        super().__init__(f"no stored run {run_id!r} (deleted, or never loaded)")
        self.run_id = run_id


def _now() -> datetime:
    """UTC without a zone, as every TIMESTAMP in the store is written."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _rows_as_dicts(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]


def _has_table(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """False on a store written by an older version and opened read-only (nothing could add it)."""
    return bool(con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = ?", [table]).fetchone()[0])


def _not_trashed(con: duckdb.DuckDBPyConnection, column: str = "run_id") -> str:
    """A WHERE condition keeping runs that are not in the trash (column: the run id to test)."""
    if not _has_table(con, "run_trash"):
        return "true"
    return f"{column} NOT IN (SELECT run_id FROM run_trash)"   # column: a name from this module


# --------------------------------------------------------------------------- audit log

def record_audit(con: duckdb.DuckDBPyConnection, action: str, run_id: str | None = None,
                 actor: str | None = None, detail: str | None = None) -> None:
    """Append one row to the audit log (who did what to which run, when)."""
    con.execute('INSERT INTO audit_log ("at", actor, action, run_id, detail) VALUES (?, ?, ?, ?, ?)',
                [_now(), actor, action, run_id, detail])


def audit_log(con: duckdb.DuckDBPyConnection, limit: int = 200) -> list[dict[str, Any]]:
    """The latest audit rows, newest first: at, actor, action, run_id, detail."""
    if not _has_table(con, "audit_log"):
        return []
    return _rows_as_dicts(con.execute(
        'SELECT "at", actor, action, run_id, detail FROM audit_log ORDER BY "at" DESC, rowid DESC LIMIT ?',
        [int(limit)]))


# --------------------------------------------------------------------------- runs

def list_runs(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """All stored runs not in the trash, newest first, with their rank count and event count."""
    cursor = con.execute(
        f"""
        SELECT r.run_id, r.name, r.created_at, r.source, r.world_size, r.tags, r.notes,
               count(k.rank) AS n_ranks, coalesce(sum(k.n_events), 0) AS n_events,
               list(k.rank ORDER BY k.rank) FILTER (WHERE k.rank IS NOT NULL) AS ranks
        FROM runs r LEFT JOIN ranks k USING (run_id)
        WHERE {_not_trashed(con, "r.run_id")}
        GROUP BY ALL
        ORDER BY r.created_at DESC, r.run_id
        """
    )
    return _rows_as_dicts(cursor)


def get_run(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    return next((r for r in list_runs(con) if r["run_id"] == run_id), None)


def run_exists(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """True for a stored run that is not in the trash."""
    return con.execute(f"SELECT count(*) FROM runs WHERE run_id = ? AND {_not_trashed(con)}",
                       [run_id]).fetchone()[0] > 0


def require_run(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Raise RunNotFound unless run_id is a stored run outside the trash (for readers that would
    otherwise answer an empty result for a deleted run)."""
    if not run_exists(con, run_id):
        raise RunNotFound(run_id)


def clean_run_name(name: str) -> str:
    """A run name as stored: stripped; ValueError for a blank one or one that is not text (a
    non-UTF-8 argument), so the CLI and the dashboard refuse the same names."""
    if not is_utf8_text(name):
        raise ValueError("a run name must be UTF-8 text")
    name = name.strip()
    if not name:
        raise ValueError("a run name cannot be blank")
    return name


def rename_run(con: duckdb.DuckDBPyConnection, run_id: str, name: str, actor: str | None = None) -> None:
    name = clean_run_name(name)
    with transaction(con):
        con.execute("UPDATE runs SET name = ? WHERE run_id = ?", [name, run_id])
        record_audit(con, "rename", run_id, actor, name)


def set_tags(con: duckdb.DuckDBPyConnection, run_id: str, tags: list[str], actor: str | None = None) -> None:
    clean = sorted({t.strip() for t in tags if t and t.strip()})
    with transaction(con):
        con.execute("UPDATE runs SET tags = ? WHERE run_id = ?", [clean, run_id])
        record_audit(con, "tags", run_id, actor, ", ".join(clean))


def set_notes(con: duckdb.DuckDBPyConnection, run_id: str, notes: str, actor: str | None = None) -> None:
    with transaction(con):
        con.execute("UPDATE runs SET notes = ? WHERE run_id = ?", [notes, run_id])
        record_audit(con, "notes", run_id, actor, notes)


def set_mark(con: duckdb.DuckDBPyConnection, run_id: str, finding_id: str, status: str | None,
             note: str = "", actor: str | None = None) -> None:
    """Mark a finding in a review (to_fix / fixed / wont_fix) with a note; status None clears it.

    Marks are keyed by the finding's stable id, so they survive re-analysis of the run.
    """
    if status is not None and status not in MARK_STATUSES:
        raise ValueError(f"unknown mark {status!r}; expected one of {', '.join(MARK_STATUSES)}")
    with transaction(con):
        if status is None:
            con.execute("DELETE FROM finding_marks WHERE run_id = ? AND finding_id = ?", [run_id, finding_id])
            record_audit(con, "unmark", run_id, actor, finding_id)
            return
        con.execute(
            """
            INSERT INTO finding_marks (run_id, finding_id, status, note, updated_at) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT (run_id, finding_id) DO UPDATE
            SET status = excluded.status, note = excluded.note, updated_at = excluded.updated_at
            """,
            [run_id, finding_id, status, note, _now()],
        )
        record_audit(con, "mark", run_id, actor, f"{finding_id}: {status}" + (f" ({note})" if note else ""))


def get_marks(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, dict[str, Any]]:
    """finding_id -> {"status", "note", "updated_at"} for one run."""
    rows = con.execute(
        "SELECT finding_id, status, note, updated_at FROM finding_marks WHERE run_id = ?", [run_id]
    ).fetchall()
    return {fid: {"status": s, "note": n, "updated_at": u} for fid, s, n, u in rows}


def matching_run_ids(con: duckdb.DuckDBPyConnection, prefix: str, in_trash: bool = False) -> list[str]:
    """The run ids starting with prefix, among runs outside the trash (in_trash False) or in it
    (True). None for a blank prefix (it would match all) or one that is not text (never an id)."""
    prefix = prefix.strip()
    if not prefix or not is_utf8_text(prefix):
        return []
    if in_trash:
        if not _has_table(con, "run_trash"):
            return []
        sql = "SELECT run_id FROM run_trash WHERE starts_with(run_id, ?) ORDER BY run_id"
    else:
        sql = f"SELECT run_id FROM runs WHERE starts_with(run_id, ?) AND {_not_trashed(con)} ORDER BY run_id"
    return [r[0] for r in con.execute(sql, [prefix]).fetchall()]


def resolve_run_id(con: duckdb.DuckDBPyConnection, prefix: str) -> str | None:
    """A full run id from a unique prefix (as users type them from `runs` output)."""
    matches = matching_run_ids(con, prefix)
    return matches[0] if len(matches) == 1 else None


# --------------------------------------------------------------------------- trash

def delete_run(con: duckdb.DuckDBPyConnection, run_id: str, actor: str | None = None) -> bool:
    """Move a run to the trash (restore_run brings it back until it is purged). Returns False when
    there is no such run outside the trash."""
    with transaction(con):
        if not run_exists(con, run_id):
            return False
        con.execute("INSERT INTO run_trash (run_id, deleted_at, deleted_by) VALUES (?, ?, ?)",
                    [run_id, _now(), actor])
        record_audit(con, "delete", run_id, actor)
    return True


def restore_run(con: duckdb.DuckDBPyConnection, run_id: str, actor: str | None = None,
                detail: str | None = None) -> bool:
    """Take a run out of the trash. Returns False when it was not in the trash."""
    with transaction(con):
        if not con.execute("SELECT count(*) FROM run_trash WHERE run_id = ?", [run_id]).fetchone()[0]:
            return False
        con.execute("DELETE FROM run_trash WHERE run_id = ?", [run_id])
        record_audit(con, "restore", run_id, actor, detail)
    return True


def list_trash(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The runs in the trash, most recently deleted first: run_id, name, deleted_at, deleted_by."""
    if not _has_table(con, "run_trash"):
        return []
    return _rows_as_dicts(con.execute(
        "SELECT t.run_id, r.name, t.deleted_at, t.deleted_by FROM run_trash t JOIN runs r USING (run_id) "
        "ORDER BY t.deleted_at DESC, t.run_id"))


def _remove_run_rows(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    for table in _RUN_TABLES:   # stored tables by full name: `events` may be the view adding partitions
        con.execute(f"DELETE FROM {partitions.stored_table(con, table)} WHERE run_id = ?", [run_id])


def purge_run(con: duckdb.DuckDBPyConnection, run_id: str, actor: str | None = None) -> bool:
    """Delete a run and everything derived from it for good (normally one in the trash; `delete
    --purge` also takes a run outside it). Returns False when there was no such run."""
    with transaction(con):
        if not con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]:
            return False
        files = partitions.own_locations(con, [run_id])   # a copy of the store leaves the original's files
        _remove_run_rows(con, run_id)
        record_audit(con, "purge", run_id, actor)
    partitions.remove_run_files(con, files)     # once the catalogue no longer names them
    return True


def purge_trash(con: duckdb.DuckDBPyConnection, older_than_days: float = TRASH_RETENTION_DAYS,
                actor: str | None = None) -> int:
    """Delete for good the runs trashed more than older_than_days ago; returns how many."""
    cutoff = _now() - timedelta(days=older_than_days)
    with transaction(con):
        expired = [r[0] for r in con.execute(
            "SELECT run_id FROM run_trash WHERE deleted_at <= ? ORDER BY run_id", [cutoff]).fetchall()]
        files = partitions.own_locations(con, expired)
        for run_id in expired:
            _remove_run_rows(con, run_id)
            record_audit(con, "purge", run_id, actor, f"in the trash for over {older_than_days:g} days")
    partitions.remove_run_files(con, files)
    return len(expired)
