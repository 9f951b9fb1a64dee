"""Hostile and unlucky input at the ingest and store level: numbers the store cannot hold, text
that is not UTF-8, archive bombs made of many members, a full disk, killed processes, a
read-only store. Each bad file gets a plain message naming it, the other files of the call
still load, and nothing half-written stays behind."""
from __future__ import annotations

import gzip
import io
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest

from analyzers.ingest import Limits, ingest_paths
from analyzers.common import tempfiles
from analyzers.ingest import sources
from analyzers.store.database import connect, read_only_reason
from tests.support.ingest_traces import assert_plain, errors_by_file, store_counts
from tests.support.ingest_traces import event, mixed_events, trace_text, write, write_tar_gz, write_zip
from tests.support.paths import REPO_ROOT


def warnings_by_file(res):
    return {w.file: w.error for w in res.warnings}


# -- numbers and text the store cannot hold ---------------------------------------------------

@pytest.mark.parametrize("meta, expected", [
    ({"distributedInfo": {"rank": 1, "world_size": 2**31}}, "distributedInfo.world_size 2147483648 is not a usable"),
    ({"distributedInfo": {"rank": 1, "world_size": 2**64}}, "is not a usable world size"),
    ({"baseTimeNanoseconds": 2**63}, "baseTimeNanoseconds 9223372036854775808 is out of range"),
    ({"baseTimeNanoseconds": str(2**63)}, "baseTimeNanoseconds 9223372036854775808 is out of range"),
    ({"baseTimeNanoseconds": -(2**70)}, "is out of range"),
    ({"baseTimeNanoseconds": 1e300}, "baseTimeNanoseconds 100… (301 digits) is out of range"),
    # too long for a float: named by its first digits and length
    ({"distributedInfo": {"rank": 1, "world_size": 10**400}}, "distributedInfo.world_size 100… (401 digits)"),
    ({"baseTimeNanoseconds": 10**400}, "baseTimeNanoseconds 100… (401 digits) is out of range"),
])
def test_metadata_numbers_out_of_range_are_ignored_with_a_warning(con, tmp_path, good, meta, expected):
    bad = write(tmp_path / "rank1.json", trace_text([event()], meta))
    res = ingest_paths(con, [good, bad])
    assert res.errors == [] and res.ranks == [0, 1]
    assert expected in warnings_by_file(res)["rank1.json"]
    world_size, = con.execute("SELECT world_size FROM runs").fetchone()
    base, = con.execute("SELECT base_time_ns FROM ranks WHERE rank = 1").fetchone()
    assert world_size == 2 and base is None


def raw_trace(meta_text: str) -> str:
    """A trace whose top-level keys are given as raw JSON text (escapes json.dumps would not write)."""
    return "{" + meta_text + ', "traceEvents": [' + event() + "]}"


@pytest.mark.parametrize("meta_text", ['"note": "\\ud800"', '"\\udc00": 1', '"schemaVersion": "\\udc00"',
                                       '"deviceProperties": [{"name": "gpu \\ud800"}]'])
def test_lone_surrogates_in_metadata_are_stored_replaced(con, tmp_path, good, meta_text):
    res = ingest_paths(con, [good, write(tmp_path / "rank1.json", raw_trace(meta_text))])
    assert res.errors == [] and res.ranks == [0, 1]
    assert store_counts(con)[:2] == (1, 2)


@pytest.mark.parametrize("shift", range(4))
def test_multibyte_text_in_a_non_object_event_in_every_byte_alignment(con, tmp_path, good, shift):
    # DuckDB quotes the bad element cut at a byte count: 3 shifts in 4 cut a character in half
    text = trace_text([event(), " " * shift + '"' + "中文字元" * 12 + '"', event()])
    res = ingest_paths(con, [good, write(tmp_path / "rank1.json", text)])
    assert res.errors == [] and res.ranks == [0, 1]
    assert "dropped 1 of 3 events" in warnings_by_file(res)["rank1.json"]


