"""analyzers.ingest on small traces written by the tests: exact values, ranks, reuse, rollback."""
from __future__ import annotations

import json

import duckdb
import pytest

from analyzers.ingest import Limits, ingest_paths
from analyzers.ingest import run_writer as ingest_core
from analyzers.ingest import parse as ingest_parse
from analyzers.ingest.layout import scan_layout
from analyzers.store.database import connect
from tests.support.ingest_traces import (EPOCH_TS, EPOCH_TS_NS, EXPECTED_MIXED_KINDS, event, mixed_events,
                                 old_schema_events, trace_text, write, write_tar_gz, write_zip)


@pytest.fixture()
def con():
    c = connect(":memory:")
    yield c
    c.close()


def kinds(con, run_id):
    return dict(con.execute("SELECT kind, count(*) FROM events WHERE run_id = ? GROUP BY kind", [run_id]).fetchall())


def one(con, sql, *params):
    return con.execute(sql, list(params)).fetchone()


def test_new_schema_kinds_and_fields(con, tmp_path):
    path = write(tmp_path / "job" / "rank0.json", trace_text(
        mixed_events(), {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 4, "backend": "nccl"},
                         "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}], "baseTimeNanoseconds": 17e17},
        meta_after={"traceName": "t.json", "displayTimeUnit": "ms"}))
    res = ingest_paths(con, [path])
    assert res.errors == [] and res.warnings == []
    assert kinds(con, res.run_id) == EXPECTED_MIXED_KINDS
    kernel = one(con, "SELECT ts_ns, dur_ns, device, stream, correlation, external_id, pid, tid, cat, ph "
                      "FROM events WHERE kind = 'kernel'")
    assert kernel == (1010125, 20500, 0, 7, 77, 2, "0", "7", "kernel", "X")
    # device/stream from pid and the "stream N" tid when args lack them; bytes kept
    assert one(con, "SELECT device, stream, bytes, correlation FROM events WHERE kind = 'memcpy'") == (0, 20, 4096, 78)
    assert one(con, "SELECT device, stream, bytes FROM events WHERE kind = 'memset'") == (1, 9, 128)
    # flows carry their id as correlation; instants have dur 0; metadata has no ts
    assert sorted(con.execute("SELECT ph, correlation, dur_ns FROM events WHERE kind = 'flow'").fetchall()) == \
        [("f", 77, None), ("s", 77, None)]
    assert one(con, "SELECT dur_ns FROM events WHERE kind = 'instant'") == (0,)
    assert one(con, "SELECT ts_ns FROM events WHERE kind = 'metadata'") == (None,)
    assert one(con, "SELECT pid, tid FROM events WHERE kind = 'trace'") == ("Spans", "PyTorch Profiler")
    # args kept verbatim and queryable
    assert one(con, "SELECT args->>'cuda_sync_kind' FROM events WHERE kind = 'cuda_sync'") == ("Stream Sync",)
    rank = one(con, "SELECT rank, file_name, schema_version, device_name, base_time_ns, n_events, "
                    "distributed_info->>'backend', trace_meta->>'traceName', json_array_length(device_properties) "
                    "FROM ranks WHERE run_id = ?", res.run_id)
    assert rank == (0, "rank0.json", "1", "NVIDIA H100", 1700000000000000000, 17, "nccl", "t.json", 1)
    run = one(con, "SELECT name, world_size, length(content_hash) FROM runs WHERE run_id = ?", res.run_id)
    assert run == ("rank0", 4, 64)
    assert len(res.run_id) == 12 and res.ranks == [0]


def test_old_schema_is_normalised(con, tmp_path):
    path = write(tmp_path / "resnet.json.gz", trace_text(old_schema_events()))
    res = ingest_paths(con, path)
    assert res.errors == []
    assert kinds(con, res.run_id) == {"cpu_op": 1, "runtime": 1, "kernel": 1, "memcpy": 1, "memset": 1, "flow": 2}
    assert con.execute("SELECT kind, external_id FROM events WHERE external_id IS NOT NULL ORDER BY kind").fetchall() == \
        [("cpu_op", 11), ("kernel", 11), ("memcpy", 12), ("runtime", 11)]
    assert one(con, "SELECT ts_ns, device, stream, bytes FROM events WHERE kind = 'memcpy'") == \
        (1610366662254430000, 0, 7, 602112)
    assert one(con, "SELECT name FROM events WHERE kind = 'cpu_op'") == ("ProfilerStep#3",)
    assert one(con, "SELECT name, world_size FROM runs") == ("resnet", 1)


