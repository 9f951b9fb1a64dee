"""Every real trace in ../shared/traces loads, checked against an independent Python reading
(json with Decimal numbers: exact timestamps, event counts per category)."""
from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal

import pytest

from analyzers.ingest import ingest_paths
from analyzers.store.database import connect

SINGLE_FILES = ["alexnet_single_gpu.json.gz", "cpu_only_rank34.json.gz", "nccl_allreduce_with_sizes.json.gz",
                "no_distributed_info_cpu_ops.json.gz", "resnet50_num_workers_0.json.gz",
                "resnet50_num_workers_4.json.gz", "rocm_mi250_minitoy.json.gz", "triton_single_kernel.json.gz"]
CAT_TO_KIND = {"Kernel": "kernel", "kernel": "kernel", "Runtime": "runtime", "cuda_runtime": "runtime",
               "Operator": "cpu_op", "cpu_op": "cpu_op", "Memcpy": "memcpy", "gpu_memcpy": "memcpy",
               "Memset": "memset", "gpu_memset": "memset", "cuda_driver": "driver", "cuda_sync": "cuda_sync",
               "user_annotation": "user_annotation", "gpu_user_annotation": "gpu_user_annotation"}


@pytest.fixture(scope="module")
def store():
    con = connect(":memory:")
    yield con
    con.close()


def python_reading(path):
    doc = json.loads(gzip.open(path).read(), parse_float=Decimal)
    events = doc["traceEvents"]
    ts_ns = sorted(int(e["ts"] * 1000) for e in events if "ts" in e)
    kinds = Counter(CAT_TO_KIND[e["cat"]] for e in events if e.get("ph") == "X" and e.get("cat") in CAT_TO_KIND)
    return doc, events, ts_ns, kinds


@pytest.mark.parametrize("name", SINGLE_FILES)
def test_real_trace_loads_exactly(store, shared_traces, name):
    path = shared_traces / name
    doc, events, ts_ns, kinds = python_reading(path)
    res = ingest_paths(store, [path])
    assert res.errors == [] and res.warnings == []
    run = res.run_id
    assert store.execute("SELECT count(*) FROM events WHERE run_id = ?", [run]).fetchone()[0] == len(events)
    got_ts = [r[0] for r in store.execute(
        "SELECT ts_ns FROM events WHERE run_id = ? AND ts_ns IS NOT NULL ORDER BY ts_ns", [run]).fetchall()]
    assert got_ts == ts_ns
    got_kinds = dict(store.execute(
        "SELECT kind, count(*) FROM events WHERE run_id = ? AND ph = 'X' AND kind NOT IN "
        "('trace', 'python_function', 'other') GROUP BY kind", [run]).fetchall())
    assert got_kinds == dict(kinds)
    dist = doc.get("distributedInfo") or {}
    rank, device, world = store.execute(
        "SELECT rank, device_name, world_size FROM ranks JOIN runs USING (run_id) WHERE run_id = ?", [run]).fetchone()
    assert rank == dist.get("rank", 0)
    assert world == dist.get("world_size", 1)
    props = doc.get("deviceProperties") or [{}]
    assert device == props[0].get("name")


def test_nccl_two_ranks_as_one_run(store, shared_traces):
    res = ingest_paths(store, [shared_traces / "nccl2rank"])
    assert res.errors == [] and res.ranks == [0, 1]
    rows = store.execute("SELECT rank, n_events FROM ranks WHERE run_id = ? ORDER BY rank", [res.run_id]).fetchall()
    assert rows == [(0, 4855), (1, 4720)]
    assert store.execute("SELECT world_size, name FROM runs WHERE run_id = ?", [res.run_id]).fetchone() == \
        (128, "nccl2rank")
    # collective kernels keep their stream and correlation for the analyzers
    nccl = store.execute("SELECT count(*), count(stream), count(correlation) FROM events WHERE run_id = ? "
                         "AND kind = 'kernel' AND name LIKE 'ncclKernel%'", [res.run_id]).fetchone()
    assert nccl[0] > 0 and nccl[0] == nccl[1] == nccl[2]


def test_rocm_hip_calls_are_runtime(store, shared_traces):
    res = ingest_paths(store, [shared_traces / "rocm_mi250_minitoy.json.gz"])
    names = store.execute("SELECT DISTINCT kind FROM events WHERE run_id = ? AND name LIKE 'hip%'",
                          [res.run_id]).fetchall()
    assert names == [("runtime",)]


def test_collective_metadata_and_copy_details_kept(store, shared_traces):
    res = ingest_paths(store, [shared_traces / "nccl_allreduce_with_sizes.json.gz"])
    row = store.execute(
        "SELECT args->>'Collective name', TRY_CAST(args->>'In msg nelems' AS BIGINT), args->>'dtype' "
        "FROM events WHERE run_id = ? AND kind = 'kernel' AND name LIKE 'ncclKernel_AllReduce%' LIMIT 1",
        [res.run_id]).fetchone()
    assert row[0] == "allreduce" and row[1] > 0 and row[2]
    copies = store.execute("SELECT count(*), count(bytes) FROM events WHERE run_id = ? AND kind = 'memcpy' "
                           "AND name = 'Memcpy DtoD (Device -> Device)'", [res.run_id]).fetchone()
    assert copies[0] > 0 and copies[0] == copies[1]
