"""Runs kept as Parquet partitions (analyzers/store/partitions.py), and their ingest and per-rank analyses
as tasks on a Dask cluster (analyzers/cluster.py, analyzers/execution/rank_tasks.py).

The report (run, ranks, findings, notes) of the sweep's sample runs and real traces
(tests/analysis_support.py SWEEP_SAMPLES, SWEEP_SHARED; every one with TRACEDOCTOR_FULL_SWEEP=1) must be exactly that of
the embedded store: with the events as Parquet in a local folder, in fsspec's memory filesystem
(object storage), and through `--cluster local:2`, the CLI's JSON included."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analyzers.store import partitions
from analyzers.cluster import InProcess, check_address, executor
from analyzers.execution.pipeline import analyze_run
from analyzers.read.stored import stored_rank_table
from analyzers.analysis.metrics import rank_summary
from analyzers.ingest import ingest_jobs, ingest_paths
from analyzers.read.report import build_report
from analyzers.store.runs import delete_run, purge_run
from analyzers.store.database import connect
from tests.support.analysis import (SWEEP_SAMPLES, SWEEP_SHARED, sample_run_paths, shared_trace_names,
                                   sweep_sample_paths, sweep_shared_trace_names)
from tests.support.paths import REPO_ROOT

SAMPLES = REPO_ROOT / "sample_traces"
REPORT_KEYS = ("run", "ranks", "findings", "notes")


def _report_in(con, path: Path, events_root: str | None = None, runner=None) -> dict:
    result = ingest_paths(con, [str(path)], events_root=events_root, runner=runner)
    assert result.run_id and not result.errors, result.errors
    analyze_run(con, result.run_id, runner=runner)
    report = build_report(con, result.run_id)
    # the ranks table stored with the analysis (from its cached views) is the one computed afresh
    assert stored_rank_table(con, result.run_id) is not None
    # (each rank's `memory` figures are joined to that table in the report, from memory events)
    ranks = [{k: v for k, v in rank.items() if k != "memory"} for rank in report["ranks"]]
    assert _same(ranks, rank_summary(con, result.run_id))
    return {key: report[key] for key in REPORT_KEYS}


def _report(path: Path, events_root: str | None = None, runner=None, db: str = ":memory:") -> dict:
    con = connect(db)
    try:
        return _report_in(con, path, events_root, runner)
    finally:
        con.close()


@pytest.fixture(scope="module")
def local_cluster():
    pytest.importorskip("distributed")
    with executor("local:2") as runner:
        yield runner


def _same(a: dict, b: dict) -> bool:
    """Equal down to the JSON text (1 and 1.0 differ there)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _assert_layouts_agree(path: Path, tmp_path: Path, runner, store) -> None:
    embedded = _report_in(store, path)
    folder = _report(path, str(tmp_path / "events"), InProcess(), db=str(tmp_path / "folder.duckdb"))
    assert _same(folder, embedded)
    on_cluster = _report(path, str(tmp_path / "cluster-events"), runner, db=str(tmp_path / "cluster.duckdb"))
    assert _same(on_cluster, embedded)
    # the partitions hold every event, one file per rank, and nothing of the working folders stays
    con = connect(str(tmp_path / "cluster.duckdb"))
    rows = con.execute("SELECT p.rank, p.n_events, r.n_events, p.location FROM event_partitions p "
                       "JOIN ranks r USING (run_id, rank) ORDER BY p.rank").fetchall()
    con.close()
    assert [r[0] for r in rows] == embedded["run"]["ranks"]
    assert all(r[1] == r[2] and r[1] > 0 and os.path.isfile(r[3]) for r in rows)
    assert sorted(os.listdir(tmp_path / "cluster-events")) == [f"run_id={embedded['run']['run_id']}"]


@pytest.mark.parametrize("path", sweep_sample_paths(), ids=lambda p: p.name)
def test_sample_runs_agree_in_every_layout(path, tmp_path, local_cluster, run_store):
    _assert_layouts_agree(path, tmp_path, local_cluster, run_store)