def test_rocm_runtime_kind_comes_from_cat(con, tmp_path):
    path = write(tmp_path / "rocm.json", trace_text([
        event("X", "cuda_runtime", "hipLaunchKernel", pid=3, tid=3, ts="5", dur="1", args={"correlation": 9}),
        event("X", "kernel", "Cijk_Ailk", pid=2, tid=1, ts="6", dur="2", args={"device": 2, "stream": 1, "correlation": 9}),
    ]))
    res = ingest_paths(con, [path])
    assert kinds(con, res.run_id) == {"runtime": 1, "kernel": 1}
    assert one(con, "SELECT device FROM events WHERE kind = 'kernel'") == (2,)


@pytest.mark.parametrize("route", ["predicted", "small_file", "float_first"])
def test_epoch_timestamps_are_exact(con, tmp_path, monkeypatch, route):
    # float64 holds 1712195495519695.812 as ...695.75; the stored value must keep the 812 ns.
    if route != "predicted":   # the sample of the file's head did not see the decimals
        monkeypatch.setattr(ingest_parse, "SAMPLE_BYTES", 0)
    if route == "float_first":   # the large-file route: float parse, detect fractions, redo from text
        monkeypatch.setattr(ingest_parse, "SMALL_BODY", 0)
    events = [event(ts=EPOCH_TS, dur="3.001"),
              event(ts="1712195495519696.999", dur="0.5"),
              event(ts="1712195495519697", dur="1")]
    res = ingest_paths(con, [write(tmp_path / "t.json", trace_text(events))])
    assert res.errors == []
    assert con.execute("SELECT ts_ns, dur_ns FROM events ORDER BY ts_ns").fetchall() == [
        (EPOCH_TS_NS, 3001), (1712195495519696999, 500), (1712195495519697000, 1000)]


def test_exactness_decided_per_rank_in_one_run(con, tmp_path, monkeypatch):
    monkeypatch.setattr(ingest_parse, "SMALL_BODY", 0)
    epoch = write(tmp_path / "rank0.json", trace_text([event(ts=EPOCH_TS)] * 3))
    integer_epoch = write(tmp_path / "rank1.json", trace_text([event(ts="1712195495519700", dur="4")]))
    # a relative clock, dated by baseTimeNanoseconds to the same minute: one job (else refused as another)
    relative = write(tmp_path / "rank2.json", trace_text([event(ts="4458677009853.422", dur="2636.669")],
                                                         {"baseTimeNanoseconds": 1712195495000000000}))
    res = ingest_paths(con, [epoch, integer_epoch, relative])
    assert res.errors == [] and res.ranks == [0, 1, 2]
    assert con.execute("SELECT rank, ts_ns, dur_ns FROM events ORDER BY rank, ts_ns").fetchall() == [
        (0, EPOCH_TS_NS, 2250), (0, EPOCH_TS_NS, 2250), (0, EPOCH_TS_NS, 2250),
        (1, 1712195495519700000, 4000), (2, 4458677009853422, 2636669)]


def test_epoch_timestamps_round_to_the_ns_whatever_the_decimals(con, tmp_path):
    texts = ["1712195495519695.8", "1712195495519695.81", "1712195495519695.8125",
             "1712195495519695.81249", "1712195495519695.9996", "1712195495519695.000"]
    res = ingest_paths(con, [write(tmp_path / "t.json", trace_text([event(ts=t) for t in texts]))])
    assert res.errors == []
    assert [r[0] for r in con.execute("SELECT ts_ns FROM events ORDER BY ts_ns").fetchall()] == [
        1712195495519695000, 1712195495519695800, 1712195495519695810, 1712195495519695812,
        1712195495519695813, 1712195495519696000]