def test_file_names_that_are_not_utf8_inside_a_directory_and_a_tar(con, tmp_path):
    folder = tmp_path / "job"
    write(folder / "rank0.json", trace_text(mixed_events(), {"distributedInfo": {"rank": 0}}))
    with open(os.path.join(os.fsencode(folder), b"rank1_\xff\xfe.json"), "w") as fh:
        fh.write(trace_text([event()], {"distributedInfo": {"rank": 1}}))
    res = ingest_paths(con, [folder])
    assert res.errors == [] and res.ranks == [0, 1]
    assert res.files == ["job/rank0.json", "job/rank1_\ufffd\ufffd.json"]
    assert con.execute("SELECT file_name FROM ranks WHERE rank = 1").fetchone() == ("rank1_\ufffd\ufffd.json",)

    tar = tmp_path / "job.tar.gz"
    with tarfile.open(tar, "w:gz", format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape") as tf:
        for name, text in (("rank0.json", trace_text(mixed_events())), ("rank1_\udcff.json", trace_text([event()]))):
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))
    res = ingest_paths(con, [tar], name="tar")
    assert res.errors == [] and res.files == ["job.tar.gz:rank0.json", "job.tar.gz:rank1_\ufffd.json"]


def test_zip_member_name_flagged_utf8_but_not_is_a_per_archive_error(con, tmp_path, good):
    z = tmp_path / "names.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("rank1_\u00e9\u00e9.json", trace_text([event()]))   # stored as UTF-8, flagged so
    z.write_bytes(z.read_bytes().replace("rank1_\u00e9\u00e9".encode(), b"rank1_\xff\xfe\xff\xfe"))
    res = ingest_paths(con, [z, good])
    assert "is flagged as UTF-8 but is not valid UTF-8" in errors_by_file(res)["names.zip"]
    assert res.ranks == [0]


# -- archives: limits over the whole archive ----------------------------------------------------

def padded_members(count: int) -> dict[str, str]:
    """count rank files of ~600 KiB each that compress ~1000x (spaces in a metadata value)."""
    return {f"rank{k}.json": trace_text([event()], {"distributedInfo": {"rank": k}, "pad": " " * (600 << 10)})
            for k in range(1, count + 1)}


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_archive_bomb_of_many_members_is_refused_as_a_whole(con, tmp_path, good, kind):
    # each member stays under the 1 MiB floor; the archive inflates to 6 MiB, over 200x its size
    members = padded_members(10)
    archive = (write_zip if kind == "zip" else write_tar_gz)(tmp_path / f"bomb.{kind}", members)
    assert archive.stat().st_size * 200 < 6 << 20
    res = ingest_paths(con, [good, archive], limits=Limits(ratio_floor=1 << 20))
    message = errors_by_file(res)[f"bomb.{kind}"]
    assert "refused: the archive inflates to more than" in message and "200x" in message
    assert res.ranks == [0] and list(errors_by_file(res)) == [f"bomb.{kind}"]


@pytest.mark.parametrize("kind, count", [("zip", "6"), ("tar.gz", "more than 5")])
def test_archive_with_more_trace_files_than_the_limit_is_refused(con, tmp_path, good, kind, count):
    members = {f"r{k}.json": trace_text([event(ts=str(k))]) for k in range(6)}
    archive = (write_zip if kind == "zip" else write_tar_gz)(tmp_path / f"many.{kind}", members)
    res = ingest_paths(con, [archive, good], limits=Limits(max_files_per_dir=5))
    assert errors_by_file(res) == {f"many.{kind}": f"refused: the archive holds {count} .json files (the limit "
                                                   "is 5); give the traces of one job"}
    assert res.ranks == [0]


def test_refused_archive_leaves_no_inflated_members_behind(con, tmp_path, good, monkeypatch):
    monkeypatch.setenv("TRACEDOCTOR_TMPDIR", str(tmp_path / "tmp"))
    seen = []
    real_discard = sources._discard_from

    def discard_and_record(files, start):    # the members inflated before the archive was refused
        seen.extend(p for f in files[start:] for p in f.parts)
        real_discard(files, start)
    monkeypatch.setattr(sources, "_discard_from", discard_and_record)
    archive = write_tar_gz(tmp_path / "bomb.tar.gz", padded_members(10))
    ingest_paths(con, [good, archive], limits=Limits(ratio_floor=1 << 20))
    assert seen and not any(os.path.exists(p) for p in seen)


# -- messages that say what is wrong ------------------------------------------------------------

