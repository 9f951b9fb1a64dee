"""Read-only data access for the dashboard: everything a page draws comes from here.

Each function is a plain SELECT over the shared definitions (analyzers/sql/lib: steps, GPU
activity, collectives; analyzers/sql/metrics: step_breakdown, rank_breakdown, the comm tables),
with the run id and windows passed as parameters (trace content is never formatted into SQL).
Results come back as pandas frames or plain dicts, ready to draw; the app computes nothing.
Only the timeline and its export read raw events, since they draw every kind of event.
"""
from __future__ import annotations

import contextvars
import json
import os
import tempfile
from typing import TYPE_CHECKING, Any, Mapping

import duckdb

if TYPE_CHECKING:    # frames come from DuckDB's .df(); importing pandas here cost the CLI 0.35 s a call
    import pandas as pd

from analyzers.read import page_defaults
from analyzers.read.stored import all_run_notes
from analyzers.read.fixes import choose_fixes
from analyzers.store.runs import require_run
from analyzers.sql.engine import ensure_loaded

# While set (store_page_defaults), _frame writes its result to this Parquet file instead of
# returning it: the page tables are stored without pandas (the CLI's analysis does not import it).
_PARQUET_SINK: contextvars.ContextVar[str | None] = contextvars.ContextVar("parquet_sink", default=None)


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> pd.DataFrame:
    sink = _PARQUET_SINK.get()
    if sink is not None:
        ensure_loaded(con).execute(f"COPY ({sql}) TO {_sql_text(sink)} (FORMAT parquet)", params)
        return None
    return ensure_loaded(con).execute(sql, params).df()


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


# step_breakdown's ns columns as the pages read them (ms, the names their charts use)
_STEP_MS_COLUMNS = """
    step_ns / 1e6 AS step_ms, compute_ns / 1e6 AS compute_ms, comm_exposed_ns / 1e6 AS comm_exposed_ms,
    memory_ns / 1e6 AS memory_ms, idle_ns / 1e6 AS idle_ms, comm_ns / 1e6 AS comm_ms
"""


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
    """One row per (rank, GPU-clock step) of metrics/step_breakdown.sql, in ms.

    Columns: rank, step (NULL for a rank without ProfilerStep ranges), t0_ns, t1_ns, clock,
    step_ms, compute_ms, comm_exposed_ms, memory_ms, idle_ms (the four parts add up to step_ms),
    comm_ms (all communication in the step, hidden or not) and gpu_busy_ms.
    """
    stored = page_defaults.read(con, run_id, "step_breakdown")
    return stored if stored is not None else _step_breakdown(con, run_id)


