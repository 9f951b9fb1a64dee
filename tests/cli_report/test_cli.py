"""The CLI is a contract other tools read: exit codes, run ids, the JSON report shape."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.kineto_traces import _trace
from tests.support.paths import REPO_ROOT as REPO


def run_cli(*args: str, db: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "analyzers", *args, "--db", str(db)],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)


@pytest.fixture()
def job(tmp_path: Path) -> Path:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    for rank in range(2):
        with gzip.open(job_dir / f"rank-{rank}.json.gz", "wt") as f:
            json.dump(_trace(rank, 2, kernel_us=100.0, gap_us=20.0), f)
    return job_dir


def test_ingest_prints_run_id_and_recognises_the_same_files(job, tmp_path):
    db = tmp_path / "store.duckdb"
    first = run_cli("ingest", str(job), db=db)
    assert first.returncode == 0, first.stderr
    run_id = first.stdout.strip()
    assert run_id and "\n" not in run_id
    second = run_cli("ingest", str(job), "--name", "again", db=db)
    assert second.returncode == 0 and second.stdout.strip() == run_id
    listed = json.loads(run_cli("runs", "--format", "json", db=db).stdout)
    assert [r["run_id"] for r in listed] == [run_id]
    assert listed[0]["ranks"] == [0, 1] and listed[0]["world_size"] == 2


def test_analyze_json_follows_the_contract(job, tmp_path):
    db = tmp_path / "store.duckdb"
    proc = run_cli("analyze", str(job), "--format", "json", db=db)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report) >= {"run", "errors", "ranks", "findings"}
    assert set(report["run"]) >= {"run_id", "name", "world_size", "ranks", "files"}
    assert report["run"]["ranks"] == [0, 1] and report["run"]["world_size"] == 2
    assert report["errors"] == []
    rank_keys = {"rank", "steps", "step_time_ms", "idle_pct", "compute_pct", "non_compute_pct",
                 "comm_time_ms", "comm_overlap_pct", "h2d_time_ms"}
    for row in report["ranks"]:
        assert set(row) >= rank_keys
        assert row["steps"] == 3
        # per step: 4 x (10 µs launch lead + 100 µs kernel + 20 µs gap) = 520 µs
        assert row["step_time_ms"] == pytest.approx(0.52, rel=1e-6)
        # GPU span = first kernel start to last kernel end; idle = the gaps between kernels
        span_us = 3 * 520 - 30
        assert row["idle_pct"] == pytest.approx(100 * (span_us - 12 * 100) / span_us, abs=0.01)
        assert row["compute_pct"] == pytest.approx(100 * 1200 / span_us, abs=0.01)
    finding_keys = {"id", "kind", "severity", "rank", "step", "stream", "start_us", "end_us",
                    "cost_ms_per_step", "cost_pct", "summary", "metrics", "fixes"}
    for finding in report["findings"]:
        assert set(finding) >= finding_keys


def test_analyze_reuses_a_stored_run_by_id_and_renders_md_and_html(job, tmp_path):
    db = tmp_path / "store.duckdb"
    run_id = run_cli("ingest", str(job), db=db).stdout.strip()
    md = run_cli("analyze", run_id[:8], "--format", "md", db=db)
    assert md.returncode == 0, md.stderr
    assert "rank" in md.stdout.lower()
    out = tmp_path / "report.html"
    html = run_cli("analyze", run_id, "--format", "html", "--out", str(out), db=db)
    assert html.returncode == 0 and out.read_text().lstrip().lower().startswith("<!doctype html")


def test_nothing_loadable_exits_2_with_errors_naming_files(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    proc = run_cli("analyze", str(bad), "--format", "json", db=tmp_path / "s.duckdb")
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert report["run"] is None and report["errors"][0]["file"].endswith("broken.json")
    assert "Traceback" not in proc.stderr
    assert run_cli("ingest", str(bad), db=tmp_path / "s.duckdb").returncode == 2


def test_fail_on_trips_exit_1_only_above_threshold(tmp_path):
    # CPU launch-bound: each launch is issued 300 µs after the GPU went idle, 4 times a step
    path = tmp_path / "launch_bound.json"
    path.write_text(json.dumps(_trace(0, 1, kernel_us=50.0, gap_us=300.0)))
    db = tmp_path / "store.duckdb"
    report = json.loads(run_cli("analyze", str(path), db=db).stdout)
    launch_gaps = [f for f in report["findings"] if f["kind"] == "launch_gap"]
    assert launch_gaps, report["findings"]
    worst = launch_gaps[0]
    assert worst["cost_pct"] > 50
    assert run_cli("analyze", str(path), "--fail-on", "any:100.1", db=db).returncode == 0
    tripped = run_cli("analyze", str(path), "--fail-on", f"launch_gap:{worst['cost_pct'] - 0.01}", db=db)
    assert tripped.returncode == 1 and worst["id"] in tripped.stderr
    assert run_cli("analyze", str(path), "--fail-on", "x:notanumber", db=db).returncode == 2


@pytest.mark.parametrize("spec", ["no_such_kind", "LAUNCH_GAP", "launch-gap", "launch_gap:nan", "launch_gap:inf", ":5"])
def test_fail_on_rule_that_could_never_trip_is_a_usage_error(job, tmp_path, spec):
    # a misspelt kind or a NaN threshold used to be accepted and never trip: CI passed silently
    proc = run_cli("analyze", str(job), "--fail-on", spec, db=tmp_path / "s.duckdb")
    assert proc.returncode == 2 and "--fail-on" in proc.stderr and "Traceback" not in proc.stderr


def test_blank_ids_and_paths_are_refused_not_read_as_everything(job, tmp_path):
    db = tmp_path / "store.duckdb"
    run_id = run_cli("ingest", str(job), db=db).stdout.strip()
    # an unset shell variable: "" is a prefix of every run id, and Path("") is the current directory
    for blank in ("", "  "):
        proc = run_cli("delete", blank, db=db)
        assert proc.returncode == 2 and "no run id" in proc.stderr
        assert run_cli("analyze", blank, db=db).returncode == 2
        assert run_cli("ingest", blank, db=db).returncode == 2
    assert [r["run_id"] for r in json.loads(run_cli("runs", "--format", "json", db=db).stdout)] == [run_id]


def test_delete_with_an_ambiguous_prefix_names_the_matches(tmp_path):
    from analyzers.ingest import ingest_paths
    from analyzers.store.database import connect
    db = tmp_path / "store.duckdb"
    con = connect(db)
    ids = set()
    for k in range(40):    # enough runs that two ids share a first hex digit
        path = tmp_path / f"t{k}.json"
        path.write_text(json.dumps(_trace(0, 1, kernel_us=50.0 + k, gap_us=10.0, steps=1)))
        ids.add(ingest_paths(con, [path]).run_id)
    con.close()
    first = sorted(ids)[0][0]
    sharing = sorted(i for i in ids if i.startswith(first))
    assert len(sharing) > 1
    proc = run_cli("delete", first, db=db)
    assert proc.returncode == 2 and f"matches {len(sharing)} runs" in proc.stderr
    assert len(json.loads(run_cli("runs", "--format", "json", db=db).stdout)) == 40


def test_report_that_cannot_be_written_is_one_line_exit_2(job, tmp_path):
    for out in (tmp_path / "missing" / "r.json", tmp_path):
        proc = run_cli("analyze", str(job), "--out", str(out), db=tmp_path / "s.duckdb")
        assert proc.returncode == 2 and "cannot write the report" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_nothing_loaded_report_keeps_every_contract_key(tmp_path):
    bad = tmp_path / "empty.json"
    bad.write_text("")
    report = json.loads(run_cli("analyze", str(bad), db=tmp_path / "s.duckdb").stdout)
    assert set(report) == {"run", "errors", "ranks", "memory_snapshots", "findings", "notes"}


def test_a_store_held_by_another_process_is_named_in_plain_words(job, tmp_path):
    import duckdb
    db = tmp_path / "held.duckdb"
    holder = duckdb.connect(str(db))
    try:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        code = ("import analyzers.store.database as s, sys; s._LOCK_WAIT_S = 0.5; "
                "from analyzers.cli import main; sys.exit(main(sys.argv[1:]))")
        proc = subprocess.run([sys.executable, "-c", code, "runs", "--db", str(db)], capture_output=True,
                              text=True, env=env, timeout=120)
    finally:
        holder.close()
    assert proc.returncode == 2
    assert "in use by another process" in proc.stderr and "Traceback" not in proc.stderr


def test_output_piped_into_head_ends_quietly(job, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(f"{sys.executable} -m analyzers analyze {job} --db {tmp_path / 's.duckdb'} | head -c 10",
                          shell=True, capture_output=True, text=True, env=env, timeout=300)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def _os_user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def test_delete_moves_the_run_to_the_trash_and_restore_brings_it_back(job, tmp_path):
    from analyzers.store.runs import audit_log
    from analyzers.store.database import connect

    db = tmp_path / "store.duckdb"
    run_id = run_cli("ingest", str(job), db=db).stdout.strip()
    deleted = run_cli("delete", run_id[:6], db=db)
    assert deleted.returncode == 0 and f"python -m analyzers restore {run_id}" in deleted.stdout
    assert json.loads(run_cli("runs", "--format", "json", db=db).stdout) == []
    trashed = json.loads(run_cli("trash", "--format", "json", db=db).stdout)
    assert [(t["run_id"], t["deleted_by"]) for t in trashed] == [(run_id, _os_user())]
    assert run_id in run_cli("trash", db=db).stdout
    again = run_cli("delete", run_id, db=db)
    assert again.returncode == 2 and "already in the trash" in again.stderr
    in_trash = run_cli("analyze", run_id, db=db)
    assert in_trash.returncode == 2 and "restore" in in_trash.stderr
    assert run_cli("restore", run_id[:6], db=db).stdout.strip() == f"restored {run_id}"
    assert [r["run_id"] for r in json.loads(run_cli("runs", "--format", "json", db=db).stdout)] == [run_id]
    assert run_cli("restore", run_id, db=db).returncode == 2     # not in the trash any more
    purged = run_cli("delete", "--purge", run_id, db=db)
    assert purged.returncode == 0 and "for good" in purged.stdout
    assert run_cli("trash", "--format", "json", db=db).stdout.strip() == "[]"
    assert "empty" in run_cli("trash", db=db).stdout
    assert run_cli("delete", run_id, db=db).returncode == 2
    con = connect(db)
    try:
        actions = [(r["action"], r["actor"]) for r in audit_log(con)]
    finally:
        con.close()
    user = _os_user()
    assert actions == [("purge", user), ("restore", user), ("delete", user), ("ingest", user)]


def _read_only_call(db: Path, *argv: str) -> tuple[int, str]:
    """A CLI command on the store opened read-only (as where the file cannot be written): its exit code and stderr."""
    import contextlib
    import io

    from analyzers import cli
    from analyzers.store.database import connect

    args = cli.build_parser().parse_args(list(argv))
    con = connect(db, read_only=True)
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = cli.COMMANDS[args.command](con, args)
    finally:
        con.close()
    return code, err.getvalue() + out.getvalue()


def test_a_read_only_store_serves_reads_and_says_why_it_cannot_write(job, tmp_path):
    db = tmp_path / "store.duckdb"
    run_id = run_cli("ingest", str(job), db=db).stdout.strip()
    code, text = _read_only_call(db, "analyze", run_id)
    assert code == 2 and "read-only" in text and "not been analysed" in text
    assert run_cli("analyze", run_id, db=db).returncode == 0
    code, text = _read_only_call(db, "analyze", run_id, "--format", "json")
    assert code == 0 and json.loads(text)["run"]["run_id"] == run_id
    code, text = _read_only_call(db, "runs")
    assert code == 0 and run_id in text
    for argv in (("delete", run_id), ("restore", run_id), ("ingest", str(job)), ("analyze", str(job))):
        code, text = _read_only_call(db, *argv)
        assert code == 2 and "read-only" in text and "Traceback" not in text, argv


def test_analyze_path_imports_no_heavy_layers(job, tmp_path):
    # the CLI must start fast: DuckDB hands back frames itself; pandas cost each call 0.35 s
    code = ("import sys, runpy; sys.argv = ['analyzers', 'analyze', sys.argv[1], '--db', sys.argv[2], '--format', 'md']\n"
            "try:\n    runpy.run_module('analyzers', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'streamlit', 'pandas', 'plotly') if m in sys.modules), file=sys.stderr)")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code, str(job), str(tmp_path / "s.duckdb")],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert "## " in done.stdout, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]"


def test_ingest_leaves_the_run_unanalysed_and_analyze_marks_it_current(tmp_path):
    from analyzers.analysis.version import ANALYSIS_VERSION
    from analyzers.read.stored import analysis_is_current
    from analyzers.store.database import connect

    path = tmp_path / "launch_bound.json"
    path.write_text(json.dumps(_trace(0, 1, kernel_us=50.0, gap_us=300.0)))
    db = tmp_path / "s.duckdb"
    run_id = run_cli("ingest", str(path), db=db).stdout.strip()
    con = connect(db)
    try:
        assert not analysis_is_current(con, run_id)
    finally:
        con.close()
    assert run_cli("analyze", run_id, db=db).returncode == 0
    con = connect(db)
    try:
        assert analysis_is_current(con, run_id)
        assert con.execute("SELECT analysis_version FROM runs WHERE run_id = ?", [run_id]).fetchone()[0] == ANALYSIS_VERSION
    finally:
        con.close()


def test_top_with_a_number_no_query_takes_is_a_usage_error(tmp_path):
    """`top --limit 99999999999999999999` (or such a --rank): argparse's usage error, exit 2, no traceback."""
    db = tmp_path / "s.duckdb"
    trace = tmp_path / "r0.json"
    trace.write_text(json.dumps(_trace(0, 1, kernel_us=50.0, gap_us=10.0)))
    run_id = run_cli("ingest", str(trace), "-q", db=db).stdout.split()[0]
    for option in ("--limit", "--rank"):
        done = run_cli("top", run_id, option, "99999999999999999999", db=db)
        assert done.returncode == 2 and "Traceback" not in done.stderr and "not between" in done.stderr, done.stderr


