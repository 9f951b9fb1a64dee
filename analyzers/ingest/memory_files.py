"""Memory inputs beside (or instead of) a run's traces: allocator snapshots and memory timelines.

Recognised by content, never by extension (gzip is looked through):
- an allocator snapshot: a pickle (torch.cuda.memory._snapshot() / _dump_snapshot(), torch_npu's
  alike) of a dict with `segments` (each with `blocks`) and optionally `device_traces`;
- a memory timeline: `torch.profiler`'s export_memory_timeline raw output, a JSON list of
  [ts, action, bytes, category] rows (ts in µs, -1 for memory that existed before profiling).

Snapshots are read by SafeUnpickler, which refuses every class and every persistent id: only
pickle's plain data (dicts, lists, tuples, strings, numbers, bytes, None, booleans) is built, so
no code from a file ever runs; size and count caps (MemoryLimits) bound what a file may hold.
Each file belongs to a rank: the rank its name gives (rank3, rank-3, ..._3.pickle), else the
run's only rank, else 0. Rows go to the memory_* tables of analyzers/store/schema.sql.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import blake3
import duckdb

GZIP_MAGIC = b"\x1f\x8b"
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_TRAILING_NUMBER = re.compile(r"[-_.](\d{1,5})(?:\.[a-z]+)+$", re.IGNORECASE)
_PEEK = 64

# export_memory_timeline's action and category indices (torch/profiler/_memory_profiler.py:
# Action enum values; _CATEGORY_TO_INDEX, the order of _CATEGORY_TO_COLORS)
TIMELINE_ACTIONS = {1: "preexisting", 2: "create", 3: "increment_version", 4: "destroy"}
TIMELINE_CATEGORIES = ["parameter", "optimizer_state", "input", "temporary", "activation", "gradient",
                       "autograd_detail", "unknown"]


@dataclass(frozen=True)
class MemoryLimits:
    """Caps on one memory file. A real snapshot of an 80 GB GPU holds ~10^4-10^5 blocks and a
    trace ring of at most its configured entries (default 10^5 per device); a timeline has a row
    per tensor version. Beyond these the file is refused with the cap it broke."""
    max_bytes: int = 2 << 30                 # the file's (inflated) size
    max_items: int = 20_000_000              # containers and scalars the unpickler may build
    max_segments: int = 1_000_000
    max_blocks: int = 5_000_000
    max_trace_entries: int = 10_000_000
    max_timeline_rows: int = 50_000_000
    max_frames: int = 64                     # stack frames kept per block or trace entry


class MemoryFileError(Exception):
    """A memory file that cannot be read, in plain words."""


class SafeUnpickler(pickle.Unpickler):
    """Builds only pickle's plain data: any class or function a file names (GLOBAL, STACK_GLOBAL,
    REDUCE through them, INST/OBJ/NEWOBJ, extension codes) is refused before anything runs, as is
    a persistent id. `budget` bounds how many objects the memo may hold."""

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle's hook
        raise MemoryFileError(f"refused: the pickle names a class or function ({module[:80]}.{name[:80]}), "
                              "and memory snapshots hold only plain data; nothing of it was run")

    def persistent_load(self, pid: Any):
        raise MemoryFileError("refused: the pickle refers to outside objects (a persistent id); "
                              "memory snapshots hold only plain data")


@dataclass
class MemoryFile:
    """One recognised memory input."""
    display: str
    member: str
    path: Path
    kind: str                      # 'allocator_snapshot' | 'memory_timeline'
    content_hash: str = ""
    rank: int | None = None        # from its name; None: decided by the run
    origin: str = ""
    data: Any = field(default=None, repr=False)


def _open(path: Path):
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == GZIP_MAGIC else open(path, "rb")


def _peek(path: Path) -> bytes:
    try:
        with _open(path) as fh:
            return fh.read(_PEEK)
    except (OSError, EOFError, zlib.error):
        return b""


def sniff(path: Path) -> str | None:
    """'allocator_snapshot', 'memory_timeline' or None (not a memory file: left to the trace reader)."""
    head = _peek(path)
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:     # pickle PROTO opcode
        return "allocator_snapshot"
    text = head.lstrip()
    # a timeline's first row: [[ts, action, bytes, category] (a trace is an object: '{')
    if re.match(rb"\[\s*\[\s*-?\d", text):
        return "memory_timeline"
    return None


def rank_from_name(name: str) -> int | None:
    match = _RANK_IN_NAME.search(name) or _TRAILING_NUMBER.search(name)
    return int(match.group(1)) if match else None


def _read_limited(path: Path, limit: int, display: str) -> bytes:
    with _open(path) as fh:
        try:
            data = fh.read(limit + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise MemoryFileError(f"the file is damaged or cut short ({exc})") from None
    if len(data) > limit:
        raise MemoryFileError(f"refused: it holds more than {limit >> 20} MiB (the limit for one memory file)")
    return data


def _count_items(obj: Any, limit: int) -> None:
    """Refuse structures beyond `limit` objects (breadth first, no recursion)."""
    seen, todo = 0, [obj]
    while todo:
        item = todo.pop()
        seen += 1
        if seen > limit:
            raise MemoryFileError(f"refused: it holds more than {limit:,} objects")
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)


def load_snapshot(path: Path, limits: MemoryLimits = MemoryLimits()) -> dict[str, Any]:
    """The snapshot's plain data, or MemoryFileError (a class in it, too big, not a snapshot)."""
    data = _read_limited(path, limits.max_bytes, str(path))
    try:
        obj = SafeUnpickler(io.BytesIO(data)).load()
    except MemoryFileError:
        raise
    except RecursionError:
        raise MemoryFileError("refused: the pickle is nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - any malformed pickle is the file's fault, in words
        raise MemoryFileError(f"not a readable pickle ({type(exc).__name__}: {str(exc)[:120]})") from None
    _count_items(obj, limits.max_items)
    if isinstance(obj, list):                           # an old snapshot: the segments list itself
        obj = {"segments": obj}
    if not isinstance(obj, dict) or not isinstance(obj.get("segments"), list):
        raise MemoryFileError("a pickle, but not an allocator snapshot (no 'segments' list)")
    return obj


def load_timeline(path: Path, limits: MemoryLimits = MemoryLimits()) -> list[list[Any]]:
    data = _read_limited(path, limits.max_bytes, str(path))
    try:
        rows = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise MemoryFileError(f"a memory timeline that is not valid JSON ({str(exc)[:120]})") from None
    if not isinstance(rows, list):
        raise MemoryFileError("not a memory timeline (a list of [ts, action, bytes, category] rows)")
    if len(rows) > limits.max_timeline_rows:
        raise MemoryFileError(f"refused: it holds more than {limits.max_timeline_rows:,} rows")
    return rows


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if -(1 << 63) <= value < (1 << 63) else None
    if isinstance(value, float) and value == value and abs(value) < 9e18:
        return int(value)
    return None


def _text(value: Any, limit: int = 512) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).encode("utf-8", "replace").decode("utf-8")[:limit]