def _step_breakdown(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return _frame(con, f"""
        SELECT rank, step, start_ns AS t0_ns, end_ns AS t1_ns, clock, {_STEP_MS_COLUMNS},
               gpu_busy_ns / 1e6 AS gpu_busy_ms
        FROM step_breakdown($run_id) ORDER BY rank, step""", {"run_id": run_id})


def rank_breakdown(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Mean per step, per rank, of the step breakdown (metrics/step_breakdown.sql), in ms."""
    return _frame(con, f"SELECT rank, steps, {_STEP_MS_COLUMNS} FROM rank_step_breakdown($run_id) ORDER BY rank",
                  {"run_id": run_id})


def run_summary(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any]:
    """The run-wide figures (metrics/step_breakdown.sql run_summary): host_step_ms, gpu_step_ms,
    idle_pct (None where unknown) and has_gpu."""
    cur = ensure_loaded(con).execute("SELECT * FROM run_summary($run_id)", {"run_id": run_id})
    return dict(zip([d[0] for d in cur.description], cur.fetchone()))


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
# Nesting levels drawn per lane: deeper ops share the last sub-row (Perfetto draws every level,
# but past ~6 levels of aten calls a lane is taller than the chart and says no more).
TIMELINE_MAX_DEPTH = 6
# A pixel of the timeline as a share of the visible span (the chart is ~1500 px wide at most):
# events shorter than that are merged, so zooming in (a narrower span) separates them.
TIMELINE_PIXEL_FRACTION = 1 / 1500
# Launch -> GPU work arrows drawn at most per window (the ones starting first); more hide the bars.
TIMELINE_MAX_FLOWS = 400

# A CPU lane's name: the trace's thread_name metadata where it has one, else "thread <tid>" with a
# negative tid (Kineto writes some as signed 32-bit) shown as the unsigned number it stands for;
# a tid that is text ("PyTorch Profiler") is its own name.
_THREAD_LABEL_SQL = """
    coalesce(
        {names}.thread_name,
        CASE WHEN TRY_CAST({tid} AS BIGINT) < 0 THEN 'thread ' || (TRY_CAST({tid} AS BIGINT) + 4294967296)::VARCHAR
             WHEN TRY_CAST({tid} AS BIGINT) IS NOT NULL THEN 'thread ' || {tid}
             ELSE coalesce({tid}, '?') END)
"""
# Per (rank, pid, tid) the name of the trace's thread_name metadata; where a thread was renamed,
# the name that is not the main thread's (the renamed worker, e.g. pt_autograd_0).
_THREAD_NAMES_SQL = """
    SELECT rank, pid, tid,
           arg_min(json_extract_string(args, '$.name'),
                   json_extract_string(args, '$.name') ILIKE '%main%' AND tid <> pid) AS thread_name
    FROM events
    -- ph first: row groups without metadata are skipped by their zone maps
    WHERE run_id = $run_id AND ph = 'M' AND kind = 'metadata' AND name = 'thread_name'
      AND ($ranks IS NULL OR list_contains($ranks, rank))
    GROUP BY rank, pid, tid
"""


def clamp_window(t0_ns: int, t1_ns: int, bounds: tuple[int, int]) -> tuple[int, int]:
    """[t0_ns, t1_ns) cut to the trace's bounds (time_bounds), so no window starts before the first
    event or ends after the last; an inverted or empty result keeps at least 1 ns."""
    start = min(max(int(t0_ns), bounds[0]), bounds[1] - 1)
    return start, max(min(int(t1_ns), bounds[1]), start + 1)


def timeline_window(con: duckdb.DuckDBPyConnection, run_id: str, t0_ns: int, t1_ns: int,
                    ranks: list[int] | None = None, max_events: int = 3000, max_merged: int = 3000,
                    min_pixel_fraction: float = TIMELINE_PIXEL_FRACTION, include_python: bool = False,
                    max_depth: int = TIMELINE_MAX_DEPTH) -> pd.DataFrame:
    """The intervals drawn in a time window: one row per bar.

    Only events overlapping [t0_ns, t1_ns) are read. Each lane (a GPU stream, a CPU thread) has
    sub-rows by nesting: an event's depth is the number of events of its lane that enclose it
    (open when it starts; a sweep over starts and ends, so set-based), capped at max_depth.
    Events shorter than a pixel of this window ((t1-t0) * min_pixel_fraction) are merged per lane,
    depth and pixel into one bar (kind 'merged', name 'N short events'), in bins widened so there
    are about max_merged such bars at most; of the rest, the max_events longest are kept. So a
    narrow window shows every event as its own bar, and the frame stays small however big the
    trace is. Communication kernels get kind 'communication'.

    Columns: rank, lane, lane_order, depth, is_gpu, kind, name, start_ns, end_ns, n_events, stream,
    pid, tid (a GPU lane's device and stream; a CPU lane's pid and tid, as in the trace).
    Lanes: per rank the GPU streams, then the CPU threads with the training thread (main_threads)
    first; a CPU lane is named by the trace's thread_name metadata, else by its tid.
    """
    kinds = [k for k in TIMELINE_KINDS if include_python or k != "python_function"]
    pixel_ns = max(1, int((t1_ns - t0_ns) * min_pixel_fraction))
    sql = f"""
    WITH win AS (
        SELECT row_number() OVER () AS event_no, rank, name, ts_ns, ts_ns + dur_ns AS end_ns, stream,
               CASE WHEN e.kind = 'kernel' AND is_comm_kernel(e.name) THEN 'communication'
                    ELSE e.kind END AS kind,
               e.kind IN (SELECT unnest($gpu_kinds)) AS is_gpu,
               CASE WHEN e.kind IN (SELECT unnest($gpu_kinds)) THEN coalesce(device::VARCHAR, pid, '?')
                    ELSE coalesce(pid, '?') END AS lane_pid,
               CASE WHEN e.kind IN (SELECT unnest($gpu_kinds)) THEN coalesce(stream::VARCHAR, tid, '?')
                    ELSE coalesce(tid, '?') END AS lane_tid
        FROM events e
        WHERE run_id = $run_id AND e.kind IN (SELECT unnest($kinds)) AND dur_ns IS NOT NULL
          AND ts_ns < $t1 AND ts_ns + dur_ns > $t0
          AND ($ranks IS NULL OR list_contains($ranks, rank))
    ),
    -- nesting within each lane: lib/intervals.sql event_depth
    lane_events AS (
        SELECT (rank, is_gpu, lane_pid, lane_tid) AS grp, event_no AS id, ts_ns AS start_ns, end_ns FROM win
    ),
    nested AS (
        SELECT w.*, least(greatest(d.depth, 0), $max_depth)::INTEGER AS depth
        FROM win w JOIN event_depth('lane_events') d ON d.id = w.event_no
    ),
    long_events AS (
        SELECT rank, is_gpu, lane_pid, lane_tid, depth, kind, name, ts_ns AS start_ns, end_ns, 1 AS n_events, stream
        FROM nested WHERE end_ns - ts_ns >= $pixel_ns
        ORDER BY end_ns - ts_ns DESC
        LIMIT $max_events
    ),
    -- bins for short events: a pixel wide, wider when many lanes would exceed $max_merged bars
    bin AS (
        SELECT greatest($pixel_ns,
                        ($t1 - $t0) * count(DISTINCT (rank, is_gpu, lane_pid, lane_tid)) // $max_merged) AS ns
        FROM win
    ),
    short_merged AS (
        SELECT rank, is_gpu, lane_pid, lane_tid, depth, 'merged' AS kind,
               count(*) || ' short events' AS name, min(ts_ns) AS start_ns, max(end_ns) AS end_ns,
               count(*) AS n_events, any_value(stream) AS stream
        FROM nested WHERE end_ns - ts_ns < $pixel_ns
        GROUP BY rank, is_gpu, lane_pid, lane_tid, depth, (ts_ns - $t0) // (SELECT ns FROM bin)
    ),
    bars AS (SELECT * FROM long_events UNION ALL SELECT * FROM short_merged),
    thread_names AS ({_THREAD_NAMES_SQL}),
    cpu_pids AS (SELECT rank, count(DISTINCT lane_pid) AS n FROM win WHERE NOT is_gpu GROUP BY rank),
    lanes AS (
        SELECT DISTINCT b.rank, b.is_gpu, b.lane_pid, b.lane_tid,
               CASE WHEN b.is_gpu THEN 'GPU ' || b.lane_pid || ' · stream ' || b.lane_tid
                    ELSE 'CPU ' || CASE WHEN p.n > 1 THEN 'pid ' || b.lane_pid || ' ' ELSE '' END || '· '
                         || {_THREAD_LABEL_SQL.format(names="n", tid="b.lane_tid")}
               END AS lane_name,
               -- the rank's training thread (lib/steps.sql main_threads) comes first
               NOT b.is_gpu AND m.rank IS NOT NULL AS is_main,
               CASE WHEN TRY_CAST(b.lane_tid AS BIGINT) < 0 THEN TRY_CAST(b.lane_tid AS BIGINT) + 4294967296
                    ELSE TRY_CAST(b.lane_tid AS BIGINT) END AS tid_number   -- a signed 32-bit tid as unsigned
        FROM bars b
        LEFT JOIN thread_names n ON NOT b.is_gpu AND n.rank = b.rank AND n.pid = b.lane_pid AND n.tid = b.lane_tid
        LEFT JOIN cpu_pids p ON p.rank = b.rank
        LEFT JOIN main_threads($run_id) m
               ON NOT b.is_gpu AND m.rank = b.rank AND coalesce(m.pid, '?') = b.lane_pid AND coalesce(m.tid, '?') = b.lane_tid
    )
    SELECT b.rank,
           CASE WHEN (SELECT count(DISTINCT rank) FROM win) > 1 THEN 'rank ' || b.rank || ' · ' ELSE '' END
               || l.lane_name AS lane,
           dense_rank() OVER (ORDER BY b.rank, NOT b.is_gpu, NOT l.is_main, l.tid_number NULLS LAST,
                                       b.lane_pid, b.lane_tid) AS lane_order,
           b.depth, b.is_gpu, b.kind, b.name, b.start_ns, b.end_ns, b.n_events, b.stream,
           b.lane_pid AS pid, b.lane_tid AS tid
    FROM bars b JOIN lanes l USING (rank, is_gpu, lane_pid, lane_tid)
    ORDER BY lane_order, depth, start_ns
    """
    params = {"run_id": run_id, "t0": int(t0_ns), "t1": int(t1_ns), "ranks": ranks, "kinds": kinds,
              "gpu_kinds": list(GPU_KINDS), "pixel_ns": pixel_ns, "max_events": int(max_events),
              "max_merged": max(1, int(max_merged)), "max_depth": max(0, int(max_depth))}
    return _frame(con, sql, params)


def timeline_flows(con: duckdb.DuckDBPyConnection, run_id: str, t0_ns: int, t1_ns: int,
                   ranks: list[int] | None = None, max_flows: int = TIMELINE_MAX_FLOWS) -> pd.DataFrame:
    """The CPU launch -> GPU work pairs of a window (gpu_activity.sql's launches: same correlation
    id, e.g. cudaLaunchKernel -> its kernel) whose call starts and work starts within [t0_ns, t1_ns),
    so the line between them is drawn whole: at most max_flows, the earliest launches first.

    Columns: rank, launch_name, launch_tid, launch_start_ns, launch_end_ns, gpu_kind, gpu_name,
    device, stream, gpu_start_ns, gpu_end_ns, correlation.
    """
    return _frame(con, """
        SELECT rank, launch_name, launch_tid, launch_start_ns, launch_end_ns, gpu_kind, gpu_name, device, stream,
               gpu_start_ns, gpu_end_ns, correlation
        FROM launches($run_id)
        WHERE ($ranks IS NULL OR list_contains($ranks, rank))
          AND launch_start_ns >= $t0 AND gpu_start_ns < $t1
        ORDER BY launch_start_ns, rank, gpu_start_ns
        LIMIT $max_flows""",
        {"run_id": run_id, "t0": int(t0_ns), "t1": int(t1_ns), "ranks": ranks, "max_flows": int(max_flows)})


def export_window_trace(con: duckdb.DuckDBPyConnection, run_id: str, t0_ns: int, t1_ns: int,
                        ranks: list[int] | None = None, max_events: int = 200_000) -> bytes:
    """The events of a window as a small Chrome trace (JSON bytes) that Perfetto opens.

    Each (rank, pid) becomes one process named "rank R · pid"; a CPU thread is named as the
    trace's thread_name metadata names it (else "thread <tid>", unsigned), the process's main
    thread first; a GPU stream "stream N". The trace's launch -> GPU flow events (ph s/f) are kept
    so Perfetto draws the arrows. ts/dur in microseconds with ns precision; args verbatim. At most
    max_events events (the longest) so the file stays small. The JSON is built by DuckDB, values
    escaped by it. Raises analyzers.store.runs.RunNotFound for a run deleted (or never stored), not an
    empty trace.
    """
    require_run(con, run_id)
    sql = f"""
    WITH win AS (
        SELECT rank, kind, cat, ph, name, ts_ns, dur_ns, coalesce(pid, '?') AS pid, coalesce(tid, '?') AS tid,
               args, correlation
        FROM events
        WHERE run_id = $run_id AND ph IN ('X', 'i', 'I', 's', 'f')
          AND ts_ns < $t1 AND ts_ns + coalesce(dur_ns, 0) >= $t0
          AND ($ranks IS NULL OR list_contains($ranks, rank))
        ORDER BY coalesce(dur_ns, 0) DESC
        LIMIT $max_events
    ),
    numbered AS (
        SELECT *, dense_rank() OVER (ORDER BY rank, pid) AS pid_n,
               dense_rank() OVER (PARTITION BY rank, pid ORDER BY tid <> pid, TRY_CAST(tid AS BIGINT), tid) AS tid_n
        FROM win
    ),
    thread_names AS ({_THREAD_NAMES_SQL}),
    threads AS (
        SELECT n.rank, n.pid, n.tid, n.pid_n, n.tid_n,
               CASE WHEN bool_or(n.kind IN (SELECT unnest($gpu_kinds))) THEN 'stream ' || n.tid
                    ELSE any_value({_THREAD_LABEL_SQL.format(names="t", tid="n.tid")}) END AS label
        FROM numbered n
        LEFT JOIN thread_names t ON t.rank = n.rank AND t.pid = n.pid AND t.tid = n.tid
        GROUP BY n.rank, n.pid, n.tid, n.pid_n, n.tid_n
    ),
    trace_events AS (
        SELECT json_object('name', name, 'cat', coalesce(cat, kind), 'ph', ph, 'ts', ts_ns / 1000.0,
                           'dur', coalesce(dur_ns, 0) / 1000.0, 'pid', pid_n, 'tid', tid_n,
                           'args', coalesce(args, '{{}}'::JSON)) AS ev, 1 AS ord, ts_ns
        FROM numbered WHERE ph NOT IN ('s', 'f')
        UNION ALL
        -- flow ends bind to the enclosing slice of their thread ('bp': 'e' for the arrow's head)
        SELECT json_object('name', name, 'cat', coalesce(cat, kind), 'ph', ph, 'ts', ts_ns / 1000.0,
                           'pid', pid_n, 'tid', tid_n, 'id', correlation, 'bp', 'e'), 1, ts_ns
        FROM numbered WHERE ph IN ('s', 'f') AND correlation IS NOT NULL
        UNION ALL
        SELECT DISTINCT json_object('name', 'process_name', 'ph', 'M', 'pid', pid_n, 'tid', 0,
                           'args', json_object('name', 'rank ' || rank || ' · ' || pid)), 0, 0
        FROM numbered
        UNION ALL
        SELECT json_object('name', 'thread_name', 'ph', 'M', 'pid', pid_n, 'tid', tid_n,
                           'args', json_object('name', label)), 0, 0
        FROM threads
        UNION ALL
        SELECT json_object('name', 'thread_sort_index', 'ph', 'M', 'pid', pid_n, 'tid', tid_n,
                           'args', json_object('sort_index', tid_n)), 0, 0
        FROM threads
    )
    SELECT '{{"displayTimeUnit": "ns", "traceEvents": ['
           || coalesce(string_agg(ev::VARCHAR, ',' ORDER BY ord, ts_ns), '') || ']}}'
    FROM trace_events
    """
    params = {"run_id": run_id, "t0": int(t0_ns), "t1": int(t1_ns), "ranks": ranks, "max_events": int(max_events),
              "gpu_kinds": list(GPU_KINDS)}
    return con.execute(sql, params).fetchone()[0].encode()


# --------------------------------------------------------------------------- findings

def findings(con: duckdb.DuckDBPyConnection, run_id: str, raw: bool = False) -> list[dict[str, Any]]:
    """The run's stored findings, costliest first, in the CLI contract's shape plus their review mark
    (mark_status, mark_note; None when unmarked). raw: NULL cost, summary and note stay None (the
    report's JSON contract) instead of 0 / "" (what the dashboard formats)."""
    rows = con.execute(
        """
        SELECT f.finding_id, f.kind, f.severity, f.rank, f.ranks, f.caused_by, f.step, f.stream, f.t_start_ns,
               f.t_end_ns, f.cost_ns, f.cost_pct, f.summary, f.metrics::VARCHAR, m.status, m.note
        FROM findings f LEFT JOIN finding_marks m USING (run_id, finding_id)
        WHERE f.run_id = $run_id
        -- the order analyze_run stored (root_causes.order_findings); by cost for older stores
        ORDER BY f.position NULLS LAST, f.cost_ns DESC NULLS LAST, f.finding_id
        """,
        {"run_id": run_id},
    ).fetchall()
    trace = run_costs(con, run_id)
    out = []
    for (fid, kind, severity, rank, ranks, caused_by, step, stream, t0, t1, cost_ns, cost_pct, summary, metrics,
         mark_status, mark_note) in rows:
        try:
            metrics = json.loads(metrics) if metrics else {}
        except ValueError:
            metrics = {}
        fixes = choose_fixes(kind, metrics, trace)
        if raw:
            cost_ms = None if cost_ns is None else cost_ns / 1e6
        else:
            cost_ms, cost_pct, summary, mark_note = (cost_ns or 0) / 1e6, cost_pct or 0.0, summary or "", mark_note or ""
        out.append({
            "id": fid, "kind": kind, "severity": severity, "rank": rank,
            "ranks": list(ranks) if ranks is not None else ([] if rank is None else [rank]),
            "caused_by": caused_by, "step": step, "stream": stream,
            "start_ns": t0, "end_ns": t1,
            "cost_ms_per_step": cost_ms, "cost_pct": cost_pct,
            "summary": summary, "metrics": metrics,
            "fixes": fixes.ids, "fixes_ruled_out": fixes.ruled_out, "fixes_unknown": fixes.unknown,
            "mark_status": mark_status, "mark_note": mark_note,
        })
    return out


def run_costs(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    """What the run's findings add up to (analyzers.analysis.root_causes.RunCosts, stored by its last
    analysis): step_ms, root_cause_ms, saves_at_most_ms, saves_at_most_pct, unexplained_idle_ms; None when
    unknown."""
    row = con.execute("SELECT analysis_summary::VARCHAR FROM runs WHERE run_id = $run_id", {"run_id": run_id}).fetchone()
    if row is None or row[0] is None:
        return None
    try:
        return json.loads(row[0])
    except ValueError:
        return None


def whatif(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    """The run's what-if replay as its last analysis stored it (analyzers/analysis/whatif): "run" (measured,
    replayed, all fixes, greedy order, critical path by category), "findings" (id -> prediction or
    None), "steps" (replay error per rank and step), "notes", "path" (where the critical path runs:
    whatif_path_bars); None when never replayed."""
    from analyzers.analysis.whatif import stored_whatif

    return stored_whatif(con, run_id)


def whatif_waterfall(doc: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The step now, then after each fix in the greedy order (fixes applied together, replayed):
    rows of label (finding id or 'now'/'all fixes'), step_ms, saving_ms (from the step before)."""
    if not doc or not (doc.get("run") or {}).get("measured_step_ms"):
        return []
    run, predictions = doc["run"], doc.get("findings") or {}
    rows = [{"label": "now", "step_ms": run["measured_step_ms"], "saving_ms": 0.0}]
    for fid in run.get("order") or []:
        after = (predictions.get(fid) or {}).get("step_ms_after_order")
        if after is None:
            continue
        rows.append({"label": fid, "step_ms": after, "saving_ms": rows[-1]["step_ms"] - after})
    return rows


def whatif_path_bars(doc: Mapping[str, Any] | None, t0_ns: int, t1_ns: int, ranks: list[int]) -> pd.DataFrame:
    """The replay's critical path in a time window, as timeline bars (timeline_window's columns): per
    rank a lane 'critical path' above the others, a bar for each stretch the path spends on the host
    (kind 'critical path: host') or on the GPU ('critical path: GPU'), clipped to the window. Empty
    when the stored what-if has no path (an older analysis, or too many stretches: its note says)."""
    import pandas as pd     # (only the pages draw timelines: see the import at the top)

    columns = ["rank", "lane", "lane_order", "depth", "is_gpu", "kind", "name", "start_ns", "end_ns", "n_events",
               "stream", "pid", "tid"]
    path = (doc or {}).get("path") or {}
    frame = pd.DataFrame({key: path.get(key) or [] for key in ("rank", "on_gpu", "start_ns", "end_ns", "elements")})
    if frame.empty:
        return pd.DataFrame(columns=columns)
    frame = frame[frame["rank"].isin(ranks) & (frame["end_ns"] >= t0_ns) & (frame["start_ns"] <= t1_ns)]
    several = len(set(ranks)) > 1
    order = {rank: i - len(ranks) for i, rank in enumerate(sorted(set(ranks)))}   # before every event lane
    on_gpu = frame["on_gpu"].astype(bool)
    return pd.DataFrame({
        "rank": frame["rank"], "lane": [f"rank {r} · critical path" if several else "critical path" for r in frame["rank"]],
        "lane_order": frame["rank"].map(order), "depth": 0, "is_gpu": False,
        "kind": on_gpu.map({True: "critical path: GPU", False: "critical path: host"}),
        "name": [f"{n:,} GPU ops on the path" if g else f"{n:,} host events on the path (and the CPU time between)"
                 for g, n in zip(on_gpu, frame["elements"])],
        "start_ns": frame["start_ns"].clip(lower=t0_ns), "end_ns": frame["end_ns"].clip(upper=t1_ns),
        "n_events": frame["elements"], "stream": None, "pid": None, "tid": None}, columns=columns)


def whatif_vs_measured(con: duckdb.DuckDBPyConnection, before: str, after: str) -> list[dict[str, Any]]:
    """The before run's predictions beside what the after run measured: per finding with a
    prediction (and all fixes together), the predicted step and saving, the measured step and saving
    (mean step of each run, the same definition), and the finding's cost (the naive "cost = saving")."""
    predicted, measured = whatif(con, before) or {}, whatif(con, after) or {}
    before_ms = (predicted.get("run") or {}).get("measured_step_ms")
    after_ms = (measured.get("run") or {}).get("measured_step_ms")
    if not before_ms or not after_ms:
        return []
    costs = {f["id"]: f for f in findings(con, before)}
    rows = []
    for fid, p in (predicted.get("findings") or {}).items():
        if not p or fid not in costs:
            continue
        rows.append({"finding": fid, "kind": costs[fid]["kind"], "predicted_step_ms": p["step_ms_after"],
                     "predicted_saving_ms": p["saving_ms"], "measured_step_ms": after_ms,
                     "measured_saving_ms": round(before_ms - after_ms, 3),
                     "cost_ms": costs[fid]["cost_ms_per_step"]})
    all_fixes = predicted["run"].get("all_fixes_step_ms")
    if rows and all_fixes is not None:
        rows.append({"finding": "all fixes", "kind": None, "predicted_step_ms": all_fixes,
                     "predicted_saving_ms": round(before_ms - all_fixes, 3), "measured_step_ms": after_ms,
                     "measured_saving_ms": round(before_ms - after_ms, 3),
                     "cost_ms": None})
    return rows


def run_notes(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """The caveats of the run's analysis in plain words (what could not be looked at, how to read
    the costs): the CLI JSON's "notes"."""
    return all_run_notes(con, run_id)


def run_kind_costs(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, dict[str, Any]]:
    """What each finding kind costs the run (metrics/kind_costs.sql run_kind_costs), by kind: findings,
    cost_ns (root causes' ns per step), worst_pct, worst_rank_pct (the worst rank's summed cost_pct),
    cost_bytes."""
    cur = ensure_loaded(con).execute("SELECT * FROM run_kind_costs($run_id) ORDER BY kind", {"run_id": run_id})
    columns = [d[0] for d in cur.description]
    return {row[0]: dict(zip(columns[1:], row[1:])) for row in cur.fetchall()}


def finding_counts(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per run: number of findings and the costliest one's % of step time (for the run list)."""
    return _frame(
        con,
        "SELECT run_id, count(*) AS n_findings, max(cost_pct) AS worst_pct FROM findings GROUP BY run_id",
        {},
    )


# --------------------------------------------------------------------------- communication

def collectives(con: duckdb.DuckDBPyConnection, run_id: str, limit: int = 5000) -> pd.DataFrame:
    """One row per communication kernel (longest first, at most `limit`): metrics/comm.sql's
    collective_kernels in ms, plus start_ms (after the run's first event).

    Columns: rank, collective, name, stream, group_size, bytes, start_ns, start_ms, duration_ms,
    true_ms (the transfer: the shortest matched instance across ranks), wait_ms, algbw_gbps and
    busbw_gbps (from true_ms, as the comm_exposed finding reports them), measured_busbw_gbps
    (from the kernel's own duration, waiting included).
    """
    return _frame(con, """
        SELECT rank, collective, name, stream, group_size, bytes, start_ns,
               (start_ns - (SELECT min(ts_ns) FROM events WHERE run_id = $run_id AND dur_ns > 0)) / 1e6 AS start_ms,
               dur_ns / 1e6 AS duration_ms, true_dur_ns / 1e6 AS true_ms, wait_ns / 1e6 AS wait_ms,
               algbw_gbps, busbw_gbps, measured_busbw_gbps
        FROM collective_kernels($run_id)
        ORDER BY duration_ms DESC, rank, start_ns LIMIT $limit""", {"run_id": run_id, "limit": int(limit)})


def collective_summary(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Per rank and collective type (metrics/comm.sql's comm_by_collective): instances, total_ms
    (true durations), wait_ms, total_bytes, mean_bytes, algbw_gbps, busbw_gbps (bytes over true
    durations: the figures the comm_exposed finding's by_collective metric carries)."""
    return _frame(con, """
        SELECT rank, collective, instances, true_ns / 1e6 AS total_ms, wait_ns / 1e6 AS wait_ms,
               total_bytes, mean_bytes, algbw_gbps, busbw_gbps
        FROM comm_by_collective($run_id) ORDER BY rank, total_ms DESC""", {"run_id": run_id})


# --------------------------------------------------------------------------- compare

def run_step_breakdown(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """The run's mean step and its parts (metrics/kind_costs.sql run_step_breakdown), one row, in ns;
    stored by the analysis, else computed."""
    stored = page_defaults.read(con, run_id, "run_step_breakdown")
    return stored if stored is not None else _run_step_breakdown(con, run_id)


def _run_step_breakdown(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return _frame(con, "SELECT * FROM run_step_breakdown($run_id)", {"run_id": run_id})


def compare_runs(con: duckdb.DuckDBPyConnection, run_before: str, run_after: str) -> dict[str, Any]:
    """Two runs side by side.

    Returns {"kinds": frame(kind, before_ms, after_ms, delta_ms, before_pct, after_pct,
    before_count, after_count, before_bytes, after_bytes)} where *_ms is the kind's cost per step (one
    finding per cause; consequences not added), *_pct its % of step time and *_bytes a memory
    finding's bytes (None for the others); {"memory": peak_allocated_/peak_reserved_ before/after:
    the highest over ranks and devices (memory_device_summary; None without [memory] events)}; and {"steps": frame(run,
    steps, mean_step_ms, compute_ms, comm_exposed_ms, memory_ms, idle_ms)} each run's mean step
    (run_step_breakdown: the mean over ranks of each rank's mean, steps over all ranks); and {"delta": {<part>_before, <part>_after, <part>_delta for
    mean_step_ms, compute_ms, comm_exposed_ms, memory_ms, idle_ms; speedup = before / after mean step,
    slowdown = after / before mean step}} (values None where a run has no steps).
    """
    kinds = _frame(con, """
        WITH costs AS (
            SELECT $before AS run_id, kind, cost_ns / 1e6 AS cost_ms, worst_pct, findings AS n, cost_bytes
            FROM run_kind_costs($before)
            UNION ALL
            SELECT $after, kind, cost_ns / 1e6, worst_pct, findings, cost_bytes FROM run_kind_costs($after)
        ),
        kinds AS (SELECT DISTINCT kind FROM costs)
        SELECT k.kind,
               coalesce(b.cost_ms, 0) AS before_ms, coalesce(a.cost_ms, 0) AS after_ms,
               coalesce(a.cost_ms, 0) - coalesce(b.cost_ms, 0) AS delta_ms,
               coalesce(b.worst_pct, 0) AS before_pct, coalesce(a.worst_pct, 0) AS after_pct,
               coalesce(b.n, 0) AS before_count, coalesce(a.n, 0) AS after_count,
               b.cost_bytes AS before_bytes, a.cost_bytes AS after_bytes
        FROM kinds k
        LEFT JOIN costs b ON b.kind = k.kind AND b.run_id = $before
        LEFT JOIN costs a ON a.kind = k.kind AND a.run_id = $after
        ORDER BY greatest(coalesce(b.cost_ms, 0), coalesce(a.cost_ms, 0)) DESC, k.kind
    """, {"before": run_before, "after": run_after})
    import pandas as pd

    both_runs = pd.concat([run_step_breakdown(con, run_id).assign(run=side)
                           for side, run_id in (("before", run_before), ("after", run_after))], ignore_index=True)
    steps = duckdb.query_df(both_runs, "both_runs", """
        SELECT run, steps, step_ns / 1e6 AS mean_step_ms, compute_ns / 1e6 AS compute_ms,
               comm_exposed_ns / 1e6 AS comm_exposed_ms, memory_ns / 1e6 AS memory_ms, idle_ns / 1e6 AS idle_ms
        FROM both_runs WHERE ranks > 0 ORDER BY run DESC""").df()
    parts = ("mean_step_ms", "compute_ms", "comm_exposed_ms", "memory_ms", "idle_ms")
    deltas = duckdb.query_df(steps, "steps", "SELECT " + ", ".join(
        f"max({p}) FILTER (WHERE run = 'before') AS {p}_before, max({p}) FILTER (WHERE run = 'after') AS {p}_after, "
        f"max({p}) FILTER (WHERE run = 'after') - max({p}) FILTER (WHERE run = 'before') AS {p}_delta"
        for p in parts) + ", max(mean_step_ms) FILTER (WHERE run = 'before') / "
        "nullif(max(mean_step_ms) FILTER (WHERE run = 'after'), 0) AS speedup, "
        "max(mean_step_ms) FILTER (WHERE run = 'after') / "
        "nullif(max(mean_step_ms) FILTER (WHERE run = 'before'), 0) AS slowdown FROM steps").fetchall()[0]
    names = [f"{p}_{w}" for p in parts for w in ("before", "after", "delta")] + ["speedup", "slowdown"]
    memory = con.execute("""
        SELECT max(peak_allocated_bytes) FILTER (WHERE run = 'before'), max(peak_allocated_bytes) FILTER (WHERE run = 'after'),
               max(peak_reserved_bytes) FILTER (WHERE run = 'before'), max(peak_reserved_bytes) FILTER (WHERE run = 'after')
        FROM (SELECT 'before' AS run, * FROM memory_device_summary($before)
              UNION ALL SELECT 'after', * FROM memory_device_summary($after))""",
                         {"before": run_before, "after": run_after}).fetchone()
    return {"kinds": kinds, "steps": steps, "delta": dict(zip(names, deltas)),
            "memory": dict(zip(("peak_allocated_before", "peak_allocated_after", "peak_reserved_before",
                                "peak_reserved_after"), memory))}


# --------------------------------------------------------------------------- operators and kernels

# How many rows a top-N table shows unless asked otherwise (dashboard and `python -m analyzers top`).
TOP_N_DEFAULT = 20


def _view_params(run_id: str, window: tuple[int, int] | None, rank: int | None, step: int | None) -> dict[str, Any]:
    """The window parameters every metrics/operators.sql view takes (a step wins over a time window)."""
    from analyzers.common import thresholds

    t0, t1 = (None, None) if window is None or step is not None else (int(window[0]), int(window[1]))
    return {"run_id": run_id, "t0": t0, "t1": t1, "rank": None if rank is None else int(rank),
            "step": None if step is None else int(step),
            "tc_patterns": list(thresholds.TENSOR_CORE_KERNEL_PATTERNS),
            "tc_ops": list(thresholds.TENSOR_CORE_ELIGIBLE_OPS)}


def _stored_whole_run(con: duckdb.DuckDBPyConnection, run_id: str, name: str, window: tuple[int, int] | None,
                      rank: int | None, step: int | None, by_rank: bool, limit: int | None) -> pd.DataFrame | None:
    """The stored table `name` for the page's default view (the whole run, all ranks summed: what
    PAGE_DEFAULTS stores), its first `limit` rows; None for any other view or when none is stored."""
    if window is not None or rank is not None or step is not None or by_rank:
        return None
    stored = page_defaults.read(con, run_id, name)
    return None if stored is None else _first(stored, limit)


def _first(frame: pd.DataFrame, limit: int | None) -> pd.DataFrame:
    """A stored table's first `limit` rows (it is stored in the query's order), as LIMIT gives them."""
    return frame if limit is None else frame.head(int(limit)).reset_index(drop=True)


def top_ops(con: duckdb.DuckDBPyConnection, run_id: str, window: tuple[int, int] | None = None,
            rank: int | None = None, step: int | None = None, by_rank: bool = False,
            limit: int | None = TOP_N_DEFAULT) -> pd.DataFrame:
    """The Operator view (metrics/operators.sql cpu_op_summary), by self time, in ms.

    window: (t0_ns, t1_ns), or a step number (host window per rank), or neither for the whole run;
    rank: one rank or None for all (by_rank: one row per rank and name instead of summed).
    Columns: rank, name, calls, total_ms, self_ms, mean_ms, self_pct, total_pct (of the step /
    window time), gpu_self_ms, gpu_total_ms, tc_pct (share of gpu_total on tensor cores; NULL
    without GPU work), tensor_core_eligible, window_ms.
    """
    stored = _stored_whole_run(con, run_id, "top_ops", window, rank, step, by_rank, limit)
    if stored is not None:
        return stored
    return _frame(con, """
        SELECT rank, name, calls, total_ns / 1e6 AS total_ms, self_ns / 1e6 AS self_ms, mean_ns / 1e6 AS mean_ms,
               self_pct, total_pct, gpu_self_ns / 1e6 AS gpu_self_ms, gpu_total_ns / 1e6 AS gpu_total_ms,
               100.0 * tc_gpu_total_ns / nullif(gpu_total_ns, 0) AS tc_pct, tensor_core_eligible,
               window_ns / 1e6 AS window_ms
        FROM cpu_op_summary($run_id, $t0, $t1, $rank, $step, $by_rank, $tc_patterns, $tc_ops)
        ORDER BY self_ns DESC, total_ns DESC, name, rank
        LIMIT $limit""", {**_view_params(run_id, window, rank, step), "by_rank": bool(by_rank),
                           "limit": None if limit is None else int(limit)})


def top_kernels(con: duckdb.DuckDBPyConnection, run_id: str, window: tuple[int, int] | None = None,
                rank: int | None = None, step: int | None = None, by_rank: bool = False,
                limit: int | None = TOP_N_DEFAULT) -> pd.DataFrame:
    """The Kernel view (metrics/operators.sql gpu_kernel_summary), by total time, in ms.

    Window, rank and by_rank as top_ops (a step is its GPU-clock window). Columns: rank, name,
    category, calls, total_ms, mean_ms, min_ms, max_ms, streams, busy_pct (of GPU busy time),
    step_pct (of the step / window time), tensor_core, fp32_cuda_core (a matmul that could use
    tensor cores and does not), family and dtype (lib/kernel_taxonomy.sql), busy_ms, window_ms.
    """
    stored = _stored_whole_run(con, run_id, "top_kernels", window, rank, step, by_rank, limit)
    if stored is not None:
        return stored
    return _frame(con, """
        SELECT rank, name, category, calls, total_ns / 1e6 AS total_ms, mean_ns / 1e6 AS mean_ms,
               min_ns / 1e6 AS min_ms, max_ns / 1e6 AS max_ms, streams, busy_pct, step_pct, tensor_core,
               fp32_cuda_core, family, dtype, busy_ns / 1e6 AS busy_ms, window_ns / 1e6 AS window_ms
        FROM gpu_kernel_summary($run_id, $t0, $t1, $rank, $step, $by_rank, $tc_patterns)
        ORDER BY total_ns DESC, name, rank
        LIMIT $limit""", {k: v for k, v in {**_view_params(run_id, window, rank, step), "by_rank": bool(by_rank),
                                              "limit": None if limit is None else int(limit)}.items()
                          if k != "tc_ops"})


def op_perf(con: duckdb.DuckDBPyConnection, run_id: str, limit: int | None = TOP_N_DEFAULT) -> pd.DataFrame:
    """The per-op performance model over the whole run (metrics/op_perf.sql op_perf): per op name and
    input shapes, FLOPs and bytes per call, achieved TFLOP/s and TB/s, % of the GPU's peak (gpu_peaks)
    and the time above the roofline; by GPU time. Empty when the trace has no recorded shapes.
    Columns: name, category, shape, dtype, calls, gflops, mb, gpu_ms, mean_us, tflops, tbps,
    flops_per_byte, gpu, peak_tflops, peak_tbps, pct_peak_flops, pct_peak_bw, bound, roofline_ms, lost_ms."""
    stored = page_defaults.read(con, run_id, "op_perf")
    if stored is not None:
        return _first(stored, limit)
    return _frame(con, "SELECT * FROM op_perf($run_id) ORDER BY gpu_ms DESC, name, shape LIMIT $limit",
                  {"run_id": run_id, "limit": None if limit is None else int(limit)})


_KERNEL_PERF_SQL = """SELECT name, tflops, tbps, occupancy_pct, blocks_per_sm, warps_per_sm, registers_per_thread,
                            shared_memory_bytes FROM kernel_perf($run_id) ORDER BY name"""


def _plain(value: Any) -> Any:
    """A stored table's value as the query's own rows give it (numpy scalars as Python's)."""
    return value.item() if hasattr(value, "item") else value


def perf_by_name(con: duckdb.DuckDBPyConnection, run_id: str, of_kind: str) -> dict[str, dict[str, Any]]:
    """{name: {tflops, tbps, ...}} over the whole run: per kernel name (of_kind 'kernels',
    op_perf.sql kernel_perf: achieved rates and occupancy columns) or per op name ('ops': op_perf's
    shapes together). A name the model does not cover has none."""
    if of_kind == "kernels":
        stored = page_defaults.read(con, run_id, "kernel_perf")
        if stored is not None:
            values = stored.astype(object).where(stored.notna(), None)
            return {row[0]: {c: _plain(v) for c, v in zip(values.columns[1:], row[1:])}
                    for row in values.itertuples(index=False, name=None)}
        sql = _KERNEL_PERF_SQL
    else:
        sql = """SELECT name, sum(gflops * calls) / sum(gpu_ms) AS tflops, sum(mb * calls) * 1048576 / sum(gpu_ms) / 1e9 AS tbps,
                        sum(lost_ms) AS lost_ms FROM op_perf($run_id) GROUP BY name"""
    cur = con.execute(sql, {"run_id": run_id})
    columns = [d[0] for d in cur.description]
    return {row[0]: dict(zip(columns[1:], row[1:])) for row in cur.fetchall()}


def top_modules(con: duckdb.DuckDBPyConnection, run_id: str, window: tuple[int, int] | None = None,
                rank: int | None = None, step: int | None = None, by_rank: bool = False,
                limit: int | None = TOP_N_DEFAULT) -> pd.DataFrame:
    """Time per module path (nn.Module events of with_modules/with_stack traces, record_function
    ranges; metrics/operators.sql module_summary), by total time; empty when the trace has neither.
    Columns: rank, path, name, source ('module' | 'annotation'), depth, calls, total_ms, gpu_total_ms,
    total_pct, window_ms."""
    stored = _stored_whole_run(con, run_id, "top_modules", window, rank, step, by_rank, limit)
    if stored is not None:
        return stored
    params = _view_params(run_id, window, rank, step)
    return _frame(con, """
        SELECT rank, path, name, source, depth, calls, total_ns / 1e6 AS total_ms, gpu_total_ns / 1e6 AS gpu_total_ms,
               total_pct, window_ns / 1e6 AS window_ms
        FROM module_summary($run_id, $t0, $t1, $rank, $step, $by_rank)
        ORDER BY total_ns DESC, path, rank
        LIMIT $limit""", {k: params[k] for k in ("run_id", "t0", "t1", "rank", "step")}
        | {"by_rank": bool(by_rank), "limit": None if limit is None else int(limit)})


def operator_diff(con: duckdb.DuckDBPyConnection, run_before: str, run_after: str, of_kind: str = "kernels",
                  limit: int | None = TOP_N_DEFAULT) -> pd.DataFrame:
    """Per kernel name (of_kind 'kernels'), CPU op name ('ops') or kernel family ('families': gemm,
    attention, conv, norm, elementwise, comm, ...; lines up runs on different GPU vendors), the two
    runs' whole-run time per step (metrics/operators.sql operator_diff), largest change first.
    Columns: name, before_ms, after_ms, delta_ms, before_calls, after_calls, delta_calls (per step),
    tensor_core (kernels: on tensor cores; ops: tensor-core eligible)."""
    if of_kind not in ("kernels", "ops", "families"):
        raise ValueError(f"of_kind must be 'kernels', 'ops' or 'families', not {of_kind!r}")
    import pandas as pd

    params = _view_params(run_before, None, None, None)
    sides = pd.concat([operator_sides(con, run, of_kind).assign(side=side)
                       for side, run in (("before", run_before), ("after", run_after))], ignore_index=True)
    steps = {side: ensure_loaded(con).execute("SELECT steps FROM run_step_count(?)", [run]).fetchall()[0][0]
             for side, run in (("before", run_before), ("after", run_after))}
    con.register("operator_diff_sides", sides)
    try:
        return _frame(con, """
            SELECT * FROM operator_diff('operator_diff_sides', $before_steps, $after_steps, $of_kind, $tc_patterns, $tc_ops)
            ORDER BY abs(delta_ms) DESC, greatest(before_ms, after_ms) DESC, name
            LIMIT $limit""", {"before_steps": steps["before"], "after_steps": steps["after"], "of_kind": of_kind,
                               "tc_patterns": params["tc_patterns"], "tc_ops": params["tc_ops"],
                               "limit": None if limit is None else int(limit)})
    finally:
        con.unregister("operator_diff_sides")


def operator_sides(con: duckdb.DuckDBPyConnection, run_id: str, of_kind: str) -> pd.DataFrame:
    """One run's side of operator_diff (metrics/operators.sql operator_sides): name, calls, total_ns;
    the kernel and family sides stored by the analysis are read back."""
    if of_kind in ("kernels", "families"):
        stored = page_defaults.read(con, run_id, f"operator_sides_{of_kind}")
        if stored is not None:
            return stored
    params = _view_params(run_id, None, None, None)
    return _frame(con, "SELECT * FROM operator_sides($run_id, $of_kind, $tc_patterns, $tc_ops) ORDER BY name",
                  {"run_id": run_id, "of_kind": of_kind, "tc_patterns": params["tc_patterns"],
                   "tc_ops": params["tc_ops"]})


# --------------------------------------------------------------------------- stored page tables

# The whole-run tables the pages open on, computed by the queries above with the whole run's
# parameters and every row (the pages take their first rows): stored by each analysis
# (store_page_defaults), read back by those queries.
PAGE_DEFAULTS: dict[str, Any] = {
    "step_breakdown": lambda con, run_id: _step_breakdown(con, run_id),
    "top_ops": lambda con, run_id: top_ops(con, run_id, limit=None),
    "top_kernels": lambda con, run_id: top_kernels(con, run_id, limit=None),
    "top_modules": lambda con, run_id: top_modules(con, run_id, limit=None),
    "kernel_perf": lambda con, run_id: _frame(con, _KERNEL_PERF_SQL, {"run_id": run_id}),
    "op_perf": lambda con, run_id: op_perf(con, run_id, limit=None),
    "operator_sides_kernels": lambda con, run_id: operator_sides(con, run_id, "kernels"),
    "operator_sides_families": lambda con, run_id: operator_sides(con, run_id, "families"),
    "run_step_breakdown": lambda con, run_id: _run_step_breakdown(con, run_id),
}


def store_page_defaults(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Compute PAGE_DEFAULTS on `con` (inside the analysis, while the run's views are cached) and
    store them for the run, replacing the previous analysis's; each query's result goes straight
    to a Parquet file (_PARQUET_SINK)."""
    page_defaults.write(con, run_id, {})           # computed afresh, not read back from an older analysis
    tables = {}
    with tempfile.TemporaryDirectory(prefix="tracedoctor-pages-") as folder:
        for name, compute in PAGE_DEFAULTS.items():
            path = os.path.join(folder, f"{name}.parquet")
            token = _PARQUET_SINK.set(path)
            try:
                compute(con, run_id)
            finally:
                _PARQUET_SINK.reset(token)
            with open(path, "rb") as written:
                tables[name] = written.read()
    page_defaults.write(con, run_id, tables)
