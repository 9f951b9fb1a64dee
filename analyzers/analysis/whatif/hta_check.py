"""Check a critical path against Holistic Trace Analysis' (its overlaid output marks the events on
its path with args.critical = 1): per event kind, how many of HTA's critical runtime calls and GPU
work our path holds (recall), and how many of ours HTA's holds (precision). Events are matched by
kind and start time (whole microseconds: HTA's own resolution). CPU ops are not compared: the
replay keeps them as the CPU time between runtime calls, not as nodes."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import duckdb
from analyzers.common import thresholds as th
from analyzers.analysis.whatif.critical_path import critical_path
from analyzers.analysis.whatif.graph import COPY, LAUNCH, SYNC, build_run_graph
from analyzers.analysis.whatif.replay import replay_run

# the runtime calls compared: launches, copies, sets and syncs (HTA's path also walks other calls,
# e.g. cudaDeviceGetAttribute, as CPU time; the replay counts those as CPU time between nodes)
_COMPARED_CALL = re.compile(r"^(cuda|hip)(LaunchKernel|LaunchKernelExC|Memcpy|MemcpyAsync|MemsetAsync|Memset|"
                            r"StreamSynchronize|DeviceSynchronize|EventSynchronize)$")
_KINDS = {"cuda_runtime": "runtime", "kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


def hta_critical(path: str | Path) -> dict[str, set[int]]:
    """{kind: start times (us) of the events HTA's overlaid trace marks critical}."""
    with gzip.open(path, "rt") if str(path).endswith(".gz") else open(path) as handle:
        events = json.load(handle)["traceEvents"]
    out: dict[str, set[int]] = {k: set() for k in _KINDS.values()}
    for e in events:
        kind = _KINDS.get(e.get("cat"))
        if kind == "runtime" and not _COMPARED_CALL.match(str(e.get("name"))):
            continue
        if kind and (e.get("args") or {}).get("critical") == 1:
            out[kind].add(int(float(e["ts"])))
    return out


def our_critical(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, set[int]]:
    """{kind: start times (us) of the runtime calls and GPU work on our critical path}, rank 0."""
    graph = build_run_graph(con, run_id, th.resolve())
    replay = replay_run(graph)
    g, r = graph.ranks[0], replay.ranks[0]
    path = critical_path(g, r)
    out: dict[str, set[int]] = {k: set() for k in _KINDS.values()}
    gpu_kind = {0: "kernel", 1: "kernel", 2: "memory"}
    for is_gpu, index in zip(path.is_gpu.tolist(), path.index.tolist()):
        if is_gpu:
            kind = gpu_kind.get(int(g.g_cat[index]))
            if kind == "memory":
                kind = "memcpy" if g.g_copy_dir[index] is not None else "memset"
            if kind:
                out[kind].add(int((int(g.g_start[index]) + g.t0) // 1000))
        elif g.h_type[index] in (LAUNCH, COPY, SYNC):    # the runtime calls HTA's graph has as nodes too
            out["runtime"].add(int((int(g.h_start[index]) + g.t0) // 1000))
    # the nodes of the chain that are not runtime calls (loader, comm) have no HTA counterpart
    return out


def compare(ours: dict[str, set[int]], hta: dict[str, set[int]]) -> dict[str, dict[str, Any]]:
    rows = {}
    for kind in _KINDS.values():
        a, b = ours[kind], hta[kind]
        both = len(a & b)
        rows[kind] = {"hta": len(b), "ours": len(a), "both": both,
                      "recall": None if not b else round(both / len(b), 3),
                      "precision": None if not a else round(both / len(a), 3)}
    return rows
