-- requires: lib/steps.sql lib/gpu_steps.sql lib/gpu_activity.sql lib/intervals.sql
-- Operator and kernel views: top CPU ops, GPU kernels and module scopes by time, what the PyTorch
-- Profiler TensorBoard plugin's Operator and Kernel views showed, and their diff between two runs
-- (HTA's TraceDiff). The dashboard's "Operators & kernels" page, Compare and `python -m analyzers
-- top` read these (analyzers/read/queries.py).
--
-- Every view covers a window, the same parameters throughout:
--   only_rank   a rank, or NULL for every rank
--   only_step   a step number (steps(run): ProfilerStep#N or the inferred iteration): host ops
--               are read in its host window, GPU work in its GPU-clock window (gpu_steps), per rank
--   t0_ns, t1_ns  else a time window [t0_ns, t1_ns) on every rank
--   all NULL    the whole run, counted as every per-step figure is (rank_step_costs): host ops
--               starting in the rank's host steps (host_step_windows), counted GPU work
--               (gpu_activity.counted) clipped to its steps on the GPU clock (gpu_steps); a rank
--               without steps counts everything. Shares are of the steps' time (host: the host
--               steps, else the rank's host span; GPU: the gpu_steps windows, else the GPU span)
-- by_rank      TRUE: one row per rank and name; FALSE: summed over the ranks (rank NULL)


-- host_view_windows(run, t0_ns, t1_ns, only_rank, only_step): per rank, the host time range a
-- view covers (NULL bounds: unbounded, the whole run, whose views keep only what starts in the
-- rank's host steps) and the time its shares are of (window_ns: the whole run's is the rank's
-- step time, or its host span, first to last host event, on a rank without steps).
-- Columns: rank, start_ns, end_ns, window_ns, whole_run
CREATE OR REPLACE MACRO host_view_windows(run, t0_ns, t1_ns, only_rank, only_step) AS TABLE
WITH rank_list AS (
    SELECT rank FROM ranks WHERE run_id = run AND (only_rank IS NULL OR rank = only_rank)
), step_time AS (
    SELECT rank, sum(dur_ns) AS step_ns FROM steps(run)
    WHERE only_step IS NULL AND (t0_ns IS NULL OR t1_ns IS NULL) GROUP BY rank
), host_span AS (
    SELECT rank, max(ts_ns + dur_ns) - min(ts_ns) AS span_ns FROM events
    WHERE run_id = run AND only_step IS NULL AND (t0_ns IS NULL OR t1_ns IS NULL)
      AND kind IN ('cpu_op', 'user_annotation', 'python_function', 'runtime', 'driver')
      AND dur_ns IS NOT NULL AND rank NOT IN (SELECT rank FROM step_time)
    GROUP BY rank
)
SELECT s.rank, s.start_ns, s.end_ns, s.dur_ns AS window_ns, FALSE AS whole_run
FROM steps(run) s JOIN rank_list r ON r.rank = s.rank
WHERE only_step IS NOT NULL AND s.step = only_step
UNION ALL
SELECT rank, t0_ns, t1_ns, t1_ns - t0_ns, FALSE FROM rank_list
WHERE only_step IS NULL AND t0_ns IS NOT NULL AND t1_ns IS NOT NULL
UNION ALL
SELECT r.rank, NULL::BIGINT, NULL::BIGINT, coalesce(s.step_ns, h.span_ns), TRUE
FROM rank_list r LEFT JOIN step_time s ON s.rank = r.rank LEFT JOIN host_span h ON h.rank = r.rank
WHERE only_step IS NULL AND (t0_ns IS NULL OR t1_ns IS NULL);


-- gpu_view_windows(run, t0_ns, t1_ns, only_rank, only_step): host_view_windows on the GPU clock:
-- a step is its gpu_steps window; the whole run's step time is the rank's gpu_steps windows
-- together (step_breakdown's step time; the GPU span on a rank without steps).
-- Columns: rank, start_ns, end_ns, window_ns, whole_run
CREATE OR REPLACE MACRO gpu_view_windows(run, t0_ns, t1_ns, only_rank, only_step) AS TABLE
WITH rank_list AS (
    SELECT rank FROM ranks WHERE run_id = run AND (only_rank IS NULL OR rank = only_rank)
), step_time AS (
    SELECT rank, sum(dur_ns) AS step_ns FROM gpu_steps(run)
    WHERE only_step IS NULL AND (t0_ns IS NULL OR t1_ns IS NULL) GROUP BY rank
)
SELECT g.rank, g.start_ns, g.end_ns, g.dur_ns AS window_ns, FALSE AS whole_run
FROM gpu_steps(run) g JOIN rank_list r ON r.rank = g.rank
WHERE only_step IS NOT NULL AND g.step = only_step
UNION ALL
SELECT rank, t0_ns, t1_ns, t1_ns - t0_ns, FALSE FROM rank_list
WHERE only_step IS NULL AND t0_ns IS NOT NULL AND t1_ns IS NOT NULL
UNION ALL
SELECT r.rank, NULL::BIGINT, NULL::BIGINT, s.step_ns, TRUE
FROM rank_list r LEFT JOIN step_time s ON s.rank = r.rank
WHERE only_step IS NULL AND (t0_ns IS NULL OR t1_ns IS NULL);


-- is_tensor_core_eligible_op(name, ops): a CPU op whose work can run on tensor cores (a matmul,
-- convolution, RNN cell or attention): its name is in `ops` (thresholds.TENSOR_CORE_ELIGIBLE_OPS),
-- an autograd node's version suffix ignored (MmBackward0 is MmBackward).
CREATE OR REPLACE MACRO is_tensor_core_eligible_op(name, ops) AS
    list_contains(ops, regexp_replace(name, '(Backward)\d+$', '\1'));


-- launched_within(ranges, points): per range of a thread, the GPU time launched by the calls
-- starting inside it: start_ns <= t < end_ns, event_depth's order (a call at a range's first
-- instant is inside it, one at its end is not; a zero-length range holds none).
-- ranges: the NAME of a table (grp, id, start_ns, end_ns; rows without an end are left out);
-- points: the NAME of a table (grp, t, gpu_ns, tc_ns) of the launch calls.
-- Columns: id, gpu_ns, tc_ns (sums, ns; 0 when none)
CREATE OR REPLACE MACRO launched_within(ranges, points) AS TABLE
WITH at_instant AS (
    SELECT grp, t, sum(gpu_ns) AS gpu_ns, sum(tc_ns) AS tc_ns FROM query_table(points) GROUP BY grp, t
), running AS MATERIALIZED (
    SELECT grp, t, sum(gpu_ns) OVER w AS gpu_cum, sum(tc_ns) OVER w AS tc_cum
    FROM at_instant WINDOW w AS (PARTITION BY grp ORDER BY t ROWS UNBOUNDED PRECEDING)
), r AS (
    SELECT grp, id, start_ns, end_ns FROM query_table(ranges) WHERE end_ns IS NOT NULL
)
SELECT r.id, coalesce(e.gpu_cum, 0) - coalesce(b.gpu_cum, 0) AS gpu_ns, coalesce(e.tc_cum, 0) - coalesce(b.tc_cum, 0) AS tc_ns
FROM r
ASOF LEFT JOIN running e ON e.grp = r.grp AND e.t < r.end_ns
ASOF LEFT JOIN running b ON b.grp = r.grp AND b.t < r.start_ns;


-- cpu_op_instances(run, t0_ns, t1_ns, only_rank, only_step, tc_patterns): every cpu_op event
-- starting in the window (the whole run: in one of the rank's host steps, host_step_windows),
-- with its self time and the GPU work it launched. ProfilerStep#N
-- ranges (a cpu_op in many traces) are the steps, not ops: left out.
-- Nesting is lib/intervals.sql event_depth's on the same rank and thread, with the launch calls of
-- launches(run) as points: each node has the depth of the ops open around it; its parent is the
-- latest op at the depth above that started before it (ASOF join), kept only when it still
-- encloses the node's start.
-- Columns:
--   rank, name, start_ns, dur_ns, depth (1: no op around it)
--   self_ns        dur_ns minus its direct child ops (each cut to the parent's end), floored at 0
--   gpu_self_ns    GPU time (kernels, copies, sets) launched by calls directly inside the op
--   gpu_total_ns   GPU time launched by calls anywhere inside it, its child ops' included
--   tc_gpu_total_ns  the part of gpu_total_ns on tensor-core kernels (is_tensor_core_kernel)
CREATE OR REPLACE MACRO cpu_op_instances(run, t0_ns, t1_ns, only_rank, only_step, tc_patterns) AS TABLE
WITH bounds AS (
    SELECT rank, coalesce(start_ns, -9223372036854775807) AS w0, coalesce(end_ns, 9223372036854775807) AS w1,
           whole_run
    FROM host_view_windows(run, t0_ns, t1_ns, only_rank, only_step)
), windows AS MATERIALIZED (
    -- horizon: where the last op starting in the window ends (its children run until then)
    SELECT b.rank, b.w0, b.w1, b.whole_run,
           CASE WHEN b.w1 = 9223372036854775807 THEN b.w1
                ELSE greatest(b.w1, (SELECT max(e.ts_ns + e.dur_ns) FROM events e
                                     WHERE e.run_id = run AND e.rank = b.rank AND e.kind = 'cpu_op'
                                       AND e.ts_ns >= b.w0 AND e.ts_ns < b.w1)) END AS horizon
    FROM bounds b
), ops AS MATERIALIZED (
    -- the ops overlapping the window or its horizon: the ops starting in it, their ancestors and children
    SELECT row_number() OVER () AS op_id, e.rank, hash(e.rank, coalesce(e.tid, '')) AS thread, e.name, e.ts_ns AS start_ns,
           e.ts_ns + e.dur_ns AS end_ns, e.dur_ns, e.ts_ns >= w.w0 AND e.ts_ns < w.w1 AS starts_inside,
           w.whole_run
    FROM events e JOIN windows w ON w.rank = e.rank
    WHERE e.run_id = run AND e.kind = 'cpu_op' AND e.dur_ns IS NOT NULL AND e.dur_ns >= 0
      AND e.ts_ns < w.horizon AND e.ts_ns + e.dur_ns >= w.w0
      AND NOT is_profiler_step(e.name)
), whole_run_starts AS (
    -- the whole run: each op's start (1 ns) against its rank's host steps
    SELECT op_id, rank AS grp, start_ns, start_ns + 1 AS end_ns FROM ops WHERE whole_run
), host_steps AS (
    SELECT grp, start_ns, end_ns FROM host_step_windows(run)
    WHERE EXISTS (SELECT 1 FROM windows WHERE whole_run)
), starts_in_steps AS (
    SELECT op_id FROM interval_clip('whole_run_starts', 'host_steps')
), launch_points AS MATERIALIZED (
    SELECT -row_number() OVER () AS point_id, hash(l.rank, coalesce(l.launch_tid, '')) AS thread,
           l.launch_start_ns AS t, l.gpu_dur_ns,
           CASE WHEN l.gpu_kind = 'kernel' AND is_tensor_core_kernel(l.gpu_name, tc_patterns)
                THEN l.gpu_dur_ns ELSE 0 END AS tc_ns
    FROM launches(run) l JOIN windows w ON w.rank = l.rank
    WHERE l.launch_start_ns >= w.w0 AND l.launch_start_ns < w.horizon
), thread_events AS (
    -- the ops and, as points, the launch calls (negative ids), nested by lib/intervals.sql event_depth
    SELECT thread AS grp, op_id AS id, start_ns, end_ns FROM ops
    UNION ALL
    SELECT thread, point_id, t, NULL FROM launch_points
), nested AS MATERIALIZED (
    SELECT grp AS thread, id, depth AS parent_depth, seq FROM event_depth('thread_events')
), op_starts AS MATERIALIZED (
    SELECT n.thread, n.seq, n.parent_depth, n.parent_depth + 1 AS depth, o.op_id, o.start_ns, o.end_ns
    FROM nested n JOIN ops o ON o.op_id = n.id
), children AS (
    -- op starts and launch points inside another op, each with that op (its parent)
    SELECT c.is_op, c.t, c.end_ns AS child_end_ns, c.gpu_ns, p.op_id AS parent_id, p.end_ns AS parent_end_ns
    FROM (SELECT thread, seq, parent_depth, true AS is_op, start_ns AS t, end_ns, 0 AS gpu_ns
          FROM op_starts WHERE parent_depth > 0
          UNION ALL
          SELECT n.thread, n.seq, n.parent_depth, false, l.t, NULL, l.gpu_dur_ns
          FROM nested n JOIN launch_points l ON l.point_id = n.id WHERE n.parent_depth > 0) c
    ASOF JOIN op_starts p ON p.thread = c.thread AND p.depth = c.parent_depth AND c.seq > p.seq
    WHERE p.end_ns >= c.t
), child_time AS (
    SELECT parent_id AS op_id,
           coalesce(sum(least(child_end_ns, parent_end_ns) - t) FILTER (WHERE is_op), 0) AS child_ns,
           coalesce(sum(gpu_ns) FILTER (WHERE NOT is_op), 0) AS gpu_self_ns
    FROM children
    GROUP BY parent_id
), launch_sums AS (
    SELECT thread AS grp, t, gpu_dur_ns AS gpu_ns, tc_ns FROM launch_points
), launched_inside AS (
    -- GPU work launched between an op's start and end
    SELECT id AS op_id, gpu_ns AS gpu_total_ns, tc_ns AS tc_gpu_total_ns
    FROM launched_within('thread_events', 'launch_sums')
)
SELECT o.rank, o.name, o.start_ns, o.dur_ns, s.depth,
       greatest(o.dur_ns - coalesce(c.child_ns, 0), 0) AS self_ns,
       coalesce(c.gpu_self_ns, 0)::BIGINT AS gpu_self_ns,
       coalesce(l.gpu_total_ns, 0)::BIGINT AS gpu_total_ns,
       coalesce(l.tc_gpu_total_ns, 0)::BIGINT AS tc_gpu_total_ns
FROM ops o
JOIN op_starts s ON s.op_id = o.op_id
LEFT JOIN child_time c ON c.op_id = o.op_id
LEFT JOIN launched_inside l ON l.op_id = o.op_id
WHERE o.starts_inside AND (NOT o.whole_run OR o.op_id IN (SELECT op_id FROM starts_in_steps));


-- cpu_op_summary(run, t0_ns, t1_ns, only_rank, only_step, by_rank, tc_patterns, tc_ops): the
-- Operator view, one row per op name (and rank with by_rank).
-- Columns:
--   rank (NULL unless by_rank), name, calls, total_ns (inclusive; an op nested in one of the same
--   name counts in both, as in the TensorBoard plugin), self_ns, mean_ns (total / calls),
--   self_pct    self_ns / window_ns x 100: its share of the step time (of the window's time per
--               rank for a time window)
--   total_pct   total_ns / window_ns x 100
--   gpu_self_ns, gpu_total_ns, tc_gpu_total_ns   (cpu_op_instances)
--   tensor_core_eligible  is_tensor_core_eligible_op, where the op launched GPU work
--   window_ns   the step time (window time) of the ranks read; steps: how many steps that holds
--               (a step window: 1 per rank; a time window: NULL)
CREATE OR REPLACE MACRO cpu_op_summary(run, t0_ns, t1_ns, only_rank, only_step, by_rank, tc_patterns, tc_ops) AS TABLE
WITH windows AS (
    SELECT CASE WHEN by_rank THEN rank END AS grp_rank, sum(window_ns) AS window_ns
    FROM host_view_windows(run, t0_ns, t1_ns, only_rank, only_step) GROUP BY ALL
), per_name AS (
    SELECT CASE WHEN by_rank THEN rank END AS grp_rank, name, count(*) AS calls, sum(dur_ns) AS total_ns,
           sum(self_ns) AS self_ns, sum(gpu_self_ns) AS gpu_self_ns, sum(gpu_total_ns) AS gpu_total_ns,
           sum(tc_gpu_total_ns) AS tc_gpu_total_ns
    FROM cpu_op_instances(run, t0_ns, t1_ns, only_rank, only_step, tc_patterns)
    GROUP BY ALL
)
SELECT p.grp_rank AS rank, p.name, p.calls, p.total_ns::BIGINT AS total_ns, p.self_ns::BIGINT AS self_ns,
       p.total_ns / p.calls AS mean_ns,
       100.0 * p.self_ns / nullif(w.window_ns, 0) AS self_pct,
       100.0 * p.total_ns / nullif(w.window_ns, 0) AS total_pct,
       p.gpu_self_ns::BIGINT AS gpu_self_ns, p.gpu_total_ns::BIGINT AS gpu_total_ns,
       p.tc_gpu_total_ns::BIGINT AS tc_gpu_total_ns,
       -- a CPU op that ran on the CPU (no GPU work under it) has no tensor cores to be eligible for
       is_tensor_core_eligible_op(p.name, tc_ops) AND coalesce(p.gpu_total_ns, 0) > 0 AS tensor_core_eligible,
       w.window_ns::BIGINT AS window_ns
FROM per_name p LEFT JOIN windows w ON w.grp_rank IS NOT DISTINCT FROM p.grp_rank;


-- gpu_kernel_instances(run, t0_ns, t1_ns, only_rank, only_step): the GPU activity (kernels,
-- copies, sets) of the window: cut to it (as step_breakdown cuts to a step); the whole run reads
-- the counted activity cut to the rank's steps on the GPU clock (gpu_steps: its GPU span on a
-- rank without steps), as rank_step_costs, so that its totals over the step count are per step.
-- Zero-length activity lies in no whole-run window (interval_clip).
-- Columns: rank, kind, name, category, stream, dur_ns (the whole activity), start_ns, end_ns (cut)
CREATE OR REPLACE MACRO gpu_kernel_instances(run, t0_ns, t1_ns, only_rank, only_step) AS TABLE
WITH views AS MATERIALIZED (
    SELECT * FROM gpu_view_windows(run, t0_ns, t1_ns, only_rank, only_step)
), whole_run_activity AS (
    SELECT g.rank AS grp, g.rank, g.kind, g.name, g.category, g.stream, g.dur_ns, g.start_ns, g.end_ns
    FROM gpu_activity(run) g JOIN views w ON w.rank = g.rank
    WHERE w.whole_run AND g.counted
), step_windows AS (
    SELECT rank AS grp, start_ns, end_ns FROM gpu_steps(run)
    WHERE rank IN (SELECT rank FROM views WHERE whole_run)
)
SELECT g.rank, g.kind, g.name, g.category, g.stream, g.dur_ns,
       greatest(g.start_ns, w.start_ns) AS start_ns, least(g.end_ns, w.end_ns) AS end_ns
FROM gpu_activity(run) g JOIN views w ON w.rank = g.rank
WHERE NOT w.whole_run AND g.end_ns > w.start_ns AND g.start_ns < w.end_ns
UNION ALL
SELECT rank, kind, name, category, stream, dur_ns, start_ns, end_ns
FROM interval_clip('whole_run_activity', 'step_windows');


-- gpu_kernel_summary(run, t0_ns, t1_ns, only_rank, only_step, by_rank, tc_patterns): the Kernel
-- view, one row per kernel name (and rank with by_rank).
-- Columns:
--   rank (NULL unless by_rank), name, category (gpu_activity's), calls, total_ns (inside the
--   window), mean_ns, min_ns, max_ns (of whole kernels), streams (how many streams ran it)
--   busy_pct     total_ns / GPU busy time x 100 (busy: union of all GPU activity in the window; the
--                whole run's is step_breakdown's gpu_busy over the steps, of counted activity)
--   step_pct     total_ns / window_ns x 100 (share of the step time, or of the window's time)
--   tensor_core  is_tensor_core_kernel; fp32_cuda_core  is_fp32_simt_matmul: a matmul or
--                convolution that could use tensor cores and does not (the fp32_matmul finding)
--   family, dtype  kernel_family, kernel_dtype (lib/kernel_taxonomy.sql)
--   busy_ns, window_ns   the denominators of the ranks read
CREATE OR REPLACE MACRO gpu_kernel_summary(run, t0_ns, t1_ns, only_rank, only_step, by_rank, tc_patterns) AS TABLE
WITH activity AS MATERIALIZED (
    SELECT * FROM gpu_kernel_instances(run, t0_ns, t1_ns, only_rank, only_step)
), busy_intervals AS (
    SELECT rank AS grp, start_ns, end_ns FROM activity
), busy AS (
    SELECT CASE WHEN by_rank THEN grp END AS grp_rank, sum(union_ns) AS busy_ns
    FROM interval_union_total('busy_intervals') GROUP BY ALL
), windows AS (
    SELECT CASE WHEN by_rank THEN rank END AS grp_rank, sum(window_ns) AS window_ns
    FROM gpu_view_windows(run, t0_ns, t1_ns, only_rank, only_step) GROUP BY ALL
), per_name AS (
    SELECT CASE WHEN by_rank THEN rank END AS grp_rank, name, any_value(category) AS category, count(*) AS calls,
           sum(end_ns - start_ns) AS total_ns, avg(dur_ns) AS mean_ns, min(dur_ns) AS min_ns, max(dur_ns) AS max_ns,
           count(DISTINCT (rank, stream)) AS streams
    FROM activity WHERE kind = 'kernel'
    GROUP BY ALL
)
SELECT p.grp_rank AS rank, p.name, p.category, p.calls, p.total_ns::BIGINT AS total_ns, p.mean_ns,
       p.min_ns, p.max_ns, p.streams,
       100.0 * p.total_ns / nullif(b.busy_ns, 0) AS busy_pct,
       100.0 * p.total_ns / nullif(w.window_ns, 0) AS step_pct,
       is_tensor_core_kernel(p.name, tc_patterns) AS tensor_core,
       is_fp32_simt_matmul(p.name) AS fp32_cuda_core,
       kernel_family(p.name) AS family, kernel_dtype(p.name) AS dtype,
       b.busy_ns::BIGINT AS busy_ns, w.window_ns::BIGINT AS window_ns
FROM per_name p
LEFT JOIN busy b ON b.grp_rank IS NOT DISTINCT FROM p.grp_rank
LEFT JOIN windows w ON w.grp_rank IS NOT DISTINCT FROM p.grp_rank;


-- module_summary(run, t0_ns, t1_ns, only_rank, only_step, by_rank): time per module path, from
-- with_modules / with_stack traces' python_function events 'nn.Module: Foo_0' and from
-- record_function ranges (user_annotation, ProfilerStep#N left out). A scope's path is the scopes
-- around it on the same rank and thread ('DistributedDataParallel.forward/ResNet_0/Conv2d_1');
-- nested by event_depth (lib/intervals.sql); the whole run, as in cpu_op_instances, counts the scopes starting
-- in the rank's host steps. No rows when the trace has neither.
-- Columns:
--   rank (NULL unless by_rank), path, name (its last part), source ('module' | 'annotation'),
--   depth, calls, total_ns (inclusive host time), gpu_total_ns (GPU work launched inside it),
--   total_pct (of the step / window time), window_ns
CREATE OR REPLACE MACRO module_summary(run, t0_ns, t1_ns, only_rank, only_step, by_rank) AS TABLE
WITH RECURSIVE windows AS MATERIALIZED (
    SELECT rank, coalesce(start_ns, -9223372036854775807) AS w0, coalesce(end_ns, 9223372036854775807) AS w1,
           window_ns, whole_run
    FROM host_view_windows(run, t0_ns, t1_ns, only_rank, only_step)
), scopes AS MATERIALIZED (
    -- ids in a fixed order: of two scopes with the same bounds, event_depth nests the later id inside
    SELECT row_number() OVER (ORDER BY e.rank, e.tid, e.ts_ns, e.dur_ns DESC, e.name) AS scope_id,
           e.rank, coalesce(e.tid, '') AS tid,
           CASE WHEN e.kind = 'python_function' THEN substr(e.name, length('nn.Module: ') + 1) ELSE e.name END AS name,
           CASE WHEN e.kind = 'python_function' THEN 'module' ELSE 'annotation' END AS source,
           e.ts_ns AS start_ns, e.ts_ns + e.dur_ns AS end_ns, e.dur_ns,
           e.ts_ns >= w.w0 AND e.ts_ns < w.w1 AS starts_inside, w.whole_run
    FROM events e JOIN windows w ON w.rank = e.rank
    WHERE e.run_id = run AND e.dur_ns IS NOT NULL AND e.dur_ns > 0
      AND e.ts_ns < w.w1 AND e.ts_ns + e.dur_ns >= w.w0
      AND ((e.kind = 'python_function' AND starts_with(e.name, 'nn.Module: '))
           OR (e.kind = 'user_annotation'
               AND NOT is_profiler_step(e.name)))
), whole_run_starts AS (
    SELECT scope_id, rank AS grp, start_ns, start_ns + 1 AS end_ns FROM scopes WHERE whole_run
), host_steps AS (
    SELECT grp, start_ns, end_ns FROM host_step_windows(run)
    WHERE EXISTS (SELECT 1 FROM windows WHERE whole_run)
), starts_in_steps AS (
    SELECT scope_id FROM interval_clip('whole_run_starts', 'host_steps')
), thread_scopes AS (
    SELECT hash(rank, tid) AS grp, scope_id AS id, start_ns, end_ns FROM scopes
), starts AS MATERIALIZED (
    -- nesting on each rank and thread: lib/intervals.sql event_depth
    SELECT sc.rank, sc.tid, d.seq, d.depth AS parent_depth, d.depth + 1 AS depth, sc.scope_id,
           sc.start_ns AS t, sc.end_ns
    FROM event_depth('thread_scopes') d JOIN scopes sc ON sc.scope_id = d.id
), parents AS (
    SELECT c.scope_id, p.scope_id AS parent_id
    FROM (SELECT * FROM starts WHERE parent_depth > 0) c
    ASOF JOIN starts p ON p.rank = c.rank AND p.tid = c.tid AND p.depth = c.parent_depth AND c.seq > p.seq
    WHERE p.end_ns >= c.t
), paths AS (
    -- scopes without a parent start their path; each level appends its name (bounded by the depth)
    SELECT s.scope_id, s.name AS path, 1 AS level
    FROM scopes s WHERE s.scope_id NOT IN (SELECT scope_id FROM parents)
    UNION ALL
    SELECT pr.scope_id, p.path || '/' || s.name, p.level + 1
    FROM paths p JOIN parents pr ON pr.parent_id = p.scope_id JOIN scopes s ON s.scope_id = pr.scope_id
), launch_points AS (
    SELECT hash(l.rank, coalesce(l.launch_tid, '')) AS grp, l.launch_start_ns AS t, l.gpu_dur_ns AS gpu_ns, 0 AS tc_ns
    FROM launches(run) l JOIN windows w ON w.rank = l.rank
    WHERE l.launch_start_ns >= w.w0
      AND EXISTS (SELECT 1 FROM scopes)
), gpu_inside AS (
    -- GPU time launched inside each scope
    SELECT id AS scope_id, gpu_ns AS gpu_total_ns FROM launched_within('thread_scopes', 'launch_points')
), per_path AS (
    SELECT CASE WHEN by_rank THEN s.rank END AS grp_rank, p.path, any_value(s.name) AS name,
           any_value(s.source) AS source, any_value(p.level) AS depth, count(*) AS calls,
           sum(s.dur_ns) AS total_ns, sum(coalesce(g.gpu_total_ns, 0)) AS gpu_total_ns
    FROM scopes s JOIN paths p ON p.scope_id = s.scope_id LEFT JOIN gpu_inside g ON g.scope_id = s.scope_id
    WHERE s.starts_inside AND (NOT s.whole_run OR s.scope_id IN (SELECT scope_id FROM starts_in_steps))
    GROUP BY ALL
), window_time AS (
    SELECT CASE WHEN by_rank THEN rank END AS grp_rank, sum(window_ns) AS window_ns FROM windows GROUP BY ALL
)
SELECT p.grp_rank AS rank, p.path, p.name, p.source, p.depth, p.calls, p.total_ns::BIGINT AS total_ns,
       p.gpu_total_ns::BIGINT AS gpu_total_ns, 100.0 * p.total_ns / nullif(w.window_ns, 0) AS total_pct,
       w.window_ns::BIGINT AS window_ns
FROM per_path p LEFT JOIN window_time w ON w.grp_rank IS NOT DISTINCT FROM p.grp_rank;


-- run_step_count(run): how many steps the run's ranks hold together, a rank without steps
-- counting 1 (rank_breakdown's steps_divisor, summed): what "per step" divides a run's total by.
-- Columns: steps
CREATE OR REPLACE MACRO run_step_count(run) AS TABLE
SELECT sum(greatest(coalesce(s.n, 0), 1)) AS steps
FROM ranks r LEFT JOIN (SELECT rank, count(*) AS n FROM steps(run) GROUP BY rank) s ON s.rank = r.rank
WHERE r.run_id = run;


-- operator_sides(run, of_kind, tc_patterns, tc_ops): one run's whole-run totals per op name
-- ('ops'), kernel name ('kernels') or kernel family ('families': lib/kernel_taxonomy.sql
-- kernel_family, which lines up runs whose kernels are named differently: another GPU vendor,
-- another library), counted inside the steps as the whole-run views count: one side of
-- operator_diff (stored per run for the page's first view, queries.PAGE_DEFAULTS).
-- Columns: name, calls, total_ns
CREATE OR REPLACE MACRO operator_sides(run, of_kind, tc_patterns, tc_ops) AS TABLE
SELECT name, calls, total_ns FROM cpu_op_summary(run, NULL, NULL, NULL, NULL, FALSE, tc_patterns, tc_ops)
WHERE of_kind = 'ops'
UNION ALL
SELECT name, calls, total_ns FROM gpu_kernel_summary(run, NULL, NULL, NULL, NULL, FALSE, tc_patterns)
WHERE of_kind = 'kernels'
UNION ALL
SELECT family, sum(calls), sum(total_ns) FROM gpu_kernel_summary(run, NULL, NULL, NULL, NULL, FALSE, tc_patterns)
WHERE of_kind = 'families' GROUP BY family;


-- operator_diff(sides, before_steps, after_steps, of_kind, tc_patterns, tc_ops): the two runs'
-- operator_sides (the table named `sides`: side 'before' | 'after', name, calls, total_ns) per
-- step (over the ranks' step count, run_step_count), what Compare's per-op table shows.
-- Columns: name, before_ms, after_ms (time per step), delta_ms, before_calls, after_calls
--   (calls per step), delta_calls, tensor_core (kernels: is_tensor_core_kernel; ops: eligible;
--   families: NULL)
CREATE OR REPLACE MACRO operator_diff(sides, before_steps, after_steps, of_kind, tc_patterns, tc_ops) AS TABLE
WITH per_step AS (
    SELECT name,
           coalesce(max(total_ns) FILTER (WHERE side = 'before'), 0) / before_steps / 1e6 AS before_ms,
           coalesce(max(total_ns) FILTER (WHERE side = 'after'), 0) / after_steps / 1e6 AS after_ms,
           coalesce(max(calls) FILTER (WHERE side = 'before'), 0) / before_steps AS before_calls,
           coalesce(max(calls) FILTER (WHERE side = 'after'), 0) / after_steps AS after_calls
    FROM query_table(sides) GROUP BY name
)
SELECT name, before_ms, after_ms, after_ms - before_ms AS delta_ms, before_calls, after_calls,
       after_calls - before_calls AS delta_calls,
       CASE WHEN of_kind = 'kernels' THEN is_tensor_core_kernel(name, tc_patterns)
            WHEN of_kind = 'ops' THEN is_tensor_core_eligible_op(name, tc_ops) END AS tensor_core
FROM per_step;
