"""Inflated traces cut into parse ranges as they stream (analyzers/ingest/stream_split.py).

The splitter must give what the plain path gives for the same text: the same layout (offsets and
metadata), ranges that together hold exactly the event list, and through ingest the same rows and
the same error messages; anything it cannot split comes back whole as one plain file.
"""
from __future__ import annotations

import gzip
import json
import os

import pytest

from analyzers.ingest import Limits, ingest_paths
from analyzers.ingest import run_writer as ingest_core
from analyzers.ingest import stream_split
from analyzers.ingest.layout import LayoutError, scan_layout
from analyzers.ingest.parse import join_parts
from analyzers.ingest.sources import _range_bytes
from analyzers.store.database import connect
from tests.support.ingest_traces import event, mixed_events, trace_text, write, write_tar_gz, write_zip

NESTED_ARGS = {"Input Dims": [[1, 2]], "nested": [{"a": 1}, {"b": [{}, {}]}], "text": "}, {\"ph\": 1}"}


def many_events(n: int) -> list[str]:
    return [event(ts=str(1000 + i), args=dict(NESTED_ARGS, **{"External id": i})) for i in range(n)]


SHAPES = {
    "meta_before": trace_text(many_events(400), {"schemaVersion": 1, "deviceProperties": [{"name": "A100"}]}),
    "events_first": trace_text(many_events(400), events_first=True),
    "meta_after": trace_text(many_events(400), meta_after={"traceName": "x", "baseTimeNanoseconds": 17,
                                                           "displayTimeUnit": "ms"}),
    "bare_array": "[\n" + ",\n".join(many_events(400)) + "\n]\n",
    "empty_list": trace_text([]),
    "one_event": trace_text([event()]),
    "bom_and_utf8": "\ufeff" + trace_text(many_events(50), {"schemaVersion": 1, "note": "größe µs"}),
    "long_meta_after": trace_text(many_events(50), meta_after={"big": ["x" * 100] * 3000}),
}


def split(text: str, part_bytes: int, chunk: int, tmp_path) -> stream_split.SplitTrace | str:
    splitter = stream_split.RangeSplitter(str(tmp_path), part_bytes)
    data = text.encode()
    for start in range(0, len(data), chunk):
        splitter.feed(data[start:start + chunk])
    return splitter.finish()


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("part_bytes, chunk, lookahead", [
    (1 << 20, 1 << 20, 1 << 20),      # one range
    (2000, 4096, 1 << 20),            # cut only once the text has ended
    (2000, 7, 512),                   # cut mid-stream, fed a few bytes at a time
    (300, 1000, 600),
])
def test_ranges_hold_exactly_the_event_list(shape, part_bytes, chunk, lookahead, tmp_path, monkeypatch):
    monkeypatch.setattr(stream_split, "LOOKAHEAD", lookahead)
    text = SHAPES[shape]
    plain = tmp_path / "plain.json"
    plain.write_bytes(text.encode())
    expected = scan_layout(plain)
    out = tmp_path / "out"
    out.mkdir()
    result = split(text, part_bytes, chunk, out)
    assert isinstance(result, stream_split.SplitTrace)
    assert result.layout == expected
    events = [e for part in result.parts for e in json.loads(open(part, encoding="utf-8").read())]
    doc = json.loads(text.lstrip("\ufeff"))
    assert events == (doc if isinstance(doc, list) else doc["traceEvents"])
    assert sorted(os.listdir(out)) == sorted(os.path.basename(p) for p in result.parts)
    if part_bytes < 1 << 20 and shape not in ("empty_list", "one_event"):
        assert len(result.parts) > 1