def _frames(frames: Any, limit: int) -> str | None:
    """Stack frames as JSON [{name, filename, line}], at most `limit` of them."""
    if not isinstance(frames, list) or not frames:
        return None
    out = []
    for frame in frames[:limit]:
        if isinstance(frame, dict):
            out.append({"name": _text(frame.get("name"), 256), "filename": _text(frame.get("filename"), 256),
                        "line": _int(frame.get("line"))})
    return json.dumps(out) if out else None


def snapshot_rows(snapshot: dict[str, Any], limits: MemoryLimits = MemoryLimits()
                  ) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """(segments, blocks, trace entries) as rows for memory_segments / memory_blocks / memory_trace
    (without run_id and snapshot_id)."""
    segments, blocks, trace = [], [], []
    raw_segments = snapshot["segments"]
    if len(raw_segments) > limits.max_segments:
        raise MemoryFileError(f"refused: it holds more than {limits.max_segments:,} segments")
    for s_index, seg in enumerate(raw_segments):
        if not isinstance(seg, dict):
            continue
        address = _int(seg.get("address"))
        segments.append((s_index, _int(seg.get("device")), address, _int(seg.get("total_size")),
                         _int(seg.get("allocated_size")), _int(seg.get("active_size")),
                         _int(seg.get("requested_size")), _int(seg.get("stream")), _text(seg.get("segment_type"), 32),
                         bool(seg.get("is_expandable")) if seg.get("is_expandable") is not None else None))
        raw_blocks = seg.get("blocks") if isinstance(seg.get("blocks"), list) else []
        offset = 0
        for b_index, block in enumerate(raw_blocks):
            if not isinstance(block, dict):
                continue
            if len(blocks) >= limits.max_blocks:
                raise MemoryFileError(f"refused: it holds more than {limits.max_blocks:,} blocks")
            size = _int(block.get("size"))
            # older snapshots give blocks no address: they lie back to back from the segment's
            b_address = _int(block.get("address"))
            if b_address is None and address is not None:
                b_address = address + offset
            offset += size or 0
            blocks.append((s_index, b_index, _int(seg.get("device")), b_address, size,
                           _int(block.get("requested_size")), _text(block.get("state"), 32),
                           _frames(block.get("frames"), limits.max_frames)))
    device_traces = snapshot.get("device_traces")
    if isinstance(device_traces, list):
        for device, entries in enumerate(device_traces):
            if not isinstance(entries, list):
                continue
            for seq, entry in enumerate(entries):
                if not isinstance(entry, dict):
                    continue
                if len(trace) >= limits.max_trace_entries:
                    raise MemoryFileError(f"refused: it holds more than {limits.max_trace_entries:,} trace entries")
                trace.append((device, seq, _text(entry.get("action"), 32), _int(entry.get("addr")),
                              _int(entry.get("size")), _int(entry.get("stream")), _int(entry.get("time_us")),
                              _int(entry.get("device_free")), _frames(entry.get("frames"), limits.max_frames)))
    return segments, blocks, trace


