"""Bad input: every case yields a plain-words error naming the file, good files still load, and
nothing partial is left in the store."""
from __future__ import annotations

import gzip
import os

import pytest

from analyzers.ingest import Limits, ingest_paths
from tests.support.ingest_traces import event, mixed_events, trace_text, write, write_tar_gz, write_zip
from tests.support.ingest_traces import assert_plain, errors_by_file, store_counts


BAD_DOCUMENTS = {
    "empty.json": (b"", "empty"),
    "blank.json": (b"   \n ", "whitespace"),
    "notjson.json": (b"hello, world", "not JSON"),
    "truncated.json": (trace_text(mixed_events())[:-200].encode(), "truncated"),
    "truncated_head.json": (b'{"schemaVersion": 1, "traceEv', "truncated or malformed"),
    "empty_list.json": (b"[]", "empty"),
    "empty_object.json": (b"{}", "no 'traceEvents'"),
    "numbers.json": (b"[1, 2, 3]", "none of its 3 events is usable"),
    "events_five.json": (b'{"traceEvents": 5}', "'traceEvents' is a number, not a list"),
    "events_string.json": (b'{"schemaVersion": 1, "traceEvents": "x"}', "'traceEvents' is a string"),
    "no_events.json": (b'{"schemaVersion": 1, "traceEvents": []}', "empty"),
    "all_unusable.json": (trace_text(['{"ph": "X"}', '{"name": "no ph", "ts": 5}', '"str"', "null"]).encode(),
                          "none of its 4 events is usable"),
    "garbage_inside.json": (trace_text([event(), "{\"ph\": \"X\", \"ts\": 1, oops}"]).encode(), "malformed"),
    "latin1.json": (b'\xff\xfe{\x00"\x00', "not JSON"),
}


@pytest.mark.parametrize("name", sorted(BAD_DOCUMENTS))
def test_bad_document_is_an_error_and_good_file_still_loads(con, tmp_path, good, name):
    data, expected = BAD_DOCUMENTS[name]
    bad = write(tmp_path / "bad" / name, data)
    res = ingest_paths(con, [good, bad])
    errors = errors_by_file(res)
    assert list(errors) == [name], res.errors
    assert expected in errors[name]
    assert_plain(errors[name])
    assert res.run_id is not None and res.ranks == [0]
    assert store_counts(con) == (1, 1, 17)


def test_only_bad_files_leave_the_store_empty(con, tmp_path):
    res = ingest_paths(con, [write(tmp_path / "a.json", b"{}"), write(tmp_path / "b.json", b"")])
    assert res.run_id is None and len(res.errors) == 2
    assert store_counts(con) == (0, 0, 0)


def test_missing_path_and_empty_directory(con, tmp_path):
    (tmp_path / "emptydir").mkdir()
    res = ingest_paths(con, [tmp_path / "nope.json", tmp_path / "emptydir"])
    errors = errors_by_file(res)
    assert "no such file" in errors[str(tmp_path / "nope.json")]
    assert "holds no .json" in errors[str(tmp_path / "emptydir")]
    assert res.run_id is None


