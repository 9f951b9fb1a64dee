-- requires: lib/intervals.sql lib/steps.sql lib/gpu_activity.sql lib/gpu_steps.sql lib/step_costs.sql lib/collectives.sql
-- Rank balance: which rank the others wait for, and what it costs them.
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
-- synthesizer's straggler scenario checks this against a counterfactual run). comm_exposed.sql subtracts
-- it from exposed comm so nothing is counted twice. CPU-only (gloo) ranks use the same rule with CPU time: work = step time
-- outside communication, exposed = time the training thread is blocked in communication (cpu_comm_blocked,
-- the figure comm_exposed reports for them).
--
-- Every per-step figure counts only what lies inside the steps it divides by (GPU activity
-- clipped to the rank's GPU-clock steps, lib/gpu_steps.sql; CPU time to its host steps), so it is
-- the same whether the steps are ProfilerSteps or inferred iterations, and start-up is no step's cost.
--
-- Built on lib/steps.sql, gpu_activity.sql, collectives.sql and intervals.sql.


-- gloo_spans(run): the gloo collectives' host spans (gloo:all_reduce, ...), on every rank.
-- Columns: rank, name, start_ns, end_ns, dur_ns
CREATE OR REPLACE MACRO gloo_spans(run) AS TABLE
SELECT rank, name, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns, dur_ns
FROM events
WHERE run_id = run AND kind IN ('user_annotation', 'cpu_op') AND starts_with(name, 'gloo:')
  AND dur_ns IS NOT NULL AND dur_ns >= 0;


-- collective_instances(run): every collective of the run, one row per rank and instance, with
-- its match across ranks.
-- Columns:
--   rank, source      'gpu' (an NCCL/RCCL kernel) | 'cpu' (a gloo:* span on a rank without GPU comm)
--   pg                process group name (args "Process Group Name"), '' when the trace has none
--   collective        lower-case name without underscores ('allreduce', 'sendrecv', ...)
--   nelems, bytes, group_size   from the args where present, else NULL
--   bus_factor        nccl-tests' busbw / algbw factor for this collective and group size (lib/collectives.sql)
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
    -- (sql.engine.run_cache) saves scanning every kernel's args again)
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
           c.bus_factor
    FROM comm c
    LEFT JOIN comm_args a ON a.rank = c.rank AND a.correlation = c.correlation AND a.start_ns = c.start_ns
    LEFT JOIN comm_launch l ON l.rank = c.rank AND l.correlation = c.correlation
), cpu_comm AS (
    -- gloo runs the collective on the calling thread's behalf and blocks it: the span is the wait
    SELECT rank, 'cpu' AS source, '' AS pg,
           replace(lower(regexp_extract(name, '^gloo:(\w+)', 1)), '_', '') AS collective,
           NULL::BIGINT AS nelems, NULL::BIGINT AS bytes, NULL::INTEGER AS group_size,
           NULL::INTEGER AS stream, start_ns, end_ns, dur_ns,
           start_ns AS issued_ns, NULL::DOUBLE AS bus_factor
    FROM gloo_spans(run)
    WHERE rank NOT IN (SELECT DISTINCT rank FROM gpu_comm)
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


-- cpu_comm_blocked(run, in_flight): for every rank with gloo collectives, the pieces of its
-- steps (steps(run), host clock) during which communication is in flight, and whether its
-- training thread is blocked in it. in_flight: the NAME of a table/CTE (rank, start_ns, end_ns) of
-- the gloo spans, collective_instances' CPU rows (passed in so a caller that has them does not
-- match them again).
-- Columns:
--   rank, blocked (BOOLEAN: the thread runs none of its own ops; else comm is hidden behind them)
--   start_ns, end_ns, dur_ns
-- The training thread is main_threads' (lib/steps.sql: the one carrying ProfilerStep#N, else the
-- busiest). Its own work is its cpu_ops, except ops that issue a
-- collective inside them (the autograd hook DDP all-reduces from, a comm hook that waits on its
-- future): those may be waiting, so only their children count. A torch 2.13 CPU trace records no
-- span for the wait itself (work.wait(), DDP's finalize after backward): it is the thread's
-- silence while gloo works.
CREATE OR REPLACE MACRO cpu_comm_blocked(run, in_flight) AS TABLE
WITH in_flight_spans AS MATERIALIZED (
    SELECT rank, start_ns, end_ns FROM query_table(in_flight)
), step_windows AS MATERIALIZED (
    SELECT rank AS grp, start_ns, end_ns FROM steps(run) WHERE rank IN (SELECT rank FROM in_flight_spans)
), training_threads AS (
    SELECT rank, pid, tid FROM main_threads(run) WHERE rank IN (SELECT rank FROM in_flight_spans)
), thread_ops AS MATERIALIZED (
    SELECT e.rank, e.ts_ns AS start_ns, e.ts_ns + e.dur_ns AS end_ns,
           starts_with(e.name, 'c10d::') OR starts_with(e.name, '_c10d_functional::')
               OR starts_with(e.name, 'gloo:') OR e.name = 'record_param_comms' AS is_comm
    FROM events e
    JOIN training_threads t ON t.rank = e.rank AND t.pid IS NOT DISTINCT FROM e.pid AND t.tid IS NOT DISTINCT FROM e.tid
    WHERE e.run_id = run AND e.kind = 'cpu_op' AND e.dur_ns > 0 AND NOT is_profiler_step(e.name)
), comm_ops AS (
    SELECT rank AS grp, start_ns, end_ns FROM thread_ops WHERE is_comm
), comm_starts AS (
    SELECT rank, start_ns AS comm_start_ns FROM thread_ops WHERE is_comm
), own_ops AS (
    -- ops with no collective issued inside them: the next comm op starts after they end
    SELECT o.rank AS grp, o.start_ns, o.end_ns
    FROM (SELECT * FROM thread_ops WHERE NOT is_comm) o
    ASOF LEFT JOIN comm_starts c ON c.rank = o.rank AND o.start_ns <= c.comm_start_ns
    WHERE c.comm_start_ns IS NULL OR c.comm_start_ns >= o.end_ns
), own_work AS (
    -- what runs inside a c10d op (its allocations) is that op's, i.e. communication
    SELECT grp, start_ns, end_ns FROM interval_subtract('own_ops', 'comm_ops')
), comm AS (
    SELECT rank AS grp, start_ns, end_ns FROM in_flight_spans UNION ALL SELECT * FROM comm_ops
), comm_in_steps AS MATERIALIZED (
    SELECT grp, start_ns, end_ns FROM interval_intersect('comm', 'step_windows')
)
SELECT grp AS rank, NOT in_b AS blocked, start_ns, end_ns, end_ns - start_ns AS dur_ns
FROM _interval_sweep('comm_in_steps', 'own_work')
WHERE in_a;


-- rank_gpu_work(run, host_blocked_min_ns): rank_balance's GPU figures of each rank with counted GPU
-- activity, from that rank's events alone (sql.engine.run_cache computes it rank by rank), in ns over
-- the whole trace: span_ns, compute_ns, comm_ns, exposed_ns, held_ns (NULL where it has none).
CREATE OR REPLACE MACRO rank_gpu_work(run, host_blocked_min_ns) AS TABLE
WITH act AS (
    SELECT rank, start_ns, end_ns FROM gpu_activity(run) WHERE counted
), gpu_span AS (
    SELECT rank, max(end_ns) - min(start_ns) AS span_ns FROM act GROUP BY rank
), segments AS MATERIALIZED (
    -- what the GPU does inside the steps: lib/step_costs.sql gpu_step_segments
    -- of counted activity (HTA's rule, as rank_balance's other GPU figures)
    SELECT rank, start_ns, end_ns, dur_ns, counted_compute, counted_comm FROM gpu_step_segments(run)
    WHERE counted_compute > 0 OR counted_comm > 0
), compute_union AS (
    SELECT rank, sum(dur_ns) FILTER (WHERE counted_compute > 0) AS compute_ns FROM segments GROUP BY rank
), comm_union AS (
    -- communication inside the steps: rank_step_costs' (the ranks table's comm per step)
    SELECT rank, comm_in_steps_ns AS comm_ns FROM rank_step_costs(run)
), exposed_pieces AS MATERIALIZED (
    -- communication no compute kernel overlaps
    SELECT rank AS grp, start_ns, end_ns, dur_ns FROM segments WHERE counted_compute = 0 AND counted_comm > 0
), comm_exposed AS (
    SELECT grp AS rank, sum(dur_ns) AS exposed_ns FROM exposed_pieces GROUP BY grp
), host_blocked AS (
    -- the host stuck in CUDA calls (syncs, blocking copies, launches on a full queue): while the
    -- GPU waits in a collective, this is the host being held up by it. Shorter calls are
    -- ordinary launch overhead (thresholds.HOST_BLOCKED_MIN_NS), not waiting.
    SELECT rank AS grp, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns
    FROM events WHERE run_id = run AND kind IN ('runtime', 'driver') AND dur_ns >= host_blocked_min_ns
), comm_held AS (
    SELECT grp AS rank, sum(dur_ns) AS held_ns FROM interval_intersect('exposed_pieces', 'host_blocked') GROUP BY grp
)
SELECT gs.rank, gs.span_ns, cu.compute_ns, mu.comm_ns, ce.exposed_ns, ch.held_ns
FROM gpu_span gs
LEFT JOIN compute_union cu ON cu.rank = gs.rank
LEFT JOIN comm_union mu ON mu.rank = gs.rank
LEFT JOIN comm_exposed ce ON ce.rank = gs.rank
LEFT JOIN comm_held ch ON ch.rank = gs.rank;


