-- requires: lib/steps.sql lib/gpu_activity.sql lib/collectives.sql lib/rank_balance.sql
-- Trace integrity: what in a trace makes some figures unreliable or would fake a finding, each
-- read by analyzers/analysis/integrity.py into one plain-words note. Trace text (kernel names, log lines)
-- comes out as values, never into SQL.


-- graph_replays(run): per rank, the CUDA/HIP graphs it replayed: cudaGraphLaunch/hipGraphLaunch
-- calls and the GPU work they ran (each replayed kernel carries its launch's correlation id).
-- Columns: rank, graph_launches, replayed (kernels, copies and sets run by them), replayed_ns
CREATE OR REPLACE MACRO graph_replays(run) AS TABLE
SELECT rank, count(DISTINCT correlation) AS graph_launches, count(*) AS replayed, sum(gpu_dur_ns) AS replayed_ns
FROM launches(run)
WHERE contains(launch_name, 'GraphLaunch')
GROUP BY rank;


-- graph_captures(run): per rank, its CUDA/HIP graph captures (graph_capture_windows) and the
-- launch calls made inside them; a launch inside a capture only records work, so its kernel
-- never appears in the trace.
-- Columns: rank, captures, capture_ns, launches_in_capture, launches_without_work
CREATE OR REPLACE MACRO graph_captures(run) AS TABLE
WITH windows AS (
    SELECT rank, tid, start_ns, end_ns FROM graph_capture_windows(run)
), launch_calls AS (
    SELECT rank, coalesce(tid, '') AS tid, ts_ns, correlation
    FROM events
    WHERE run_id = run AND kind IN ('runtime', 'driver') AND contains(name, 'Launch')
      AND rank IN (SELECT rank FROM windows)
), captured AS (
    -- captures are few: a plain range join on their rank and thread
    SELECT DISTINCT c.rank, c.correlation, c.ts_ns
    FROM launch_calls c JOIN windows w ON w.rank = c.rank AND w.tid = c.tid
     AND w.start_ns <= c.ts_ns AND c.ts_ns < w.end_ns
), ran AS (
    SELECT DISTINCT rank, correlation FROM gpu_activity(run) WHERE correlation IS NOT NULL
), per_rank AS (
    SELECT c.rank, count(*) AS launches_in_capture, count(*) FILTER (WHERE r.rank IS NULL) AS launches_without_work
    FROM captured c LEFT JOIN ran r ON r.rank = c.rank AND r.correlation = c.correlation
    GROUP BY c.rank
)
SELECT w.rank, count(*) AS captures, sum(w.end_ns - w.start_ns) AS capture_ns,
       coalesce(any_value(p.launches_in_capture), 0) AS launches_in_capture,
       coalesce(any_value(p.launches_without_work), 0) AS launches_without_work
FROM windows w LEFT JOIN per_rank p ON p.rank = w.rank
GROUP BY w.rank;


-- unrecognised_comm_kernels(run): kernels that look like collective communication but that the
-- analyses cannot use as such:
--   'not_comm'     named like NCCL/RCCL/MSCCL (nccl, rccl or msccl in the name) but outside
--                  gpu_activity's comm category (HTA's ^nccl.*Kernel): counted as computation
--   'unnamed'      comm kernels whose collective is unknown (ncclDevKernel_Generic, or a name
--                  without one, and no "Collective name" arg): matched across ranks by order only
-- Columns: what, kernels, example (the most frequent name)
CREATE OR REPLACE MACRO unrecognised_comm_kernels(run) AS TABLE
SELECT 'not_comm' AS what, count(*) AS kernels, mode(name) AS example
FROM gpu_activity(run)
WHERE kind = 'kernel' AND category <> 'comm'
  -- (every name the regex accepts contains 'ccl': a cheap pre-test)
  AND contains(lower(name), 'ccl') AND regexp_matches(name, '(?i)(nccl|rccl|msccl)')
HAVING count(*) > 0
UNION ALL
SELECT 'unnamed', count(*), mode(name)
FROM collectives(run)
WHERE collective IS NULL
HAVING count(*) > 0;


