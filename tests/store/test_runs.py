"""Run bookkeeping: rename, tags, notes, marks, delete — with hostile text passed as parameters."""
import pytest

from analyzers.store import runs
from analyzers.store.database import connect


@pytest.fixture()
def con():
    c = connect(":memory:")
    for run_id, name in (("aaa111", "first"), ("aaa222", "second"), ("bbb333", "third")):
        c.execute("INSERT INTO runs (run_id, name, created_at, content_hash) VALUES (?, ?, now(), ?)",
                  [run_id, name, run_id * 2])
        c.execute("INSERT INTO ranks (run_id, rank, file_name, file_hash, n_events) VALUES (?, 0, 'r0.json', 'x', 10)",
                  [run_id])
        c.execute("INSERT INTO events (run_id, rank, kind, name, ts_ns, dur_ns) VALUES (?, 0, 'kernel', 'k', 0, 5)",
                  [run_id])
    yield c
    c.close()


def test_list_runs_counts_ranks_and_events(con):
    listed = {r["run_id"]: r for r in runs.list_runs(con)}
    assert set(listed) == {"aaa111", "aaa222", "bbb333"}
    assert listed["aaa111"]["n_ranks"] == 1 and listed["aaa111"]["n_events"] == 10
    assert listed["aaa111"]["ranks"] == [0]


def test_rename_tags_notes_take_hostile_text_verbatim(con):
    hostile = "x'); DROP TABLE runs; --<script>"
    runs.rename_run(con, "aaa111", hostile)
    runs.set_tags(con, "aaa111", ["after-fix", " baseline ", "after-fix", ""])
    runs.set_notes(con, "aaa111", hostile)
    run = runs.get_run(con, "aaa111")
    assert run["name"] == hostile and run["notes"] == hostile
    assert run["tags"] == ["after-fix", "baseline"]
    with pytest.raises(ValueError):
        runs.rename_run(con, "aaa111", "   ")


def test_marks_upsert_clear_and_validate(con):
    runs.set_mark(con, "aaa111", "launch_gap:r0", "to_fix", "owner: alice")
    runs.set_mark(con, "aaa111", "launch_gap:r0", "fixed", "merged #42")
    marks = runs.get_marks(con, "aaa111")
    assert list(marks) == ["launch_gap:r0"]
    assert marks["launch_gap:r0"]["status"] == "fixed" and marks["launch_gap:r0"]["note"] == "merged #42"
    with pytest.raises(ValueError):
        runs.set_mark(con, "aaa111", "launch_gap:r0", "done")
    runs.set_mark(con, "aaa111", "launch_gap:r0", None)
    assert runs.get_marks(con, "aaa111") == {}


def test_purge_removes_every_row_of_the_run_only(con):
    runs.set_mark(con, "aaa111", "f", "to_fix")
    assert runs.delete_run(con, "aaa111") is True
    assert runs.delete_run(con, "aaa111") is False      # already in the trash
    assert runs.purge_run(con, "aaa111") is True
    assert runs.purge_run(con, "aaa111") is False
    for table in ("runs", "ranks", "events", "finding_marks", "run_trash"):
        assert con.execute(f"SELECT count(*) FROM {table} WHERE run_id = 'aaa111'").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM events").fetchone()[0] == 2


def test_resolve_run_id_needs_a_unique_prefix(con):
    assert runs.resolve_run_id(con, "bbb") == "bbb333"
    assert runs.resolve_run_id(con, "aaa") is None      # ambiguous
    assert runs.resolve_run_id(con, "zzz") is None