@pytest.mark.parametrize("text, error", [
    ('{"a": 1}', "has no 'traceEvents' list"),
    ('{"traceEvents": 5}', "'traceEvents' is a number"),
    (trace_text(many_events(300))[:-40], "truncated"),                      # the end is cut off
    (trace_text(many_events(300)).replace("\n]\n", "\n\n", 1), "truncated"),  # the list never closes
    ("   ", "only whitespace"),
    ("[1, 2", "truncated or malformed"),
])
def test_what_it_cannot_split_comes_back_whole(text, error, tmp_path, monkeypatch):
    monkeypatch.setattr(stream_split, "LOOKAHEAD", 256)
    out = tmp_path / "out"
    out.mkdir()
    result = split(text, 500, 333, out)
    assert isinstance(result, str)
    assert os.listdir(out) == [os.path.basename(result)]    # no ranges left behind
    whole = open(result, encoding="utf-8").read()
    try:
        assert json.loads(whole) == json.loads(text)         # the same JSON (separators may differ)
    except json.JSONDecodeError:
        assert whole.replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "")
    with pytest.raises(LayoutError, match=error):
        scan_layout(result)


def test_abort_removes_everything(tmp_path):
    splitter = stream_split.RangeSplitter(str(tmp_path), 200)
    splitter.feed(trace_text(many_events(200)).encode()[:30000])
    assert os.listdir(tmp_path)
    splitter.abort()
    assert os.listdir(tmp_path) == []


def load(path, part_bytes: int | None = 4096, threads: int | None = None) -> dict:
    """One ingest into its own store (one store would reuse the first of two equal runs): the
    run id, the errors and warnings, and the stored rows and rank metadata."""
    con = connect(":memory:")
    if threads:
        con.execute(f"SET threads = {threads}")
    res = ingest_paths(con, [path], limits=Limits() if part_bytes is None else Limits(part_bytes=part_bytes))
    got = {"run_id": res.run_id, "errors": [e.error for e in res.errors],
           "warnings": [e.error for e in res.warnings]}
    if res.run_id:
        got["rows"] = con.execute("SELECT * EXCLUDE (run_id) FROM events ORDER BY ALL").fetchall()
        got["ranks"] = con.execute("SELECT * EXCLUDE (run_id, file_name) FROM ranks").fetchall()
    con.close()
    return got


def ingest_both(text: str, tmp_path, part_bytes: int | None = 4096, threads: int | None = None) -> tuple[dict, dict]:
    """The same text loaded from X.json and from X.json.gz."""
    return tuple(load(write(tmp_path / name.replace(".", "_") / name, text), part_bytes, threads)
                 for name in ("rank0.json", "rank0.json.gz"))


@pytest.mark.parametrize("container", ["gz", "zip", "tar.gz", "zip-of-gz"])
def test_inflated_inputs_load_the_same_rows_and_meta_as_plain(container, tmp_path):
    text = trace_text(many_events(3000) + mixed_events(),
                      {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}},
                      meta_after={"traceName": "t", "baseTimeNanoseconds": 1700000000000000000})
    plain = write(tmp_path / "plain" / "rank0.json", text)
    if container == "gz":
        packed = write(tmp_path / "rank0.json.gz", text)
    elif container == "zip":
        packed = write_zip(tmp_path / "r.zip", {"rank0.json": text})
    elif container == "tar.gz":
        packed = write_tar_gz(tmp_path / "r.tar.gz", {"rank0.json": text})
    else:
        packed = write_zip(tmp_path / "r.zip", {"rank0.json.gz": gzip.compress(text.encode())})
    got = {label: load(path, part_bytes=8192) for label, path in (("plain", plain), ("packed", packed))}
    assert all(g["errors"] == [] and g["warnings"] == [] for g in got.values())
    assert got["packed"] == got["plain"]        # same rows, same rank metadata, same content hash