def test_the_sweeps_cases_exist():
    """A renamed sample run or trace must not drop out of the default sweep unnoticed."""
    assert set(SWEEP_SAMPLES) <= {p.name for p in sample_run_paths()}
    shared = shared_trace_names()
    assert not shared or set(SWEEP_SHARED) <= set(shared)


@pytest.mark.parametrize("name", sweep_shared_trace_names() or ["(none)"])
def test_real_traces_agree_in_every_layout(shared_traces, name, tmp_path, local_cluster, run_store):
    _assert_layouts_agree(shared_traces / name, tmp_path, local_cluster, run_store)


def test_object_storage_through_fsspec():
    """Events in fsspec's memory filesystem (what an S3 or GCS bucket is to fsspec) are written,
    read in place, and deleted with the run."""
    fsspec = pytest.importorskip("fsspec")
    path = SAMPLES / "synthetic_all"
    embedded = _report(path)
    root = "memory://td-test-bucket/events"
    con = connect(":memory:")
    result = ingest_paths(con, [str(path)], events_root=root)
    assert result.run_id and not result.errors
    analyze_run(con, result.run_id)
    report = build_report(con, result.run_id)
    assert _same({key: report[key] for key in REPORT_KEYS}, embedded)
    memory = fsspec.filesystem("memory")
    files = memory.glob(f"/td-test-bucket/events/run_id={result.run_id}/rank=*/*.parquet")
    assert len(files) == len(embedded["run"]["ranks"])
    assert con.execute("SELECT count(*) FROM events WHERE run_id = ?", [result.run_id]).fetchone()[0] == \
        sum(r[0] for r in con.execute("SELECT n_events FROM ranks WHERE run_id = ?", [result.run_id]).fetchall())
    # the store file holds no event of it
    assert con.execute(f"SELECT count(*) FROM {partitions.stored_events_table(con)}").fetchone()[0] == 0
    delete_run(con, result.run_id)
    assert purge_run(con, result.run_id)
    assert memory.glob(f"/td-test-bucket/events/run_id={result.run_id}/**") == []
    assert con.execute("SELECT count(*) FROM event_partitions").fetchone()[0] == 0
    con.close()


def test_a_bad_file_fails_alone(tmp_path):
    """A rank file that cannot be parsed is named; the others load as partitions; nothing of the
    failed file, nor the staging folder, stays."""
    good = sorted((SAMPLES / "synthetic_all").iterdir())
    folder = tmp_path / "job"
    folder.mkdir()
    for source in good[:2]:
        (folder / source.name).write_bytes(source.read_bytes())
    (folder / "rank-9.json").write_text('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "name": "a"}, {"ph": ', "utf-8")
    con = connect(":memory:")
    root = tmp_path / "events"
    result = ingest_paths(con, [str(folder)], events_root=str(root))
    assert result.run_id is not None
    assert [e.file for e in result.errors] == ["job/rank-9.json"]
    assert sorted(p.name for p in root.iterdir()) == [f"run_id={result.run_id}"]
    assert len(list(root.glob("run_id=*/rank=*/*.parquet"))) == 2
    con.close()