@pytest.mark.parametrize("ts, expected", [
    ("1712195495519695.812", True),      # epoch µs with decimals: float64 steps 0.25 µs there
    ("1712195495519695.000", False),     # no fraction
    ("1610366662254362", False),         # 2021 traces: integer µs
    ("4458676522690.655", False),        # relative clock below 2^43 µs: float64 is exact to the ns
    ("1" * 5000 + ".5", False),          # absurd: no int() of 5000 digits (Python refuses > 4300)
])
def test_timestamp_path_predicted_from_the_head(tmp_path, ts, expected):
    path = write(tmp_path / "t.json", trace_text([event(ts="5"), event(ts=ts)]))
    layout = scan_layout(path)
    assert ingest_parse.predict_exact(str(path), layout.events_start, layout.body_bytes) is expected


def test_relative_timestamps_exact_on_float_path(con, tmp_path, monkeypatch):
    monkeypatch.setattr(ingest_parse, "SMALL_BODY", 0)
    # values from nccl_allreduce_with_sizes where ts * 1000 in float64 rounds the wrong way
    events = [event(ts="4458676522690.655"), event(ts="4458676522709.059"), event(ts="-2.5", dur="0")]
    res = ingest_paths(con, [write(tmp_path / "t.json", trace_text(events))])
    assert sorted(r[0] for r in con.execute("SELECT ts_ns FROM events").fetchall()) == \
        [-2500, 4458676522690655, 4458676522709059]
    assert res.errors == []


@pytest.mark.parametrize("layout", ["events_last", "events_first", "meta_lists_after"])
def test_metadata_found_wherever_trace_events_sits(con, tmp_path, layout):
    meta = {"schemaVersion": 1, "distributedInfo": {"rank": 2, "world_size": 3}, "traceName": "x [a] {b}"}
    after = None
    if layout == "meta_lists_after":   # lists of objects after the events must not be mistaken for them
        after = {"deviceProperties": [{"id": 0, "name": "GPU ]} weird"}], "INFO": ["a]", "b"], "empty": []}
    text = trace_text(mixed_events(), meta, events_first=(layout == "events_first"), meta_after=after)
    path = write(tmp_path / "x.json", text)
    lay = scan_layout(path)
    assert lay.meta["distributedInfo"] == {"rank": 2, "world_size": 3}
    assert json.loads("[" + path.read_bytes()[lay.events_start + 1:lay.events_end].decode() + "]")[0]["name"] == \
        "ProfilerStep#7"
    res = ingest_paths(con, [path])
    assert res.errors == [] and res.ranks == [2]
    assert one(con, "SELECT count(*) FROM events") == (17,)
    if after:
        assert one(con, "SELECT device_name FROM ranks") == ("GPU ]} weird",)


def test_bom_and_non_ascii_metadata(con, tmp_path):
    text = trace_text([event(name="kernel µ")], {"schemaVersion": 1, "légende": "café"},
                      meta_after={"nœud": ["ü"]})
    res = ingest_paths(con, [write(tmp_path / "bom.json", b"\xef\xbb\xbf" + text.encode("utf-8"))])
    assert res.errors == []
    assert one(con, "SELECT trace_meta->>'légende', trace_meta->'nœud'->>0 FROM ranks") == ("café", "ü")
    assert one(con, "SELECT name FROM events") == ("kernel µ",)


def test_bare_event_array_is_accepted(con, tmp_path):
    path = write(tmp_path / "chrome.json", "[" + ",".join(mixed_events()[:3]) + "]")
    res = ingest_paths(con, [path])
    assert res.errors == [] and one(con, "SELECT count(*) FROM events") == (3,)


def test_ranks_from_distributed_info_names_and_order(con, tmp_path):
    d = tmp_path / "job"
    write(d / "a.json", trace_text([event()], {"distributedInfo": {"rank": 5, "world_size": 8}}))
    write(d / "trace_rank-3.json.gz", trace_text([event(), event()]))
    write(d / "worker_1.pt.trace.json", trace_text([event()] * 3))
    write(d / "zzz.json", trace_text([event()] * 4))   # no rank anywhere: first free number
    write(d / "notes.txt", "not a trace")               # ignored by the directory walk
    res = ingest_paths(con, [d])
    assert res.errors == []
    assert res.ranks == [0, 1, 3, 5]
    assert con.execute("SELECT rank, file_name, n_events FROM ranks ORDER BY rank").fetchall() == [
        (0, "zzz.json", 4), (1, "worker_1.pt.trace.json", 3), (3, "trace_rank-3.json", 2), (5, "a.json", 1)]
    assert one(con, "SELECT name, world_size FROM runs") == ("job", 8)


