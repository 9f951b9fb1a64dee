"""The what-if dependency graph of a run, as numpy arrays per rank (built from whatif/graph.sql).

A rank is a host chain and its GPU streams (see graph.sql for the edges). The host chain is a
sequence of nodes; the CPU time between one node and the host's progress before it (`gap`) is
replayed as measured, so a node that ends later (a sync that waits longer) pushes everything after
it. Blocking nodes (syncs, blocking copies, CPU collective waits) end when what they wait for ends
(`target`), plus their own overhead (`own`); everything else keeps its measured duration.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

# host node types
CALL, LAUNCH, SYNC, COPY, LOADER, COMM_WAIT, COMM_ISSUE, STEP = range(8)
HOST_TYPE_NAMES = ("call", "launch", "sync", "copy", "loader", "comm_wait", "comm_issue", "step")
# what a blocking host node waits for
T_NONE, T_DEVICE, T_STREAM, T_OP, T_COLL = range(5)
# GPU op categories
G_COMPUTE, G_COMM, G_MEMORY, G_WAIT = range(4)
GPU_CATEGORY_NAMES = ("compute", "comm", "memory", "stream_wait")
NEVER = -(1 << 62)        # "no constraint" in int64 ns arithmetic



@dataclass
class RankGraph:
    """One rank's graph. Host arrays are in chain order; GPU arrays sorted by (stream, start).
    Times are ns relative to the rank's first host node (measured values)."""
    rank: int
    t0: int
    # host chain
    h_type: np.ndarray          # int8, HOST_TYPE codes
    h_start: np.ndarray         # int64, measured
    h_dur: np.ndarray           # int64, measured duration (non-blocking nodes replay it)
    h_gap: np.ndarray           # int64, CPU time before the node (may be negative: concurrent threads)
    h_blocking: np.ndarray      # bool
    h_target_kind: np.ndarray   # int8, T_* (blocking nodes)
    h_target: np.ndarray        # int64, stream id (T_STREAM), op index (T_OP), collective index (T_COLL)
    h_own: np.ndarray           # int64, a blocking node's own time after its wait
    h_stall: np.ndarray         # bool, a slow runtime call that neither launches, syncs nor copies
    h_copy_dir: np.ndarray      # object, a copy call's direction (HtoD, DtoH...), None otherwise
    h_coll: np.ndarray          # int64, collective index of a comm_issue node, -1 otherwise
    h_coll_tail: np.ndarray     # int64, a comm_wait's collective: its end after the last rank's arrival
    h_loader_in_main: np.ndarray  # bool, a DataLoader wait of a loader without workers (_SingleProcessDataLoaderIter)
    h_untraced: np.ndarray      # int64, the part of the CPU time before the node (h_gap) in recurring
                                # untraced holes (lib/host_time.sql: no thread of the process in a profiled op)
    # GPU ops
    g_stream: np.ndarray        # int64
    g_start: np.ndarray         # int64, measured
    g_dur: np.ndarray           # int64
    g_launch: np.ndarray        # int64, host index of the launch (or of the host node before it: see g_has_launch)
    g_has_launch: np.ndarray    # bool, the launch edge is recorded
    g_early: np.ndarray         # int64, -1, or for an op that started before its launch call returned
                                # (a pageable copy runs inside cudaMemcpyAsync) its start after the call's start
    g_cat: np.ndarray           # int8, G_* codes
    g_fp32: np.ndarray          # bool
    g_copy_dir: np.ndarray      # object
    g_pageable: np.ndarray      # bool
    g_dep: np.ndarray           # int64, an op on another stream this one waits for (stream wait), -1 none
    g_coll: np.ndarray          # int64, collective index (NCCL kernels), -1 none
    g_coll_tail: np.ndarray     # int64, a collective kernel's end after the last rank's arrival
    # steps: host node index of each step's start and end marker, measured durations
    step_numbers: np.ndarray
    step_start_node: np.ndarray
    step_end_node: np.ndarray
    step_measured_ns: np.ndarray
    launch_latency_ns: int = 0  # L: launch call end -> kernel start when the stream is free
    queue_gap_ns: int = 0       # G: previous op end -> next op start when it was queued
    notes: list[str] = field(default_factory=list)

    def replace(self, **changes: Any) -> "RankGraph":
        return dataclasses.replace(self, **changes)

    @property
    def n_host(self) -> int:
        return len(self.h_type)

    def host_step(self) -> np.ndarray:
        """Per host node, the index of the step whose start and end markers hold it (a marker
        shared by two steps: the later), -1 outside every step."""
        step = np.full(self.n_host, -1, dtype=np.int64)
        for k, (start, end) in enumerate(zip(self.step_start_node, self.step_end_node)):
            step[start:end + 1] = k
        return step