@pytest.mark.parametrize("bad_cut", [False, True])
def test_gz_cut_into_many_ranges_and_healed(bad_cut, tmp_path, monkeypatch):
    # a cut inside an event (forced here: any "}, {" taken for a boundary, without the check that
    # an event starts there) makes a range invalid JSON: the file is re-read as one range joined
    # from its ranges
    path = write(tmp_path / "big.json.gz", trace_text(many_events(3000)))
    if bad_cut:
        from analyzers.ingest import layout
        monkeypatch.setattr(layout, "next_event_start",
                            lambda mm, lo, hi: next((m.end() - 1 for m in layout._EVENT_BOUNDARY.finditer(mm, lo, hi)
                                                     if mm[m.end():m.end() + 3] == b'"b"'), None))
    seen = []
    real_insert = ingest_core.insert_events
    monkeypatch.setattr(ingest_core, "insert_events",
                        lambda con, run_id, rank_parts, **kw: seen.append(len(rank_parts[0][1]))
                        or real_insert(con, run_id, rank_parts, **kw))
    con = connect(":memory:")
    res = ingest_paths(con, [path], limits=Limits(part_bytes=4096))
    assert seen[0] > 100                     # really read as many ranges
    assert (seen[-1] == 1) is bad_cut        # healed by one joined range
    assert res.errors == []
    got = con.execute("SELECT count(*), sum(external_id), min(ts_ns), max(ts_ns) FROM events").fetchone()
    assert got == (3000, sum(range(3000)), 1_000_000, 3_999_000)
    assert os.listdir(tmp_path) == ["big.json.gz"]      # the temp ranges are gone


@pytest.mark.parametrize("text", [
    '{"a": 1}',
    trace_text(mixed_events())[:-30],
    '{"traceEvents": [' + event() + ", 5, " + event() + "]}",
])
def test_errors_name_the_same_problem_as_for_plain_files(text, tmp_path):
    plain, packed = ingest_both(text, tmp_path, part_bytes=None)
    assert plain["errors"] == packed["errors"]
    assert plain["warnings"] == packed["warnings"]