def test_lone_file_trailing_number_is_not_a_rank(con, tmp_path):
    res = ingest_paths(con, [write(tmp_path / "resnet50_num_workers_4.json", trace_text([event()]))])
    assert res.ranks == [0]


def test_same_content_is_reused_not_duplicated(con, tmp_path):
    a = write(tmp_path / "rank0.json", trace_text(mixed_events(), {"distributedInfo": {"rank": 0}}))
    b = write(tmp_path / "rank1.json", trace_text(mixed_events()[:5], {"distributedInfo": {"rank": 1}}))
    first = ingest_paths(con, [a, b], name="baseline")
    # the same bytes, gzipped and zipped, in another order: same content, same run
    z = write_zip(tmp_path / "again.zip", {"r1.json": b.read_text(), "r0.json": a.read_text()})
    second = ingest_paths(con, [z])
    assert first.reused is False and second.reused is True
    assert second.run_id == first.run_id and second.ranks == [0, 1]
    assert one(con, "SELECT count(*) FROM runs") == (1,)
    assert one(con, "SELECT count(*) FROM events") == (22,)
    assert one(con, "SELECT name FROM runs") == ("baseline",)
    other = ingest_paths(con, [a])
    assert other.run_id != first.run_id and other.reused is False


def test_archives_and_gzip_members(con, tmp_path):
    t0 = trace_text([event()], {"distributedInfo": {"rank": 0}})
    t1 = trace_text([event(), event()], {"distributedInfo": {"rank": 1}})
    import gzip
    z = write_zip(tmp_path / "run.zip", {"dir/rank0.json": t0, "dir/rank1.json.gz": gzip.compress(t1.encode()),
                                         "README.md": "hello"})
    res = ingest_paths(con, [z])
    assert res.errors == [] and res.ranks == [0, 1]
    assert res.files == ["run.zip:dir/rank0.json", "run.zip:dir/rank1.json.gz"]
    assert con.execute("SELECT file_name, n_events FROM ranks ORDER BY rank").fetchall() == \
        [("rank0.json", 1), ("rank1.json", 2)]
    tgz = write_tar_gz(tmp_path / "run.tar.gz", {"a/rank0.json": t0, "a/rank1.json": t1})
    res2 = ingest_paths(con, [tgz])
    assert res2.reused and res2.run_id == res.run_id


@pytest.mark.parametrize("bad_cut", [False, True])
def test_many_parts_give_the_same_rows(con, tmp_path, monkeypatch, bad_cut):
    # nested lists of objects in args put "}, {" inside events: the cutter must skip them, and a
    # cut that still lands inside an event must be healed by re-reading the file as one range
    events = [event(ts=str(1000 + i), args={"External id": i, "Input Dims": [[1, 2]],
                                            "nested": [{"a": i}, {"b": [{}, {}]}]}) for i in range(3000)]
    path = write(tmp_path / "big.json", trace_text(events))
    if bad_cut:
        from analyzers.ingest import layout
        monkeypatch.setattr(layout, "next_event_start",
                            lambda mm, lo, hi: mm.find(b'{"a"', lo, hi) if mm.find(b'{"a"', lo, hi) >= 0 else None)
    calls = []
    real_write_parts = ingest_core.write_parts
    monkeypatch.setattr(ingest_core, "write_parts",
                        lambda files, tmpdir, workers: calls.append(files[0][2]) or real_write_parts(files, tmpdir, workers))
    res = ingest_paths(con, [path], limits=Limits(part_bytes=4096))
    assert calls[0] > 100            # really cut into many ranges
    assert res.errors == []
    got = con.execute("SELECT count(*), sum(external_id), min(ts_ns), max(ts_ns) FROM events").fetchone()
    assert got == (3000, sum(range(3000)), 1_000_000, 3_999_000)