-- clock_skew(run, min_ns): ranks whose clocks disagree. A collective cannot end on one rank
-- before every rank of it has started, so a matched instance (collective_instances) that starts
-- on a rank more than min_ns after it ended on another means the first rank's timestamps run
-- ahead of the second's by at least that much. Left out: point-to-point instances (send/recv
-- pair two peers, not every rank matched by order), and pairs of ranks that each look ahead of
-- the other (no clock offset does that: the instances matched are not the same operation).
-- Columns:
--   rank            the rank whose timestamps run ahead
--   behind_rank     the rank it is most often compared against (where the instance ended first)
--   instances       matched instances showing it, of matched_instances on that rank
--   min_skew_ns, median_skew_ns, max_skew_ns   how far ahead, at least (per instance)
CREATE OR REPLACE MACRO clock_skew(run, min_ns) AS TABLE
WITH matched AS (
    SELECT rank, pg, step, seq, start_ns, end_ns,
           -- the instance's first end across ranks (never the rank's own: it started before it ended)
           min(end_ns) OVER g AS first_end_ns,
           arg_min(rank, end_ns) OVER g AS first_end_rank
    FROM collective_instances(run)
    WHERE matched AND collective NOT IN ('sendrecv', 'send', 'recv')
    WINDOW g AS (PARTITION BY pg, step, seq)
), per_rank AS (
    SELECT rank, count(*) AS matched_instances FROM matched GROUP BY rank
), skewed AS (
    SELECT rank, first_end_rank, start_ns - first_end_ns AS skew_ns
    FROM matched
    WHERE start_ns - first_end_ns > min_ns
), consistent AS (
    SELECT s.* FROM skewed s
    ANTI JOIN skewed r ON r.rank = s.first_end_rank AND r.first_end_rank = s.rank
)
SELECT s.rank, mode(s.first_end_rank) AS behind_rank, count(*) AS instances,
       any_value(p.matched_instances) AS matched_instances,
       min(s.skew_ns) AS min_skew_ns, median(s.skew_ns) AS median_skew_ns, max(s.skew_ns) AS max_skew_ns
FROM consistent s JOIN per_rank p ON p.rank = s.rank
GROUP BY s.rank;


-- repeated_profiler_steps(run): ProfilerStep#N numbers that occur more than once on a rank (a file
-- joining several profiling sessions, or a loop whose numbering restarts). steps() spans each
-- number from its first range to its last, so such a "step" covers every session between them.
-- Columns: rank, numbers (how many step numbers repeat), most (the most ranges of one number),
--          example (a repeating number)
CREATE OR REPLACE MACRO repeated_profiler_steps(run) AS TABLE
WITH ranges AS (
    SELECT rank, profiler_step_number(name) AS step, count(*) AS n
    FROM events
    WHERE run_id = run AND kind IN ('cpu_op', 'user_annotation')
      AND is_profiler_step(name) AND dur_ns IS NOT NULL
    GROUP BY rank, step
    HAVING count(*) > 1
)
SELECT rank, count(*) AS numbers, max(n) AS most, min(step) AS example
FROM ranges GROUP BY rank;


-- missing_ranks(run): the job's world size (distributedInfo.world_size of any rank file) against
-- the ranks loaded; one row when ranks are missing.
-- Columns: world_size, loaded, loaded_ranks (sorted)
CREATE OR REPLACE MACRO missing_ranks(run) AS TABLE
WITH declared AS (
    SELECT max(TRY_CAST(json_extract_string(distributed_info, '$.world_size') AS INTEGER)) AS world_size
    FROM ranks WHERE run_id = run
), loaded AS (
    SELECT count(*) AS loaded, list(rank ORDER BY rank) AS loaded_ranks FROM ranks WHERE run_id = run
)
SELECT d.world_size, l.loaded, l.loaded_ranks
FROM declared d, loaded l
WHERE d.world_size > l.loaded;