@pytest.mark.parametrize("tail, expected", [
    (b"appended text", "13 bytes that are not gzip data follow the end of the gzip stream"),
    (b"x", "1 byte that is not gzip data follows the end of the gzip stream"),
    (b"\0" * 64, None),                                     # zero padding: gzip readers skip it
], ids=["text", "one_byte", "zero_padding"])
def test_bytes_after_the_gzip_stream_are_named_as_such(con, tmp_path, good, tail, expected):
    bad = tmp_path / "rank1.json.gz"
    bad.write_bytes(gzip.compress(trace_text([event()]).encode()) + tail)
    res = ingest_paths(con, [good, bad])
    if expected is None:
        assert res.errors == [] and res.ranks == [0, 1]
    else:
        assert expected in errors_by_file(res)["rank1.json.gz"] and res.ranks == [0]


def test_truncated_gzip_is_still_called_truncated(con, tmp_path):
    data = gzip.compress(trace_text(mixed_events()).encode())
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(data[:-3])
    assert "gzip data is truncated" in errors_by_file(ingest_paths(con, [bad]))["cut.json.gz"]


def test_metadata_after_trace_events_over_the_limit_says_so(con, tmp_path, monkeypatch):
    from analyzers.ingest import layout
    monkeypatch.setattr(layout, "MAX_META_BYTES", 1 << 16)
    monkeypatch.setattr(layout, "TAIL_WINDOW", 1 << 12)
    text = trace_text([event()], meta_after={"blob": "x" * (1 << 18)})
    message = errors_by_file(ingest_paths(con, [write(tmp_path / "tail.json", text)]))["tail.json"]
    assert "closes the traceEvents list: the metadata after it is larger than 0.0625 MiB" in message


BLANK = 40 << 20     # more than DuckDB's largest JSON value (parse._MAX_OBJECT): it calls it malformed


@pytest.mark.parametrize("head, fill, tail, expected", [
    (b"[", b" ", b"]", "its traceEvents list is empty"),
    (b'{"traceEvents": [', b"\n", b"]}", "its traceEvents list is empty"),
    (b"{", b" ", b"}", "it has no 'traceEvents' list"),
    (b"", b" ", b"", "only whitespace"),
], ids=["bare_list", "trace_events", "object", "nothing"])
def test_documents_of_mostly_whitespace_get_true_messages(con, tmp_path, good, head, fill, tail, expected):
    bad = write(tmp_path / "blank.json", head + fill * BLANK + tail)
    res = ingest_paths(con, [good, bad])
    assert expected in errors_by_file(res)["blank.json"]
    assert res.ranks == [0]


def test_long_whitespace_before_the_trace_is_not_an_error(con, tmp_path):
    path = write(tmp_path / "t.json", " " * (1 << 20) + trace_text(mixed_events()))
    res = ingest_paths(con, [path])
    assert res.errors == [] and res.ranks == [0]


def test_whitespace_too_long_to_hold_is_refused_not_read_into_memory(con, tmp_path, monkeypatch):
    monkeypatch.setattr("analyzers.ingest.layout.MAX_META_BYTES", 1 << 20)
    path = write(tmp_path / "t.json", " " * (2 << 20) + trace_text(mixed_events()))
    res = ingest_paths(con, [path])
    assert res.run_id is None and "starts with over 1 MiB of whitespace" in res.errors[0].error


# -- a full disk --------------------------------------------------------------------------------

def test_a_full_store_disk_fails_the_call_at_once_without_blaming_the_trace(con, tmp_path, good, monkeypatch):
    calls = []

    def disk_full(*args, **kwargs):
        calls.append(1)
        raise duckdb.IOException(f'IO Error: Could not write file "{tmp_path}/store.duckdb": No space left on device')
    monkeypatch.setattr("analyzers.ingest.run_writer.insert_events", disk_full)
    other = write(tmp_path / "rank1.json", trace_text([event()], {"distributedInfo": {"rank": 1}}))
    res = ingest_paths(con, [good, other])
    assert len(calls) == 1                                   # no retry file by file
    assert res.run_id is None and set(errors_by_file(res)) == {"rank0.json", "rank1.json"}
    message = errors_by_file(res)["rank0.json"]
    assert "is full" in message and str(tmp_path) in message and "malformed" not in message
    assert_plain(message)
    monkeypatch.undo()
    assert ingest_paths(con, [good]).ranks == [0]           # the connection is still usable


