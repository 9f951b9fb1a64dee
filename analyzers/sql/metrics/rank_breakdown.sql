-- requires: lib/intervals.sql lib/steps.sql lib/gpu_activity.sql lib/gpu_steps.sql lib/step_costs.sql lib/rank_balance.sql
-- Per-rank figures, with Holistic Trace Analysis' definitions so that they can be
-- checked against HTA's own output (tests/cli_report/test_hta_agreement.py).


-- rank_breakdown(run): one row per rank of the run (CPU-only ranks included, GPU columns NULL).
-- Only GPU activity with gpu_activity.counted (HTA's ProfilerStep filtering rule) is used.
-- Columns:
--   rank
--   n_steps          number of steps (ProfilerStep#N windows, else inferred iterations; 0: none)
--   mean_step_ns     mean step duration (steps(run)); the GPU span when the rank has no steps
--   steps_divisor    n_steps, or 1 when there are none (per-step figures divide totals by it)
--   first_gpu_ns, last_gpu_ns, span_ns   first to last GPU activity (HTA's "kernel_time")
--   busy_ns          union of all GPU activity (kernels, memcpy, memset, every stream)
--   idle_ns          span_ns - busy_ns
--   compute_ns       union of compute kernels (not comm, not memory)
--   non_compute_ns   busy_ns - compute_ns (communication and memory not hidden under compute)
--   comm_ns          union of communication kernels
--   comm_overlap_ns  union(comm) ∩ union(compute)
--   h2d_ns           summed duration of host-to-device copies
--   (whole-trace totals by HTA's rules: divided by steps_divisor they are no per-step figure on a
--   rank whose steps leave out start-up or a tail; rank_step_costs (lib/step_costs.sql) has those)
--   gpu_events       number of counted GPU activities
CREATE OR REPLACE MACRO rank_breakdown(run) AS TABLE
WITH act AS (
    SELECT rank AS grp, start_ns, end_ns, category FROM gpu_activity(run) WHERE counted
), span AS (
    SELECT grp, min(start_ns) AS first_gpu_ns, max(end_ns) AS last_gpu_ns, count(*) AS gpu_events
    FROM act GROUP BY grp
), all_act AS (
    SELECT grp, start_ns, end_ns FROM act
), compute_act AS (
    SELECT grp, start_ns, end_ns FROM act WHERE category = 'compute'
), comm_act AS (
    SELECT grp, start_ns, end_ns FROM act WHERE category = 'comm'
), compute_or_comm AS (
    SELECT grp, start_ns, end_ns FROM act WHERE category IN ('compute', 'comm')
), sums AS (
    -- union lengths, one window each (interval_union_total); the overlap by inclusion-exclusion:
    -- |comm ∩ compute| = |comm| + |compute| - |comm ∪ compute|. Cheaper than one sweep over
    -- every edge with a running count per category (4 window functions over twice the rows).
    SELECT span.grp,
           coalesce(b.union_ns, 0) AS busy_ns,
           coalesce(c.union_ns, 0) AS compute_ns,
           coalesce(m.union_ns, 0) AS comm_ns,
           coalesce(m.union_ns, 0) + coalesce(c.union_ns, 0) - coalesce(cm.union_ns, 0) AS comm_overlap_ns
    FROM span
    LEFT JOIN interval_union_total('all_act') b ON b.grp = span.grp
    LEFT JOIN interval_union_total('compute_act') c ON c.grp = span.grp
    LEFT JOIN interval_union_total('comm_act') m ON m.grp = span.grp
    LEFT JOIN interval_union_total('compute_or_comm') cm ON cm.grp = span.grp
), h2d AS (
    -- copies(run)'s host_to_device, without its launch join
    SELECT rank AS grp, sum(dur_ns) AS h2d_ns
    FROM gpu_activity(run)
    WHERE counted AND is_h2d_copy(kind, name, args)
    GROUP BY rank
), step_stats AS (
    SELECT rank AS grp, count(*) AS n_steps, avg(dur_ns) AS mean_step_ns FROM steps(run) GROUP BY rank
)
SELECT r.rank,
       coalesce(st.n_steps, 0) AS n_steps,
       coalesce(st.mean_step_ns, span.last_gpu_ns - span.first_gpu_ns) AS mean_step_ns,
       greatest(coalesce(st.n_steps, 0), 1) AS steps_divisor,
       span.first_gpu_ns, span.last_gpu_ns, span.last_gpu_ns - span.first_gpu_ns AS span_ns,
       CASE WHEN span.grp IS NOT NULL THEN coalesce(sums.busy_ns, 0) END AS busy_ns,
       span.last_gpu_ns - span.first_gpu_ns - coalesce(sums.busy_ns, 0) AS idle_ns,
       CASE WHEN span.grp IS NOT NULL THEN coalesce(sums.compute_ns, 0) END AS compute_ns,
       CASE WHEN span.grp IS NOT NULL THEN coalesce(sums.busy_ns, 0) - coalesce(sums.compute_ns, 0) END AS non_compute_ns,
       CASE WHEN span.grp IS NOT NULL THEN coalesce(sums.comm_ns, 0) END AS comm_ns,
       CASE WHEN span.grp IS NOT NULL THEN coalesce(sums.comm_overlap_ns, 0) END AS comm_overlap_ns,
       CASE WHEN span.grp IS NOT NULL THEN coalesce(h2d.h2d_ns, 0) END AS h2d_ns,
       coalesce(span.gpu_events, 0) AS gpu_events
FROM ranks r
LEFT JOIN step_stats st ON st.grp = r.rank
LEFT JOIN span ON span.grp = r.rank
LEFT JOIN sums ON sums.grp = r.rank
LEFT JOIN h2d ON h2d.grp = r.rank
WHERE r.run_id = run;


-- rank_step_costs(run): see lib/step_costs.sql (the per-step totals rank_summary divides).


-- rank_summary(run): the report's and the Overview's ranks table, one row per rank, from
-- rank_breakdown (HTA's whole-trace percentages) and rank_step_costs (per-step figures counting
-- only what lies inside the steps). GPU figures are NULL on a rank without counted GPU activity
-- (comm_time_ms there is its gloo collectives' time, NULL without any).
-- Columns:
--   rank              INTEGER
--   steps             BIGINT   steps (ProfilerStep#N windows, else inferred iterations; 0: none)
--   step_time_ms      DOUBLE   mean step duration, ms; the GPU span when the rank has no steps
--   idle_pct, compute_pct, non_compute_pct   DOUBLE  HTA's temporal breakdown, % of the GPU span
--                              (NULL when the span is 0)
--   comm_time_ms      DOUBLE   communication kernel time per step, ms: the union of NCCL kernel
--                              intervals inside the steps / steps; on a gloo rank without GPU
--                              activity, collectives in flight inside its steps (cpu_comm_in_steps)
--   comm_overlap_pct  DOUBLE   % of the whole communication time overlapped by compute kernels
--                              (HTA's comm/comp overlap); NULL without communication
--   h2d_time_ms       DOUBLE   host-to-device copy time inside the steps per step, ms
CREATE OR REPLACE MACRO rank_summary(run) AS TABLE
WITH b AS MATERIALIZED (
    SELECT * FROM rank_breakdown(run)
), cpu_ranks AS (
    SELECT rank FROM b WHERE gpu_events = 0
)
SELECT b.rank,
       b.n_steps AS steps,
       b.mean_step_ns::DOUBLE / 1e6 AS step_time_ms,
       CASE WHEN b.gpu_events > 0 AND b.span_ns <> 0 THEN 100.0::DOUBLE * b.idle_ns::DOUBLE / b.span_ns::DOUBLE END AS idle_pct,
       CASE WHEN b.gpu_events > 0 AND b.span_ns <> 0 THEN 100.0::DOUBLE * b.compute_ns::DOUBLE / b.span_ns::DOUBLE END AS compute_pct,
       CASE WHEN b.gpu_events > 0 AND b.span_ns <> 0 THEN 100.0::DOUBLE * b.non_compute_ns::DOUBLE / b.span_ns::DOUBLE END
           AS non_compute_pct,
       CASE WHEN b.gpu_events > 0 THEN coalesce(c.comm_in_steps_ns, 0)::DOUBLE / b.steps_divisor::DOUBLE / 1e6
            WHEN g.rank IS NOT NULL THEN g.comm_in_steps_ns::DOUBLE / b.steps_divisor::DOUBLE / 1e6 END
           AS comm_time_ms,
       CASE WHEN b.gpu_events > 0 AND b.comm_ns <> 0 THEN 100.0::DOUBLE * b.comm_overlap_ns::DOUBLE / b.comm_ns::DOUBLE END
           AS comm_overlap_pct,
       CASE WHEN b.gpu_events > 0 THEN coalesce(c.h2d_in_steps_ns, 0)::DOUBLE / b.steps_divisor::DOUBLE / 1e6 END
           AS h2d_time_ms
FROM b
LEFT JOIN rank_step_costs(run) c ON c.rank = b.rank
LEFT JOIN cpu_comm_in_steps(run, 'cpu_ranks') g ON g.rank = b.rank;


-- run_mean_step(run): the run's step, one row. What a finding about the whole run (no one rank)
-- is a % of, and the step its costs are weighed against.
-- Columns:
--   mean_step_ns  DOUBLE  the mean over ranks of each rank's mean step (rank_breakdown.mean_step_ns;
--                         ranks without one left out); NULL when no rank has one
--   ranks         BIGINT  the run's ranks (rank files)
CREATE OR REPLACE MACRO run_mean_step(run) AS TABLE
SELECT avg(mean_step_ns) FILTER (WHERE mean_step_ns <> 0) AS mean_step_ns, count(*) AS ranks
FROM (SELECT mean_step_ns FROM rank_breakdown(run) ORDER BY rank);