-- partial_steps(run, cut_max_fraction): ranks whose trace begins or ends inside a training step.
--   'begins'  before the rank's first ProfilerStep the GPU ran work whose launch call is not in
--             the trace: it was launched before profiling began, by a step already running
--   'ends'    the rank's last ProfilerStep (of three or more) lasts under cut_max_fraction of the
--             median of its others, nothing on the host starts after it, and it does not end on
--             the host op that ends most of the steps before it (when they agree on one): the
--             trace stopped inside that step
-- Columns: rank, edge ('begins' | 'ends'), step (the cut step; for 'begins' the first full one),
--          start_ns, end_ns (the partial part), dur_ns, median_step_ns (the rank's other steps)
CREATE OR REPLACE MACRO partial_steps(run, cut_max_fraction) AS TABLE
WITH st AS (
    SELECT rank, step, start_ns, end_ns, dur_ns,
           row_number() OVER (PARTITION BY rank ORDER BY start_ns DESC) AS from_last,
           count(*) OVER (PARTITION BY rank) AS n_steps
    FROM profiler_steps(run)
), first_step AS (
    SELECT rank, arg_min(step, start_ns) AS step, min(start_ns) AS start_ns FROM st GROUP BY rank
), launched AS (
    SELECT DISTINCT rank, correlation FROM events
    WHERE run_id = run AND kind IN ('runtime', 'driver') AND correlation IS NOT NULL
), orphan_work AS (
    -- GPU work before the first step with no launch call in the trace
    SELECT g.rank, min(g.start_ns) AS start_ns, max(g.end_ns) AS end_ns
    FROM gpu_activity(run) g
    JOIN first_step f ON f.rank = g.rank AND g.start_ns < f.start_ns
    LEFT JOIN launched l ON l.rank = g.rank AND l.correlation = g.correlation
    WHERE g.correlation IS NOT NULL AND l.rank IS NULL
    GROUP BY g.rank
), begins AS (
    SELECT o.rank, 'begins' AS edge, f.step, o.start_ns, f.start_ns AS end_ns, f.start_ns - o.start_ns AS dur_ns,
           (SELECT median(dur_ns) FROM st WHERE st.rank = o.rank) AS median_step_ns
    FROM orphan_work o JOIN first_step f ON f.rank = o.rank
), others AS (
    SELECT rank, median(dur_ns) AS median_step_ns FROM st WHERE from_last > 1 GROUP BY rank
), host_after AS (
    SELECT e.rank, max(e.ts_ns) AS last_host_start_ns
    FROM events e
    WHERE e.run_id = run AND e.kind IN ('cpu_op', 'user_annotation', 'runtime', 'driver', 'python_function')
    GROUP BY e.rank
), short_last AS (
    SELECT s.rank, 'ends' AS edge, s.step, s.start_ns, s.end_ns, s.dur_ns, o.median_step_ns
    FROM st s
    JOIN others o ON o.rank = s.rank
    JOIN host_after h ON h.rank = s.rank
    WHERE s.from_last = 1 AND s.n_steps >= 3
      AND s.dur_ns < cut_max_fraction * o.median_step_ns
      AND h.last_host_start_ns <= s.end_ns
), sampled AS (
    -- the short last step and the three before it, on the (few) ranks that have one
    SELECT st.* FROM st JOIN short_last c ON c.rank = st.rank WHERE st.from_last <= 4
), step_ops AS (
    SELECT w.rank, w.from_last, e.name, e.ts_ns + e.dur_ns AS end_ns
    FROM events e JOIN sampled w ON w.rank = e.rank AND e.ts_ns >= w.start_ns AND e.ts_ns + e.dur_ns <= w.end_ns
    WHERE e.run_id = run AND e.kind IN ('cpu_op', 'user_annotation') AND e.dur_ns IS NOT NULL
      AND e.ts_ns >= (SELECT min(start_ns) FROM sampled) AND NOT is_profiler_step(e.name)
), last_ops AS (
    -- each sampled step's last-ending host op (ties: the first name)
    SELECT rank, from_last, first(name ORDER BY end_ns DESC, name) AS name FROM step_ops GROUP BY ALL
), closing AS (
    -- the host op that ends most of the steps before the last (its optimizer step, say)
    SELECT rank, name, count(*) AS agreeing, any_value(sampled) AS sampled
    FROM (SELECT *, count(*) OVER (PARTITION BY rank) AS sampled FROM last_ops WHERE from_last > 1)
    GROUP BY rank, name
    QUALIFY row_number() OVER (PARTITION BY rank ORDER BY count(*) DESC, name) = 1
), whole AS (
    -- a last step that ends on the op closing the others finished: it is only shorter (a
    -- schedule stops at a step boundary; the last step of a varying loop may simply be quick)
    SELECT c.rank FROM closing c JOIN last_ops l ON l.rank = c.rank AND l.from_last = 1 AND l.name = c.name
    WHERE 2 * c.agreeing > c.sampled
), ends AS (
    SELECT * FROM short_last WHERE rank NOT IN (SELECT rank FROM whole)
)
SELECT * FROM begins
UNION ALL
SELECT * FROM ends;


-- kineto_log_warnings(run): lines of the profiler's own log (the trace's top-level INFO, WARNING
-- and ERROR lists, kept in ranks.trace_meta) that say events were lost:
--   'dropped'      "Dropped N activity records" (CUPTI's dropped-record count), or any WARNING /
--                  ERROR line that mentions dropped records or events
--   'buffer_full'  "Exceeded max GPU buffer count ... terminating tracing": CUPTI stopped
--                  recording GPU activity before the trace ended
--   'stopped_early' the "Record counts" line with "CUPTI stopped early? = 1"
-- Columns: rank, what, level ('INFO' | 'WARNING' | 'ERROR'), line, dropped (N, when the line says)
CREATE OR REPLACE MACRO kineto_log_warnings(run) AS TABLE
WITH levels AS (
    SELECT rank, unnest(['INFO', 'WARNING', 'ERROR']) AS level, trace_meta
    FROM ranks WHERE run_id = run AND trace_meta IS NOT NULL
), lines AS (
    SELECT rank, level, unnest(TRY_CAST(json_extract(trace_meta, '$.' || level) AS VARCHAR[])) AS line
    FROM levels
    WHERE json_type(trace_meta, '$.' || level) = 'ARRAY'
), classified AS (
    SELECT rank, level, line,
           CASE WHEN regexp_matches(line, 'Exceeded max GPU buffer count') THEN 'buffer_full'
                WHEN regexp_matches(line, 'CUPTI stopped early\? = (1|true)') THEN 'stopped_early'
                WHEN regexp_matches(line, '(?i)dropped \d+ activity records')
                     OR (level <> 'INFO'
                         AND regexp_matches(line, '(?i)dropped.*(record|event)s?|(record|event)s? dropped'))
                     THEN 'dropped' END AS what
    FROM lines
)
SELECT rank, what, level, line,
       TRY_CAST(nullif(regexp_extract(line, '(?i)dropped (\d+)', 1), '') AS BIGINT) AS dropped
FROM classified
WHERE what IS NOT NULL;
