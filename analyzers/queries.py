"""Read-only SQL data access for the dashboard: everything a page draws comes from here.

Each function is one set-based query over the store with the run id and windows passed as
parameters (trace content is never formatted into SQL). Results come back as pandas frames or
plain dicts, ready to draw; the app computes nothing itself.

Shared definitions (kept close to HTA's, see ../shared/traces/README.md):
- GPU activity = events of kind kernel, memcpy, memset with a duration.
- communication = kernels whose name matches ^nccl.*Kernel (NCCL and RCCL), memory = memcpy and
  memset, compute = every other kernel.
- step = a ProfilerStep#N range on the host (cpu_op or user_annotation), moved onto the GPU's
  clock through the launches it made (see _STEP_WINDOWS). A rank without any ProfilerStep gets
  one pseudo-step (step NULL) spanning its first to last GPU activity.
- step breakdown: GPU activity is clipped to the step's window and every instant of the window
  is counted once, in priority compute > communication > memory > idle. So the parts add up to
  the step time, and the communication part is exactly the *exposed* communication (not hidden
  behind compute).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import duckdb

if TYPE_CHECKING:    # frames come from DuckDB's .df(); importing pandas here cost the CLI 0.35 s a call
    import pandas as pd

from analyzers.findings import fixes_ruled_out

COMM_KERNEL_PATTERN = "^nccl.*Kernel"

# GPU activity classified once; every query below starts from it.
_GPU_ACTIVITY = f"""
    SELECT rank, kind, name, ts_ns, ts_ns + dur_ns AS end_ns, device, stream, correlation,
           CASE WHEN kind IN ('memcpy', 'memset') THEN 'memory'
                WHEN regexp_matches(name, '{COMM_KERNEL_PATTERN}') THEN 'communication'
                ELSE 'compute' END AS category
    FROM events
    WHERE run_id = $run_id AND kind IN ('kernel', 'memcpy', 'memset') AND dur_ns > 0
"""

# Step windows per rank, on the GPU's clock. The host runs ahead of the GPU, so a ProfilerStep's
# host window does not hold its own GPU work. A step's GPU window starts at the first GPU activity
# launched (same correlation id) by a runtime call inside the host step and ends where the next
# step's starts (the last step: where its last launched activity ends). A step without launched
# GPU work keeps its host window; a rank without ProfilerStep ranges gets one pseudo-step
# (step NULL) over its whole GPU span.
_STEP_WINDOWS = f"""
    gpu AS ({_GPU_ACTIVITY}),
    host_steps AS (
        SELECT rank, CAST(regexp_extract(name, 'ProfilerStep#(\\d+)', 1) AS INTEGER) AS step,
               min(ts_ns) AS t0, max(ts_ns + dur_ns) AS t1
        FROM events
        WHERE run_id = $run_id AND kind IN ('cpu_op', 'user_annotation')
          AND starts_with(name, 'ProfilerStep#') AND dur_ns > 0
        GROUP BY ALL
        HAVING step IS NOT NULL
    ),
    -- each launching runtime call in its host step (ASOF: the last step starting before it)
    launches AS (
        SELECT r.rank, r.correlation, s.step
        FROM events r ASOF JOIN host_steps s ON s.rank = r.rank AND r.ts_ns >= s.t0
        WHERE r.run_id = $run_id AND r.kind IN ('runtime', 'driver') AND r.correlation IS NOT NULL
          AND r.ts_ns < s.t1
    ),
    launched AS (
        SELECT g.rank, l.step, min(g.ts_ns) AS first_start, max(g.end_ns) AS last_end
        FROM gpu g JOIN launches l ON l.rank = g.rank AND l.correlation = g.correlation
        GROUP BY g.rank, l.step
    ),
    gpu_steps AS (
        -- a step runs on the GPU from its first work to the next step's; the last one, with no
        -- next, as long as its host step (the GPU clock trails the host by the launch lag), or to
        -- its last work if that is later (ending it at its last kernel made it the one short step
        -- of every heatmap)
        SELECT l.rank, l.step, l.first_start AS t0,
               coalesce(lead(l.first_start) OVER (PARTITION BY l.rank ORDER BY l.step),
                        greatest(l.last_end, l.first_start + coalesce(h.t1 - h.t0, 0))) AS t1
        FROM launched l LEFT JOIN host_steps h ON h.rank = l.rank AND h.step = l.step
    ),
    windows AS (
        SELECT rank, step, t0, t1 FROM gpu_steps WHERE t1 > t0
        UNION ALL
        SELECT h.rank, h.step, h.t0, h.t1 FROM host_steps h
        WHERE NOT EXISTS (SELECT 1 FROM gpu_steps g WHERE g.rank = h.rank AND g.step = h.step AND g.t1 > g.t0)
        UNION ALL
        SELECT rank, NULL::INTEGER, min(ts_ns), max(end_ns) FROM gpu
        WHERE rank NOT IN (SELECT rank FROM host_steps)
        GROUP BY rank
    )
