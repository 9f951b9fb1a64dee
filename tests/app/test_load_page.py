"""Load traces page (streamlit.testing): the run name starts empty after each load, each attempt's
outcome replaces the last one's, a folder of unrelated jobs becomes one run per job, and a store
file deleted or replaced under the running dashboard is reopened with a message, not a traceback."""
from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from analyzers.store.database import connect
from tests.support.app_pages import goto, open_app, plain
from tests.support.app_store import BEFORE_RUN, build_store


def goto_load(at: AppTest) -> AppTest:
    return goto(at, "views/load.py")


def rank_trace(rank: int, world: int, start_us: int) -> str:
    """A minimal rank file of one step, one kernel, starting at start_us on the trace's clock."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": start_us, "dur": 1000},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": start_us + 10,
         "dur": 5, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": start_us + 20, "dur": 400,
         "args": {"device": 0, "stream": 7, "correlation": 7}},
    ]
    return json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": world},
                       "traceEvents": events})


def write_job(folder: Path, world: int, start_us: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(world):
        (folder / f"rank{rank}.json").write_text(rank_trace(rank, world, start_us + 50 * rank))
    return folder


def load_path(at: AppTest, path: str, name: str | None = None) -> AppTest:
    [t for t in at.text_input if t.label == "File or directory path"][0].input(path)
    if name is not None:
        [t for t in at.text_input if t.label == "Run name (optional)"][-1].input(name)
    at.run()
    [b for b in at.button if b.label == "Analyse this path"][0].click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def run_names(db: Path) -> dict[str, str]:
    con = connect(db)
    try:
        return dict(con.execute("SELECT run_id, name FROM runs").fetchall())
    finally:
        con.close()


def test_the_run_name_starts_empty_after_a_load(tmp_path, monkeypatch):
    first, second = write_job(tmp_path / "job_a", 2, 10**15), write_job(tmp_path / "job_b", 2, 2 * 10**15)
    db = tmp_path / "s.duckdb"
    at = load_path(goto_load(open_app(monkeypatch, db)), str(first), name="before the fix")
    name_fields = [t.value for t in at.text_input if t.label == "Run name (optional)"]
    assert name_fields and all(value == "" for value in name_fields), name_fields
    at = load_path(at, str(second))
    names = sorted(run_names(db).values())
    assert names == ["before the fix", "job_b"]   # not stored under the first load's name
    assert any("job_b" in plain(s.value) for s in at.success)


def test_an_error_replaces_the_previous_success(tmp_path, monkeypatch):
    job = write_job(tmp_path / "job_a", 2, 10**15)
    at = load_path(goto_load(open_app(monkeypatch, tmp_path / "s.duckdb")), str(job))
    assert [s.value for s in at.success] and not at.error
    at = load_path(at, str(tmp_path / "job_a_mistyped"))
    assert not at.success, [s.value for s in at.success]
    refusal = [plain(e.value) for e in at.error if "no such file" in e.value]
    assert refusal == [f"{tmp_path / 'job_a_mistyped'}: no such file or directory on this machine"]   # named once
    at = load_path(at, str(job))    # and the next success replaces that error
    assert any("Already stored" in s.value for s in at.success) and not at.error


def test_a_folder_of_two_jobs_is_stored_as_one_run_per_job(tmp_path, monkeypatch):
    parent = tmp_path / "profiles"
    write_job(parent / "job_a", 2, 1_700_000_000_000_000)
    write_job(parent / "job_b", 1, 1_700_000_900_000_000)   # 15 minutes later, another world size
    db = tmp_path / "s.duckdb"
    at = load_path(goto_load(open_app(monkeypatch, db)), str(parent))
    assert sorted(run_names(db).values()) == ["job_a", "job_b"]
    assert any("2 different jobs" in i.value for i in at.info)
    [shown] = [plain(s.value) for s in at.success]      # one summary, a line per run, in job order
    assert shown.startswith("Stored 2 runs, one per job:") and shown.index("job_a") < shown.index("job_b"), shown
    assert "Loaded run **job_a**" in shown and "from 2 file(s)" in shown


def test_a_deleted_store_file_is_recreated_with_a_message(tmp_path, monkeypatch):
    db = tmp_path / "store.duckdb"
    build_store(db)
    at = open_app(monkeypatch, db, run_id=BEFORE_RUN)
    db.unlink()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    warnings = [w.value for w in at.warning]
    assert any("run store file was deleted" in w for w in warnings), warnings
    assert not any("no longer stored" in w for w in warnings)   # the run was not deleted: the store was
    at.run()
    assert not at.exception and not any("run store file" in w.value for w in at.warning)   # said once
    assert db.exists()
    job = write_job(tmp_path / "job_a", 2, 10**15)
    at = load_path(goto_load(at), str(job))      # and the new store takes loads
    assert list(run_names(db).values()) == ["job_a"]


def test_a_store_file_replaced_by_junk_says_so_then_recovers(tmp_path, monkeypatch):
    db = tmp_path / "store.duckdb"
    build_store(db)
    at = open_app(monkeypatch, db, run_id=BEFORE_RUN)
    db.unlink()
    db.write_text("not a database")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("cannot be opened" in e.value for e in at.error), [e.value for e in at.error]
    db.unlink()            # whoever broke it puts it right: the next click works again
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error
    assert any("No run loaded yet" in i.value for i in at.info)


def test_a_store_file_replaced_by_another_store_is_read(tmp_path, monkeypatch):
    db, other = tmp_path / "store.duckdb", tmp_path / "other.duckdb"
    build_store(db)
    at = open_app(monkeypatch, db, run_id=BEFORE_RUN)
    con = connect(other)
    con.close()
    other.replace(db)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("was replaced by another file" in w.value for w in at.warning)
    assert any("No run loaded yet" in i.value for i in at.info)


def test_a_real_folder_of_unrelated_jobs_is_split(shared_traces, tmp_path, monkeypatch):
    db = tmp_path / "s.duckdb"
    at = load_path(goto_load(open_app(monkeypatch, db)), str(shared_traces))
    names = sorted(run_names(db).values())
    assert "nccl2rank" in names and "alexnet_single_gpu" in names and len(names) >= 6, names
    assert any("different jobs" in i.value for i in at.info)
    assert not at.exception


def test_a_url_loads_like_a_folder_and_events_go_where_configured(tmp_path, monkeypatch):
    """A folder typed as a URL (fsspec's memory filesystem standing in for a bucket) loads as the
    same folder would; with TRACEDOCTOR_EVENTS_DIR the page says where events go, and they go there."""
    import fsspec

    local = write_job(tmp_path / "job_u", 2, 1_700_000_000_000_000)
    memory = fsspec.filesystem("memory")
    for source in local.iterdir():
        memory.pipe(f"/td-load-page/job_u/{source.name}", source.read_bytes())
    monkeypatch.setenv("TRACEDOCTOR_EVENTS_DIR", str(tmp_path / "events"))
    db = tmp_path / "u.duckdb"
    at = load_path(goto_load(open_app(monkeypatch, db)), "memory://td-load-page/job_u")
    assert any("Events are kept as Parquet files, one per rank" in plain(c.value) for c in at.caption)
    assert list(run_names(db).values()) == ["job_u"]
    assert any("Loaded run **job_u**" in plain(s.value) for s in at.success)
    assert len(list((tmp_path / "events").glob("run_id=*/rank=*/*.parquet"))) == 2


def test_an_upload_ticket_whose_secret_holds_two_underscores_draws_the_page(tmp_path, monkeypatch):
    """Upload tickets are url-safe secrets; now and then one holds "__", which Streamlit refuses in
    a component's key: the page must draw whatever the secret."""
    import secrets

    real = secrets.token_urlsafe
    monkeypatch.setattr(secrets, "token_urlsafe", lambda nbytes=32: "a__" + real(nbytes))
    at = goto_load(open_app(monkeypatch, tmp_path / "s.duckdb"))
    assert not at.exception, [e.value for e in at.exception]
    job = write_job(tmp_path / "job_a", 2, 10**15)
    at = load_path(at, str(job))       # a load opens the next ticket, drawn again
    assert [s.value for s in at.success]


def test_component_keys_never_hold_two_underscores_and_differ_per_secret():
    from app.auth import component_key

    keys = {component_key("uploader", secret) for secret in ("a__b", "a__c", "__", "x_")}
    assert len(keys) == 4 and not any("__" in key for key in keys)