def test_a_rank_whose_worker_keeps_dying_fails_alone_and_leaves_no_temp(tmp_path, monkeypatch):
    """A worker killed under one rank's task on every try (as the OOM killer would): that file is
    named as failed, the other ranks are stored as the run, and the temp folders the dead workers
    wrote are gone when the ingest returns."""
    pytest.importorskip("distributed")
    from tests.support.cluster_loss import DyingCluster

    scratch = tmp_path / "tmp"
    monkeypatch.setenv("TRACEDOCTOR_TMPDIR", str(scratch))    # before the workers start: they inherit it
    folder = tmp_path / "job"
    folder.mkdir()
    for source in sorted((SAMPLES / "synthetic_control").iterdir()):
        (folder / source.name).write_bytes(source.read_bytes())
    con = connect(":memory:")
    try:
        with executor("local:2") as cluster:
            result = ingest_paths(con, [str(folder)], events_root=str(tmp_path / "events"),
                                  runner=DyingCluster(cluster, "control_rank-2.pt.trace.json.gz"))
            left = sorted(p.name for p in scratch.iterdir() if p.name.startswith("tracedoctor-"))
        assert result.run_id is not None, result.errors
        assert [e.file for e in result.errors] == ["job/control_rank-2.pt.trace.json.gz"]
        assert "died" in result.errors[0].error
        assert sorted(result.ranks) == [0, 1, 3]
        assert con.execute("SELECT count(*) FROM ranks WHERE run_id = ?", [result.run_id]).fetchone()[0] == 3
        assert left == [], left
    finally:
        con.close()


def test_refused_store_write_leaves_no_partition(tmp_path, monkeypatch):
    """When the catalogue cannot be written, the moved partition files are deleted again."""
    from analyzers.ingest import partitioned

    def fail(*_args, **_kwargs):
        raise RuntimeError("catalogue write refused")
    monkeypatch.setattr(partitioned, "_commit", fail)
    con = connect(":memory:")
    root = tmp_path / "events"
    with pytest.raises(RuntimeError):
        ingest_paths(con, [str(SAMPLES / "synthetic_all")], events_root=str(root))
    assert not list(root.rglob("*"))       # no file, no empty folder
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    con.close()


def test_the_same_files_again_reuse_the_run(tmp_path):
    con = connect(":memory:")
    root = str(tmp_path / "events")
    first = ingest_jobs(con, [str(SAMPLES / "synthetic_all")], events_root=root)[0]
    again = ingest_jobs(con, [str(SAMPLES / "synthetic_all")], events_root=root)[0]
    assert again.run_id == first.run_id and again.reused
    assert len(list((tmp_path / "events").glob("run_id=*/rank=*/*.parquet"))) == 4
    con.close()


def test_cluster_addresses_are_checked():
    assert check_address("local:2") is None and check_address("tcp://10.0.0.1:8786") is None
    assert "N >= 1" in check_address("local:0") and "N >= 1" in check_address("local:x")
    assert "address" in check_address(" ")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analyzers", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def test_cli_cluster_json_equals_in_process(tmp_path):
    """`analyze --cluster local:2`: the findings and ranks JSON are the in-process ones."""
    pytest.importorskip("distributed")
    path = str(SAMPLES / "cpu_balanced_sampler_before")
    plain = _cli("analyze", path, "--db", str(tmp_path / "a.duckdb"), "-q", cwd=tmp_path)
    clustered = _cli("analyze", path, "--db", str(tmp_path / "b.duckdb"), "-q", "--cluster", "local:2", cwd=tmp_path)
    assert plain.returncode == 0 and clustered.returncode == 0, clustered.stderr
    a, b = json.loads(plain.stdout), json.loads(clustered.stdout)
    assert a["findings"] and a["findings"] == b["findings"]
    assert a["ranks"] == b["ranks"] and a["notes"] == b["notes"]
    assert "local Dask cluster of 2 worker processes" in clustered.stderr
    assert (tmp_path / "b.duckdb.events").is_dir()
    # the stored run again, through the cluster
    again = _cli("analyze", b["run"]["run_id"], "--db", str(tmp_path / "b.duckdb"), "-q", "--cluster", "local:2",
                 cwd=tmp_path)
    assert again.returncode == 0 and json.loads(again.stdout)["findings"] == a["findings"]


def test_cli_without_cluster_imports_no_engine(tmp_path):
    code = ("import sys; from analyzers.cli import main; "
            f"rc = main(['analyze', {str(SAMPLES / 'synthetic_all')!r}, '--db', {str(tmp_path / 'x.duckdb')!r}, '-q', "
            f"'--events-dir', {str(tmp_path / 'ev')!r}]); "
            "print('ENGINE', 'distributed' in sys.modules or 'dask' in sys.modules or 'ray' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ENGINE False")