def test_progress_reports_stages(con, tmp_path):
    seen = []
    path = write(tmp_path / "p.json", trace_text([event()]))
    ingest_paths(con, [path], progress=lambda stage, f, frac: seen.append((stage, frac)))
    stages = [s for s, _ in seen]
    assert stages.index("reading") < stages.index("parsing") < stages.index("writing")
    assert seen[-1] == ("writing", 1.0)
    assert all(0.0 <= frac <= 1.0 for _, frac in seen)


def test_failed_write_leaves_nothing(con, tmp_path, monkeypatch):
    a = write(tmp_path / "rank0.json", trace_text(mixed_events(), {"distributedInfo": {"rank": 0}}))
    b = write(tmp_path / "rank1.json", trace_text(mixed_events(), {"distributedInfo": {"rank": 1}}))

    def explode(metas):   # called after both ranks' events and ranks rows are written
        raise RuntimeError("disk full")

    monkeypatch.setattr(ingest_core, "world_size", explode)
    with pytest.raises(RuntimeError):
        ingest_paths(con, [a, b])
    for table in ("runs", "ranks", "events"):
        assert one(con, f"SELECT count(*) FROM {table}") == (0,)
    monkeypatch.undo()
    res = ingest_paths(con, [a, b])   # the connection is usable and the run loads afterwards
    assert res.reused is False and one(con, "SELECT count(*) FROM events") == (34,)


def test_file_backed_store_and_memory_setting_untouched(tmp_path):
    store = connect(tmp_path / "td.duckdb")
    store.execute("SET memory_limit = '3GB'")
    before = store.execute("SELECT current_setting('memory_limit')").fetchone()
    res = ingest_paths(store, [write(tmp_path / "x.json.gz", trace_text(mixed_events()))])
    assert store.execute("SELECT current_setting('memory_limit')").fetchone() == before
    store.close()
    again = duckdb.connect(str(tmp_path / "td.duckdb"))
    assert again.execute("SELECT count(*) FROM events WHERE run_id = ?", [res.run_id]).fetchone() == (17,)


@pytest.mark.parametrize("sizes, threads, expected", [
    ([1075 << 20], 2, [6]),                 # equal ranges, a multiple of the threads
    ([108 << 20], 2, [2]),
    ([128 << 20] * 8, 2, [1] * 8),          # one range per rank file when they already balance
    ([128 << 20] * 3, 2, [2, 1, 1]),        # 3 files on 2 threads: one more cut
    ([None, 128 << 20], 2, [1, 3]),         # a file read as one range is never cut
    ([500 << 20, 100 << 20], 2, [3, 1]),
    ([1 << 30], 1, [4]),
])
def test_part_counts_keep_every_thread_busy(sizes, threads, expected):
    counts = ingest_core.part_counts(sizes, threads, 256 << 20)
    assert counts == expected
    assert sum(counts) % threads == 0


def test_store_written_by_an_earlier_version_is_migrated(tmp_path):
    # stores written before the BLAKE3 switch name the hash columns sha256 / file_sha256
    path = tmp_path / "old.duckdb"
    old = duckdb.connect(str(path))
    old.execute("CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, name VARCHAR NOT NULL, created_at TIMESTAMP "
                "NOT NULL, source VARCHAR, sha256 VARCHAR NOT NULL, world_size INTEGER, tags VARCHAR[] DEFAULT [], "
                "notes VARCHAR DEFAULT '')")
    old.execute("CREATE TABLE ranks (run_id VARCHAR NOT NULL, rank INTEGER NOT NULL, file_name VARCHAR NOT NULL, "
                "file_sha256 VARCHAR NOT NULL)")
    old.execute("INSERT INTO runs (run_id, name, created_at, sha256) VALUES ('abc', 'kept', now(), 'h')")
    old.close()
    con = connect(path)
    # its runs have never been analysed by this version (the dashboard analyses them when opened)
    assert con.execute("SELECT run_id, name, content_hash, analysis_version FROM runs").fetchall() == \
        [("abc", "kept", "h", None)]
    cols = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'ranks'").fetchall()}
    assert "file_hash" in cols and "file_sha256" not in cols
    con.close()
    connect(path).close()   # opening it again is a no-op


