"""The trash and the audit log (#12, team mode): deleting moves a run to the trash, restore brings
it back, purges delete for good; every change is recorded with who made it."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest

from analyzers.store import runs
from analyzers.ingest import ingest_paths
from analyzers.read.queries import export_window_trace
from analyzers.store.database import connect
from tests.support.kineto_traces import _trace


@pytest.fixture()
def con():
    c = connect(":memory:")
    for run_id in ("aaa111", "bbb222"):
        c.execute("INSERT INTO runs (run_id, name, created_at, content_hash) VALUES (?, ?, now(), ?)",
                  [run_id, f"name-{run_id}", run_id])
        c.execute("INSERT INTO ranks (run_id, rank, file_name, file_hash, n_events) VALUES (?, 0, 'r0.json', 'x', 1)",
                  [run_id])
        c.execute("INSERT INTO events (run_id, rank, kind, ph, name, ts_ns, dur_ns) VALUES (?, 0, 'kernel', 'X', 'k', 0, 5)",
                  [run_id])
    yield c
    c.close()


def live_ids(con) -> list[str]:
    return sorted(r["run_id"] for r in runs.list_runs(con))


def test_a_deleted_run_waits_in_the_trash_hidden_from_every_list(con):
    assert runs.delete_run(con, "aaa111", actor="alice") is True
    assert live_ids(con) == ["bbb222"]
    assert runs.get_run(con, "aaa111") is None and not runs.run_exists(con, "aaa111")
    assert runs.matching_run_ids(con, "aaa") == [] and runs.resolve_run_id(con, "aaa") is None
    assert runs.matching_run_ids(con, "aaa", in_trash=True) == ["aaa111"]
    [trashed] = runs.list_trash(con)
    assert (trashed["run_id"], trashed["name"], trashed["deleted_by"]) == ("aaa111", "name-aaa111", "alice")
    assert con.execute("SELECT count(*) FROM events WHERE run_id = 'aaa111'").fetchone()[0] == 1   # rows kept
    assert runs.restore_run(con, "aaa111", actor="bob") is True
    assert runs.restore_run(con, "aaa111") is False
    assert live_ids(con) == ["aaa111", "bbb222"] and runs.list_trash(con) == []


def test_purge_trash_deletes_only_runs_past_the_retention(con):
    runs.delete_run(con, "aaa111")
    runs.delete_run(con, "bbb222")
    con.execute("UPDATE run_trash SET deleted_at = deleted_at - ? WHERE run_id = 'aaa111'", [timedelta(days=8)])
    assert runs.purge_trash(con) == 1
    assert con.execute("SELECT list(DISTINCT run_id) FROM events").fetchone()[0] == ["bbb222"]
    assert [r["run_id"] for r in runs.list_trash(con)] == ["bbb222"]
    assert runs.purge_trash(con, older_than_days=0) == 1 and runs.list_trash(con) == []


def test_every_change_is_audited_newest_first(con):
    runs.rename_run(con, "aaa111", "renamed", actor="alice")
    runs.set_tags(con, "aaa111", ["baseline"], actor="alice")
    runs.set_notes(con, "aaa111", "n", actor="alice")
    runs.set_mark(con, "aaa111", "launch_gap:r0", "to_fix", "x", actor="bob")
    runs.set_mark(con, "aaa111", "launch_gap:r0", None, actor="bob")
    runs.delete_run(con, "aaa111", actor="carol")
    runs.restore_run(con, "aaa111", actor="carol")
    runs.delete_run(con, "aaa111", actor="carol")
    runs.purge_run(con, "aaa111", actor="dave")
    runs.record_audit(con, "ingest", "bbb222", actor="cli", detail="1 file(s)")
    log = runs.audit_log(con)
    assert [(r["action"], r["actor"]) for r in log] == [
        ("ingest", "cli"), ("purge", "dave"), ("delete", "carol"), ("restore", "carol"), ("delete", "carol"),
        ("unmark", "bob"), ("mark", "bob"), ("notes", "alice"), ("tags", "alice"), ("rename", "alice")]
    assert log[-1]["detail"] == "renamed" and log[-1]["run_id"] == "aaa111"
    assert len(runs.audit_log(con, limit=3)) == 3


def test_a_refused_change_records_nothing(con):
    with pytest.raises(ValueError):
        runs.rename_run(con, "aaa111", "   ", actor="alice")
    with pytest.raises(ValueError):
        runs.set_mark(con, "aaa111", "f", "done")
    assert runs.audit_log(con) == []


@pytest.fixture()
def ingested(tmp_path):
    """A store holding one ingested run: (store, the trace's path, its run id)."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_trace(0, 1, kernel_us=50.0, gap_us=10.0)))
    store = connect(":memory:")
    yield store, path, ingest_paths(store, [path]).run_id
    store.close()


def test_ingesting_the_files_of_a_trashed_run_restores_it(ingested):
    store, path, run_id = ingested
    runs.delete_run(store, run_id)
    again = ingest_paths(store, [path])
    assert again.run_id == run_id and again.reused
    assert live_ids(store) == [run_id] and runs.list_trash(store) == []
    assert runs.audit_log(store)[0]["action"] == "restore"


@pytest.mark.parametrize("events_dir", [False, True])
def test_a_trashed_sample_run_stays_in_the_trash_when_the_samples_load_again(ingested, tmp_path, events_dir):
    """The dashboard loads its sample runs at every start (and after a cache clear) with
    restore_trashed=False: a sample run a maintainer deleted is not brought back."""
    store, path, run_id = ingested
    runs.delete_run(store, run_id, actor="max")
    root = str(tmp_path / "events") if events_dir else None
    again = ingest_paths(store, [path], restore_trashed=False, events_root=root)
    assert again.run_id is None and not again.errors
    assert live_ids(store) == [] and [r["run_id"] for r in runs.list_trash(store)] == [run_id]
    assert [e["action"] for e in runs.audit_log(store)][0] == "delete"


def test_timeline_export_of_a_deleted_run_is_an_error_not_an_empty_trace(ingested):
    store, _, run_id = ingested
    whole = (0, 2**62)
    assert json.loads(export_window_trace(store, run_id, *whole))["traceEvents"]
    runs.delete_run(store, run_id)
    with pytest.raises(runs.RunNotFound, match=run_id):
        export_window_trace(store, run_id, *whole)
    with pytest.raises(LookupError):
        export_window_trace(store, "never-stored", *whole)