@contextmanager
def small_tmpfs(path: Path, size: str = "8m"):
    """A tmpfs of `size` mounted at path (root only); skips the test where mounting is refused."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("cannot mount a tmpfs here")
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root, or not permitted)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def incompressible_trace(path: Path, events: int) -> Path:
    """A trace whose events do not compress in DuckDB's store (random hex in args)."""
    return write(path, trace_text([event(ts=str(3 * k), args={"blob": os.urandom(40).hex()})
                                   for k in range(events)], {"distributedInfo": {"rank": 1}}))


def test_store_on_a_full_disk_is_named_and_usable_after(tmp_path, good):
    big = incompressible_trace(tmp_path / "big" / "rank1.json", 150_000)
    with small_tmpfs(tmp_path / "disk", size="4m") as disk:
        db = disk / "store.duckdb"
        con = connect(db)
        started = time.monotonic()
        res = ingest_paths(con, [big])
        assert time.monotonic() - started < 10, "no retry loop"
        message = errors_by_file(res)["rank1.json"]
        assert f"the disk holding the store {db} is full" in message and "malformed" not in message
        con.close()
        con = connect(db)      # the next open gives back what the failed append took
        assert db.stat().st_size < 2 << 20
        loaded = ingest_paths(con, [good])
        assert loaded.errors == [] and loaded.ranks == [0]
        con.execute("DELETE FROM runs")
        con.close()


def test_temp_directory_on_a_full_disk_is_named(tmp_path, good, monkeypatch):
    big = incompressible_trace(tmp_path / "big" / "rank1.json", 150_000)
    packed = write(tmp_path / "big" / "rank1.json.gz", big.read_bytes())
    con = connect(tmp_path / "store.duckdb")
    with small_tmpfs(tmp_path / "disk") as disk:
        monkeypatch.setenv("TRACEDOCTOR_TMPDIR", str(disk / "tmp"))
        res = ingest_paths(con, [good, packed])
        message = errors_by_file(res)["rank1.json.gz"]
        assert f"temp directory {disk / 'tmp'}: the disk is full" in message and "TRACEDOCTOR_TMPDIR" in message
        assert res.ranks == [0]
        assert os.listdir(disk / "tmp") == []
    con.close()


# -- killed processes ---------------------------------------------------------------------------