def test_truncated_gzip(con, tmp_path, good):
    data = gzip.compress(trace_text(mixed_events()).encode())
    bad = write(tmp_path / "cut.json.gz", b"")
    bad.write_bytes(data[: len(data) // 2])
    res = ingest_paths(con, [good, bad])
    assert "gzip data is truncated" in errors_by_file(res)["cut.json.gz"]
    assert store_counts(con) == (1, 1, 17)


def test_corrupt_gzip(con, tmp_path):
    bad = tmp_path / "corrupt.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(200))
    res = ingest_paths(con, [bad])
    msg = errors_by_file(res)["corrupt.json.gz"]
    assert "corrupt" in msg or "truncated" in msg
    assert_plain(msg)


def test_mistyped_and_missing_fields_are_dropped_and_counted(con, tmp_path):
    events = [event(ts="10"), event(ts='"abc"'), event(ts=None), event(dur=None), event(dur="-1"),
              event(ts="11", pid=[1], tid={"x": 1}), "5", "[1, 2]", event(ts="12", dur='"7"'),
              event("X", "kernel", None, ts="13", args={"device": "zero", "stream": 3})]
    res = ingest_paths(con, [write(tmp_path / "t.json", trace_text(events))])
    assert res.errors == []
    assert [w.file for w in res.warnings] == ["t.json"]
    assert "dropped 6 of 10 events" in res.warnings[0].error
    # kept: ts 10, ts 11 (odd pid/tid kept as text or NULL), "7" as a numeric string, and a
    # mistyped args.device that falls back to the numeric pid
    rows = con.execute("SELECT ts_ns, dur_ns, device, stream FROM events ORDER BY ts_ns").fetchall()
    assert rows == [(10000, 2250, 0, 7), (11000, 2250, None, None), (12000, 7000, 0, 7), (13000, 2250, 0, 3)]
    assert con.execute("SELECT n_events FROM ranks").fetchone() == (4,)
    assert con.execute("SELECT count(*) FROM events WHERE kind = '__dropped__'").fetchone() == (0,)


def test_duplicate_ranks_name_both_files(con, tmp_path):
    a = write(tmp_path / "a.json", trace_text([event()], {"distributedInfo": {"rank": 1}}))
    b = write(tmp_path / "b.json", trace_text([event(), event()], {"distributedInfo": {"rank": 1}}))
    res = ingest_paths(con, [a, b])
    msg = errors_by_file(res)["b.json"]
    assert "duplicate rank 1" in msg and "a.json" in msg
    assert res.ranks == [1] and store_counts(con) == (1, 1, 1)


@pytest.mark.parametrize("member, expected", [
    ("../evil.json", "leaves the archive"),
    ("a/../../evil.json", "leaves the archive"),
    ("/etc/evil.json", "absolute path"),
    ("C:/evil.json", "absolute path"),
    ("inner.zip", "nested archives"),
    ("inner.tar.gz", "nested archives"),
])
def test_zip_members_refused(con, tmp_path, good, member, expected):
    z = write_zip(tmp_path / "x.zip", {member: trace_text([event()]),
                                       "ok/rank0.json": good.read_text()})
    before = set(os.listdir(tmp_path))
    res = ingest_paths(con, [z])
    assert expected in errors_by_file(res)[f"x.zip:{member}"]
    assert res.ranks == [0]
    assert set(os.listdir(tmp_path)) == before and not (tmp_path.parent / "evil.json").exists()


def test_zip_symlink_member_refused(con, tmp_path, good):
    z = write_zip(tmp_path / "s.zip", {"rank0.json": good.read_text()}, symlinks={"rank1.json": "/etc/passwd"})
    res = ingest_paths(con, [z])
    assert "symbolic link" in errors_by_file(res)["s.zip:rank1.json"]
    assert res.ranks == [0]


def test_tar_links_and_escapes_refused(con, tmp_path, good):
    t = write_tar_gz(tmp_path / "t.tar.gz", {"rank0.json": good.read_text(), "../up.json": "{}"},
                     symlinks={"rank1.json": "/etc/passwd"})
    res = ingest_paths(con, [t])
    errors = errors_by_file(res)
    assert "is a link" in errors["t.tar.gz:rank1.json"]
    assert "leaves the archive" in errors["t.tar.gz:../up.json"]
    assert res.ranks == [0]


def test_not_a_zip(con, tmp_path):
    bad = write(tmp_path / "fake.zip", b"PK\x03\x04 this is not really a zip")
    msg = errors_by_file(ingest_paths(con, [bad]))["fake.zip"]
    assert "zip" in msg
    assert_plain(msg)


def test_gzip_bomb_stopped_while_inflating(con, tmp_path, good):
    # 64 MiB of spaces inside a valid trace compresses ~1000x; the ratio cap stops it early
    text = trace_text([event()]).replace('"traceEvents"', " " * (64 << 20) + '"traceEvents"', 1)
    bomb = write(tmp_path / "bomb.json.gz", text)
    assert bomb.stat().st_size < 200_000
    limits = Limits(ratio_floor=1 << 20, max_ratio=200)
    res = ingest_paths(con, [good, bomb], limits=limits)
    msg = errors_by_file(res)["bomb.json.gz"]
    assert "decompression bomb" in msg and "200x" in msg
    assert res.ranks == [0]


def test_zip_bomb_member_stopped(con, tmp_path):
    text = trace_text([event()]).replace('"traceEvents"', " " * (32 << 20) + '"traceEvents"', 1)
    z = write_zip(tmp_path / "b.zip", {"rank0.json": text})
    res = ingest_paths(con, [z], limits=Limits(ratio_floor=1 << 20))
    assert "decompression bomb" in errors_by_file(res)["b.zip"]     # its declared size: refused unread
    assert res.run_id is None


def test_total_size_cap(con, tmp_path, good):
    # the streaming path for huge inputs, with a lowered cap instead of a multi-GB file
    big = write(tmp_path / "big.json.gz", trace_text([event(ts=str(i)) for i in range(20000)]))
    res = ingest_paths(con, [good, big], limits=Limits(max_total_bytes=256 << 10))
    msg = errors_by_file(res)["big.json.gz"]
    assert "more than 256 KiB in all" in msg
    assert res.ranks == [0]


def test_unknown_schema_version_loads_with_warning(con, tmp_path):
    res = ingest_paths(con, [write(tmp_path / "v9.json", trace_text([event()], {"schemaVersion": 9}))])
    assert res.errors == [] and res.run_id
    assert "unknown schemaVersion 9" in res.warnings[0].error
    assert con.execute("SELECT schema_version FROM ranks").fetchone() == ("9",)


def test_huge_metadata_value_refused(con, tmp_path, monkeypatch):
    from analyzers.ingest import layout
    monkeypatch.setattr(layout, "MAX_META_BYTES", 1 << 16)
    monkeypatch.setattr(layout, "HEAD_WINDOW", 1 << 12)
    text = trace_text([event()], {"schemaVersion": 1, "blob": "x" * (1 << 18)})
    res = ingest_paths(con, [write(tmp_path / "blob.json", text)])
    assert "larger than" in errors_by_file(res)["blob.json"]


def test_the_same_trace_twice_in_one_call_loads_once(con, tmp_path):
    # the same file picked twice, or a .json beside its own .json.gz: one rank, not two
    text = trace_text(mixed_events())
    plain = write(tmp_path / "trace.json", text)
    packed = write(tmp_path / "trace.json.gz", text)
    res = ingest_paths(con, [plain, packed])
    assert res.ranks == [0] and res.files == ["trace.json"]
    assert "the same trace as trace.json" in {w.file: w.error for w in res.warnings}["trace.json.gz"]
    assert store_counts(con)[:2] == (1, 1)


def test_the_same_file_given_twice_loads_once(con, tmp_path):
    path = write(tmp_path / "trace.json", trace_text(mixed_events()))
    res = ingest_paths(con, [path, path])
    assert res.ranks == [0] and [w.error for w in res.warnings] == ["given twice: loaded once"]
    assert store_counts(con)[:2] == (1, 1)


@pytest.mark.parametrize("members", [{"README.md": "hi"}, {}, {"docs/": None}])
def test_archive_without_trace_files_is_named(con, tmp_path, good, members):
    import zipfile
    z = tmp_path / "nothing.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text or "")
    res = ingest_paths(con, [z, good])
    assert errors_by_file(res) == {"nothing.zip": "the archive holds no .json or .json.gz trace files"}
    assert res.run_id and res.ranks == [0]
    empty_tar = write_tar_gz(tmp_path / "nothing.tar.gz", {"notes.txt": "hi"})
    assert errors_by_file(ingest_paths(con, [empty_tar])) == \
        {"nothing.tar.gz": "the archive holds no .json or .json.gz trace files"}


def test_files_of_the_same_name_are_named_as_typed(con, tmp_path):
    a = write(tmp_path / "a" / "trace.json", trace_text([event()], {"distributedInfo": {"rank": 0}}))
    b = write(tmp_path / "b" / "trace.json", trace_text([event(), event()], {"distributedInfo": {"rank": 0}}))
    res = ingest_paths(con, [str(a), str(b)])
    assert errors_by_file(res) == {str(b): f"duplicate rank 0: {a} is already rank 0"}


@pytest.mark.parametrize("rank", [-1, 10**12])
def test_unusable_declared_rank_is_a_warning_and_the_file_loads(con, tmp_path, rank):
    path = write(tmp_path / "rank3.json", trace_text([event()], {"distributedInfo": {"rank": rank}}))
    res = ingest_paths(con, [path])
    assert res.errors == [] and res.ranks == [3]
    assert [w.file for w in res.warnings] == ["rank3.json"]
    assert f"distributedInfo.rank {rank} is not a usable rank number" in res.warnings[0].error


def test_full_temp_disk_fails_only_the_file_that_did_not_fit(con, tmp_path, good, monkeypatch):
    import errno

    import analyzers.ingest.parse as parse
    big = write(tmp_path / "big" / "rank1.json", trace_text(mixed_events() * 50, {"distributedInfo": {"rank": 1}}))
    real_copy = parse.copy_range

    def copy_or_fill(src_fd, dst_fd, offset, count):   # the temp disk fills while big.json is copied
        if os.fstat(src_fd).st_size == big.stat().st_size:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_copy(src_fd, dst_fd, offset, count)
    monkeypatch.setattr(parse, "copy_range", copy_or_fill)
    res = ingest_paths(con, [good, big])
    assert res.ranks == [0]
    message = errors_by_file(res)["rank1.json"]
    assert "No space left on device" in message and "TRACEDOCTOR_TMPDIR" in message
    assert_plain(message)


def test_temp_directory_is_made_or_named_when_unusable(con, tmp_path, good, monkeypatch):
    monkeypatch.setenv("TRACEDOCTOR_TMPDIR", str(tmp_path / "new" / "tmp"))
    assert ingest_paths(con, [good]).ranks == [0]
    assert (tmp_path / "new" / "tmp").is_dir()
    blocker = write(tmp_path / "a_file", "x")
    monkeypatch.setenv("TRACEDOCTOR_TMPDIR", str(blocker / "tmp"))
    res = ingest_paths(con, [good], name="other")
    assert res.run_id is None
    assert "cannot use the temp directory" in errors_by_file(res)[str(good)]


def test_files_of_different_jobs_are_refused(con, tmp_path):
    one = write(tmp_path / "single" / "trace.json", trace_text([event()], {"distributedInfo": {"rank": 0, "world_size": 1}}))
    job = write(tmp_path / "job" / "rank1.json", trace_text([event()], {"distributedInfo": {"rank": 1, "world_size": 2}}))
    res = ingest_paths(con, [one, job])   # ingest_jobs stores one run each (tests/ingest/test_ingest_jobs.py)
    assert res.run_id is None
    assert "2 different jobs" in res.errors[0].error
    assert "trace (1 file, world size 1" in res.errors[0].error and "rank1 (1 file, world size 2" in res.errors[0].error


def test_a_directory_of_thousands_of_json_files_is_refused_at_once(con, tmp_path, good):
    crowded = tmp_path / "home"
    for k in range(6):
        write(crowded / f"cache{k}.json", "{}")
    res = ingest_paths(con, [crowded, good], limits=Limits(max_files_per_dir=5))
    assert errors_by_file(res) == {str(crowded): "refused: the directory holds 6 .json files (the limit is 5); "
                                                 "give the folder of one job's traces"}
    assert res.ranks == [0]


def test_the_run_is_named_after_the_first_input_that_loaded(con, tmp_path, good):
    empty = write(tmp_path / "empty.json", "")
    res = ingest_paths(con, [empty, good])
    assert res.ranks == [0]
    assert con.execute("SELECT name FROM runs WHERE run_id = ?", [res.run_id]).fetchone()[0] == "rank0"