def test_range_count_keeps_every_thread_busy_when_the_size_is_known():
    assert _range_bytes(None, 2, 16 << 20) == 16 << 20
    size = 1075 << 20
    per = _range_bytes(size, 2, 16 << 20)
    assert -(-size // per) % 2 == 0 and per <= 16 << 20


def test_gzip_trailer_gives_the_range_size(tmp_path, monkeypatch):
    text = trace_text(many_events(2000))
    path = write(tmp_path / "t.json.gz", text)
    sizes = []
    real = stream_split.RangeSplitter.__init__
    monkeypatch.setattr(stream_split.RangeSplitter, "__init__",
                        lambda self, tmpdir, part_bytes: sizes.append(part_bytes) or real(self, tmpdir, part_bytes))
    con = connect(":memory:")
    con.execute("SET threads = 2")
    ingest_paths(con, [path], limits=Limits(part_bytes=64 << 10))
    assert sizes == [_range_bytes(len(text.encode()), 2, 64 << 10)]


def test_cuts_in_metadata_after_the_list_are_undone(tmp_path):
    # metadata after traceEvents holding objects with a "ph" key looks like more events: ranges
    # cut there are dropped and the list's end is found in the text before them
    text = trace_text(many_events(200), meta_after={
        "otherEvents": [{"ph": "i", "name": "a" * 6000}, {"ph": "i", "name": "b"}], "traceName": "x"})
    plain, packed = ingest_both(text, tmp_path)
    assert plain["errors"] == [] and len(plain["rows"]) == 200
    assert packed == plain
    out = tmp_path / "split"
    out.mkdir()
    result = split(text, 2000, 4096, out)
    assert isinstance(result, stream_split.SplitTrace)
    (tmp_path / "t.json").write_text(text)
    assert result.layout == scan_layout(tmp_path / "t.json")
    assert sorted(os.listdir(out)) == sorted(os.path.basename(p) for p in result.parts)   # dropped ranges removed


@pytest.mark.parametrize("part_bytes, threads", [(64 << 10, 2), (16 << 20, 16)])
def test_timestamp_path_sampled_across_ranges(part_bytes, threads, tmp_path):
    # whole-µs epoch timestamps first, then ones with ns digits within the first MiB of the list:
    # the sample that picks the exact path must read past the first range as it does in a plain file
    events = [event(ts=str(1712195495519000 + i)) for i in range(3000)]
    events += [event(ts=f"{1712195495520000 + i}.001") for i in range(40000)]
    plain, packed = ingest_both(trace_text(events), tmp_path, part_bytes=part_bytes, threads=threads)
    assert packed == plain
    assert {row[5] % 1000 for row in packed["rows"]} == {0, 1}     # ts_ns keeps the .001


def test_not_a_trace_is_written_out_at_once(tmp_path):
    # a definite verdict (not JSON) needs no more text: nothing is held back in memory
    splitter = stream_split.RangeSplitter(str(tmp_path), 4096)
    splitter.feed(b"line 1 of a log file\n" * 1000)
    assert splitter.plain_path is not None and len(splitter.head) == 0
    splitter.feed(b"more\n")
    assert os.path.getsize(splitter.finish()) == 21 * 1000 + 5


def test_deeply_nested_args_do_not_take_the_call_down(tmp_path):
    deep = '{"ph": "X", "ts": 5, "dur": 1, "args": {"d": ' + "[" * 3000 + "]" * 3000 + "}}"
    bad = write(tmp_path / "rank0.json.gz", trace_text([deep] * 50))
    good = write(tmp_path / "good1.json", trace_text([event()], {"distributedInfo": {"rank": 1}}))
    res = ingest_paths(connect(":memory:"), [bad, good], limits=Limits(part_bytes=4096))
    assert "good1.json" in res.files
    deep_head = write(tmp_path / "head.json.gz", '{"meta": ' + "[" * 5000 + "]" * 5000 + ', "traceEvents": []}')
    res = ingest_paths(connect(":memory:"), [deep_head])
    assert "nested too deeply" in res.errors[0].error


@pytest.mark.parametrize("offset", [0, 1, 2, 5, 8])
def test_metadata_that_crosses_the_first_window(offset, tmp_path):
    # a key, its colon or traceEvents' '[' right at the 1 MiB edge of the first look at the head
    window = 1 << 20
    key_edge = '{"a": "' + "x" * (window - 9 - offset) + '", "schemaVersion": 1, "traceEvents": [' + event() + "]}"
    head, tail = '{"a": "', '", "traceEvents": '
    bracket_edge = head + "x" * (window - offset - len(head) - len(tail)) + tail + "[" + event() + "]}"
    for text in (key_edge, bracket_edge):
        plain, packed = ingest_both(text, tmp_path / str(len(text)))
        assert plain["errors"] == [] and len(plain["rows"]) == 1
        assert packed == plain


def test_small_files_in_an_archive_stay_one_range_each(tmp_path):
    text = trace_text(many_events(150))
    members = {f"rank{r}.json": text.replace('"tid": 7', f'"tid": {r}') for r in range(12)}
    archive = write_zip(tmp_path / "ranks.zip", members)
    seen = []
    real = ingest_core.insert_events
    con = connect(":memory:")
    con.execute("SET threads = 16")
    import analyzers.ingest.run_writer as core_module
    core_module.insert_events = lambda c, run_id, rank_parts, **kw: seen.append(
        sum(len(p) for _, p in rank_parts)) or real(c, run_id, rank_parts, **kw)
    try:
        res = ingest_paths(con, [archive])
    finally:
        core_module.insert_events = real
    assert res.errors == [] and len(res.ranks) == 12
    assert seen == [12]


def test_random_documents_split_like_the_plain_scan(tmp_path, monkeypatch):
    """Seeded random traces (odd whitespace, strings full of brackets and '}, {', nested objects
    with "ph" keys, BOMs, bare arrays), cut at random sizes and fed in random chunks: whenever
    the plain scan reads the text, the splitter gives its layout and exactly its events."""
    import random

    rnd = random.Random(20261121)
    blanks = [" ", "\n", "\r\n", "\t", "", "  "]
    words = ["a", "}, {", "]", "}", '"traceEvents"', 'q"uote', "back\\slash", "größe", "日本語", "𝄞", "ph", "[{", "],"]

    def ws() -> str:
        return "".join(rnd.choice(blanks) for _ in range(rnd.randrange(3)))

    def word() -> str:
        return "".join(rnd.choice(words) for _ in range(rnd.randrange(4)))

    def value(depth: int = 0, ph_ok: bool = True):
        r = rnd.random()
        if depth > 3 or r < 0.3:
            return rnd.choice([word(), rnd.randrange(10 ** 6), 1.5, None, True])
        if r < 0.6:
            return [value(depth + 1, ph_ok) for _ in range(rnd.randrange(4))]
        obj = {word() or "k": value(depth + 1, ph_ok) for _ in range(rnd.randrange(4))}
        if ph_ok and rnd.random() < 0.3:
            obj["ph"] = "X"
        return obj

    def dump(v) -> str:
        text = json.dumps(v, ensure_ascii=rnd.random() < 0.5)
        return text.replace(", ", "," + ws()).replace(": ", ":" + ws()) if rnd.random() < 0.5 else text

    def document() -> str:
        events = [dump({"ph": rnd.choice("XiMsf"), "ts": 1000 + i, "dur": 1, "name": word(),
                        "args": {"x": value()}}) for i in range(rnd.choice([0, 1, 2, 5, 50, 300]))]
        body = "[" + ws() + ("," + ws()).join(events) + ws() + "]"
        if rnd.random() < 0.15:
            return ws() + body + ws()
        head = [f'{dump(word() or "h")}:{ws()}{dump(value(0, False))}' for _ in range(rnd.randrange(3))]
        tail = [f'{dump(word() or "t")}:{ws()}{dump(value(0, rnd.random() < 0.3))}' for _ in range(rnd.randrange(3))]
        keys = head + [f'"traceEvents":{ws()}{body}'] + tail
        return ("\ufeff" if rnd.random() < 0.1 else "") + ws() + "{" + ws() + ("," + ws()).join(keys) + ws() + "}" + ws()

    checked = healed = 0
    for index in range(250):
        text = document()
        try:
            doc = json.loads(text.lstrip("\ufeff"))
        except ValueError:
            continue
        if isinstance(doc, dict) and list(doc).count("traceEvents") != 1:
            continue
        plain = tmp_path / f"{index}.json"
        plain.write_bytes(text.encode())
        try:
            expected = scan_layout(plain)
        except LayoutError:
            continue
        monkeypatch.setattr(stream_split, "LOOKAHEAD", rnd.choice([8, 100, 2000, 1 << 20]))
        out = tmp_path / f"out{index}"
        out.mkdir()
        result = split(text, rnd.choice([1, 50, 300, 4096]), rnd.choice([1, 3, 7, 64, 1000, 1 << 20]), out)
        assert isinstance(result, stream_split.SplitTrace), index
        assert result.layout == expected, index
        want = doc if isinstance(doc, list) else doc["traceEvents"]
        try:
            events = [e for part in result.parts for e in json.loads(open(part, encoding="utf-8").read())]
        except ValueError:
            # a cut inside an event (a nested object with "ph" after '}, {' in its args): the
            # parse then reads the ranges joined back into one, as here
            events = json.loads(open(join_parts(result.parts, str(out)), encoding="utf-8").read())
            healed += 1
        assert events == want, index
        checked += 1
    assert checked > 100 and healed > 0


def test_deeply_nested_value_in_a_key_position_is_reported(tmp_path):
    text = "{" + "[" * 200000 + "]" * 200000 + ': 1, "traceEvents": []}'
    for name in ("k.json", "k.json.gz"):
        res = ingest_paths(connect(":memory:"), [write(tmp_path / name, text)])
        assert res.run_id is None and "malformed near the start" in res.errors[0].error
