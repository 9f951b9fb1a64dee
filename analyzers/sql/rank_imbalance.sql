-- Rank imbalance (issue #3, analysis 3): which rank the others wait for, and what it costs them.
--
-- A collective finishes on every rank at (about) the same moment: when the last rank has
-- arrived and the data has moved. So the same collective, seen on every rank, lasts longest on
-- the rank that arrived first; its shortest instance across ranks is its true duration (the
-- transfer) and the rest of each instance is time spent waiting for the last rank. Instances
-- are matched across ranks by their order within (process group, ProfilerStep), and only when
-- every rank agrees on the collective's name and size.
--
-- What a waiting rank loses: the time its GPU spends in collectives with nothing else to do
-- (comm not hidden under its compute) beyond what the straggler itself spends that way. The
-- straggler never waits, so its exposed comm is pure transfer; everything another rank is
-- exposed beyond that is waiting for the straggler: the most the rank can get back if the work
-- were balanced (all of it when the rank has no stall of its own hidden behind the wait; the
-- synthesizer's straggler scenario checks this against a counterfactual run). comm.sql subtracts
-- it from exposed comm so nothing is counted twice. CPU-only (gloo) ranks use the same rule with CPU time: work = step time
-- outside collectives, exposed = time inside collectives (gloo blocks the calling thread).
--
-- Built on views.sql (steps, gpu_activity, collectives) and intervals.sql.


-- collective_instances(run): every collective of the run, one row per rank and instance, with
-- its match across ranks.
-- Columns:
--   rank, source      'gpu' (an NCCL/RCCL kernel) | 'cpu' (a gloo:* span on a rank without GPU comm)
--   pg                process group name (args "Process Group Name"), '' when the trace has none
--   collective        lower-case name without underscores ('allreduce', 'sendrecv', ...)
--   nelems, bytes, group_size   from the args where present, else NULL
--   bus_factor        nccl-tests' busbw / algbw factor for this collective and group size (views.sql)
--   stream            the GPU stream (NULL for CPU spans)
--   step              ProfilerStep#N whose CPU window issued it (NULL outside every step)
--   seq               order of the instance within (rank, pg, step)
--   start_ns, end_ns, dur_ns
--   matched           BOOLEAN: at least two ranks have an instance with this (pg, step, seq),
--                     the same collective name and element count, and as many instances in
--                     that (pg, step) (else the order is not the same collective everywhere)
--   matched_ranks     how many ranks share it (1 when unmatched)
--   true_dur_ns       shortest matched instance (its own duration when unmatched)
--   wait_ns           dur_ns - true_dur_ns: time spent waiting for other ranks
CREATE OR REPLACE MACRO collective_instances(run) AS TABLE
WITH step_windows AS (
    SELECT rank, step, start_ns, end_ns FROM steps(run)
), comm AS MATERIALIZED (
    SELECT * FROM collectives(run) WHERE counted
), comm_args AS (
    -- the process group is in the kernel's args, which collectives() does not carry
    -- (read from gpu_activity: its kernels are these events, and a cached gpu_activity
    -- (sqlrun.run_cache) saves scanning every kernel's args again)
    SELECT e.rank, e.correlation, e.start_ns,
           json_extract_string(e.args, '$."Process Group Name"') AS pg
    FROM gpu_activity(run) e
    WHERE e.kind = 'kernel' AND e.correlation IS NOT NULL
      AND (e.rank, e.correlation) IN (SELECT (rank, correlation) FROM comm)
), comm_launch AS (
    -- when the CPU issued it: that decides its ProfilerStep (launches() by correlation)
    SELECT e.rank, e.correlation, min(e.ts_ns) AS launch_start_ns
    FROM events e
    WHERE e.run_id = run AND e.kind IN ('runtime', 'driver') AND e.correlation IS NOT NULL
      AND (e.rank, e.correlation) IN (SELECT (rank, correlation) FROM comm)
    GROUP BY e.rank, e.correlation
), gpu_comm AS (
    SELECT c.rank, 'gpu' AS source, coalesce(a.pg, '') AS pg,
           replace(c.collective, '_', '') AS collective, c.nelems, c.bytes, c.group_size, c.stream,
           c.start_ns, c.end_ns, c.dur_ns, coalesce(l.launch_start_ns, c.start_ns) AS issued_ns,
           c.busbw_gbps / nullif(c.algbw_gbps, 0) AS bus_factor
    FROM comm c
    LEFT JOIN comm_args a ON a.rank = c.rank AND a.correlation = c.correlation AND a.start_ns = c.start_ns
    LEFT JOIN comm_launch l ON l.rank = c.rank AND l.correlation = c.correlation
), cpu_comm AS (
    -- gloo runs the collective on the calling thread's behalf and blocks it: the span is the wait
    SELECT rank, 'cpu' AS source, '' AS pg,
           replace(lower(regexp_extract(name, '^gloo:(\w+)', 1)), '_', '') AS collective,
           NULL::BIGINT AS nelems, NULL::BIGINT AS bytes, NULL::INTEGER AS group_size,
           NULL::INTEGER AS stream, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns, dur_ns,
           ts_ns AS issued_ns, NULL::DOUBLE AS bus_factor
    FROM events
    WHERE run_id = run AND kind IN ('user_annotation', 'cpu_op') AND name LIKE 'gloo:%'
      AND dur_ns IS NOT NULL AND dur_ns >= 0
      AND rank NOT IN (SELECT DISTINCT rank FROM gpu_comm)
), all_comm AS (
    SELECT * FROM gpu_comm UNION ALL BY NAME SELECT * FROM cpu_comm
), stepped AS (
    SELECT a.*, CASE WHEN a.issued_ns < s.end_ns THEN s.step END AS step
    FROM all_comm a ASOF LEFT JOIN step_windows s ON a.rank = s.rank AND a.issued_ns >= s.start_ns
), numbered AS (
    SELECT *, row_number() OVER (PARTITION BY rank, pg, step ORDER BY start_ns, end_ns) AS seq,
           count(*) OVER (PARTITION BY rank, pg, step) AS in_step
    FROM stepped
), grouped AS (
    SELECT *,
           count(*) OVER g AS n_ranks,
           min(dur_ns) OVER g AS min_dur_ns,
           min(collective) OVER g IS NOT DISTINCT FROM max(collective) OVER g AS same_collective,
           coalesce(min(nelems) OVER g = max(nelems) OVER g, true)
               AND count(nelems) OVER g IN (0, count(*) OVER g) AS same_size,
           -- a rank with an instance more or less in this step would shift the order: match none
           min(in_step) OVER (PARTITION BY pg, step) = max(in_step) OVER (PARTITION BY pg, step) AS same_count
    FROM numbered
    WINDOW g AS (PARTITION BY pg, step, seq)
)
SELECT rank, source, pg, collective, nelems, bytes, bus_factor, group_size, stream, step, seq,
       start_ns, end_ns, dur_ns,
       n_ranks >= 2 AND same_collective AND same_size AND same_count AS matched,
       CASE WHEN matched THEN n_ranks ELSE 1 END AS matched_ranks,
       CASE WHEN matched THEN min_dur_ns ELSE dur_ns END AS true_dur_ns,
       dur_ns - true_dur_ns AS wait_ns
FROM grouped;


-- rank_balance(run): one row per rank that has work to compare (GPU activity, or CPU steps).
-- GPU figures use HTA's definitions and its ProfilerStep rule (gpu_activity.counted), like
-- metrics.sql's rank_breakdown; computed here from one pass over the activity because this is
-- the hot path of both distributed analyses.
-- Columns:
--   rank, n_steps, steps_divisor (n_steps or 1)
--   mean_step_ns          mean ProfilerStep duration; the GPU span when the rank has no steps
--   has_gpu               BOOLEAN
--   work_ns_per_step      GPU: union of compute kernels; CPU-only: step time outside collectives
--   comm_ns_per_step      GPU: union of comm kernels; CPU-only: time in collectives (within steps)
--   exposed_ns_per_step   GPU: comm kernel time no compute kernel overlaps; CPU-only: time in collectives
--   wait_ns_per_step      summed wait of its matched collective instances (0 when none matched)
--   matched_instances, instances, p2p_instances (send/recv: ranks may be pipeline stages)
--   is_straggler          BOOLEAN: the rank the others wait for (least wait when instances were
--                         matched across ranks, else the most work), one per run with >= 2 ranks
--   lost_ns_per_step      exposed time beyond the straggler's: waiting for it (0 for the straggler)
--   held_ns_per_step      exposed comm time during which the host sat in CUDA calls (held up by it);
--                         CPU-only: time in collectives
--   held_lost_ns_per_step held time beyond the straggler's, at most lost_ns_per_step: the part of
--                         the waiting that also holds up the host. Waiting while the host does its own
--                         work (a slow data loader, Python) is hidden behind that work, and balancing
--                         the ranks alone would not win it back.
CREATE OR REPLACE MACRO rank_balance(run) AS TABLE
WITH act AS MATERIALIZED (
    SELECT rank AS grp, start_ns, end_ns, category FROM gpu_activity(run) WHERE counted
), compute_act AS (
    SELECT grp, start_ns, end_ns FROM act WHERE category = 'compute'
), comm_act AS (
    SELECT grp, start_ns, end_ns FROM act WHERE category = 'comm'
), gpu_span AS (
    SELECT grp AS rank, max(end_ns) - min(start_ns) AS span_ns FROM act GROUP BY grp
), compute_union AS (
    SELECT grp AS rank, union_ns AS compute_ns FROM interval_union_total('compute_act')
), comm_union AS (
    SELECT grp AS rank, union_ns AS comm_ns FROM interval_union_total('comm_act')
), exposed_pieces AS MATERIALIZED (
    SELECT grp, start_ns, end_ns, dur_ns FROM interval_subtract('comm_act', 'compute_act')
), comm_exposed AS (
    SELECT grp AS rank, sum(dur_ns) AS exposed_ns FROM exposed_pieces GROUP BY grp
), host_blocked AS (
    -- the host stuck in CUDA calls (syncs, blocking copies, launches on a full queue): while the
    -- GPU waits in a collective, this is the host being held up by it. Calls under 20 us are
    -- ordinary launch overhead (a cudaLaunchKernel costs ~5-10 us), not waiting.
    SELECT rank AS grp, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns
    FROM events WHERE run_id = run AND kind IN ('runtime', 'driver') AND dur_ns >= 20000
), comm_held AS (
    SELECT grp AS rank, sum(dur_ns) AS held_ns FROM interval_intersect('exposed_pieces', 'host_blocked') GROUP BY grp
), ci AS MATERIALIZED (
    SELECT * FROM collective_instances(run)
), inst AS (
    SELECT rank, sum(wait_ns) FILTER (WHERE matched) AS wait_ns,
           count(*) FILTER (WHERE matched) AS matched_instances, count(*) AS instances,
           count(*) FILTER (WHERE collective IN ('sendrecv', 'send', 'recv')) AS p2p_instances
    FROM ci GROUP BY rank
), cpu_coll_spans AS (
    SELECT rank AS grp, start_ns, end_ns FROM ci WHERE source = 'cpu'
), step_windows AS MATERIALIZED (
    SELECT rank AS grp, start_ns, end_ns, dur_ns FROM steps(run)
), cpu_coll AS (
    -- only the part inside ProfilerSteps, the windows work is measured in
    SELECT grp AS rank, sum(dur_ns) AS coll_ns FROM interval_intersect('cpu_coll_spans', 'step_windows') GROUP BY grp
), step_stats AS (
    SELECT grp AS rank, count(*) AS n_steps, avg(dur_ns) AS mean_step_ns, sum(dur_ns) AS step_ns
    FROM step_windows GROUP BY grp
), per_rank AS MATERIALIZED (
    SELECT r.rank,
           coalesce(st.n_steps, 0) AS n_steps,
           greatest(coalesce(st.n_steps, 0), 1) AS steps_divisor,
           coalesce(st.mean_step_ns, gs.span_ns) AS mean_step_ns,
           gs.rank IS NOT NULL AS has_gpu,
           CASE WHEN has_gpu THEN coalesce(cu.compute_ns, 0)
                ELSE greatest(st.step_ns - coalesce(cc.coll_ns, 0), 0) END / steps_divisor AS work_ns_per_step,
           CASE WHEN has_gpu THEN coalesce(mu.comm_ns, 0)
                ELSE coalesce(cc.coll_ns, 0) END / steps_divisor AS comm_ns_per_step,
           CASE WHEN has_gpu THEN coalesce(ce.exposed_ns, 0)
                ELSE coalesce(cc.coll_ns, 0) END / steps_divisor AS exposed_ns_per_step,
           CASE WHEN has_gpu THEN coalesce(ch.held_ns, 0)
                ELSE coalesce(cc.coll_ns, 0) END / steps_divisor AS held_ns_per_step,
           coalesce(i.wait_ns, 0) / steps_divisor AS wait_ns_per_step,
           coalesce(i.matched_instances, 0) AS matched_instances,
           coalesce(i.instances, 0) AS instances,
           coalesce(i.p2p_instances, 0) AS p2p_instances
    FROM ranks r
    LEFT JOIN step_stats st ON st.rank = r.rank
    LEFT JOIN gpu_span gs ON gs.rank = r.rank
    LEFT JOIN compute_union cu ON cu.rank = r.rank
    LEFT JOIN comm_union mu ON mu.rank = r.rank
    LEFT JOIN comm_exposed ce ON ce.rank = r.rank
    LEFT JOIN comm_held ch ON ch.rank = r.rank
    LEFT JOIN inst i ON i.rank = r.rank
    LEFT JOIN cpu_coll cc ON cc.rank = r.rank
    WHERE r.run_id = run AND (gs.rank IS NOT NULL OR st.step_ns IS NOT NULL)
), ranked AS (
    SELECT *,
           row_number() OVER (ORDER BY
               CASE WHEN (SELECT count(*) FROM per_rank WHERE matched_instances > 0) >= 2
                    THEN wait_ns_per_step END ASC NULLS LAST,
               work_ns_per_step DESC NULLS LAST, rank) = 1
           AND count(*) OVER () >= 2 AS is_straggler
    FROM per_rank
)
SELECT r.*,
       CASE WHEN r.is_straggler THEN 0
            ELSE greatest(r.exposed_ns_per_step
                          - coalesce(max(r.exposed_ns_per_step) FILTER (WHERE r.is_straggler) OVER (), r.exposed_ns_per_step),
                          0) END AS lost_ns_per_step,
       CASE WHEN r.is_straggler THEN 0
            ELSE least(greatest(r.held_ns_per_step
                                - coalesce(max(r.held_ns_per_step) FILTER (WHERE r.is_straggler) OVER (), r.held_ns_per_step),
                                0), lost_ns_per_step) END AS held_lost_ns_per_step
FROM ranked r;


-- rank_imbalance_report(run): at most one row (runs with two or more ranks to compare): the
-- straggler, what the imbalance costs, and where it shows.
-- Columns:
--   straggler_rank, n_ranks
--   imbalance_pct          (max - mean) / mean of work per step across ranks, in %
--   straggler_work_ns, mean_work_ns   per step
--   cost_ns                time each other rank loses per step (mean of their lost_ns_per_step)
--   held_cost_ns           the part of it that holds up their hosts too (mean held_lost_ns_per_step)
--   max_lost_ns, max_lost_rank        the rank that loses most
--   mean_step_ns           mean step time over the ranks
--   wait_ns_per_step       mean matched in-collective wait of the other ranks (evidence)
--   matched                BOOLEAN: collective instances were matched across ranks
--   point_to_point         BOOLEAN: send/recv seen (pipeline stages run different layers by design)
--   source                 'gpu' | 'cpu' (what work and waiting were measured on)
--   lost_by_rank           LIST of {rank, lost_ns}
--   steps                  LIST of {step, wait_ns (mean over the waiting ranks), start_ns, end_ns
--                          (the straggler's window)}, by step
--   wait_start_ns, wait_end_ns   the matched collective a waiting rank waited in longest (the
--                          window to show when the trace has no ProfilerSteps)
CREATE OR REPLACE MACRO rank_imbalance_report(run) AS TABLE
WITH rb AS MATERIALIZED (
    SELECT * FROM rank_balance(run)
), straggler AS (
    SELECT rank FROM rb WHERE is_straggler
), step_waits AS (
    SELECT i.step, sum(i.wait_ns) / greatest((SELECT count(*) FROM rb) - 1, 1) AS wait_ns
    FROM collective_instances(run) i
    WHERE i.matched AND i.step IS NOT NULL AND i.rank NOT IN (SELECT rank FROM straggler)
    GROUP BY i.step
), step_rows AS (
    SELECT list({'step': w.step, 'wait_ns': w.wait_ns, 'start_ns': s.start_ns, 'end_ns': s.end_ns}
                ORDER BY w.step) AS steps
    FROM step_waits w
    LEFT JOIN steps(run) s ON s.step = w.step AND s.rank = (SELECT rank FROM straggler)
), summary AS (
    SELECT (SELECT rank FROM straggler) AS straggler_rank,
           count(*) AS n_ranks,
           100.0 * (max(work_ns_per_step) - avg(work_ns_per_step)) / nullif(avg(work_ns_per_step), 0) AS imbalance_pct,
           max(work_ns_per_step) FILTER (WHERE is_straggler) AS straggler_work_ns,
           avg(work_ns_per_step) AS mean_work_ns,
           coalesce(avg(lost_ns_per_step) FILTER (WHERE NOT is_straggler), 0) AS cost_ns,
           coalesce(avg(held_lost_ns_per_step) FILTER (WHERE NOT is_straggler), 0) AS held_cost_ns,
           max(lost_ns_per_step) AS max_lost_ns,
           arg_max(rank, lost_ns_per_step) AS max_lost_rank,
           avg(mean_step_ns) AS mean_step_ns,
           avg(wait_ns_per_step) FILTER (WHERE NOT is_straggler) AS wait_ns_per_step,
           sum(matched_instances) > 0 AS matched,
           sum(p2p_instances) > 0 AS point_to_point,
           CASE WHEN bool_and(has_gpu) THEN 'gpu' ELSE 'cpu' END AS source,
           list({'rank': rank, 'lost_ns': lost_ns_per_step} ORDER BY rank) AS lost_by_rank
    FROM rb
    HAVING count(*) >= 2
), longest_wait AS (
    -- the window where the waiting shows when there are no steps to name one
    SELECT arg_max(i.start_ns, (i.wait_ns, -i.start_ns)) AS wait_start_ns,
           arg_max(i.end_ns, (i.wait_ns, -i.start_ns)) AS wait_end_ns
    FROM collective_instances(run) i
    WHERE i.matched AND i.rank NOT IN (SELECT rank FROM straggler)
)
SELECT summary.*, coalesce(step_rows.steps, []) AS steps, longest_wait.wait_start_ns, longest_wait.wait_end_ns
FROM summary, step_rows, longest_wait;


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
