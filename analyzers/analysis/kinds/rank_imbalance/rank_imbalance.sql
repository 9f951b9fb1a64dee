-- requires: lib/rank_balance.sql
-- rank_imbalance_report(run, ...): at most one row (runs with two or more ranks to compare): the
-- straggler, what the imbalance costs, and where it shows.
--
-- Persistence (thresholds.STRAGGLER_*, STEP_OUTLIER_*): per step, the rank the others waited for
-- and what they lost (lib/rank_balance.sql step_arrivals). A step whose loss exceeds the median
-- step's by more than STEP_OUTLIER_SIGMAS robust standard deviations (1.4826 x the median absolute
-- deviation, which the spike itself cannot inflate) and by MIN_FINDING_PCT of the
-- step is a step outlier: a one-off spike, listed apart and left out of the cost. Over the other
-- (ordinary) steps, the straggler is the rank last in more than STRAGGLER_MIN_STEP_SHARE of them
-- whose median lateness exceeds STRAGGLER_MIN_LATENESS_SIGMAS robust standard deviations of its
-- own step-to-step lateness. With no such rank the waiting moves between ranks (uneven work per
-- step, e.g. batches of different sizes): reported on the rank last most often, persistent = false.
-- Columns:
--   straggler_rank, n_ranks
--   persistent             BOOLEAN: a persistent straggler; NULL when no step could be compared
--   late_steps, steps_compared   ordinary steps it was last in, ordinary steps compared
--   lateness_ns, jitter_ns its median lateness over the ordinary steps, and the robust standard
--                          deviation of that lateness
--   imbalance_pct          (max - mean) / mean of work per step across ranks, in %
--   straggler_work_ns, mean_work_ns   per step
--   cost_ns                time each other rank loses per step in the ordinary steps: CPU (gloo)
--                          ranks, the mean per-step wait beyond the last rank's (gloo blocks the
--                          caller); GPU ranks, their exposed comm beyond the straggler's (waiting
--                          hidden under compute costs nothing), less the outlier steps' share of the wait
--   held_cost_ns           the part of it that holds up their hosts too
--   max_lost_ns, max_lost_rank        the rank that loses most
--   mean_step_ns           mean step time over the ranks
--   wait_ns_per_step       mean matched in-collective wait of the other ranks (evidence)
--   matched                BOOLEAN: collective instances were matched across ranks
--   point_to_point         BOOLEAN: send/recv seen (pipeline stages run different layers by design)
--   source                 'gpu' | 'cpu' (what work and waiting were measured on)
--   lost_by_rank           LIST of {rank, lost_ns}
--   steps                  LIST of {step, wait_ns (what the waiting ranks lost), late_rank, outlier,
--                          start_ns, end_ns (the late rank's window)}, by step
--   outliers               LIST of {step, rank, extra_ns (what the waiting ranks lost in that step
--                          beyond the median step)}: the step outliers
--   wait_start_ns, wait_end_ns   the matched collective a waiting rank waited in longest (the
--                          window to show when the trace has no ProfilerSteps)
CREATE OR REPLACE MACRO rank_imbalance_report(run, host_blocked_min_ns, straggler_min_step_share,
                                              straggler_min_lateness_sigmas, step_outlier_sigmas,
                                              step_outlier_min_step_fraction) AS TABLE
WITH rb AS MATERIALIZED (
    SELECT * FROM rank_balance(run, host_blocked_min_ns)
), arrivals AS MATERIALIZED (
    SELECT * FROM step_arrivals(run)
), per_step AS (
    SELECT step,
           any_value(rank) FILTER (WHERE is_last) AS late_rank,
           any_value(step_wait_ns) AS wait_ns
    FROM arrivals GROUP BY step
), step_spread AS (
    SELECT median(wait_ns) AS median_wait_ns, 1.4826 * mad(wait_ns) AS wait_sigma_ns FROM per_step
), classified AS MATERIALIZED (
    SELECT p.*, p.wait_ns - s.median_wait_ns AS extra_ns,
           coalesce(p.wait_ns - s.median_wait_ns
                    > greatest(step_outlier_sigmas * s.wait_sigma_ns,
                               step_outlier_min_step_fraction * (SELECT avg(mean_step_ns) FROM rb)), false) AS outlier
    FROM per_step p, step_spread s
), persistence AS (
    -- per rank, over the ordinary steps: how often it was last, and how late it typically was
    SELECT a.rank,
           count(*) FILTER (WHERE a.is_last) AS late_steps,
           count(*) AS steps_compared,
           median(a.lateness_ns) AS lateness_ns,
           1.4826 * mad(a.lateness_ns) AS jitter_ns
    FROM arrivals a JOIN classified c ON c.step = a.step AND NOT c.outlier
    GROUP BY a.rank
), judged AS (
    SELECT *, late_steps > straggler_min_step_share * steps_compared
              AND lateness_ns > straggler_min_lateness_sigmas * jitter_ns AS persistent
    FROM persistence
), chosen AS (
    -- the persistent straggler; else the rank last most often; without steps to compare, the
    -- rank that waited least over the run (rank_balance)
    SELECT coalesce((SELECT arg_max(rank, late_steps) FROM judged WHERE persistent),
                    (SELECT arg_max(rank, (late_steps, lateness_ns, -rank)) FROM judged),
                    (SELECT rank FROM rb WHERE is_straggler)) AS rank,
           (SELECT bool_or(persistent) FROM judged) AS persistent
), relative AS (
    -- rank_balance's lost and held time, measured against the chosen straggler
    SELECT rb.*, rb.rank = c.rank AS is_chosen,
           CASE WHEN rb.rank = c.rank THEN 0
                ELSE greatest(rb.exposed_ns_per_step - max(rb.exposed_ns_per_step) FILTER (WHERE rb.rank = c.rank) OVER (), 0)
           END AS lost_ns,
           CASE WHEN rb.rank = c.rank THEN 0
                ELSE greatest(rb.held_ns_per_step - max(rb.held_ns_per_step) FILTER (WHERE rb.rank = c.rank) OVER (), 0)
           END AS held_ns
    FROM rb, chosen c
), waits AS (
    SELECT avg(wait_ns) FILTER (WHERE NOT outlier) AS ordinary_wait_ns, avg(wait_ns) AS all_wait_ns
    FROM classified
), summary AS (
    SELECT (SELECT rank FROM chosen) AS straggler_rank,
           count(*) AS n_ranks,
           (SELECT persistent FROM chosen) AS persistent,
           100.0 * (max(work_ns_per_step) - avg(work_ns_per_step)) / nullif(avg(work_ns_per_step), 0) AS imbalance_pct,
           max(work_ns_per_step) FILTER (WHERE is_chosen) AS straggler_work_ns,
           avg(work_ns_per_step) AS mean_work_ns,
           coalesce(avg(lost_ns) FILTER (WHERE NOT is_chosen), 0) AS relative_cost_ns,
           coalesce(avg(least(held_ns, lost_ns)) FILTER (WHERE NOT is_chosen), 0) AS relative_held_ns,
           avg(mean_step_ns) AS mean_step_ns,
           avg(wait_ns_per_step) FILTER (WHERE NOT is_chosen) AS wait_ns_per_step,
           sum(matched_instances) > 0 AS matched,
           sum(p2p_instances) > 0 AS point_to_point,
           CASE WHEN bool_and(has_gpu) THEN 'gpu' ELSE 'cpu' END AS source,
           max(lost_ns) AS relative_max_lost_ns,
           arg_max(rank, lost_ns) AS max_lost_rank,
           list({'rank': rank, 'lost_ns': lost_ns} ORDER BY rank) AS lost_rows
    FROM relative
    HAVING count(*) >= 2
), costed AS (
    SELECT s.*,
           CASE WHEN w.all_wait_ns IS NULL THEN s.relative_cost_ns
                WHEN s.source = 'cpu' THEN w.ordinary_wait_ns
                ELSE s.relative_cost_ns * coalesce(w.ordinary_wait_ns / nullif(w.all_wait_ns, 0), 1) END AS cost_ns,
           -- lost_by_rank and held time in the same scale as cost_ns
           coalesce(cost_ns / nullif(s.relative_cost_ns, 0), 1) AS scale
    FROM summary s, waits w
), late_rank AS (
    SELECT j.late_steps, j.steps_compared, j.lateness_ns, j.jitter_ns
    FROM judged j WHERE j.rank = (SELECT rank FROM chosen)
), step_rows AS (
    SELECT list({'step': c.step, 'wait_ns': c.wait_ns, 'late_rank': c.late_rank, 'outlier': c.outlier,
                 'start_ns': s.start_ns, 'end_ns': s.end_ns} ORDER BY c.step) AS steps,
           list({'step': c.step, 'rank': c.late_rank, 'extra_ns': c.extra_ns} ORDER BY c.step)
               FILTER (WHERE c.outlier) AS outliers
    FROM classified c
    LEFT JOIN steps(run) s ON s.step = c.step AND s.rank = c.late_rank
), longest_wait AS (
    -- the window where the waiting shows when there are no steps to name one
    SELECT arg_max(i.start_ns, (i.wait_ns, -i.start_ns)) AS wait_start_ns,
           arg_max(i.end_ns, (i.wait_ns, -i.start_ns)) AS wait_end_ns
    FROM collective_instances(run) i
    WHERE i.matched AND i.rank <> (SELECT rank FROM chosen)
)
SELECT c.straggler_rank, c.n_ranks, c.persistent, l.late_steps, l.steps_compared, l.lateness_ns, l.jitter_ns,
       c.imbalance_pct, c.straggler_work_ns, c.mean_work_ns, c.cost_ns,
       least(c.relative_held_ns * c.scale, c.cost_ns) AS held_cost_ns,
       c.relative_max_lost_ns * c.scale AS max_lost_ns, c.max_lost_rank,
       c.mean_step_ns, c.wait_ns_per_step, c.matched, c.point_to_point, c.source,
       [{'rank': r.rank, 'lost_ns': r.lost_ns * c.scale} for r in c.lost_rows] AS lost_by_rank,
       coalesce(sr.steps, []) AS steps, coalesce(sr.outliers, []) AS outliers,
       lw.wait_start_ns, lw.wait_end_ns
FROM costed c
LEFT JOIN late_rank l ON true
CROSS JOIN step_rows sr
CROSS JOIN longest_wait lw;


-- rank_shape_differences(run, straggler): operators recorded with input shapes (record_shapes)
-- whose shapes on the straggler never occur on another rank, e.g. longer sequences landing on
-- one rank. Only operators every rank runs are compared.
-- Columns: name, straggler_dims, other_dims (the other ranks' most frequent shapes), n_calls
CREATE OR REPLACE MACRO rank_shape_differences(run, straggler) AS TABLE
WITH shaped AS (
    SELECT rank, name, dims
    FROM (SELECT rank, name, CAST(json_extract(args, '$."Input Dims"') AS VARCHAR) AS dims
          FROM events WHERE run_id = run AND kind = 'cpu_op')
    WHERE dims IS NOT NULL AND dims NOT IN ('[]', '[[]]')
), common_ops AS (
    SELECT name FROM shaped GROUP BY name
    HAVING count(DISTINCT rank) = (SELECT count(DISTINCT rank) FROM shaped) AND count(DISTINCT rank) >= 2
), straggler_shapes AS (
    SELECT name, dims, count(*) AS n_calls FROM shaped
    WHERE rank = straggler AND name IN (SELECT name FROM common_ops) GROUP BY name, dims
), other_shapes AS (
    SELECT name, dims, count(*) AS n_calls FROM shaped
    WHERE rank <> straggler AND name IN (SELECT name FROM common_ops) GROUP BY name, dims
)
SELECT s.name, s.dims AS straggler_dims,
       -- of equally frequent shapes, the first in text order: the same report on every analysis
       (SELECT first(o.dims ORDER BY o.n_calls DESC, o.dims) FROM other_shapes o WHERE o.name = s.name) AS other_dims,
       s.n_calls
FROM straggler_shapes s
WHERE NOT EXISTS (SELECT 1 FROM other_shapes o WHERE o.name = s.name AND o.dims = s.dims);