"""


_STEP_BREAKDOWN_SQL = f"""
    WITH {_STEP_WINDOWS},
    -- GPU activity in step windows. Nearly all of it lies inside the window where it starts (found
    -- by an ASOF join, fast); only the rest (crossing a boundary, or outside every window) goes
    -- through the slower interval-overlap join and is clipped to each window it overlaps.
    placed AS (
        SELECT g.rank, g.category, g.ts_ns, g.end_ns, w.step,
               w.t0 IS NOT NULL AND g.ts_ns < w.t1 AND g.end_ns <= w.t1 AS inside
        FROM gpu g ASOF LEFT JOIN windows w ON w.rank = g.rank AND g.ts_ns >= w.t0
    ),
    clipped AS (
        SELECT rank, step, category, ts_ns AS s, end_ns AS e FROM placed WHERE inside
        UNION ALL
        SELECT w.rank, w.step, p.category, greatest(p.ts_ns, w.t0), least(p.end_ns, w.t1)
        FROM (SELECT * FROM placed WHERE NOT inside) p
        JOIN windows w ON p.rank = w.rank AND p.ts_ns < w.t1 AND p.end_ns > w.t0
    ),
    -- sweep line: +1 where an interval of a category starts, -1 where it ends
    edges AS (
        SELECT rank, step, t, sum(d_compute) AS d_compute, sum(d_comm) AS d_comm, sum(d_memory) AS d_memory
        FROM (
            SELECT rank, step, s AS t, (category = 'compute')::INT AS d_compute,
                   (category = 'communication')::INT AS d_comm, (category = 'memory')::INT AS d_memory
            FROM clipped
            UNION ALL
            SELECT rank, step, e, -(category = 'compute')::INT, -(category = 'communication')::INT,
                   -(category = 'memory')::INT
            FROM clipped
        )
        GROUP BY ALL
    ),
    segments AS (
        SELECT rank, step,
               lead(t) OVER by_time - t AS len,
               sum(d_compute) OVER running AS n_compute,
               sum(d_comm) OVER running AS n_comm,
               sum(d_memory) OVER running AS n_memory
        FROM edges
        WINDOW by_time AS (PARTITION BY rank, step ORDER BY t),
               running AS (PARTITION BY rank, step ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
    ),
    parts AS (
        SELECT rank, step,
               coalesce(sum(len) FILTER (WHERE n_compute > 0), 0) AS compute_ns,
               coalesce(sum(len) FILTER (WHERE n_compute = 0 AND n_comm > 0), 0) AS comm_exposed_ns,
               coalesce(sum(len) FILTER (WHERE n_compute = 0 AND n_comm = 0 AND n_memory > 0), 0) AS memory_ns,
               coalesce(sum(len) FILTER (WHERE n_comm > 0), 0) AS comm_ns
        FROM segments WHERE len > 0
        GROUP BY ALL
    )
    SELECT w.rank, w.step, w.t0 AS t0_ns, w.t1 AS t1_ns,
           (w.t1 - w.t0) / 1e6 AS step_ms,
           coalesce(p.compute_ns, 0) / 1e6 AS compute_ms,
           coalesce(p.comm_exposed_ns, 0) / 1e6 AS comm_exposed_ms,
           coalesce(p.memory_ns, 0) / 1e6 AS memory_ms,
           ((w.t1 - w.t0) - coalesce(p.compute_ns + p.comm_exposed_ns + p.memory_ns, 0)) / 1e6 AS idle_ms,
           coalesce(p.comm_ns, 0) / 1e6 AS comm_ms,
           coalesce(p.compute_ns + p.comm_exposed_ns + p.memory_ns, 0) / 1e6 AS gpu_busy_ms
    FROM windows w LEFT JOIN parts p ON p.rank = w.rank AND p.step IS NOT DISTINCT FROM w.step
    ORDER BY w.rank, w.step
    """


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> pd.DataFrame:
    return con.execute(sql, params).df()


# --------------------------------------------------------------------------- runs and steps

def run_info(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    """The run's row plus its ranks (rank, file_name, device_name, n_events)."""
    row = con.execute(
        "SELECT run_id, name, created_at, source, world_size, tags, notes FROM runs WHERE run_id = $run_id",
        {"run_id": run_id},
    ).fetchone()
    if row is None:
        return None
    keys = ("run_id", "name", "created_at", "source", "world_size", "tags", "notes")
    info = dict(zip(keys, row))
    info["ranks"] = _frame(
        con,
        "SELECT rank, file_name, device_name, schema_version, n_events FROM ranks "
        "WHERE run_id = $run_id ORDER BY rank",
        {"run_id": run_id},
    )
    return info


def step_breakdown(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """One row per (rank, step): where the step's time went, in ms.

    Columns: rank, step (NULL for a rank without ProfilerStep ranges), t0_ns, t1_ns, step_ms,
    compute_ms, comm_exposed_ms, memory_ms, idle_ms (the four parts add up to step_ms),
    comm_ms (all communication time in the step, hidden or not) and gpu_busy_ms.
    """
    return _frame(con, _STEP_BREAKDOWN_SQL, {"run_id": run_id})


def rank_breakdown(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Mean per step, per rank, of the step breakdown (same columns as step_breakdown, ms)."""
    sql = f"""
    WITH per_step AS ({_STEP_BREAKDOWN_SQL})
    SELECT rank, count(*) AS steps, avg(step_ms) AS step_ms, avg(compute_ms) AS compute_ms,
           avg(comm_exposed_ms) AS comm_exposed_ms, avg(memory_ms) AS memory_ms,
           avg(idle_ms) AS idle_ms, avg(comm_ms) AS comm_ms
    FROM per_step GROUP BY rank ORDER BY rank
    """
    return _frame(con, sql, {"run_id": run_id})


def time_bounds(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[int, int] | None:
    """First start and last end (ns) of any event with a duration in the run, over all ranks."""
    row = con.execute(
        "SELECT min(ts_ns), max(ts_ns + dur_ns) FROM events WHERE run_id = $run_id AND dur_ns > 0",
        {"run_id": run_id},
    ).fetchone()
    return None if row is None or row[0] is None else (int(row[0]), int(row[1]))


# --------------------------------------------------------------------------- timeline

# Kinds drawn on the timeline (flows, counters, instants and metadata are not intervals).
TIMELINE_KINDS = ("kernel", "memcpy", "memset", "gpu_user_annotation", "cuda_sync", "runtime", "driver",
                  "cpu_op", "user_annotation", "python_function")
GPU_KINDS = ("kernel", "memcpy", "memset", "gpu_user_annotation", "cuda_sync")


def timeline_window(con: duckdb.DuckDBPyConnection, run_id: str, t0_ns: int, t1_ns: int,
                    ranks: list[int] | None = None, max_events: int = 3000, max_merged: int = 3000,
                    min_pixel_fraction: float = 1 / 1500, include_python: bool = False) -> pd.DataFrame:
    """The intervals drawn in a time window: one row per bar.

    Only events overlapping [t0_ns, t1_ns) are read. Events shorter than a pixel
    ((t1-t0) * min_pixel_fraction) are merged per lane and pixel into one bar (kind 'merged',
    name 'N short events'), in bins widened so there are about max_merged such bars at most; of the
    rest, the max_events longest are kept. So the frame stays small however big the trace is. Communication kernels get kind 'communication'.

    Columns: rank, lane, lane_order, is_gpu, kind, name, start_ns, end_ns, n_events, stream, depth.
    """
    kinds = [k for k in TIMELINE_KINDS if include_python or k != "python_function"]
    pixel_ns = max(1, int((t1_ns - t0_ns) * min_pixel_fraction))
    sql = f"""
    WITH win AS (
        SELECT rank, name, ts_ns, ts_ns + dur_ns AS end_ns, stream,
               CASE WHEN e.kind = 'kernel' AND regexp_matches(e.name, '{COMM_KERNEL_PATTERN}') THEN 'communication'
                    ELSE e.kind END AS kind,
               e.kind IN (SELECT unnest($gpu_kinds)) AS is_gpu,
               CASE WHEN e.kind IN (SELECT unnest($gpu_kinds))
                    THEN 'GPU ' || coalesce(device::VARCHAR, pid, '?') || ' · stream ' || coalesce(stream::VARCHAR, tid, '?')
                    ELSE 'CPU ' || coalesce(pid, '?') || ' · thread ' || coalesce(tid, '?') END AS lane_name
        FROM events e
        WHERE run_id = $run_id AND e.kind IN (SELECT unnest($kinds)) AND dur_ns IS NOT NULL
          AND ts_ns < $t1 AND ts_ns + dur_ns > $t0
          AND ($ranks IS NULL OR list_contains($ranks, rank))
    ),
    long_events AS (
        SELECT rank, lane_name, is_gpu, kind, name, ts_ns AS start_ns, end_ns, 1 AS n_events, stream
        FROM win WHERE end_ns - ts_ns >= $pixel_ns
        ORDER BY end_ns - ts_ns DESC
        LIMIT $max_events
    ),
    -- bins for short events: a pixel wide, wider when many lanes would exceed $max_merged bars
    bin AS (
        SELECT greatest($pixel_ns, ($t1 - $t0) * count(DISTINCT (rank, lane_name)) // $max_merged) AS ns FROM win
    ),
    short_merged AS (
        SELECT rank, lane_name, is_gpu, 'merged' AS kind,
               count(*) || ' short events' AS name, min(ts_ns) AS start_ns, max(end_ns) AS end_ns,
               count(*) AS n_events, any_value(stream) AS stream
        FROM win WHERE end_ns - ts_ns < $pixel_ns
        GROUP BY rank, lane_name, is_gpu, (ts_ns - $t0) // (SELECT ns FROM bin)
    ),
    bars AS (SELECT * FROM long_events UNION ALL SELECT * FROM short_merged)
    SELECT rank,
           CASE WHEN (SELECT count(DISTINCT rank) FROM win) > 1 THEN 'rank ' || rank || ' · ' ELSE '' END
               || lane_name AS lane,
           dense_rank() OVER (ORDER BY rank, NOT is_gpu, stream NULLS LAST, lane_name) AS lane_order,
           is_gpu, kind, name, start_ns, end_ns, n_events, stream
    FROM bars
    ORDER BY lane_order, start_ns
    """
    params = {"run_id": run_id, "t0": int(t0_ns), "t1": int(t1_ns), "ranks": ranks, "kinds": kinds,
              "gpu_kinds": list(GPU_KINDS), "pixel_ns": pixel_ns, "max_events": int(max_events),
              "max_merged": max(1, int(max_merged))}
    return _frame(con, sql, params)


def export_window_trace(con: duckdb.DuckDBPyConnection, run_id: str, t0_ns: int, t1_ns: int,
                        ranks: list[int] | None = None, max_events: int = 200_000) -> bytes:
    """The events of a window as a small Chrome trace (JSON bytes) that Perfetto opens.

    Each (rank, pid) becomes one process named "rank R · pid", each thread/stream keeps its
    name; ts/dur in microseconds with ns precision; args verbatim. At most max_events events
    (the longest) so the file stays small. The JSON is built by DuckDB, values escaped by it.
    """
    sql = """
    WITH win AS (
        SELECT rank, kind, cat, ph, name, ts_ns, dur_ns, coalesce(pid, '?') AS pid, coalesce(tid, '?') AS tid, args
        FROM events
        WHERE run_id = $run_id AND ph IN ('X', 'i', 'I') AND ts_ns < $t1 AND ts_ns + coalesce(dur_ns, 0) >= $t0
          AND ($ranks IS NULL OR list_contains($ranks, rank))
        ORDER BY coalesce(dur_ns, 0) DESC
        LIMIT $max_events
    ),
    numbered AS (
        SELECT *, dense_rank() OVER (ORDER BY rank, pid) AS pid_n,
               dense_rank() OVER (PARTITION BY rank, pid ORDER BY tid) AS tid_n
        FROM win
    ),
    trace_events AS (
        SELECT json_object('name', name, 'cat', coalesce(cat, kind), 'ph', ph, 'ts', ts_ns / 1000.0,
                           'dur', coalesce(dur_ns, 0) / 1000.0, 'pid', pid_n, 'tid', tid_n,
                           'args', coalesce(args, '{}'::JSON)) AS ev, 1 AS ord, ts_ns
        FROM numbered
        UNION ALL
        SELECT DISTINCT json_object('name', 'process_name', 'ph', 'M', 'pid', pid_n, 'tid', 0,
                           'args', json_object('name', 'rank ' || rank || ' · ' || pid)), 0, 0
        FROM numbered
        UNION ALL
        SELECT DISTINCT json_object('name', 'thread_name', 'ph', 'M', 'pid', pid_n, 'tid', tid_n,
                           'args', json_object('name', CASE WHEN kind IN ('kernel', 'memcpy', 'memset', 'gpu_user_annotation', 'cuda_sync')
                                                            THEN 'stream ' || tid ELSE 'thread ' || tid END)), 0, 0
        FROM numbered
    )
    SELECT '{"displayTimeUnit": "ns", "traceEvents": ['
           || coalesce(string_agg(ev::VARCHAR, ',' ORDER BY ord, ts_ns), '') || ']}'
    FROM trace_events
    """
    params = {"run_id": run_id, "t0": int(t0_ns), "t1": int(t1_ns), "ranks": ranks, "max_events": int(max_events)}
    return con.execute(sql, params).fetchone()[0].encode()


# --------------------------------------------------------------------------- findings

def findings(con: duckdb.DuckDBPyConnection, run_id: str, raw: bool = False) -> list[dict[str, Any]]:
    """The run's stored findings, costliest first, in the CLI contract's shape plus their review mark
    (mark_status, mark_note; None when unmarked). raw: NULL cost, summary and note stay None (the
    report's JSON contract) instead of 0 / "" (what the dashboard formats)."""
    rows = con.execute(
        """
        SELECT f.finding_id, f.kind, f.severity, f.rank, f.step, f.stream, f.t_start_ns, f.t_end_ns,
               f.cost_ns, f.cost_pct, f.summary, f.metrics::VARCHAR, f.fix_ids, m.status, m.note
        FROM findings f LEFT JOIN finding_marks m USING (run_id, finding_id)
        WHERE f.run_id = $run_id
        ORDER BY f.cost_ns DESC NULLS LAST, f.cost_pct DESC NULLS LAST, f.finding_id
        """,
        {"run_id": run_id},
    ).fetchall()
    out = []
    for (fid, kind, severity, rank, step, stream, t0, t1, cost_ns, cost_pct, summary, metrics,
         fix_ids, mark_status, mark_note) in rows:
        try:
            metrics = json.loads(metrics) if metrics else {}
        except ValueError:
            metrics = {}
        if raw:
            cost_ms = None if cost_ns is None else cost_ns / 1e6
        else:
            cost_ms, cost_pct, summary, mark_note = (cost_ns or 0) / 1e6, cost_pct or 0.0, summary or "", mark_note or ""
        out.append({
            "id": fid, "kind": kind, "severity": severity, "rank": rank, "step": step, "stream": stream,
            "start_ns": t0, "end_ns": t1,
            "cost_ms_per_step": cost_ms, "cost_pct": cost_pct,
            "summary": summary, "metrics": metrics,
            "fixes": list(fix_ids or []), "fixes_ruled_out": fixes_ruled_out(list(fix_ids or []), metrics),
            "mark_status": mark_status, "mark_note": mark_note,
        })
    return out


def finding_counts(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per run: number of findings and the costliest one's % of step time (for the run list)."""
    return _frame(
        con,
        "SELECT run_id, count(*) AS n_findings, max(cost_pct) AS worst_pct FROM findings GROUP BY run_id",
        {},
    )


# --------------------------------------------------------------------------- communication

# Bytes per element for the dtype names NCCL kernels carry in their args.
_DTYPE_BYTES = {"Float": 4, "float": 4, "Float32": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4,
                "Long": 8, "Byte": 1, "Char": 1, "Bool": 1, "Short": 2, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
                "ComplexFloat": 8, "UInt32": 4, "UInt64": 8}


_COLLECTIVES_SQL = f"""
    WITH comm AS (
        SELECT rank, ts_ns, dur_ns, name, stream,
               coalesce(args->>'Collective name',
                        regexp_extract(name, '^nccl(?:Dev)?Kernel_([A-Za-z]+)', 1)) AS collective,
               TRY_CAST(args->>'Group size' AS INTEGER) AS group_size,
               TRY_CAST(args->>'In msg nelems' AS BIGINT) AS nelems,
               args->>'dtype' AS dtype
        FROM events
        WHERE run_id = $run_id AND kind = 'kernel' AND dur_ns > 0
          AND regexp_matches(name, '{COMM_KERNEL_PATTERN}')
    ),
    dtype_sizes AS (SELECT unnest($dtype_names) AS dtype, unnest($dtype_bytes) AS elem_bytes),
    sized AS (
        SELECT comm.*, nelems * elem_bytes AS bytes,
               lower(replace(replace(collective, '_', ''), ' ', '')) AS op
        FROM comm LEFT JOIN dtype_sizes USING (dtype)
    )
    SELECT rank, ts_ns AS start_ns,
           (ts_ns - (SELECT min(ts_ns) FROM events WHERE run_id = $run_id AND dur_ns > 0)) / 1e6 AS start_ms,
           collective, name, stream, group_size, bytes,
           dur_ns / 1e6 AS duration_ms,
           bytes / dur_ns AS algbw_gbps,  -- bytes per ns = GB/s
           bytes / dur_ns * CASE
               WHEN group_size IS NULL OR group_size < 1 THEN NULL
               WHEN op LIKE '%allreduce%' THEN 2.0 * (group_size - 1) / group_size
               WHEN op LIKE '%allgather%' OR op LIKE '%reducescatter%' OR op LIKE '%alltoall%'
                    THEN (group_size - 1) * 1.0 / group_size
               ELSE 1.0 END AS busbw_gbps
    FROM sized
"""


def collectives(con: duckdb.DuckDBPyConnection, run_id: str, limit: int = 5000) -> pd.DataFrame:
    """One row per communication kernel (longest first, at most `limit`).

    Columns: rank, start_ns, start_ms (after the run's first event), collective (from args
    'Collective name', else from the kernel name),
    name, stream, group_size, bytes (In msg nelems x dtype size; NULL when the trace has no size
    metadata), duration_ms, algbw_gbps = bytes / time, busbw_gbps = algbw x the nccl-tests factor:
    2(n-1)/n all-reduce, (n-1)/n all-gather / reduce-scatter / all-to-all, 1 otherwise.
    """
    sql = f"SELECT * FROM ({_COLLECTIVES_SQL}) ORDER BY duration_ms DESC, rank, start_ns LIMIT $limit"
    return _frame(con, sql, {"run_id": run_id, "dtype_names": list(_DTYPE_BYTES), "dtype_bytes": list(_DTYPE_BYTES.values()), "limit": int(limit)})


def collective_summary(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Per rank and collective type: count, total_ms, total_bytes, mean_algbw_gbps, mean_busbw_gbps."""
    sql = f"""
    SELECT rank, collective, count(*) AS count, sum(duration_ms) AS total_ms, sum(bytes) AS total_bytes,
           avg(algbw_gbps) AS mean_algbw_gbps, avg(busbw_gbps) AS mean_busbw_gbps
    FROM ({_COLLECTIVES_SQL}) GROUP BY ALL ORDER BY rank, total_ms DESC
    """
    return _frame(con, sql, {"run_id": run_id, "dtype_names": list(_DTYPE_BYTES), "dtype_bytes": list(_DTYPE_BYTES.values())})


# --------------------------------------------------------------------------- compare

def compare_runs(con: duckdb.DuckDBPyConnection, run_before: str, run_after: str) -> dict[str, Any]:
    """Two runs side by side.

    Returns {"kinds": frame(kind, before_ms, after_ms, delta_ms, before_pct, after_pct,
    before_count, after_count)} where *_ms is the summed cost per step of the kind's findings
    (over ranks) and *_pct the worst single finding's % of step time; and {"steps": frame(run,
    steps, mean_step_ms, compute_ms, comm_exposed_ms, memory_ms, idle_ms)} the mean step over
    all ranks and steps of each run; and {"delta": {<part>_before, <part>_after, <part>_delta for
    mean_step_ms, compute_ms, comm_exposed_ms, memory_ms, idle_ms; speedup = before / after mean step}}
    (values None where a run has no steps).
    """
    kinds = _frame(con, """
        WITH costs AS (
            SELECT run_id, kind, sum(cost_ns) / 1e6 AS cost_ms, max(cost_pct) AS worst_pct, count(*) AS n
            FROM findings WHERE run_id IN ($before, $after) GROUP BY ALL
        ),
        kinds AS (SELECT DISTINCT kind FROM costs)
        SELECT k.kind,
               coalesce(b.cost_ms, 0) AS before_ms, coalesce(a.cost_ms, 0) AS after_ms,
               coalesce(a.cost_ms, 0) - coalesce(b.cost_ms, 0) AS delta_ms,
               coalesce(b.worst_pct, 0) AS before_pct, coalesce(a.worst_pct, 0) AS after_pct,
               coalesce(b.n, 0) AS before_count, coalesce(a.n, 0) AS after_count
        FROM kinds k
        LEFT JOIN costs b ON b.kind = k.kind AND b.run_id = $before
        LEFT JOIN costs a ON a.kind = k.kind AND a.run_id = $after
        ORDER BY greatest(coalesce(b.cost_ms, 0), coalesce(a.cost_ms, 0)) DESC, k.kind
    """, {"before": run_before, "after": run_after})
    steps = _frame(con, f"""
        WITH before_steps AS (SELECT * FROM ({_STEP_BREAKDOWN_SQL.replace("$run_id", "$before")})),
             after_steps AS (SELECT * FROM ({_STEP_BREAKDOWN_SQL.replace("$run_id", "$after")})),
             both_runs AS (SELECT 'before' AS run, * FROM before_steps UNION ALL SELECT 'after', * FROM after_steps)
        SELECT run, count(*) AS steps, avg(step_ms) AS mean_step_ms, avg(compute_ms) AS compute_ms,
               avg(comm_exposed_ms) AS comm_exposed_ms, avg(memory_ms) AS memory_ms, avg(idle_ms) AS idle_ms
        FROM both_runs GROUP BY run ORDER BY run DESC
    """, {"before": run_before, "after": run_after})
    parts = ("mean_step_ms", "compute_ms", "comm_exposed_ms", "memory_ms", "idle_ms")
    deltas = duckdb.query_df(steps, "steps", "SELECT " + ", ".join(
        f"max({p}) FILTER (WHERE run = 'before') AS {p}_before, max({p}) FILTER (WHERE run = 'after') AS {p}_after, "
        f"max({p}) FILTER (WHERE run = 'after') - max({p}) FILTER (WHERE run = 'before') AS {p}_delta"
        for p in parts) + ", max(mean_step_ms) FILTER (WHERE run = 'before') / "
        "nullif(max(mean_step_ms) FILTER (WHERE run = 'after'), 0) AS speedup FROM steps").fetchall()[0]
    names = [f"{p}_{w}" for p in parts for w in ("before", "after", "delta")] + ["speedup"]
    return {"kinds": kinds, "steps": steps, "delta": dict(zip(names, deltas))}