@pytest.mark.parametrize("old_store", [True, False])
def test_threads_opening_one_store_at_once_all_succeed(tmp_path, old_store):
    # the app's threads and an api call may open the store together: schema creation and the
    # migration of an old store must not fail on DuckDB's write-write conflicts
    import threading
    for trial in range(5):
        path = tmp_path / f"s{trial}.duckdb"
        base = duckdb.connect(str(path))
        if old_store:
            base.execute("CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, name VARCHAR NOT NULL, created_at "
                         "TIMESTAMP NOT NULL, source VARCHAR, sha256 VARCHAR NOT NULL, world_size INTEGER, "
                         "tags VARCHAR[] DEFAULT [], notes VARCHAR DEFAULT '')")
            base.execute("CREATE TABLE ranks (run_id VARCHAR NOT NULL, rank INTEGER NOT NULL, "
                         "file_name VARCHAR NOT NULL, file_sha256 VARCHAR NOT NULL)")
        barrier, errors = threading.Barrier(4), []

        def open_store():
            barrier.wait()
            try:
                connect(path).close()     # same process, same file: one DuckDB instance, 4 connections
            except Exception as exc:      # noqa: BLE001 - collected for the assertion
                errors.append(repr(exc))
        threads = [threading.Thread(target=open_store) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        cols = {r[0] for r in base.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'runs'").fetchall()}
        assert "content_hash" in cols and "sha256" not in cols
        base.close()


def test_rank_from_folder_names_and_dotted_numbers(con, tmp_path):
    # torchrun-style per-rank folders holding Kineto's own file names, and trace.N.json files,
    # none with distributedInfo: rank 10 must not land between 1 and 2
    d = tmp_path / "folders"
    for rank in (0, 1, 2, 10, 11):
        write(d / f"rank{rank}" / f"host_123{rank}.1712345678901.pt.trace.json",
              trace_text([event()] * (rank + 1)))
    res = ingest_paths(con, [d])
    assert res.errors == [] and res.ranks == [0, 1, 2, 10, 11]
    assert con.execute("SELECT rank, n_events FROM ranks ORDER BY rank").fetchall() == \
        [(0, 1), (1, 2), (2, 3), (10, 11), (11, 12)]
    flat = tmp_path / "flat"
    for rank in (0, 2, 10):
        write(flat / f"trace.{rank}.json", trace_text([event()] * (rank + 2)))
    res = ingest_paths(con, [flat])
    assert res.ranks == [0, 2, 10]
    assert con.execute("SELECT rank, n_events FROM ranks WHERE run_id = ? ORDER BY rank",
                       [res.run_id]).fetchall() == [(0, 2), (2, 4), (10, 12)]


def test_unnumbered_files_take_ranks_in_natural_order(con, tmp_path):
    d = tmp_path / "job"
    for k in (1, 2, 10):
        write(d / f"host{k}" / "trace.json", trace_text([event()] * k))
    res = ingest_paths(con, [d])
    assert res.ranks == [0, 1, 2]
    assert [r[0] for r in con.execute("SELECT n_events FROM ranks ORDER BY rank").fetchall()] == [1, 2, 10]


@pytest.mark.parametrize("gzipped", [False, True])
def test_late_decimal_timestamps_that_float64_rounds_to_whole_us_stay_exact(con, tmp_path, gzipped):
    # whole-µs epoch timestamps for most of a > 4 MB file, then ".1" fractions, which float64
    # (0.25 µs steps at epoch scale) rounds onto the whole µs: no stored value betrays them, so
    # only a sample of the list's end can send the file to the exact path
    base = 1_712_000_000_000_000
    n = 60_000
    events = [event(ts=f"{base + 10 * i}" + (".1" if i >= n - 1500 else ""), dur="1") for i in range(n)]
    text = trace_text(events)
    assert len(text) > 4 << 20
    path = write(tmp_path / ("t.json.gz" if gzipped else "t.json"), text)   # write() gzips a .gz
    res = ingest_paths(con, [path])
    assert res.errors == [] and res.ranks == [0], res
    got = [r[0] for r in con.execute("SELECT ts_ns FROM events WHERE run_id = ? ORDER BY ts_ns", [res.run_id]).fetchall()]
    assert got == [(base + 10 * i) * 1000 + (100 if i >= n - 1500 else 0) for i in range(n)]
