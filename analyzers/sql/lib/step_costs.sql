-- requires: lib/intervals.sql lib/gpu_activity.sql lib/gpu_steps.sql
-- What per-step figures add up inside a rank's steps on the GPU clock, per rank.


-- gpu_step_segments(run): what the GPU does inside each rank's steps on the GPU clock
-- (gpu_steps(run)), cut wherever an activity starts or ends: per piece, how many compute,
-- communication and memory activities run in it (gpu_activity's categories). The one derivation
-- of GPU busy, idle, communication and exposed communication inside the steps: step_breakdown's
-- parts, rank_step_costs' comm and rank_gpu_work's compute, exposed comm and held time read it.
-- Two activity sets: all activity in the window (step_breakdown: the window decides what belongs
-- to a step) and counted activity only (gpu_activity.counted, HTA's rule, which rank_balance and
-- the ranks table keep: work with no launch in the trace, or launched after the profiled steps,
-- is left out). Activity is clipped to the windows; pieces where nothing runs are left out.
-- Columns:
--   rank, step (NULL for a rank's pseudo-step)
--   start_ns, end_ns, dur_ns      BIGINT
--   n_compute, n_comm, n_memory   INTEGER  activities of each category running in the piece
--   counted_compute, counted_comm   INTEGER  the same, of counted activity only
CREATE OR REPLACE MACRO gpu_step_segments(run) AS TABLE
WITH windows AS (
    SELECT rank, step, start_ns AS t0, end_ns AS t1 FROM gpu_steps(run)
), gpu AS (
    SELECT rank, category, counted, start_ns, end_ns FROM gpu_activity(run) WHERE end_ns > start_ns
), placed AS (
    -- nearly all activity lies inside the window where it starts (an ASOF join, fast); only the
    -- rest (crossing a boundary, or outside every window) takes the interval-overlap join below
    SELECT g.rank, g.category, g.counted, g.start_ns, g.end_ns, w.step,
           w.t0 IS NOT NULL AND g.start_ns < w.t1 AND g.end_ns <= w.t1 AS inside
    FROM gpu g ASOF LEFT JOIN windows w ON w.rank = g.rank AND g.start_ns >= w.t0
), clipped AS (
    SELECT rank, step, category, counted, start_ns AS s, end_ns AS e FROM placed WHERE inside
    UNION ALL
    SELECT w.rank, w.step, p.category, p.counted, greatest(p.start_ns, w.t0), least(p.end_ns, w.t1)
    FROM (SELECT * FROM placed WHERE NOT inside) p
    JOIN windows w ON p.rank = w.rank AND p.start_ns < w.t1 AND p.end_ns > w.t0
), deltas AS (
    -- sweep line: +1 where an interval of a category starts, -1 where it ends
    SELECT rank, step, s AS t, 1 AS d, category, counted FROM clipped
    UNION ALL
    SELECT rank, step, e, -1, category, counted FROM clipped
), edges AS (
    SELECT rank, step, t,
           sum(d) FILTER (WHERE category = 'compute') AS d_compute,
           sum(d) FILTER (WHERE category = 'comm') AS d_comm,
           sum(d) FILTER (WHERE category = 'memory') AS d_memory,
           sum(d) FILTER (WHERE category = 'compute' AND counted) AS dc_compute,
           sum(d) FILTER (WHERE category = 'comm' AND counted) AS dc_comm
    FROM deltas
    GROUP BY rank, step, t
), segments AS (
    SELECT rank, step, t AS start_ns, lead(t) OVER by_time AS end_ns,
           coalesce(sum(d_compute) OVER running, 0) AS n_compute,
           coalesce(sum(d_comm) OVER running, 0) AS n_comm,
           coalesce(sum(d_memory) OVER running, 0) AS n_memory,
           coalesce(sum(dc_compute) OVER running, 0) AS counted_compute,
           coalesce(sum(dc_comm) OVER running, 0) AS counted_comm
    FROM edges
    WINDOW by_time AS (PARTITION BY rank, step ORDER BY t),
           running AS (PARTITION BY rank, step ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT rank, step, start_ns, end_ns, end_ns - start_ns AS dur_ns,
       n_compute::INTEGER AS n_compute, n_comm::INTEGER AS n_comm, n_memory::INTEGER AS n_memory,
       counted_compute::INTEGER AS counted_compute, counted_comm::INTEGER AS counted_comm
FROM segments
WHERE end_ns > start_ns AND (n_compute > 0 OR n_comm > 0 OR n_memory > 0);


-- rank_step_costs(run): per rank with counted GPU activity, the totals that per-step figures
-- divide by rank_breakdown's steps_divisor: only what lies inside the rank's steps on the GPU
-- clock (gpu_steps(run); a rank without steps: its pseudo-step over the GPU span), so that
-- ProfilerSteps and inferred iterations give the same figure per step and start-up, or a tail
-- after the last step, is no step's cost. Beside rank_breakdown, not in it: its whole-trace
-- figures are HTA's (checked against HTA), and it stays free of the GPU-clock steps' launch join.
-- Communication inside the steps is gpu_step_segments' (as step_breakdown's comm_ns); rank_gpu_work
-- (rank_balance) reads it here; sql.engine.run_cache computes it once per rank.
-- Columns:
--   rank
--   comm_in_steps_ns  union of communication kernels inside the steps (the ranks table's comm / step)
--   h2d_in_steps_ns   summed host-to-device copy time inside the steps (the ranks table's H2D / step;
--                     h2d_summary's copy_in_steps_ns reads it)
CREATE OR REPLACE MACRO rank_step_costs(run) AS TABLE
WITH act AS MATERIALIZED (
    SELECT rank AS grp, start_ns, end_ns FROM gpu_activity(run) WHERE counted AND is_h2d_copy(kind, name, args)
), windows AS MATERIALIZED (
    SELECT rank AS grp, start_ns, end_ns FROM gpu_steps(run)
), comm_in_steps AS (
    SELECT rank AS grp, sum(dur_ns) AS comm_ns FROM gpu_step_segments(run) WHERE counted_comm > 0 GROUP BY rank
), h2d_in_steps AS (
    SELECT grp, sum(end_ns - start_ns) AS h2d_ns FROM interval_clip('act', 'windows') GROUP BY grp
)
SELECT r.rank, coalesce(m.comm_ns, 0) AS comm_in_steps_ns, coalesce(h.h2d_ns, 0) AS h2d_in_steps_ns
FROM (SELECT DISTINCT rank FROM gpu_activity(run) WHERE counted) r
LEFT JOIN comm_in_steps m ON m.grp = r.rank
LEFT JOIN h2d_in_steps h ON h.grp = r.rank;
