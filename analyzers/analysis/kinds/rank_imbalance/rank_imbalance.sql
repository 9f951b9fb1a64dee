-- requires: lib/rank_balance.sql
-- rank_imbalance_report(run, ...): at most one row (runs with two or more ranks to compare): the
-- straggler, what the imbalance costs, and where it shows.
--
-- Persistence (thresholds.STRAGGLER_*, STEP_OUTLIER_*, RANK_LATENESS_MIN_STEP_FRACTION,
-- PERIODIC_MIN_PHASE_SHARE): per step, the rank the others waited for and what they lost
-- (lib/rank_balance.sql step_arrivals). A step whose loss exceeds the median step's by more than
-- STEP_OUTLIER_SIGMAS robust standard deviations (1.4826 x the median absolute deviation, which the
-- spike itself cannot inflate) and by MIN_FINDING_PCT of the step is a step outlier: a one-off
-- spike, listed apart and left out of the cost.
-- The noise floor: ranks doing identical work still arrive apart by the jitter of their own work
-- per step (a loaded host, the OS, the allocator); lateness counts only beyond it, and beyond
-- RANK_LATENESS_MIN_STEP_FRACTION of the step. Over the ordinary steps, the pattern is:
--   persistent  one rank last in more than STRAGGLER_MIN_STEP_SHARE of them, its median lateness
--               beyond STRAGGLER_MIN_LATENESS_SIGMAS robust standard deviations of its own lateness
--               and of the steadiest rank's work; or one rank last beyond the noise by its own
--               work (as for moving) in more than STRAGGLER_MIN_STEP_SHARE of them;
--   periodic    one rank late, beyond STRAGGLER_MIN_LATENESS_SIGMAS robust standard deviations of
--               its lateness in the other steps and of the steadiest rank's work, in at least PERIODIC_MIN_PHASE_SHARE of the steps
--               (3 or more) of one phase of a period k (every k-th step: an eval, a checkpoint);
--   moving      in most steps the last rank is late beyond STRAGGLER_MIN_LATENESS_SIGMAS of
--               jitter_ns (the ranks' median robust standard deviation of their work per step,
--               step time minus waiting), on changing ranks, by work of its own: its work exceeds
--               the others' median in that step by MOVING_LATENESS_MIN_WORK_SHARE of its lateness
--               (each step's work differs; lateness no work explains is the host's);
--   noise       none of these: within the run's jitter, no finding.
-- The cost counts only the steps the pattern explains (all ordinary steps for a persistent
-- straggler, the periodic steps, the steps beyond the noise when it moves; none for noise), per
-- ordinary step.
-- Columns:
--   straggler_rank, n_ranks
--   persistent             BOOLEAN: a persistent straggler; NULL when no step could be compared
--   pattern                'persistent' | 'periodic' | 'moving' | 'noise' (NULL: no steps compared)
--   period, periodic_steps periodic: every period-th step, and the steps it was late in
--   late_steps, significant_steps, steps_compared   ordinary steps it was last in, last in beyond
--                          the noise, ordinary steps compared
--   lateness_ns, lateness_sigma_ns   its median lateness over the ordinary steps, and that
--                          lateness' robust standard deviation
--   jitter_ns              the ranks' median robust standard deviation of their own work per step
--   beyond_noise_steps, beyond_noise_by_work_steps   ordinary steps whose last rank (any) was late
--                          beyond the noise, and of those, late by work of its own (moving's test)
--   imbalance_pct          (max - mean) / mean of work per step across ranks, in %
--   straggler_work_ns, mean_work_ns   per step
--   cost_ns                time each other rank loses per step in the steps the pattern explains: CPU (gloo)
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
                                              step_outlier_min_step_fraction, lateness_min_step_fraction,
                                              periodic_min_phase_share, moving_min_work_share) AS TABLE
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
), rank_work AS (
    -- each rank's time per ordinary step outside its waiting: its own work, whose step-to-step
    -- spread is the run's jitter (a loaded host, the OS, the allocator)
    SELECT a.step, a.rank, st.dur_ns - a.wait_ns AS work_ns
    FROM arrivals a
    JOIN classified c ON c.step = a.step AND NOT c.outlier
    JOIN steps(run) st ON st.rank = a.rank AND st.step = a.step
), noise AS (
    -- the noise floor: the ranks' typical robust standard deviation of their own work per step
    -- (and the steadiest rank's: a rank's own periodic extra work would pass for its jitter)
    SELECT coalesce(median(sigma_ns), 0) AS jitter_ns, coalesce(min(sigma_ns), 0) AS steadiest_jitter_ns
    FROM (SELECT rank, 1.4826 * mad(work_ns) AS sigma_ns FROM rank_work GROUP BY rank)
), ordinary AS MATERIALIZED (
    SELECT a.* FROM arrivals a JOIN classified c ON c.step = a.step AND NOT c.outlier
), step_floor AS (
    SELECT lateness_min_step_fraction * (SELECT avg(mean_step_ns) FROM rb) AS floor_ns,
           straggler_min_lateness_sigmas * (SELECT steadiest_jitter_ns FROM noise) AS periodic_floor_ns
), late_rows AS MATERIALIZED (
    -- per ordinary step, the rank the others waited for, and whether its lateness stands above the
    -- noise (jitter) and above lateness_min_step_fraction of the step
    SELECT o.step, o.rank, o.lateness_ns, o.step_wait_ns AS wait_ns,
           o.lateness_ns > straggler_min_lateness_sigmas * n.jitter_ns
               AND o.lateness_ns > (SELECT floor_ns FROM step_floor) AS significant,
           -- its own work in the step exceeds the others' by a share of its lateness
           coalesce((SELECT w.work_ns FROM rank_work w WHERE w.step = o.step AND w.rank = o.rank)
                    - (SELECT median(w.work_ns) FROM rank_work w WHERE w.step = o.step AND w.rank <> o.rank)
                    >= moving_min_work_share * o.lateness_ns, false) AS by_own_work
    FROM ordinary o, noise n
    WHERE o.is_last
), persistence AS (
    -- per rank, over the ordinary steps: how often it was last, and how late it typically was
    SELECT o.rank,
           count(*) FILTER (WHERE o.is_last) AS late_steps,
           count(*) FILTER (WHERE o.is_last AND l.significant) AS significant_steps,
           count(*) FILTER (WHERE o.is_last AND l.significant AND l.by_own_work) AS significant_by_work_steps,
           count(*) AS steps_compared,
           median(o.lateness_ns) AS lateness_ns,
           1.4826 * mad(o.lateness_ns) AS lateness_sigma_ns
    FROM ordinary o
    LEFT JOIN late_rows l ON l.step = o.step AND l.rank = o.rank
    GROUP BY o.rank
), judged AS (
    -- persistent: last in most steps, its median lateness beyond its own step-to-step spread of it
    -- and the steadiest rank's work jitter (the straggler's own work may vary: uneven lengths),
    -- and beyond the share of the step
    -- or last beyond the noise by work of its own in most steps (the same rank each time, however
    -- much its lateness varies: that is no moving imbalance)
    SELECT *, (late_steps > straggler_min_step_share * steps_compared
               AND lateness_ns > straggler_min_lateness_sigmas * greatest(lateness_sigma_ns, (SELECT steadiest_jitter_ns FROM noise))
               AND lateness_ns > (SELECT floor_ns FROM step_floor))
              OR significant_by_work_steps > straggler_min_step_share * steps_compared AS persistent
    FROM persistence
), candidates AS (
    -- periodic lateness: rank, period (2 .. a third of the steps: 3 or more steps per phase), phase
    SELECT DISTINCT o.rank, p.period, o.step % p.period AS phase
    FROM ordinary o,
         (SELECT unnest(range(2, greatest((SELECT count(DISTINCT step) FROM ordinary) // 3, 2) + 1)) AS period) p
), off_phase AS (
    -- the rank's lateness in the other steps: its baseline and spread without the periodic work
    SELECT c.rank, c.period, c.phase, median(o.lateness_ns) AS off_median_ns,
           1.4826 * mad(o.lateness_ns) AS off_sigma_ns, count(*) AS off_steps
    FROM candidates c JOIN ordinary o ON o.rank = c.rank AND o.step % c.period <> c.phase
    GROUP BY c.rank, c.period, c.phase
), phase_fit AS (
    SELECT f.rank, f.period, f.phase, f.off_steps, count(*) AS phase_steps,
           count(*) FILTER (WHERE o.is_last AND o.lateness_ns > f.off_median_ns + straggler_min_lateness_sigmas * f.off_sigma_ns
                                AND o.lateness_ns > (SELECT greatest(floor_ns, periodic_floor_ns) FROM step_floor)) AS phase_hits,
           list(o.step ORDER BY o.step) FILTER (WHERE o.is_last
                                AND o.lateness_ns > f.off_median_ns + straggler_min_lateness_sigmas * f.off_sigma_ns
                                AND o.lateness_ns > (SELECT greatest(floor_ns, periodic_floor_ns) FROM step_floor)) AS periodic_steps
    FROM off_phase f JOIN ordinary o ON o.rank = f.rank AND o.step % f.period = f.phase
    GROUP BY f.rank, f.period, f.phase, f.off_steps
), periodic AS (
    -- one rank late beyond its own off-phase spread in (nearly) every step of one phase; the
    -- period with the most such steps, then the shortest
    SELECT * FROM phase_fit
    WHERE phase_steps >= 3 AND off_steps >= 3 AND phase_hits >= periodic_min_phase_share * phase_steps
    ORDER BY phase_hits DESC, period, rank, phase LIMIT 1
), pattern AS (
    -- which pattern the lateness follows: 'persistent' (one rank, most steps), 'periodic' (one
    -- rank, every k-th step), 'moving' (beyond the noise by its own work in most steps, on changing ranks) or
    -- 'noise' (within the run's jitter: no finding)
    SELECT CASE WHEN (SELECT bool_or(persistent) FROM judged) THEN 'persistent'
                WHEN (SELECT count(*) FROM periodic) > 0 THEN 'periodic'
                WHEN (SELECT count(*) FILTER (WHERE significant AND by_own_work) FROM late_rows)
                     > straggler_min_step_share * (SELECT count(*) FROM late_rows) THEN 'moving'
                ELSE 'noise' END AS kind
), chosen AS (
    -- the persistent or periodic straggler; else the rank last most often; without steps to
    -- compare, the rank that waited least over the run (rank_balance)
    SELECT coalesce((SELECT arg_max(rank, late_steps) FROM judged WHERE persistent),
                    (SELECT rank FROM periodic),
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
), counted_steps AS (
    -- the steps whose waiting the pattern explains: every ordinary step of a persistent straggler,
    -- the periodic rank's late steps, the steps late beyond the noise when it moves; none for noise
    SELECT l.step FROM late_rows l, pattern p
    WHERE p.kind = 'persistent'
       OR (p.kind = 'periodic' AND list_contains((SELECT periodic_steps FROM periodic), l.step))
       OR (p.kind = 'moving' AND l.significant AND l.by_own_work)
), waits AS (
    SELECT sum(wait_ns) FILTER (WHERE NOT outlier AND step IN (SELECT step FROM counted_steps))
               / nullif(count(*) FILTER (WHERE NOT outlier), 0) AS ordinary_wait_ns,
           avg(wait_ns) AS all_wait_ns
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
                WHEN s.source = 'cpu' THEN coalesce(w.ordinary_wait_ns, 0)
                ELSE s.relative_cost_ns * coalesce(coalesce(w.ordinary_wait_ns, 0) / nullif(w.all_wait_ns, 0), 1) END AS cost_ns,
           -- lost_by_rank and held time in the same scale as cost_ns
           coalesce(cost_ns / nullif(s.relative_cost_ns, 0), 1) AS scale
    FROM summary s, waits w
), late_rank AS (
    SELECT j.late_steps, j.significant_steps, j.steps_compared, j.lateness_ns, j.lateness_sigma_ns,
           (SELECT jitter_ns FROM noise) AS jitter_ns, (SELECT kind FROM pattern) AS pattern,
           (SELECT period FROM periodic) AS period, (SELECT periodic_steps FROM periodic) AS periodic_steps,
           (SELECT count(*) FILTER (WHERE significant) FROM late_rows) AS beyond_noise_steps,
           (SELECT count(*) FILTER (WHERE significant AND by_own_work) FROM late_rows) AS beyond_noise_by_work_steps
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
SELECT c.straggler_rank, c.n_ranks, c.persistent, l.pattern, l.period, l.periodic_steps, l.late_steps,
       l.significant_steps, l.steps_compared, l.lateness_ns, l.lateness_sigma_ns, l.jitter_ns,
       l.beyond_noise_steps, l.beyond_noise_by_work_steps, c.imbalance_pct, c.straggler_work_ns, c.mean_work_ns, c.cost_ns,
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