def test_cli_bad_cluster_address_is_refused(tmp_path):
    done = _cli("analyze", str(SAMPLES / "synthetic_all"), "--db", str(tmp_path / "x.duckdb"), "--cluster", "local:0",
                cwd=tmp_path)
    assert done.returncode == 2 and "local:N needs a number of workers" in done.stderr


def test_a_cluster_address_that_is_no_scheduler_or_too_many_workers_is_refused(tmp_path):
    """A service that answers bytes no Dask scheduler sends (Dask would read them as a message of
    exabytes), and local:N far past the machine's cores: exit 2 with one line, promptly, no traceback."""
    import socket
    import threading
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def answer_junk() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.sendall(b"\xff" * 64)

    threading.Thread(target=answer_junk, daemon=True).start()
    try:
        started = time.monotonic()
        done = _cli("ingest", str(SAMPLES / "cpu_dataloader_tuning_after"), "--db", str(tmp_path / "x.duckdb"),
                    "--cluster", f"tcp://127.0.0.1:{listener.getsockname()[1]}", cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "no Dask scheduler answered" in done.stderr and time.monotonic() - started < 60
    finally:
        listener.close()
    done = _cli("ingest", str(SAMPLES / "cpu_dataloader_tuning_after"), "--db", str(tmp_path / "x.duckdb"),
                "--cluster", "local:100000", cwd=tmp_path)
    assert done.returncode == 2 and "local workers on this machine" in done.stderr and "Traceback" not in done.stderr


def test_a_missing_partition_file_spares_the_other_runs(tmp_path):
    """A partition file deleted by hand: the other runs of the store still read; that run's
    analysis says which file is missing."""
    con = connect(str(tmp_path / "store.duckdb"))
    root = str(tmp_path / "events")
    lost = ingest_paths(con, [str(SAMPLES / "synthetic_all")], events_root=root).run_id
    kept = ingest_paths(con, [str(SAMPLES / "cpu_balanced_sampler_before")], events_root=root).run_id
    embedded = ingest_paths(con, [str(SAMPLES / "synthetic_control")]).run_id
    gone = partitions.locations(con, lost, 1)[0]
    os.remove(gone)
    con.close()
    con = connect(str(tmp_path / "store.duckdb"))
    for run_id in (kept, embedded):
        assert con.execute("SELECT count(*) FROM events WHERE run_id = ?", [run_id]).fetchone()[0] > 0
        analyze_run(con, run_id)
    with pytest.raises(Exception, match="rank=1"):
        analyze_run(con, lost)
    con.close()


def test_a_missing_or_unreadable_partition_is_a_named_error_in_every_command(tmp_path):
    """A rank's Parquet file deleted (or unreadable): `analyze RUN_ID` and `top RUN_ID` exit 2
    naming the run, the rank and the file, never a traceback, and `top` gives no partial table."""
    db = str(tmp_path / "store.duckdb")
    done = _cli("ingest", str(SAMPLES / "synthetic_all"), "--db", db, "--events-dir", str(tmp_path / "events"), "-q",
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[0]
    con = connect(db)
    gone = partitions.locations(con, run_id, 2)[0]
    con.close()
    os.remove(gone)
    for command in (["analyze", run_id, "--format", "json"], ["top", run_id]):
        done = _cli(*command, "--db", db, cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"run {run_id}" in done.stderr and "rank 2" in done.stderr and gone in done.stderr, done.stderr
        assert done.stdout == ""


def test_an_events_root_that_ends_with_the_process_is_refused(tmp_path):
    """--events-dir memory://... for a store on disk: the runs would outlive their events; refused
    with rc 2 before anything is stored."""
    db = str(tmp_path / "store.duckdb")
    done = _cli("ingest", str(SAMPLES / "cpu_dataloader_tuning_after"), "--db", db, "--events-dir", "memory://td/x",
                cwd=tmp_path)
    assert done.returncode == 2 and "memory://" in done.stderr and "Traceback" not in done.stderr, done.stderr
    con = connect(db)
    try:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    finally:
        con.close()


def test_a_copy_of_a_store_never_deletes_the_originals_partition_files(tmp_path):
    """A store file copied (a backup, a colleague's copy) shares its runs' partition files: purging a
    run in the copy leaves them, and the original still analyses that run."""
    import shutil

    original = str(tmp_path / "store.duckdb")
    con = connect(original)
    run_id = ingest_paths(con, [str(SAMPLES / "cpu_balanced_sampler_before")],
                          events_root=str(tmp_path / "events")).run_id
    files = partitions.locations(con, run_id)
    con.close()
    copy = str(tmp_path / "copy.duckdb")
    shutil.copy(original, copy)
    con = connect(copy)
    assert purge_run(con, run_id)
    con.close()
    assert all(os.path.isfile(f) for f in files)
    con = connect(original)
    try:
        analyze_run(con, run_id)
        assert purge_run(con, run_id)          # the store that wrote them deletes them
    finally:
        con.close()
    assert not any(os.path.exists(f) for f in files)


def test_traces_read_from_a_url(tmp_path):
    """A folder or file given as an fsspec URL (here fsspec's memory filesystem, as an S3 bucket
    would be) loads as the same run as the local files, named as a local load names them."""
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    local = SAMPLES / "cpu_balanced_sampler_before"
    for source in sorted(local.iterdir()):
        memory.pipe(f"/td-url-test/{local.name}/{source.name}", source.read_bytes())
    memory.pipe("/td-url-test/escape/a/x.json", b"{}")
    memory.pipe("/td-url-test/escape/a/../../../td-escaped.json", (local / "rank-0.json.gz").read_bytes())

    def load(*paths):
        con = connect(":memory:")
        try:
            return ingest_paths(con, list(paths)), con.execute("SELECT name, source FROM runs").fetchall()
        finally:
            con.close()
    from_disk, _ = load(str(local))
    from_url, stored = load(f"memory://td-url-test/{local.name}")
    assert from_url.run_id == from_disk.run_id and not from_url.errors
    assert from_url.files == from_disk.files and stored[0][0] == local.name
    one, _ = load(f"memory://td-url-test/{local.name}/rank-0.json.gz")
    assert one.run_id and one.files == ["rank-0.json.gz"]
    missing, _ = load("memory://td-url-test/nothing-here/")
    assert missing.run_id is None and "no such file or folder" in missing.errors[0].error
    unknown, _ = load("nosuchprotocol://bucket/x")
    assert unknown.run_id is None and unknown.errors[0].file == "nosuchprotocol://bucket/x"
    # credentials and a presigned query never reach messages or the store
    secret, _ = load("memory://user:s3cret@td-url-test/nothing-here/?X-Amz-Signature=abc")
    assert "s3cret" not in secret.errors[0].file and "abc" not in secret.errors[0].file


@pytest.fixture()
def http_traces(tmp_path):
    """sample_traces served over HTTP on a free loopback port: its base URL."""
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(SAMPLES))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_no_secret_of_a_url_is_printed_stored_or_raised(tmp_path, http_traces):
    """A presigned URL's signature and a URL's user:password appear in no progress line, message,
    stored file name or `run.files`; protocols that are no storage (reference://, dbfs://, dir://,
    jupyter://) are refused by name, without a traceback."""
    pytest.importorskip("aiohttp")
    db = str(tmp_path / "s.duckdb")
    presigned = f"{http_traces}/cpu_dataloader_tuning_after/after.json.gz?X-Amz-Signature=SIGS3KR1T&X-Amz-Credential=AKIDS3KR1T"
    done = _cli("analyze", presigned, "--db", db, "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    con = connect(db, read_only=True)
    try:
        stored = json.dumps(con.execute("SELECT * FROM ranks").fetchall() + con.execute("SELECT * FROM runs").fetchall()
                            + con.execute("SELECT * FROM audit_log").fetchall(), default=str)
    finally:
        con.close()
    assert report["run"]["files"] == ["after.json"]
    for text in (done.stdout, done.stderr, stored):
        assert "S3KR1T" not in text
    for url in ("s3://AKIDKEY:S3KR1TKEY@bucket/x.json", f"{http_traces.replace('//', '//user:PASSS3KR1T@')}/x.json",
                "reference://x", "dbfs://x", "dir://x", "jupyter://x"):
        done = _cli("ingest", url, "--db", db, cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "S3KR1T" not in done.stdout + done.stderr, done.stderr
        assert "refused" in done.stderr, done.stderr


def test_object_names_cannot_escape_the_fetch_folder(tmp_path):
    """An object key with ../ in it is refused, and nothing is written outside the fetch folder."""
    fsspec = pytest.importorskip("fsspec")
    from analyzers.ingest.sources import InputError, Limits, fetch_url

    memory = fsspec.filesystem("memory")
    memory.pipe("/td-escape/job/rank0.json", b"{}")
    memory.pipe("/td-escape/job/a/../../../escaped.json", b"{}")
    into = tmp_path / "deep" / "er" / "fetch"
    keys = memory.find("/td-escape/job")
    if not any(".." in k for k in keys):
        pytest.skip("this fsspec normalises '..' in memory keys")
    with pytest.raises(InputError, match="outside the folder"):
        fetch_url("memory://td-escape/job", into, Limits())
    assert not list(tmp_path.rglob("escaped.json"))


def test_purging_a_partitioned_run_keeps_the_others_readable(tmp_path):
    con = connect(str(tmp_path / "store.duckdb"))
    root = str(tmp_path / "events")
    gone = ingest_paths(con, [str(SAMPLES / "synthetic_all")], events_root=root).run_id
    kept = ingest_paths(con, [str(SAMPLES / "cpu_balanced_sampler_before")], events_root=root).run_id
    embedded = ingest_paths(con, [str(SAMPLES / "synthetic_control")]).run_id
    assert purge_run(con, gone)
    for run_id in (kept, embedded):     # the same connection: its `events` no longer names the purged files
        assert con.execute("SELECT count(*) FROM events WHERE run_id = ?", [run_id]).fetchone()[0] > 0
    assert not (tmp_path / "events" / f"run_id={gone}").exists()
    con.close()


def test_a_store_with_unreadable_partitions_still_opens(tmp_path):
    """Partitions in another process's memory:// (or a bucket this machine cannot reach) leave the
    store openable and its other runs readable."""
    db = str(tmp_path / "store.duckdb")
    con = connect(db)
    embedded = ingest_paths(con, [str(SAMPLES / "synthetic_control")]).run_id
    columns = "(run_id, rank, location, n_events, n_bytes)"
    con.execute(f"INSERT INTO event_partitions {columns} VALUES ('elsewhere', 0, 'memory://no-such-bucket/x.parquet', 1, 1)")
    con.execute(f"INSERT INTO event_partitions {columns} VALUES ('elsewhere', 1, 'nosuchprotocol://b/x.parquet', 1, 1)")
    con.close()
    con = connect(db)
    assert con.execute("SELECT count(*) FROM events WHERE run_id = ?", [embedded]).fetchone()[0] > 0
    con.close()


def test_cluster_tasks_hash_the_plain_files(tmp_path, local_cluster, monkeypatch):
    """On a cluster the driver reads only the heads and tails of plain .json files (their tasks
    hash and parse them before the run is planned); a copy, and a broken file, come out as in this
    process: the same run, the same messages."""
    import gzip

    from analyzers.ingest import sources

    job = tmp_path / "job"
    job.mkdir()
    for index, source in enumerate(sorted((SAMPLES / "synthetic_all").iterdir())[:3]):   # sizes made distinct
        (job / source.name[:-len(".gz")]).write_bytes(gzip.decompress(source.read_bytes()) + b"\n" * (index + 1))
    first = sorted(job.iterdir())[1]
    (job / f"zz-copy-{first.name}").write_bytes(first.read_bytes())
    (job / "rank-7.json").write_text('{"traceEvents": [{"ph": "X", ', "utf-8")
    hashed_here: list[str] = []
    real_hash = sources._hash_file
    monkeypatch.setattr(sources, "_hash_file", lambda path: hashed_here.append(Path(path).name) or real_hash(path))
    con = connect(":memory:")
    clustered = ingest_paths(con, [str(job)], events_root=str(tmp_path / "events"), runner=local_cluster)
    con.close()
    assert hashed_here == []
    monkeypatch.setattr(sources, "_hash_file", real_hash)
    con = connect(":memory:")
    here = ingest_paths(con, [str(job)])
    con.close()
    assert clustered.run_id == here.run_id and clustered.files == here.files and len(here.files) == 3
    assert clustered.errors == here.errors and clustered.warnings == here.warnings
    assert [w.file for w in here.warnings] == [f"job/zz-copy-{first.name}"]


def test_cluster_tasks_inflate_the_gzipped_files(tmp_path, local_cluster, monkeypatch):
    """On a cluster the driver inflates only the head of each .json.gz (to plan the run); the
    tasks inflate the rest, from the original files, and the run is the one loaded in-process."""
    from analyzers.ingest import sources

    inflated_here: list[str] = []
    real_inflate = sources._gzip_file
    monkeypatch.setattr(sources, "_gzip_file",
                        lambda path, *args: inflated_here.append(Path(path).name) or real_inflate(path, *args))
    path = SAMPLES / "cpu_balanced_sampler_before"
    con = connect(":memory:")
    clustered = ingest_paths(con, [str(path)], events_root=str(tmp_path / "events"), runner=local_cluster)
    stored = con.execute("SELECT rank, file_name, file_hash, world_size FROM ranks JOIN runs USING (run_id) "
                         "ORDER BY rank").fetchall()
    con.close()
    assert inflated_here == []
    monkeypatch.setattr(sources, "_gzip_file", real_inflate)
    con = connect(":memory:")
    here = ingest_paths(con, [str(path)])
    assert clustered.run_id == here.run_id and clustered.files == here.files
    assert stored == con.execute("SELECT rank, file_name, file_hash, world_size FROM ranks JOIN runs USING (run_id) "
                                 "ORDER BY rank").fetchall()
    con.close()


@pytest.fixture
def s3_server(monkeypatch):
    """A local S3-compatible server (moto), reached through s3fs as any bucket would be."""
    moto_server = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    import fsspec

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for key, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": f"http://{host}:{port}"})
    bucket = fsspec.filesystem("s3")
    bucket.mkdir("td-bucket")
    yield bucket
    server.stop()


def test_object_storage_on_an_s3_compatible_server(s3_server):
    """Traces read from a bucket, events written to it as partitions and queried in place there:
    the report is the embedded one's, and purging the run empties the bucket's run folder."""
    path = SAMPLES / "cpu_balanced_sampler_before"
    for source in sorted(path.iterdir()):
        s3_server.put_file(str(source), f"td-bucket/traces/{path.name}/{source.name}")
    embedded = _report(path)
    con = connect(":memory:")
    result = ingest_paths(con, [f"s3://td-bucket/traces/{path.name}"], events_root="s3://td-bucket/events")
    assert result.run_id == embedded["run"]["run_id"] and not result.errors
    assert len(s3_server.glob(f"td-bucket/events/run_id={result.run_id}/rank=*/*.parquet")) == 2
    analyze_run(con, result.run_id)
    report = build_report(con, result.run_id)
    assert _same({key: report[key] for key in REPORT_KEYS}, embedded)
    delete_run(con, result.run_id)
    assert purge_run(con, result.run_id)
    s3_server.invalidate_cache()
    assert s3_server.glob(f"td-bucket/events/run_id={result.run_id}/**/*.parquet") == []
    con.close()
