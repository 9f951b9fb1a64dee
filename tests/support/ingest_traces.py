"""Small trace writers shared by the ingest tests, and their store fixtures (con, good).

Traces are written as text, not through json.dumps of floats, so timestamps keep exactly the
digits a profiler writes (e.g. 1712195495519695.812).
"""
from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from analyzers.store.database import connect

EPOCH_TS = "1712195495519695.812"          # epoch µs with ns digits: float64 would give ...695.75
EPOCH_TS_NS = 1712195495519695812


def event(ph="X", cat="kernel", name="k", pid=0, tid=7, ts="100.5", dur="2.25", args=None, **extra) -> str:
    """One event as JSON text; ts/dur are inserted verbatim (strings of digits)."""
    parts = [f'"ph": {json.dumps(ph)}']
    if cat is not None:
        parts.append(f'"cat": {json.dumps(cat)}')
    if name is not None:
        parts.append(f'"name": {json.dumps(name)}')
    parts.append(f'"pid": {json.dumps(pid)}')
    parts.append(f'"tid": {json.dumps(tid)}')
    if ts is not None:
        parts.append(f'"ts": {ts}')
    if dur is not None:
        parts.append(f'"dur": {dur}')
    for key, value in extra.items():
        parts.append(f'{json.dumps(key)}: {json.dumps(value)}')
    if args is not None:
        parts.append(f'"args": {json.dumps(args)}')
    return "{" + ", ".join(parts) + "}"


def trace_text(events: list[str], meta: dict | None = None, events_first: bool = False,
               meta_after: dict | None = None) -> str:
    """A Kineto-shaped document: metadata keys, traceEvents, then meta_after keys."""
    meta = {"schemaVersion": 1} if meta is None else meta
    head = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in meta.items()]
    body = '"traceEvents": [\n  ' + ",\n  ".join(events) + "\n]"
    tail = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in (meta_after or {}).items()]
    items = ([body] + head if events_first else head + [body]) + tail
    return "{\n" + ",\n".join(items) + "\n}\n"


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode() if isinstance(text, str) else text
    if path.name.endswith(".gz") and not path.name.endswith(".tar.gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def write_zip(path: Path, members: dict[str, str | bytes], symlinks: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in members.items():
            zf.writestr(name, text.encode() if isinstance(text, str) else text)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o120777 << 16)
            zf.writestr(info, target)
    return path


def write_tar_gz(path: Path, members: dict[str, str | bytes], symlinks: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, text in members.items():
            data = text.encode() if isinstance(text, str) else text
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tf.addfile(info)
    return path


def mixed_events() -> list[str]:
    """One event of each shape the normaliser must tell apart (new schema)."""
    return [
        event("X", "user_annotation", "ProfilerStep#7", pid=10, tid=11, ts="1000", dur="500", args={"External id": 1}),
        event("X", "cpu_op", "aten::mm", pid=10, tid=11, ts="1001.5", dur="10", args={"External id": 2}),
        event("X", "cuda_runtime", "cudaLaunchKernel", pid=10, tid=11, ts="1002", dur="3",
              args={"External id": 2, "correlation": 77}),
        event("X", "kernel", "sgemm", pid=0, tid=7, ts="1010.125", dur="20.5",
              args={"device": 0, "stream": 7, "correlation": 77, "External id": 2}),
        event("X", "gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", pid=0, tid="stream 20", ts="1040", dur="4",
              args={"correlation": 78, "bytes": 4096}),
        event("X", "gpu_memset", "Memset (Device)", pid=1, tid=9, ts="1050", dur="1", args={"bytes": 128}),
        event("X", "cuda_driver", "cuLaunchKernel", pid=10, tid=11, ts="1003", dur="1", args={"correlation": 79}),
        event("X", "python_function", "train.py(12): step", pid=10, tid=11, ts="999", dur="600"),
        event("X", "gpu_user_annotation", "fwd", pid=0, tid=7, ts="1010", dur="30", args={"device": 0, "stream": 7}),
        event("X", "cuda_sync", "Stream Sync", pid=0, tid=7, ts="1060", dur="2",
              args={"device": 0, "stream": 7, "correlation": 80, "cuda_sync_kind": "Stream Sync"}),
        event("s", "ac2g", "ac2g", pid=10, tid=11, ts="1002", dur=None, id=77, bp="e"),
        event("f", "ac2g", "ac2g", pid=0, tid=7, ts="1010.125", dur=None, id=77, bp="e"),
        event("i", "cpu_instant_event", "mark", pid=10, tid=11, ts="1005", dur=None, s="t"),
        event("M", None, "process_name", pid=0, tid=0, ts=None, dur=None, args={"name": "GPU 0"}),
        event("C", "counter", "mem", pid=10, tid=11, ts="1006", dur=None, args={"bytes": 5}),
        event("X", "Trace", "PyTorch Profiler (0)", pid="Spans", tid="PyTorch Profiler", ts="990", dur="700"),
        event("X", "overhead", "Activity Buffer Request", pid=0, tid=7, ts="995", dur="1"),
    ]


EXPECTED_MIXED_KINDS = {
    "user_annotation": 1, "cpu_op": 1, "runtime": 1, "kernel": 1, "memcpy": 1, "memset": 1, "driver": 1,
    "python_function": 1, "gpu_user_annotation": 1, "cuda_sync": 1, "flow": 2, "instant": 1, "metadata": 1,
    "counter": 1, "trace": 1, "other": 1,
}


def old_schema_events() -> list[str]:
    """2021 Kineto categories (resnet50 traces): Operator, Runtime, Kernel, Memcpy, Memset, async."""
    return [
        event("X", "Operator", "ProfilerStep#3", pid=5, tid="1890023232", ts="1610366662254362", dur="900",
              args={"external id": 11}),
        event("X", "Runtime", "cudaLaunchKernel", pid=5, tid="1890023232", ts="1610366662254370", dur="5",
              args={"correlation": 31, "external id": 11}),
        event("X", "Kernel", "volta_sgemm", pid=0, tid="stream 7", ts="1610366662254380", dur="40",
              args={"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 31, "external id": 11}),
        event("X", "Memcpy", "Memcpy HtoD (Pageable -> Device)", pid=0, tid="stream 7", ts="1610366662254430",
              dur="8", args={"device": 0, "stream": 7, "correlation": 32, "external id": 12, "bytes": 602112}),
        event("X", "Memset", "Memset (Device)", pid=0, tid="stream 7", ts="1610366662254440", dur="1",
              args={"device": 0, "stream": 7, "correlation": 33, "bytes": 64}),
        event("s", "async", "launch", pid=5, tid="1890023232", ts="1610366662254370", dur=None, id=31),
        event("f", "async", "launch", pid=0, tid="stream 7", ts="1610366662254380", dur=None, id=31, bp="e"),
    ]


def errors_by_file(res):
    return {e.file: e.error for e in res.errors}


def assert_plain(message: str):
    assert message and "Traceback" not in message and "File \"" not in message
    assert not message.startswith(("Invalid Input Error", "Conversion Error", "Exception"))


def store_counts(con):
    return tuple(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("runs", "ranks", "events"))


@pytest.fixture()
def con():
    c = connect(":memory:")
    yield c
    c.close()


@pytest.fixture()
def good(tmp_path):
    return write(tmp_path / "good" / "rank0.json", trace_text(mixed_events(), {"distributedInfo": {"rank": 0}}))