# Timelines written by older torch versions carry epoch ns (1.7e18 in 2023), newer ones epoch µs
# (1.8e15 in 2026): a value above this is ns already.
_NS_EPOCH_FLOOR = 10 ** 17


def timeline_rows(rows: list[Any]) -> list[tuple]:
    """(seq, ts_ns, action, bytes, category) for memory_timeline; malformed rows skipped. Also
    reads export_memory_timeline's other JSON form, [times (µs), sizes by category per time]:
    each time's change of a category becomes a row."""
    if (len(rows) == 2 and all(isinstance(part, list) for part in rows) and rows[0]
            and not isinstance(rows[0][0], list) and rows[1] and isinstance(rows[1][0], list)):
        return _levels_to_rows(rows[0], rows[1])
    out = []
    for seq, row in enumerate(rows):
        if not isinstance(row, list) or len(row) < 4:
            continue
        ts, action, size, category = (_int(v) for v in row[:4])
        if action is None or size is None:
            continue
        out.append((seq, None if ts is None or ts < 0 else ts if ts >= _NS_EPOCH_FLOOR else ts * 1000,
                    TIMELINE_ACTIONS.get(action, str(action)),
                    size, TIMELINE_CATEGORIES[category] if category is not None and 0 <= category < 8 else "unknown"))
    return out


def _levels_to_rows(times: list[Any], sizes: list[Any]) -> list[tuple]:
    out: list[tuple] = []
    previous = [0] * (len(TIMELINE_CATEGORIES) + 1)
    for t, levels in zip(times, sizes):
        ts = _int(t)
        if not isinstance(levels, list):
            continue
        for index, category in enumerate(TIMELINE_CATEGORIES, start=1):   # index 0 is unused by torch
            level = _int(levels[index]) if index < len(levels) else None
            if level is None or level == previous[index]:
                continue
            delta = level - previous[index]
            previous[index] = level
            out.append((len(out), None if ts is None or ts < 0 else ts * 1000, "create" if delta > 0 else "destroy",
                        delta, category))
    return out


