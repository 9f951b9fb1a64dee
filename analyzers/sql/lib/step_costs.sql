-- requires: lib/intervals.sql lib/gpu_activity.sql lib/gpu_steps.sql
-- What per-step figures add up inside a rank's steps on the GPU clock, per rank.


-- rank_step_costs(run): per rank with counted GPU activity, the totals that per-step figures
-- divide by rank_breakdown's steps_divisor: only what lies inside the rank's steps on the GPU
-- clock (gpu_steps(run); a rank without steps: its pseudo-step over the GPU span), so that
-- ProfilerSteps and inferred iterations give the same figure per step and start-up, or a tail
-- after the last step, is no step's cost. Beside rank_breakdown, not in it: its whole-trace
-- figures are HTA's (checked against HTA), and it stays free of the GPU-clock steps' launch join.
-- The one definition of GPU communication inside the steps: rank_gpu_work (rank_balance) reads it;
-- sql.engine.run_cache computes it once per rank.
-- Columns:
--   rank
--   comm_in_steps_ns  union of communication kernels inside the steps (the ranks table's comm / step)
--   h2d_in_steps_ns   summed host-to-device copy time inside the steps (the ranks table's H2D / step;
--                     h2d_summary's copy_in_steps_ns reads it)
CREATE OR REPLACE MACRO rank_step_costs(run) AS TABLE
WITH act AS MATERIALIZED (
    SELECT rank AS grp, start_ns, end_ns, category, is_h2d_copy(kind, name, args) AS h2d
    FROM gpu_activity(run) WHERE counted
), windows AS MATERIALIZED (
    SELECT rank AS grp, start_ns, end_ns FROM gpu_steps(run)
), comm_act AS (
    SELECT grp, start_ns, end_ns FROM act WHERE category = 'comm'
), comm_in_steps AS (
    SELECT grp, start_ns, end_ns FROM interval_clip('comm_act', 'windows')
), h2d_act AS (
    SELECT grp, start_ns, end_ns FROM act WHERE h2d
), h2d_in_steps AS (
    SELECT grp, sum(end_ns - start_ns) AS h2d_ns FROM interval_clip('h2d_act', 'windows') GROUP BY grp
)
SELECT r.grp AS rank, coalesce(m.union_ns, 0) AS comm_in_steps_ns, coalesce(h.h2d_ns, 0) AS h2d_in_steps_ns
FROM (SELECT DISTINCT grp FROM act) r
LEFT JOIN interval_union_total('comm_in_steps') m ON m.grp = r.grp
LEFT JOIN h2d_in_steps h ON h.grp = r.grp;