def test_a_store_on_a_read_only_mount_is_said_to_be_on_one(tmp_path):
    """A store on a file system mounted read-only is not blamed on permissions."""
    import shutil

    mount = tmp_path / "ro"
    mount.mkdir()
    db = mount / "s.duckdb"
    trace = tmp_path / "r0.json"
    trace.write_text(json.dumps(_trace(0, 1, kernel_us=50.0, gap_us=10.0)))
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        assert run_cli("ingest", str(trace), "-q", db=db).returncode == 0
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        done = run_cli("ingest", str(trace), db=db)
        assert done.returncode == 2 and "read-only file system" in done.stderr, done.stderr
        assert "no write permission" not in done.stderr
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_split_ingest_counts_only_the_runs_it_stored(tmp_path):
    """Two jobs (a dated trace, and an undated file that is no trace), one of which fails to load:
    "stored as 1 run, one per job (1 job not loaded ...)", not "stored as 1 runs"."""
    good = tmp_path / "all" / "a" / "rank0.json"
    good.parent.mkdir(parents=True)
    good.write_text(json.dumps(_trace(0, 1, kernel_us=50.0, gap_us=10.0)))
    (tmp_path / "all" / "b").mkdir()
    (tmp_path / "all" / "b" / "rank0.json").write_text('{"traceEvents": [1, 2, 3]}')
    done = run_cli("ingest", str(tmp_path / "all"), db=tmp_path / "s.duckdb")
    assert done.returncode == 0, done.stderr
    assert "stored as 1 run, one per job (1 job not loaded" in done.stderr, done.stderr


def test_the_audit_actor_is_the_os_account_and_a_restore_by_ingest_names_it(job, tmp_path):
    """$LOGNAME/$USER (anyone sets them) do not name the actor; files of a trashed run ingested
    again restore it under the same name, not NULL."""
    from analyzers.store.runs import audit_log
    from analyzers.store.database import connect

    db = tmp_path / "store.duckdb"
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOGNAME": "mallory", "USER": "mallory"}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "analyzers", *args, "--db", str(db)], capture_output=True,
                              text=True, cwd=REPO, env=env, timeout=300)
    run_id = cli("ingest", str(job), "-q").stdout.strip()
    assert cli("delete", run_id).returncode == 0
    assert cli("ingest", str(job), "-q").stdout.strip() == run_id
    con = connect(db)
    try:
        actions = [(r["action"], r["actor"]) for r in audit_log(con)]
    finally:
        con.close()
    assert ("restore", _os_user()) in actions and all(actor == _os_user() for _, actor in actions), actions