def hash_file(path: Path) -> str:
    digest = blake3.blake3()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def split_inputs(paths: Iterable[Any], max_files: int = 8192) -> tuple[list[MemoryFile], list[Any], set[Path]]:
    """(memory files among the inputs, the inputs left for the trace reader, memory files inside
    given directories that the trace reader must skip). A given file that is a memory file is taken
    out of the inputs; in a directory every file is looked at (content, not name)."""
    found: list[MemoryFile] = []
    rest: list[Any] = []
    skip: set[Path] = set()
    for given in paths:
        text = str(given)
        if "://" in text.split("/", 1)[0] + "/" and not text.lower().startswith("file://"):
            rest.append(given)      # URLs: the trace reader fetches them
            continue
        path = Path(text).expanduser()
        if path.is_file():
            kind = sniff(path)
            if kind:
                found.append(MemoryFile(path.name, path.name, path, kind, rank=rank_from_name(path.name), origin=text))
                continue
        elif path.is_dir():
            looked = 0
            for candidate in sorted(path.rglob("*")):
                if not candidate.is_file():
                    continue
                looked += 1
                if looked > max_files:
                    break
                kind = sniff(candidate)
                if kind:
                    rel = candidate.relative_to(path.parent).as_posix()
                    found.append(MemoryFile(rel, candidate.name, candidate, kind,
                                            rank=rank_from_name(candidate.relative_to(path).as_posix()), origin=text))
                    skip.add(candidate)
        rest.append(given)
    for item in found:
        item.content_hash = hash_file(item.path)
    return found, rest, skip


@dataclass
class MemoryLoad:
    """What reading the memory files of a call gave: those that loaded, and errors per file."""
    files: list[MemoryFile]
    errors: list[tuple[str, str]]


def read_all(files: list[MemoryFile], limits: MemoryLimits = MemoryLimits()) -> MemoryLoad:
    """Parse each file (snapshot rows or timeline rows into .data); a file that fails is an error."""
    ok, errors = [], []
    seen: set[str] = set()
    for item in files:
        if item.content_hash in seen:
            continue
        seen.add(item.content_hash)
        try:
            if item.kind == "allocator_snapshot":
                item.data = snapshot_rows(load_snapshot(item.path, limits), limits)
            else:
                item.data = timeline_rows(load_timeline(item.path, limits))
        except MemoryFileError as exc:
            errors.append((item.display, str(exc)))
            continue
        except OSError as exc:
            errors.append((item.display, f"could not read the file ({exc.strerror or exc})"))
            continue
        ok.append(item)
    return MemoryLoad(ok, errors)


def store(con: duckdb.DuckDBPyConnection, run_id: str, files: list[MemoryFile], run_ranks: list[int]) -> None:
    """Write the parsed memory files of a run (inside the caller's transaction, or its own)."""
    default_rank = run_ranks[0] if len(run_ranks) == 1 else 0
    first = con.execute("SELECT coalesce(max(snapshot_id) + 1, 0) FROM memory_snapshots WHERE run_id = ?",
                        [run_id]).fetchone()[0]
    for offset, item in enumerate(files):
        rank = item.rank if item.rank is not None else default_rank
        if item.kind == "allocator_snapshot":
            segments, blocks, trace = item.data
            snapshot_id = first + offset
            con.execute("INSERT INTO memory_snapshots VALUES (?, ?, ?, ?, ?)",
                        [run_id, snapshot_id, rank, item.member, item.content_hash])
            _insert(con, "memory_segments", run_id, snapshot_id, segments)
            _insert(con, "memory_blocks", run_id, snapshot_id, blocks)
            _insert(con, "memory_trace", run_id, snapshot_id, trace)
        else:
            rows = [(run_id, rank, item.member, *row) for row in item.data]
            if rows:
                _insert_rows(con, "memory_timeline", rows)


def _insert(con, table: str, run_id: str, snapshot_id: int, rows: list[tuple]) -> None:
    if rows:
        _insert_rows(con, table, [(run_id, snapshot_id, *row) for row in rows])


def _insert_rows(con, table: str, rows: list[tuple]) -> None:
    """Bulk insert through an Arrow table (a row-by-row executemany takes seconds per 10^5 blocks)."""
    import pyarrow as pa

    names = [row[0] for row in con.execute(f"DESCRIBE {table}").fetchall()]   # table names are ours
    columns = list(zip(*rows))
    arrow = pa.table({name: pa.array(list(values)) for name, values in zip(names, columns)})
    con.register("td_memory_rows", arrow)
    try:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM td_memory_rows")
    finally:
        con.unregister("td_memory_rows")
