"""Files of unrelated jobs in one load: ingest_jobs stores one run per job, named after its folder
(or first file); ingest_paths and `analyze` refuse them naming the jobs; `ingest` splits them."""
from __future__ import annotations

import shutil

import json
from pathlib import Path

import pytest

from analyzers.cli import main
from analyzers.ingest import ingest_jobs, ingest_paths
from analyzers.ingest.jobs import JOB_START_GAP_US, JobFile, group_jobs
from analyzers.store.database import connect
from tests.support.paths import REPO_ROOT

DAY_US = 86_400 * 10**6
T0 = 1_700_000_000_000_000     # 2023-11-14, epoch µs as older Kineto writes ts


def trace(start_us: int, dist: dict | None = None, base_ns: int | None = None) -> str:
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
               "ts": start_us, "dur": 1000},
              {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": start_us + 20, "dur": 400}]
    doc = {"schemaVersion": 1, "traceEvents": events}
    if dist is not None:
        doc["distributedInfo"] = dist
    if base_ns is not None:
        doc["baseTimeNanoseconds"] = base_ns
    return json.dumps(doc)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture()
def parent(tmp_path) -> Path:
    """Two jobs a day apart: job_a (2 ranks of world 2), job_b (1 rank of world 1, another day)."""
    for rank in (0, 1):
        write(tmp_path / "all" / "job_a" / f"rank{rank}.json", trace(T0 + 30 * rank, {"rank": rank, "world_size": 2}))
    write(tmp_path / "all" / "job_b" / "rank0.json", trace(T0 + DAY_US, {"rank": 0, "world_size": 1}))
    return tmp_path / "all"


def names(con) -> dict[str, str]:
    return dict(con.execute("SELECT run_id, name FROM runs").fetchall())


def test_a_parent_folder_is_split_into_one_run_per_job(parent):
    con = connect(":memory:")
    results = ingest_jobs(con, [parent])
    assert [r.ranks for r in results] == [[0, 1], [0]]
    assert [names(con)[r.run_id] for r in results] == ["job_a", "job_b"]
    assert all(not r.errors for r in results)
    again = ingest_jobs(con, [parent], name="nightly")          # the same files: the same runs, reused
    assert [r.reused for r in again] == [True, True]
    only = ingest_jobs(con, [parent / "job_a"])                  # one job: exactly as ingest_paths
    assert len(only) == 1 and only[0].run_id == results[0].run_id


def test_a_given_name_prefixes_each_job(parent, tmp_path):
    con = connect(":memory:")
    write(parent / "job_c" / "trace.json", trace(T0 + 2 * DAY_US))
    results = ingest_jobs(con, [parent], name="nightly")
    assert [names(con)[r.run_id] for r in results] == ["nightly · job_a", "nightly · job_b", "nightly · job_c"]


def test_ingest_paths_refuses_mixed_jobs_naming_them(parent):
    con = connect(":memory:")
    result = ingest_paths(con, [parent])
    assert result.run_id is None and con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    [error] = result.errors
    assert "2 different jobs" in error.error
    assert "job_a (2 files, world size 2, traced 2023-11-14 22:13 UTC)" in error.error
    assert "job_b (1 file, world size 1, traced 2023-11-15 22:13 UTC)" in error.error


def test_grouping_rules():
    def f(where, start, dist=None, base=None):
        meta = {} if dist is None else {"distributedInfo": dist}
        if base is not None:
            meta["baseTimeNanoseconds"] = base
        return JobFile(where, where, meta, start if base is None else base / 1000)

    # ranks of one job a few seconds apart, and a file without distributedInfo beside them: one job
    one = group_jobs([f("a/rank0.json", T0, {"rank": 0, "world_size": 2}),
                      f("a/rank1.json", T0 + 3 * 10**6, {"rank": 1, "world_size": 2}),
                      f("a/host.json", T0 + 10**6)])
    assert [job.members for job in one] == [[0, 1, 2]]
    # the same times, different world sizes: two jobs
    assert len(group_jobs([f("x/a.json", T0, {"world_size": 2}), f("y/b.json", T0, {"world_size": 4})])) == 2
    # a relative clock next to an epoch clock (the "1,666,178,633,367 ms into the trace" mix): two jobs
    assert len(group_jobs([f("x/a.json", T0), f("y/b.json", 4_458_676_522_690)])) == 2
    # just inside and just past the gap
    assert len(group_jobs([f("x/a.json", T0), f("x/b.json", T0 + JOB_START_GAP_US)])) == 1
    assert len(group_jobs([f("x/a.json", T0), f("x/b.json", T0 + JOB_START_GAP_US + 1)])) == 2
    # hosts of one job whose own clocks differ by weeks, dated by baseTimeNanoseconds: one job
    hosts = group_jobs([f("j/rank0.json", 4_458_676_522_690, {"rank": 0, "world_size": 2}, base=T0 * 1000),
                        f("j/rank1.json", 1_212_075_525_586, {"rank": 1, "world_size": 2}, base=T0 * 1000 + 2 * 10**9)])
    assert len(hosts) == 1 and hosts[0].label == "j"


def test_cli_ingest_splits_and_analyze_refuses(parent, tmp_path, capsys):
    db = str(tmp_path / "s.duckdb")
    assert main(["ingest", str(parent), "--db", db, "-q"]) == 0
    out, err = capsys.readouterr()
    run_ids = out.split()
    assert len(run_ids) == 2
    assert "2 different jobs" in err and "job_a" in err and "job_b" in err
    assert main(["analyze", str(parent), "--db", db]) == 2
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["run"] is None and "2 different jobs" in report["errors"][0]["error"]
    assert "python -m analyzers ingest" in err


def test_real_shared_traces_folder_is_split_by_job(shared_traces, tmp_path):
    # the folder's own traces and nccl2rank; its folders of runs from other projects (modern/,
    # critical_path/) reuse rank numbers across unrelated jobs and are read one file a run elsewhere
    folder = tmp_path / "traces"
    folder.mkdir()
    for path in shared_traces.glob("*.json.gz"):
        shutil.copyfile(path, folder / path.name)
    shutil.copytree(shared_traces / "nccl2rank", folder / "nccl2rank")
    con = connect(":memory:")
    refused = ingest_paths(con, [folder])
    assert refused.run_id is None and "different jobs" in refused.errors[0].error
    results = ingest_jobs(con, [folder])
    by_name = {names(con)[r.run_id]: r for r in results if r.run_id}
    assert by_name["nccl2rank"].ranks == [0, 1]                    # the two ranks of one job stay together
    assert by_name["cpu_only_rank34"].ranks == [34]
    assert {"alexnet_single_gpu", "nccl_allreduce_with_sizes", "triton_single_kernel"} <= set(by_name)
    for run_id in (r.run_id for r in results):                     # no run spans days any more
        span_ns = con.execute("SELECT max(ts_ns) - min(ts_ns) FROM events WHERE run_id = ?", [run_id]).fetchone()[0]
        assert span_ns < 2 * JOB_START_GAP_US * 1000, (names(con)[run_id], span_ns)


def test_before_and_after_folders_a_minute_apart_are_two_jobs(tmp_path):
    # one set-up profiled twice, a minute apart (the usual before/after of a fix): same world size,
    # within JOB_START_GAP_US; their files claim the same ranks, and the folders tell them apart
    for run, start in (("before", T0), ("after", T0 + 60 * 10**6)):
        for rank in (0, 1):
            write(tmp_path / "exp" / run / f"rank{rank}.json",
                  trace(start + 30 * rank, {"rank": rank, "world_size": 2, "backend": "nccl"}))
    con = connect(":memory:")
    results = ingest_jobs(con, [tmp_path / "exp"])
    assert sorted(names(con)[r.run_id] for r in results) == ["after", "before"]
    assert [r.ranks for r in results] == [[0, 1], [0, 1]] and all(not r.errors for r in results)


def test_a_file_without_distributed_info_stays_out_of_another_folders_job(tmp_path):
    for rank in (0, 1):
        write(tmp_path / "all" / "ddp" / f"rank{rank}.json", trace(T0 + 30 * rank, {"rank": rank, "world_size": 2}))
    write(tmp_path / "all" / "single" / "trace.json", trace(T0 + 90 * 10**6))   # a single-process run, no rank info
    con = connect(":memory:")
    results = ingest_jobs(con, [tmp_path / "all"])
    assert sorted((names(con)[r.run_id], tuple(r.ranks)) for r in results) == [("ddp", (0, 1)), ("single", (0,))]


def test_the_sample_folder_gives_one_run_per_job_folder():
    samples = REPO_ROOT / "sample_traces"
    con = connect(":memory:")
    results = ingest_jobs(con, [samples])
    folders = sorted(p.name for p in samples.iterdir() if p.is_dir() and not p.name.startswith("__"))
    assert sorted(names(con)[r.run_id] for r in results if r.run_id) == folders
    # manifest.json lies beside the job folders: named as no trace, the rest loads
    assert [e.file for r in results for e in r.errors] == ["sample_traces/manifest.json"]


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_trace_whose_first_event_is_huge_is_dated_and_joins_no_other_job(tmp_path, gzipped):
    """A 2026 trace whose first event's name is 70 KB (its first timestamp past the first 64 KiB)
    beside a 2024 trace, neither declaring distributedInfo: two runs, not one "before (+1)"."""
    import gzip

    t2024, t2026 = 1_710_000_000_000_000, 1_770_000_000_000_000
    doc = json.loads(trace(t2026))
    doc["traceEvents"][0]["name"] = "x" * 70_000
    late = json.dumps(doc).encode()
    write(tmp_path / "mixed" / "before.json", trace(t2024))
    target = tmp_path / "mixed" / ("huge_name.json.gz" if gzipped else "huge_name.json")
    target.write_bytes(gzip.compress(late) if gzipped else late)
    con = connect(":memory:")
    try:
        results = ingest_jobs(con, [str(tmp_path / "mixed")])
        assert len(results) == 2 and all(r.run_id for r in results), [(r.run_id, r.errors) for r in results]
        assert sorted(len(r.files) for r in results) == [1, 1]
    finally:
        con.close()


def test_an_undated_file_is_a_job_of_its_own(tmp_path):
    """A file with no timestamp to date it (metadata events only) beside a dated trace: split by
    job, it is a run of its own, never merged into the dated one's."""
    write(tmp_path / "mixed" / "dated.json", trace(1_770_000_000_000_000))
    write(tmp_path / "mixed" / "undated.json", json.dumps({"traceEvents": [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "python"}}]}))
    con = connect(":memory:")
    try:
        results = ingest_jobs(con, [str(tmp_path / "mixed")])
        assert len(results) == 2, [(r.run_id, r.errors) for r in results]
        loaded = [r for r in results if r.run_id]
        assert sorted(Path(f).name for r in results for f in r.files) == ["dated.json", "undated.json"]
        assert all(len(r.files) == 1 for r in results)
        # asked for as one run, it stays in it, and a warning names it
        single = ingest_paths(con, [str(tmp_path / "mixed")])
        assert single.run_id and len(single.files) == 2
        assert [Path(w.file).name for w in single.warnings if "no timestamp" in w.error] == ["undated.json"]
    finally:
        con.close()