def age(path: Path, seconds: float) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_sweep_removes_only_stale_directories_no_process_holds(tmp_path):
    stale_unlocked = tmp_path / "tracedoctor-ingest-dead"
    stale_unlocked.mkdir()
    (stale_unlocked / "x.part.json").write_text("[]")
    (stale_unlocked / tempfiles.LOCK_NAME).write_text("")
    stale_upload = tmp_path / "tracedoctor_upload_old"
    stale_upload.mkdir()
    fresh = tmp_path / "tracedoctor-ingest-fresh"
    fresh.mkdir()
    unrelated = tmp_path / "something-else"
    unrelated.mkdir()
    held_here = Path(tempfiles.make_temp_dir(tempfiles.INGEST_PREFIX, str(tmp_path)))
    # a directory held by another live process
    held_elsewhere = tmp_path / "tracedoctor_upload_busy"
    held_elsewhere.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(held_elsewhere / tempfiles.LOCK_NAME)!r}, os.O_CREAT | os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(60)""")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for path in (stale_unlocked, stale_upload, unrelated, held_here, held_elsewhere):
            age(path, 2 * 24 * 3600)
        removed = tempfiles.sweep_stale_temp_dirs(roots=[str(tmp_path)])
        assert sorted(removed) == sorted([str(stale_unlocked), str(stale_upload)])
        assert fresh.exists() and unrelated.exists() and held_here.exists() and held_elsewhere.exists()
    finally:
        holder.kill()
        holder.wait()
        tempfiles.remove_temp_dir(str(held_here))
    assert not held_here.exists()
    assert tempfiles.sweep_stale_temp_dirs(roots=[str(tmp_path)]) == [str(held_elsewhere)]   # its holder died


def test_the_temp_folder_of_a_killed_process_goes_at_the_next_sweep_not_a_day_later(tmp_path):
    """kill -9 of an ingest (or a cluster worker) mid-copy: its folder, a second old, is removed by
    the next sweep, because its lock is free; a live process's folder is left alone."""
    maker = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time
        from analyzers.common import tempfiles
        path = tempfiles.make_temp_dir(tempfiles.INGEST_PREFIX, {str(tmp_path)!r})
        open(os.path.join(path, "copy.part.json"), "wb").write(b" " * 4096)
        print(path, flush=True)
        time.sleep(60)""")], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        made = maker.stdout.readline().strip()
        assert tempfiles.sweep_stale_temp_dirs(roots=[str(tmp_path)]) == []   # alive: kept
    finally:
        maker.kill()
        maker.wait()
    assert tempfiles.sweep_stale_temp_dirs(roots=[str(tmp_path)]) == [made]
    assert not Path(made).exists()


def test_upload_dir_is_locked_until_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEDOCTOR_TMPDIR", str(tmp_path / "t"))
    upload = Path(tempfiles.make_upload_dir())
    assert upload.parent == tmp_path / "t" and upload.name.startswith(tempfiles.UPLOAD_PREFIX)
    age(upload, 3 * 24 * 3600)
    assert tempfiles.sweep_stale_temp_dirs(roots=[str(tmp_path / "t")]) == []
    tempfiles.remove_temp_dir(str(upload))
    assert not upload.exists()


def test_sigterm_removes_the_ingest_temp_directory(tmp_path):
    script = textwrap.dedent("""
        import sys, time
        from analyzers.common.tempfiles import ingest_temp_dir, install_sigterm_cleanup
        assert install_sigterm_cleanup()
        with ingest_temp_dir() as tmpdir:
            open(tmpdir + "/range.part.json", "w").write("[]")
            print(tmpdir, flush=True)
            time.sleep(60)
        """)
    env = {**os.environ, "TRACEDOCTOR_TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    tmpdir = Path(child.stdout.readline().strip())
    assert tmpdir.is_dir()
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == 128 + signal.SIGTERM
    assert not tmpdir.exists()


def test_sigterm_cleanup_leaves_another_handler_alone():
    previous = signal.signal(signal.SIGTERM, lambda *a: None)
    try:
        assert tempfiles.install_sigterm_cleanup() is False
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_store_file_grown_by_killed_ingests_is_trimmed_on_open(tmp_path):
    # what a killed ingest leaves: row groups written past the store's last block, never used
    db = tmp_path / "store.duckdb"
    connect(db).close()
    size = db.stat().st_size
    with open(db, "r+b") as fh:
        fh.truncate(size + (64 << 20))
    connect(db).close()
    assert db.stat().st_size <= size + (1 << 20)


def test_killed_ingest_does_not_grow_the_store(tmp_path):
    db = tmp_path / "store.duckdb"
    connect(db).close()
    big = incompressible_trace(tmp_path / "big.json", 400_000)
    script = (f"from analyzers.store.database import connect; from analyzers.ingest import ingest_paths; "
              f"ingest_paths(connect({str(db)!r}), [{str(big)!r}], "
              f"progress=lambda stage, f, x: stage == 'writing' and print(stage, flush=True))")
    sizes = []
    for _ in range(2):
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                                 env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        child.stdout.readline()        # parsing is over, the append is being committed: kill it
        child.kill()
        child.wait()
        connect(db).close()
        sizes.append(db.stat().st_size)
    con = connect(db)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    con.close()
    assert max(sizes) < 4 << 20, sizes


# -- a read-only store --------------------------------------------------------------------------

def test_ingest_into_a_read_only_store_says_so(tmp_path, good):
    db = tmp_path / "store.duckdb"
    connect(db).close()
    con = connect(db, read_only=True)
    res = ingest_paths(con, [good])
    assert res.run_id is None
    message = errors_by_file(res)[str(good)]
    assert "read-only" in message and str(db) in message
    assert read_only_reason(con) and read_only_reason(connect(":memory:")) is None
    con.close()


def test_store_on_a_read_only_file_system_opens_for_reading(tmp_path, good):
    with small_tmpfs(tmp_path / "ro") as disk:
        db = disk / "store.duckdb"
        con = connect(db)
        ingest_paths(con, [good])
        con.close()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True, capture_output=True)
        con = connect(db, read_only=None)
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (1,)
        res = ingest_paths(con, [good], name="again")
        assert f"the store {db} is on a read-only file system" in errors_by_file(res)[str(good)]
        con.close()