@dataclass
class RunGraph:
    """Every rank's graph and the collectives that couple them. A collective ends on each rank a
    measured time (its tail) after the last rank arrived: gloo and NCCL ranks get their result at
    different moments of the algorithm, and the last to arrive waits for nobody."""
    ranks: list[RankGraph]
    n_coll: int
    coll_keys: list[str]
    coll_matched: np.ndarray        # bool per collective: matched across ranks (else it couples nothing)
    notes: list[str] = field(default_factory=list)
    build_seconds: float = 0.0      # what building it took (its SQL and arrays)

    def replace(self, **changes: Any) -> "RunGraph":
        return dataclasses.replace(self, **changes)


def _fetch(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> dict[str, np.ndarray]:
    return con.execute(sql, params).fetchnumpy()


def _col(d: dict[str, Any], name: str, dtype=None) -> np.ndarray:
    value = d[name]
    if hasattr(value, "filled"):    # masked arrays: NULLs -> -1 (integers) or None
        if dtype is not None and np.issubdtype(np.dtype(dtype), np.integer):
            value = value.filled(-1)
        else:
            mask = np.ma.getmaskarray(value)
            value = np.asarray(value.data, dtype=object)
            value[mask] = None
    return np.asarray(value, dtype=dtype) if dtype is not None else np.asarray(value)


def build_run_graph(con: duckdb.DuckDBPyConnection, run_id: str, thresholds: dict[str, float]) -> RunGraph:
    """The run's graph from the store (whatif/graph.sql), every rank."""
    started = time.perf_counter()
    host = _fetch(con, "SELECT rank, start_ns, end_ns, coalesce(correlation, -1) AS correlation, node, call_kind, "
                       "coalesce(loader_in_main, false) AS loader_in_main "
                       "FROM whatif_host_nodes(?) ORDER BY rank, start_ns, end_ns DESC", [run_id])
    # (correlation last: copies tied on the rest keep one order in both queries)
    gpu = _fetch(con, "SELECT rank, stream, start_ns, end_ns, coalesce(correlation, -1) AS correlation, category, "
                      "is_copy, fp32_matmul, coalesce(pageable, false) AS pageable FROM whatif_gpu_ops(?) "
                      "ORDER BY rank, stream, start_ns, end_ns, correlation", [run_id])
    copy_dirs = _fetch(con, "SELECT copy_dir FROM whatif_copy_dirs(?) ORDER BY rank, stream, start_ns, end_ns, "
                            "coalesce(correlation, -1)", [run_id])
    gpu["copy_dir"] = np.full(len(gpu["rank"]), None, dtype=object)
    gpu["copy_dir"][np.asarray(gpu["is_copy"], dtype=bool)] = _col(copy_dirs, "copy_dir").astype(object)
    waits = _fetch(con, "SELECT rank, correlation, sync_kind, coalesce(stream, -1) AS stream, "
                        "coalesce(wait_on_stream, -1) AS wait_on_stream, coalesce(record_corr, -1) AS record_corr "
                        "FROM whatif_stream_waits(?)", [run_id])
    colls = _fetch(con, "SELECT rank, source, start_ns, end_ns, coll_key, true_dur_ns FROM whatif_collectives(?) "
                        "ORDER BY rank, start_ns", [run_id])
    steps = _fetch(con, "SELECT rank, step, start_ns, end_ns FROM steps(?) ORDER BY rank, start_ns", [run_id])
    stalls = _fetch(con, "SELECT rank, start_ns, name FROM runtime_stall_calls(?, ?)",
                    [run_id, int(thresholds["RUNTIME_STALL_MIN_NS"])])
    holes = _fetch(con, "SELECT rank, start_ns, end_ns FROM untraced_host_time(?, ?) WHERE recurring "
                        "ORDER BY rank, start_ns", [run_id, int(thresholds["UNTRACED_MIN_HOLE_NS"])])
    ranks = sorted(set(_col(host, "rank", np.int64).tolist()) | set(_col(steps, "rank", np.int64).tolist()))

    # collectives: one index per matched key (its transfer: the shortest instance), else per instance
    c_rank = _col(colls, "rank", np.int64)
    c_key = _col(colls, "coll_key")
    c_key = [k if isinstance(k, str) else None for k in c_key.tolist()]
    c_true = _col(colls, "true_dur_ns", np.int64)
    c_start = _col(colls, "start_ns", np.int64)
    c_end = _col(colls, "end_ns", np.int64)
    c_source = _col(colls, "source").tolist()
    keys: dict[str, int] = {}
    transfer: list[int] = []
    c_index = np.empty(len(c_key), dtype=np.int64)
    for i, key in enumerate(c_key):
        if key is None:
            c_index[i] = len(transfer)
            transfer.append(int(c_end[i] - c_start[i]))
            keys[f"unmatched/{i}"] = c_index[i]
        else:
            if key not in keys:
                keys[key] = len(transfer)
                transfer.append(int(c_true[i]))
            c_index[i] = keys[key]
    key_list = [None] * len(transfer)
    for key, index in keys.items():
        key_list[index] = key

    last_arrival = np.full(len(transfer), NEVER, dtype=np.int64)
    np.maximum.at(last_arrival, c_index, c_start)
    c_tail = np.maximum(c_end - last_arrival[c_index], 0)
    graphs = []
    notes: list[str] = []
    starts = [v for v in (_col(host, "start_ns", np.int64).min(initial=np.iinfo(np.int64).max),
                          _col(steps, "start_ns", np.int64).min(initial=np.iinfo(np.int64).max))]
    run_t0 = int(min(starts))      # one origin for every rank: collectives compare their times
    for rank in ranks:
        graph = _rank_graph(rank, run_t0, host, gpu, waits, steps, stalls, holes,
                            (c_rank, c_index, c_start, c_end, c_source, c_tail,
                             [k is not None and not k.startswith("unmatched/") for k in key_list]), thresholds)
        if graph is not None:
            graphs.append(graph)
            notes.extend(graph.notes)
    unmatched = sum(1 for k in key_list if k and k.startswith("unmatched/"))
    if unmatched and len(graphs) > 1:
        notes.append(f"{unmatched} collective instance(s) could not be matched across ranks: the replay keeps "
                     "their measured duration (waits for absent or unmatched ranks included).")
    matched = np.array([k is not None and not k.startswith("unmatched/") for k in key_list], dtype=bool)
    return RunGraph(ranks=graphs, n_coll=len(transfer), coll_keys=key_list, coll_matched=matched, notes=notes,
                    build_seconds=time.perf_counter() - started)


def _rank_graph(rank, t0, host, gpu, waits, steps, stalls, holes, colls, thresholds) -> RankGraph | None:
    sel = _col(host, "rank", np.int64) == rank
    s_sel = _col(steps, "rank", np.int64) == rank
    hs = _col(host, "start_ns", np.int64)[sel]
    he = _col(host, "end_ns", np.int64)[sel]
    call_kind = _col(host, "call_kind", np.int8)[sel]
    in_main = _col(host, "loader_in_main").astype(bool)[sel]
    corr = _col(host, "correlation", np.int64)[sel]
    node = _col(host, "node", np.int8)[sel]
    # a call inside a DataLoader wait or a blocked piece (one before it in time order) is that wait's time
    waiting = (node == 1) | (node == 2)
    if waiting.any():
        wait_end = np.maximum.accumulate(np.where(waiting, he, NEVER))
        wait_end_before = np.concatenate([[NEVER], wait_end[:-1]])
        keep = ~((node == 0) & (wait_end_before != NEVER) & (he <= wait_end_before))
        hs, he, call_kind, in_main, corr, node = (a[keep] for a in (hs, he, call_kind, in_main, corr, node))
    # step markers join the chain as zero-length nodes
    st_start = _col(steps, "start_ns", np.int64)[s_sel]
    st_end = _col(steps, "end_ns", np.int64)[s_sel]
    st_num = _col(steps, "step", np.int64)[s_sel]
    whole_trace = not s_sel.any()
    if whole_trace:
        # no steps: the whole trace is one, from the first host node to the end of the last work
        # (host or GPU; the end marker waits for the device)
        if not len(hs):
            return None
        g_rank = _col(gpu, "rank", np.int64) == rank
        last_gpu = _col(gpu, "end_ns", np.int64)[g_rank].max(initial=int(he.max()))
        st_start = np.array([hs.min()], dtype=np.int64)
        st_end = np.array([max(int(he.max()), int(last_gpu))], dtype=np.int64)
        st_num = np.array([-1], dtype=np.int64)
    marker_times = np.concatenate([st_start, st_end])
    n_real = len(hs)
    hs = np.concatenate([hs, marker_times])
    he = np.concatenate([he, marker_times])
    call_kind = np.concatenate([call_kind, np.zeros(len(marker_times), dtype=np.int8)])
    in_main = np.concatenate([in_main, np.zeros(len(marker_times), dtype=bool)])
    corr = np.concatenate([corr, np.full(len(marker_times), -1, dtype=np.int64)])
    node = np.concatenate([node, np.full(len(marker_times), 4, dtype=np.int8)])   # 4: a step marker
    # at one start time the zero-length nodes (markers, arrivals) come first
    order = np.lexsort((he - hs, hs))
    hs, he, call_kind, in_main, corr, node = (a[order] for a in (hs, he, call_kind, in_main, corr, node))
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    marker_pos = position[n_real:]
    step_start_node = marker_pos[:len(st_start)]
    step_end_node = marker_pos[len(st_start):]
    hs = hs - t0
    he = he - t0
    n = len(hs)

    h_type = np.full(n, CALL, dtype=np.int8)
    h_type[node == 1] = LOADER
    h_type[node == 2] = COMM_WAIT
    h_type[node == 3] = COMM_ISSUE
    h_type[node == 4] = STEP
    is_call = node == 0
    sync_name = call_kind == 1
    copy_name = call_kind == 2
    h_type[is_call & sync_name] = SYNC

    # GPU ops of this rank
    g_sel = _col(gpu, "rank", np.int64) == rank
    g_stream = _col(gpu, "stream", np.int64)[g_sel]
    g_start = _col(gpu, "start_ns", np.int64)[g_sel] - t0
    g_end = _col(gpu, "end_ns", np.int64)[g_sel] - t0
    g_corr = _col(gpu, "correlation", np.int64)[g_sel]
    g_category = _col(gpu, "category", np.int8)[g_sel]
    g_fp32 = _col(gpu, "fp32_matmul", bool)[g_sel]
    g_copy_dir = gpu["copy_dir"][g_sel]
    g_pageable = _col(gpu, "pageable", bool)[g_sel]
    g_cat = np.full(len(g_stream), G_COMPUTE, dtype=np.int8)
    g_cat[g_category == 1] = G_COMM
    g_cat[g_category == 2] = G_MEMORY

    # launch edges: the host call with the op's correlation (the latest one starting before the op)
    call_corr = np.where(is_call, corr, -1)
    g_launch = np.full(len(g_stream), -1, dtype=np.int64)
    if len(g_stream) and is_call.any():
        call_idx = np.flatnonzero(call_corr >= 0)
        by_corr = call_idx[np.lexsort((hs[call_idx], call_corr[call_idx]))]
        keys = call_corr[by_corr]
        pos = np.searchsorted(keys, g_corr, side="right") - 1
        ok = (pos >= 0) & (g_corr >= 0)
        pos_ok = np.where(ok, pos, 0)
        ok &= keys[pos_ok] == g_corr
        g_launch[ok] = by_corr[pos_ok[ok]]
    g_has_launch = g_launch >= 0
    # ops without a recorded launch hang off the host node before them (stream order only)
    missing = ~g_has_launch
    if missing.any():
        g_launch[missing] = np.clip(np.searchsorted(hs, g_start[missing], side="right") - 1, 0, n - 1)
    launches_any = np.zeros(n, dtype=bool)
    launches_any[g_launch[g_has_launch]] = True
    h_type[is_call & launches_any & ~sync_name] = LAUNCH
    h_type[is_call & copy_name & launches_any] = COPY

    # cross-stream waits (newer Kineto: cuda_sync 'Stream Wait Event'), and what syncs wait on
    w_sel = _col(waits, "rank", np.int64) == rank
    w_corr = _col(waits, "correlation", np.int64)[w_sel]
    w_kind = _col(waits, "sync_kind").astype(object)[w_sel]
    w_stream = _col(waits, "stream", np.int64)[w_sel]
    w_on = _col(waits, "wait_on_stream", np.int64)[w_sel]
    w_record = _col(waits, "record_corr", np.int64)[w_sel]
    call_rows = np.flatnonzero(is_call & (corr >= 0)) if len(w_corr) else np.zeros(0, dtype=np.int64)
    corr_to_host = dict(zip(corr[call_rows].tolist(), call_rows.tolist()))

    def last_op_on(stream: int, before_host: int) -> int:
        """The last op on `stream` launched before host node `before_host` (-1: none)."""
        idx = np.flatnonzero((g_stream == stream) & (g_launch < before_host))
        return int(idx[np.argmax(g_start[idx])]) if len(idx) else -1

    h_target_kind = np.zeros(n, dtype=np.int8)
    h_target = np.full(n, -1, dtype=np.int64)
    h_target_kind[h_type == SYNC] = T_DEVICE
    if whole_trace:      # the trace's end waits for its last GPU work
        h_target_kind[step_end_node[0]] = T_DEVICE
    extra_ops = []      # (stream, start, launch host, dep op) stream-wait pseudo ops
    for c, kind, stream, on, record in zip(w_corr.tolist(), w_kind.tolist(), w_stream.tolist(), w_on.tolist(),
                                           w_record.tolist()):
        host_i = corr_to_host.get(int(c))
        if host_i is None:
            continue
        if kind == "Stream Wait Event" and record >= 0 and record in corr_to_host:
            dep = last_op_on(on, corr_to_host[record])
            if dep >= 0 and stream >= 0:
                extra_ops.append((stream, int(he[host_i]), host_i, dep))
        elif kind == "Stream Sync" and stream >= 0 and h_type[host_i] == SYNC:
            h_target_kind[host_i] = T_STREAM
            h_target[host_i] = stream
        elif kind == "Event Sync" and record >= 0 and record in corr_to_host and h_type[host_i] == SYNC:
            rec = corr_to_host[record]
            streams_before = np.unique(g_stream[g_launch < rec])
            ops = [last_op_on(int(s), rec) for s in streams_before]
            ops = [o for o in ops if o >= 0]
            if ops:
                h_target_kind[host_i] = T_OP
                h_target[host_i] = max(ops, key=lambda o: g_end[o])
    g_dep = np.full(len(g_stream), -1, dtype=np.int64)
    if extra_ops:
        e = np.array(extra_ops, dtype=np.int64)
        g_stream = np.concatenate([g_stream, e[:, 0]])
        g_start = np.concatenate([g_start, e[:, 1]])
        g_end = np.concatenate([g_end, e[:, 1]])
        g_launch = np.concatenate([g_launch, e[:, 2]])
        g_has_launch = np.concatenate([g_has_launch, np.ones(len(e), dtype=bool)])
        g_cat = np.concatenate([g_cat, np.full(len(e), G_WAIT, dtype=np.int8)])
        g_fp32 = np.concatenate([g_fp32, np.zeros(len(e), dtype=bool)])
        g_copy_dir = np.concatenate([g_copy_dir, np.full(len(e), None, dtype=object)])
        g_pageable = np.concatenate([g_pageable, np.zeros(len(e), dtype=bool)])
        g_corr = np.concatenate([g_corr, np.full(len(e), -1, dtype=np.int64)])
        g_dep = np.concatenate([g_dep, e[:, 3]])
    # stream order: by measured start (the pseudo wait ops at their call's end)
    order = np.lexsort((g_start, g_stream))
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    g_stream, g_start, g_end, g_launch, g_has_launch = (a[order] for a in (g_stream, g_start, g_end, g_launch,
                                                                            g_has_launch))
    g_cat, g_fp32, g_copy_dir, g_pageable, g_corr = (a[order] for a in (g_cat, g_fp32, g_copy_dir, g_pageable,
                                                                        g_corr))
    g_dep = g_dep[order]
    g_dep = np.where(g_dep >= 0, inverse[np.clip(g_dep, 0, None)], -1)
    op_targets = h_target_kind == T_OP
    h_target[op_targets] = inverse[h_target[op_targets]]

    # collectives of this rank: matched NCCL kernels by start time; gloo spans -> comm_issue nodes
    c_rank, c_index, c_start, c_end, c_source, c_tail, c_key_matched = colls
    c_sel = c_rank == rank
    g_coll = np.full(len(g_stream), -1, dtype=np.int64)
    g_coll_tail = np.zeros(len(g_stream), dtype=np.int64)
    h_coll = np.full(n, -1, dtype=np.int64)
    h_coll_tail = np.zeros(n, dtype=np.int64)
    src = np.array(c_source, dtype=object)[c_sel]
    cs, ce, ci, ct = c_start[c_sel] - t0, c_end[c_sel] - t0, c_index[c_sel], c_tail[c_sel]
    gpu_c = src == "gpu"
    if gpu_c.any():
        comm_ops = np.flatnonzero(g_cat == G_COMM)
        lookup = {(int(s), int(e)): k for s, e, k in zip(g_start[comm_ops], g_end[comm_ops], comm_ops)}
        for s, e, k, tail in zip(cs[gpu_c], ce[gpu_c], ci[gpu_c], ct[gpu_c]):
            op = lookup.get((int(s), int(e)))
            if op is not None and c_key_matched[k]:     # an unmatched kernel keeps its measured duration
                g_coll[op] = k
                g_coll_tail[op] = tail
    cpu_c = ~gpu_c
    if cpu_c.any():
        issue = np.flatnonzero(h_type == COMM_ISSUE)
        by_start = {int(corr[i]) - t0: i for i in issue}     # (the gloo span's start)
        for s, k in zip(cs[cpu_c], ci[cpu_c]):
            i = by_start.get(int(s))
            if i is not None:
                h_coll[i] = k

    # host progress and the CPU time before each node
    cursor = np.maximum.accumulate(he)
    prev_cursor = np.concatenate([[hs[0]], cursor[:-1]])     # (the first node: no CPU time before it)
    h_gap = hs - prev_cursor
    h_dur = he - hs
    hole_sel = _col(holes, "rank", np.int64) == rank
    h_untraced = _covered_between(prev_cursor, hs, _col(holes, "start_ns", np.int64)[hole_sel] - t0,
                                  _col(holes, "end_ns", np.int64)[hole_sel] - t0)
    notes = []

    # blocking nodes: syncs (measured wait target), copies that returned after their copy ended,
    # CPU collective waits (the gloo collective ending nearest the wait's end)
    h_blocking = np.zeros(n, dtype=bool)
    h_own = np.zeros(n, dtype=np.int64)
    h_copy_dir = np.full(n, None, dtype=object)
    copy_nodes = np.flatnonzero(h_type == COPY)
    if len(copy_nodes):
        # a copy call's op: the op it launched (the first by stream order)
        launched = np.flatnonzero(g_has_launch)
        first_op = np.full(n, -1, dtype=np.int64)
        first_op[g_launch[launched][::-1]] = launched[::-1]
        ops = first_op[copy_nodes]
        have = ops >= 0
        nodes, ops = copy_nodes[have], ops[have]
        h_copy_dir[nodes] = g_copy_dir[ops]
        done_after = he[nodes] >= g_end[ops] - 1_000     # returned only after its copy was done: blocking
        h_blocking[nodes[done_after]] = True
        h_target_kind[nodes[done_after]] = T_OP
        h_target[nodes[done_after]] = ops[done_after]
    syncs = np.flatnonzero(h_type == SYNC)
    h_blocking[syncs] = True
    if whole_trace:
        h_blocking[step_end_node[0]] = True
    waits_c = np.flatnonzero(h_type == COMM_WAIT)
    cpu_coll_end, cpu_coll_tail = {}, {}
    for e, k, tail in zip(ce[cpu_c], ci[cpu_c], ct[cpu_c]):
        cpu_coll_end.setdefault(int(k), int(e))
        cpu_coll_tail.setdefault(int(k), int(tail))
    if len(waits_c) and cpu_coll_end:
        ends = np.array(list(cpu_coll_end.values()), dtype=np.int64)
        idx = np.array(list(cpu_coll_end.keys()), dtype=np.int64)
        for i in waits_c:
            k = int(np.argmin(np.abs(ends - he[i])))
            if abs(int(ends[k]) - int(he[i])) <= max(200_000, h_dur[i] // 10):
                h_blocking[i] = True
                h_target_kind[i] = T_COLL
                h_target[i] = idx[k]
                h_coll_tail[i] = cpu_coll_tail[int(idx[k])]

    # measured target ends -> own time; a call that returned before what it should wait for is
    # waiting on something else (not recorded): replayed as measured
    t_meas = _measured_targets(h_target_kind, h_target, h_blocking, g_stream, g_end, g_launch, cpu_coll_end)
    blocked = np.flatnonzero(h_blocking)
    own = he[blocked] - np.maximum(hs[blocked], t_meas[blocked])
    inconsistent = own < -1_000
    h_own[blocked] = np.maximum(own, 0)
    if inconsistent.any():
        bad = blocked[inconsistent]
        h_blocking[bad] = False
        h_target_kind[bad] = T_NONE
        notes.append(f"Rank {rank}: {len(bad)} blocking call(s) returned before the GPU work they would wait for "
                     "ended (their target is not recorded in the trace): replayed with their measured duration.")
    stall_sel = _col(stalls, "rank", np.int64) == rank
    stall_starts = set((_col(stalls, "start_ns", np.int64)[stall_sel] - t0).tolist())
    h_stall = (h_type == CALL) & np.isin(hs, np.fromiter(stall_starts, dtype=np.int64, count=len(stall_starts)))

    # an op that started before its call returned is timed from the call's start, not its end
    launch_idx = np.clip(g_launch, 0, n - 1)
    g_early = np.where(g_has_launch & (g_cat != G_WAIT) & (g_start < he[launch_idx]),
                       np.maximum(g_start - hs[launch_idx], 0), -1).astype(np.int64)
    latency, gap = _launch_constants(g_stream, g_start, g_end, g_launch, g_has_launch, he, g_cat, thresholds)
    graph = RankGraph(
        rank=rank, t0=t0, h_type=h_type, h_start=hs, h_dur=h_dur, h_gap=h_gap, h_blocking=h_blocking,
        h_target_kind=h_target_kind, h_target=h_target, h_own=h_own, h_stall=h_stall, h_copy_dir=h_copy_dir,
        h_coll=h_coll, h_coll_tail=h_coll_tail,
        h_loader_in_main=(h_type == LOADER) & in_main, h_untraced=h_untraced,
        g_stream=g_stream, g_start=g_start, g_dur=g_end - g_start, g_launch=g_launch,
        g_has_launch=g_has_launch, g_early=g_early, g_cat=g_cat, g_fp32=g_fp32, g_copy_dir=g_copy_dir, g_pageable=g_pageable,
        g_dep=g_dep, g_coll=g_coll, g_coll_tail=g_coll_tail, step_numbers=st_num, step_start_node=step_start_node,
        step_end_node=step_end_node, step_measured_ns=st_end - st_start, launch_latency_ns=latency,
        queue_gap_ns=gap, notes=notes)
    return graph


def _covered_between(lo: np.ndarray, hi: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per [lo, hi): how much of it the disjoint, sorted intervals [starts, ends) cover (0 where hi <= lo)."""
    if not len(starts):
        return np.zeros(len(lo), dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(ends - starts)])

    def covered_up_to(x: np.ndarray) -> np.ndarray:
        # whole intervals ending at or before x, plus the part of the one x lies in
        i = np.searchsorted(starts, x, side="right")          # intervals starting at or before x
        inside = np.where(i > 0, np.clip(x - starts[np.maximum(i - 1, 0)], 0,
                                         (ends - starts)[np.maximum(i - 1, 0)]), 0)
        return before[np.maximum(i - 1, 0)] * (i > 0) + inside

    return np.where(hi > lo, covered_up_to(hi) - covered_up_to(lo), 0).astype(np.int64)


def _measured_targets(kind, target, blocking, g_stream, g_end, g_launch, coll_end) -> np.ndarray:
    """The measured end of what each blocking node waits for (NEVER where nothing): the latest end of
    the work launched before it (on its stream, for a stream sync), its copy, its collective."""
    n = len(kind)
    t = np.full(n, NEVER, dtype=np.int64)
    by_launch = np.argsort(g_launch, kind="stable")
    launch_sorted = g_launch[by_launch]
    running = np.maximum.accumulate(g_end[by_launch]) if len(by_launch) else by_launch
    device = np.flatnonzero(blocking & (kind == T_DEVICE))
    if len(device) and len(by_launch):
        k = np.searchsorted(launch_sorted, device, side="left") - 1
        t[device] = np.where(k >= 0, running[np.clip(k, 0, None)], NEVER)
    for stream in np.unique(target[blocking & (kind == T_STREAM)]):
        nodes = np.flatnonzero(blocking & (kind == T_STREAM) & (target == stream))
        on = by_launch[g_stream[by_launch] == stream]
        if not len(on):
            continue
        run_on = np.maximum.accumulate(g_end[on])
        k = np.searchsorted(g_launch[on], nodes, side="left") - 1
        t[nodes] = np.where(k >= 0, run_on[np.clip(k, 0, None)], NEVER)
    ops = np.flatnonzero(blocking & (kind == T_OP))
    t[ops] = g_end[target[ops]]
    for i in np.flatnonzero(blocking & (kind == T_COLL)):
        t[i] = coll_end.get(int(target[i]), NEVER)
    return t


def _launch_constants(g_stream, g_start, g_end, g_launch, g_has_launch, h_end, g_cat, thresholds) -> tuple[int, int]:
    """(L, G) of the rank, from its own ops: L the median time from a launch call's end to its op's
    start where the stream was free (the launch decided the start); G the median gap between ops
    that were queued behind the one before (the stream decided)."""
    default_l = int(thresholds["WHATIF_DEFAULT_LAUNCH_LATENCY_NS"])
    default_g = int(thresholds["WHATIF_DEFAULT_QUEUE_GAP_NS"])
    if len(g_stream) < 2:
        return default_l, default_g
    same = np.concatenate([[False], g_stream[1:] == g_stream[:-1]])
    prev_end = np.concatenate([[NEVER], g_end[:-1]])
    gap = np.where(same, g_start - prev_end, np.iinfo(np.int64).max)
    real = g_has_launch & (g_cat != G_WAIT)
    delay = np.where(real, g_start - h_end[np.clip(g_launch, 0, len(h_end) - 1)], np.iinfo(np.int64).max)
    launch_bound = real & (delay >= 0) & (gap > delay)
    queued = same & real & (gap >= 0) & (gap <= delay)
    latency = int(np.median(delay[launch_bound])) if launch_bound.sum() >= 5 else default_l
    queue_gap = int(np.median(gap[queued])) if queued.sum() >= 5 else default_g
    return latency, queue_gap