-- rank_balance(run): one row per rank that has work to compare (GPU activity, or CPU steps).
-- GPU figures use HTA's definitions and its ProfilerStep rule (gpu_activity.counted), like
-- metrics/rank_breakdown.sql's rank_breakdown; computed here from one pass over the activity because this is
-- the hot path of both distributed analyses.
-- Columns:
--   rank, n_steps, steps_divisor (n_steps or 1)
--   mean_step_ns          mean step duration (steps(run)); the GPU span when the rank has no steps
--   has_gpu               BOOLEAN
--   (the per-step figures count only what lies inside the rank's steps: GPU activity clipped to
--   its GPU-clock steps, gpu_steps(run), whose pseudo-step covers a step-less rank's GPU span;
--   CPU time to its host steps)
--   work_ns_per_step      GPU: union of compute kernels; CPU-only: step time the training thread is
--                         not blocked in communication
--   comm_ns_per_step      GPU: union of comm kernels; CPU-only: time communication is in flight or
--                         the training thread is in a c10d op (cpu_comm_blocked)
--   exposed_ns_per_step   GPU: comm kernel time no compute kernel overlaps; CPU-only: time the
--                         training thread is blocked in communication (cpu_comm_blocked)
--   wait_ns_per_step      union of the waits of its matched collective instances issued inside a step
--                         (all of them on a rank without steps; 0 when none matched)
--   matched_instances, instances, p2p_instances (send/recv: ranks may be pipeline stages)
--   is_straggler          BOOLEAN: the rank the others wait for (least wait when instances were
--                         matched across ranks, else the most work), one per run with >= 2 ranks
--   lost_ns_per_step      exposed time beyond the straggler's: waiting for it (0 for the straggler)
--   held_ns_per_step      exposed comm time during which the host sat in CUDA calls (held up by it);
--                         CPU-only: the exposed time (the training thread is the host)
--   held_lost_ns_per_step held time beyond the straggler's, at most lost_ns_per_step: the part of
--                         the waiting that also holds up the host. Waiting while the host does its own
--                         work (a slow data loader, Python) is hidden behind that work, and balancing
--                         the ranks alone would not win it back.
CREATE OR REPLACE MACRO rank_balance(run, host_blocked_min_ns) AS TABLE
WITH gw AS (
    SELECT * FROM rank_gpu_work(run, host_blocked_min_ns)
), ci AS MATERIALIZED (
    SELECT * FROM collective_instances(run)
), step_windows AS MATERIALIZED (
    SELECT rank AS grp, start_ns, end_ns, dur_ns FROM steps(run)
), wait_spans AS (
    -- waiting per step: only instances issued inside a step, where the rank has steps; each
    -- instance waits first, then moves the data
    SELECT rank AS grp, start_ns, start_ns + wait_ns AS end_ns
    FROM ci WHERE matched AND wait_ns > 0 AND (step IS NOT NULL OR rank NOT IN (SELECT grp FROM step_windows))
), inst AS (
    -- collectives in flight together wait for the same late rank at once: the union of their waits
    SELECT ci.rank, any_value(w.union_ns) AS wait_ns,
           count(*) FILTER (WHERE matched) AS matched_instances, count(*) AS instances,
           count(*) FILTER (WHERE collective IN ('sendrecv', 'send', 'recv')) AS p2p_instances
    FROM ci LEFT JOIN interval_union_total('wait_spans') w ON w.grp = ci.rank
    GROUP BY ci.rank
), cpu_coll_spans AS (
    SELECT rank, start_ns, end_ns FROM ci WHERE source = 'cpu'
), cpu_coll AS (
    -- gloo ranks: communication in flight within steps, and the part the training thread is blocked in
    SELECT rank, sum(dur_ns) AS coll_ns, coalesce(sum(dur_ns) FILTER (WHERE blocked), 0) AS blocked_ns
    FROM cpu_comm_blocked(run, 'cpu_coll_spans') GROUP BY rank
), step_stats AS (
    SELECT grp AS rank, count(*) AS n_steps, avg(dur_ns) AS mean_step_ns, sum(dur_ns) AS step_ns
    FROM step_windows GROUP BY grp
), per_rank AS MATERIALIZED (
    SELECT r.rank,
           coalesce(st.n_steps, 0) AS n_steps,
           greatest(coalesce(st.n_steps, 0), 1) AS steps_divisor,
           coalesce(st.mean_step_ns, gw.span_ns) AS mean_step_ns,
           gw.rank IS NOT NULL AS has_gpu,
           CASE WHEN has_gpu THEN coalesce(gw.compute_ns, 0)
                ELSE greatest(st.step_ns - coalesce(cc.blocked_ns, 0), 0) END / steps_divisor AS work_ns_per_step,
           CASE WHEN has_gpu THEN coalesce(gw.comm_ns, 0)
                ELSE coalesce(cc.coll_ns, 0) END / steps_divisor AS comm_ns_per_step,
           CASE WHEN has_gpu THEN coalesce(gw.exposed_ns, 0)
                ELSE coalesce(cc.blocked_ns, 0) END / steps_divisor AS exposed_ns_per_step,
           CASE WHEN has_gpu THEN coalesce(gw.held_ns, 0)
                ELSE coalesce(cc.blocked_ns, 0) END / steps_divisor AS held_ns_per_step,
           coalesce(i.wait_ns, 0) / steps_divisor AS wait_ns_per_step,
           coalesce(i.matched_instances, 0) AS matched_instances,
           coalesce(i.instances, 0) AS instances,
           coalesce(i.p2p_instances, 0) AS p2p_instances
    FROM ranks r
    LEFT JOIN step_stats st ON st.rank = r.rank
    LEFT JOIN gw ON gw.rank = r.rank
    LEFT JOIN inst i ON i.rank = r.rank
    LEFT JOIN cpu_coll cc ON cc.rank = r.rank
    WHERE r.run_id = run AND (gw.rank IS NOT NULL OR st.step_ns IS NOT NULL)
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


-- step_arrivals(run): per ProfilerStep and rank, how late the rank reached the step's collectives.
-- Only steps in which every compared rank has matched collective instances (a rank missing from a
-- step cannot be ranked in it); empty for traces without ProfilerSteps.
-- Columns:
--   step, rank
--   wait_ns         what it spent waiting in the step. GPU: the union of its matched instances'
--                   waits (each instance waits first, then moves the data), so that collectives in
--                   flight together, waiting for the same late rank at once, count once. CPU
--                   (gloo): the time its training thread is blocked in communication in the step
--                   (cpu_comm_blocked): a gloo span's end is when its worker thread gets a core
--                   back, which on a busy host comes milliseconds after the others', so spans'
--                   durations misstate the wait; the thread's blocked time is what the step loses
--   lateness_ns     the other ranks' mean wait minus its own: how much later than the others it
--                   arrived (negative when it arrived earlier)
--   is_last         BOOLEAN: the rank the others waited for in this step (least wait; lowest rank on a tie)
--   step_wait_ns    what the waiting ranks lost in this step: their mean wait beyond the last rank's
--                   (the same on every row of the step)
CREATE OR REPLACE MACRO step_arrivals(run) AS TABLE
WITH inst AS MATERIALIZED (
    SELECT step, rank, source, matched, start_ns, end_ns, wait_ns FROM collective_instances(run) WHERE step IS NOT NULL
), wait_spans AS (
    SELECT {'step': step, 'rank': rank} AS grp, start_ns, start_ns + wait_ns AS end_ns
    FROM inst WHERE matched AND source = 'gpu' AND wait_ns > 0
), cpu_spans AS (
    SELECT rank, start_ns, end_ns FROM inst WHERE source = 'cpu'
), step_windows AS (
    SELECT rank, step, start_ns FROM steps(run)
), cpu_blocked AS (
    SELECT s.step, b.rank, sum(b.dur_ns) AS blocked_ns
    FROM (SELECT * FROM cpu_comm_blocked(run, 'cpu_spans') WHERE blocked) b
    ASOF JOIN step_windows s ON s.rank = b.rank AND b.start_ns >= s.start_ns
    GROUP BY s.step, b.rank
), per_rank AS (
    SELECT m.step, m.rank,
           CASE WHEN any_value(m.source) = 'cpu' THEN coalesce(any_value(c.blocked_ns), 0)
                ELSE coalesce(any_value(u.union_ns), 0) END AS wait_ns
    FROM (SELECT * FROM inst WHERE matched) m
    LEFT JOIN interval_union_total('wait_spans') u ON u.grp.step = m.step AND u.grp.rank = m.rank
    LEFT JOIN cpu_blocked c ON c.step = m.step AND c.rank = m.rank
    GROUP BY m.step, m.rank
), complete AS (
    SELECT * FROM per_rank
    QUALIFY count(*) OVER (PARTITION BY step) = (SELECT count(DISTINCT rank) FROM per_rank)
        AND count(*) OVER (PARTITION BY step) >= 2
)
SELECT step, rank, wait_ns,
       (sum(wait_ns) OVER s - wait_ns) / (count(*) OVER s - 1) - wait_ns AS lateness_ns,
       row_number() OVER (PARTITION BY step ORDER BY wait_ns, rank) = 1 AS is_last,
       (sum(wait_ns) OVER s - min(wait_ns) OVER s * count(*) OVER s) / (count(*) OVER s - 1) AS step_wait_ns
FROM complete
WINDOW s AS (PARTITION BY step);


-- cpu_comm_in_steps(run, cpu_ranks): per rank of the table named cpu_ranks (column rank: the
-- ranks without GPU activity, which the caller knows) that runs gloo collectives, the time a
-- collective is in flight inside its steps (the union of its gloo spans and the training thread's
-- c10d ops, as cpu_comm_blocked splits them): the ranks table's comm per step on gloo ranks, and
-- rank_balance's comm_ns_per_step there. 0 for a rank whose collectives all lie outside its steps.
-- Columns: rank, comm_in_steps_ns
CREATE OR REPLACE MACRO cpu_comm_in_steps(run, cpu_ranks) AS TABLE
WITH in_flight AS MATERIALIZED (
    SELECT rank, start_ns, end_ns FROM gloo_spans(run) WHERE rank IN (SELECT rank FROM query_table(cpu_ranks))
), blocked AS (
    SELECT rank, sum(dur_ns) AS comm_in_steps_ns FROM cpu_comm_blocked(run, 'in_flight') GROUP BY rank
)
SELECT r.rank, coalesce(b.comm_in_steps_ns, 0) AS comm_in_steps_ns
FROM (SELECT DISTINCT rank FROM in_flight) r LEFT JOIN blocked b ON b.rank = r.rank;
