-- requires: lib/gpu_steps.sql lib/gpu_activity.sql lib/step_costs.sql metrics/rank_breakdown.sql
-- Where each step's time went on the GPU, and its mean per rank: what the Overview, Ranks,
-- Compare and report charts draw.


-- step_breakdown(run): one row per rank and GPU-clock step (gpu_steps).
-- From lib/step_costs.sql gpu_step_segments: GPU activity clipped to the window (the window decides
-- what belongs to a step, so gpu_activity.counted, HTA's rule for work outside the profiled steps,
-- is not applied), every instant of the window counted once, in priority compute > communication > memory > idle,
-- with gpu_activity's categories. So the four parts add up to the step, and the communication
-- part is the communication no compute hides on this rank (waiting for another rank included).
-- Columns (ns):
--   rank, step (NULL for a rank's pseudo-step), start_ns, end_ns, step_ns, clock (gpu_steps.clock)
--   compute_ns, comm_exposed_ns, memory_ns, idle_ns   the four parts of step_ns
--   comm_ns       all communication in the step, hidden or not
--   gpu_busy_ns   compute_ns + comm_exposed_ns + memory_ns
CREATE OR REPLACE MACRO step_breakdown(run) AS TABLE
WITH windows AS (
    SELECT rank, step, start_ns AS t0, end_ns AS t1, clock FROM gpu_steps(run)
), parts AS (
    SELECT rank, step,
           coalesce(sum(dur_ns) FILTER (WHERE n_compute > 0), 0) AS compute_ns,
           coalesce(sum(dur_ns) FILTER (WHERE n_compute = 0 AND n_comm > 0), 0) AS comm_exposed_ns,
           coalesce(sum(dur_ns) FILTER (WHERE n_compute = 0 AND n_comm = 0 AND n_memory > 0), 0) AS memory_ns,
           coalesce(sum(dur_ns) FILTER (WHERE n_comm > 0), 0) AS comm_ns
    FROM gpu_step_segments(run)
    GROUP BY ALL
)
SELECT w.rank, w.step, w.t0 AS start_ns, w.t1 AS end_ns, w.t1 - w.t0 AS step_ns, w.clock,
       coalesce(p.compute_ns, 0) AS compute_ns,
       coalesce(p.comm_exposed_ns, 0) AS comm_exposed_ns,
       coalesce(p.memory_ns, 0) AS memory_ns,
       (w.t1 - w.t0) - coalesce(p.compute_ns + p.comm_exposed_ns + p.memory_ns, 0) AS idle_ns,
       coalesce(p.comm_ns, 0) AS comm_ns,
       coalesce(p.compute_ns + p.comm_exposed_ns + p.memory_ns, 0) AS gpu_busy_ns
FROM windows w LEFT JOIN parts p ON p.rank = w.rank AND p.step IS NOT DISTINCT FROM w.step;


-- rank_step_breakdown(run): step_breakdown's mean per rank (the parts still add up to step_ns).
-- Columns: rank, steps, step_ns, compute_ns, comm_exposed_ns, memory_ns, idle_ns, comm_ns (means, ns)
CREATE OR REPLACE MACRO rank_step_breakdown(run) AS TABLE
SELECT rank, count(*) AS steps, avg(step_ns) AS step_ns, avg(compute_ns) AS compute_ns,
       avg(comm_exposed_ns) AS comm_exposed_ns, avg(memory_ns) AS memory_ns, avg(idle_ns) AS idle_ns,
       avg(comm_ns) AS comm_ns
FROM step_breakdown(run)
GROUP BY rank;


-- run_step_breakdown(run): the run's mean step and its parts, one row: the mean over ranks of
-- rank_step_breakdown's per-rank means, so every rank weighs the same whatever its number of steps
-- (the parts still add up to step_ns). What Compare sets side by side.
-- Columns:
--   ranks    BIGINT  ranks with a step (0: none; the means are then NULL)
--   steps    BIGINT  steps over all those ranks
--   step_ns, compute_ns, comm_exposed_ns, memory_ns, idle_ns, comm_ns   DOUBLE, ns per step
CREATE OR REPLACE MACRO run_step_breakdown(run) AS TABLE
SELECT count(*) AS ranks, coalesce(sum(steps), 0)::BIGINT AS steps, avg(step_ns) AS step_ns,
       avg(compute_ns) AS compute_ns, avg(comm_exposed_ns) AS comm_exposed_ns, avg(memory_ns) AS memory_ns,
       avg(idle_ns) AS idle_ns, avg(comm_ns) AS comm_ns
FROM (SELECT * FROM rank_step_breakdown(run) ORDER BY rank);


-- run_summary(run): the run-wide figures the Overview shows, one row.
-- Columns:
--   host_step_ms  DOUBLE   run_mean_step: the mean over ranks of each rank's mean host step, ms
--   gpu_step_ms   DOUBLE   run_step_breakdown: the mean over ranks of each rank's mean GPU-clock step, ms
--   idle_pct      DOUBLE   the mean over ranks with GPU activity of HTA's idle % (rank_summary)
--   has_gpu       BOOLEAN  some rank has counted GPU activity (kernels, copies, memsets)
CREATE OR REPLACE MACRO run_summary(run) AS TABLE
SELECT (SELECT mean_step_ns / 1e6 FROM run_mean_step(run)) AS host_step_ms,
       (SELECT step_ns / 1e6 FROM run_step_breakdown(run)) AS gpu_step_ms,
       (SELECT avg(idle_pct) FROM rank_summary(run)) AS idle_pct,
       (SELECT coalesce(bool_or(gpu_events > 0), false) FROM rank_breakdown(run)) AS has_gpu;
