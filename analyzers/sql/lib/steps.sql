-- requires: lib/intervals.sql lib/workload.sql
-- Per-run views over `events` (schema.sql): table macros taking the run id as a value
-- parameter, e.g. `SELECT * FROM gpu_activity($run_id)`. Every analysis reads these instead
-- of raw events, so Kineto-generation differences are handled once, here.


-- is_profiler_step(name): BOOLEAN, the event is a ProfilerStep#N range (torch.profiler's step
-- annotation). starts_with first: a cheap test that rejects the million other op names before the regex.
CREATE OR REPLACE MACRO is_profiler_step(name) AS
    starts_with(name, 'ProfilerStep') AND regexp_matches(name, '^ProfilerStep\s*#\s*\d+');

-- profiler_step_number(name): INTEGER, N of a ProfilerStep#N name.
CREATE OR REPLACE MACRO profiler_step_number(name) AS
    CAST(regexp_extract(name, '^ProfilerStep\s*#\s*(\d+)', 1) AS INTEGER);


-- profiler_steps(run): ProfilerStep#N windows per rank, as the CPU saw them.
-- A step annotated on several threads (or twice) keeps its widest window.
-- Columns:
--   run_id, rank
--   step        INTEGER  N of ProfilerStep#N
--   start_ns, end_ns, dur_ns
CREATE OR REPLACE MACRO profiler_steps(run) AS TABLE
SELECT run_id, rank,
       profiler_step_number(name) AS step,
       min(ts_ns) AS start_ns, max(ts_ns + dur_ns) AS end_ns, max(ts_ns + dur_ns) - min(ts_ns) AS dur_ns
FROM events
WHERE run_id = run AND kind IN ('cpu_op', 'user_annotation')
  AND is_profiler_step(name) AND dur_ns IS NOT NULL
GROUP BY run_id, rank, step;



-- profiler_step_names(run): how many distinct ProfilerStep#N numbers the whole run has (one row),
-- the run-wide fact gpu_activity's HTA step rule reads (sql.engine.run_cache keeps it for rank passes).
CREATE OR REPLACE MACRO profiler_step_names(run) AS TABLE
SELECT count(DISTINCT step) AS n_step_names FROM profiler_steps(run);

-- stepless_top_level_ops(run): on each rank without ProfilerStep ranges, its host ranges (cpu_op,
-- user_annotation) that no other range of their thread encloses (depth 0 by lib/intervals.sql
-- event_depth). Python frames, which enclose everything, are left out.
-- Columns:
--   rank     INTEGER
--   pid, tid VARCHAR  as in events
--   name     VARCHAR
--   start_ns, end_ns  BIGINT
CREATE OR REPLACE MACRO stepless_top_level_ops(run) AS TABLE
WITH host_ranges AS MATERIALIZED (
    SELECT row_number() OVER () AS id, rank, pid, tid, name, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns
    FROM events
    WHERE run_id = run AND kind IN ('cpu_op', 'user_annotation') AND dur_ns IS NOT NULL
      AND rank NOT IN (SELECT rank FROM profiler_steps(run))
), thread_ranges AS (
    SELECT hash(rank, pid, tid) AS grp, id, start_ns, end_ns FROM host_ranges
)
SELECT h.rank, h.pid, h.tid, h.name, h.start_ns, h.end_ns
FROM event_depth('thread_ranges') d JOIN host_ranges h ON h.id = d.id
WHERE d.depth = 0;

-- stepless_main_threads(top_level): main_threads' choice on the ranks without ProfilerSteps, from
-- the NAME of a table of their top-level ops (stepless_top_level_ops' columns).
-- Columns: rank, pid, tid, source ('process_main' | 'busiest')
CREATE OR REPLACE MACRO stepless_main_threads(top_level) AS TABLE
SELECT rank, pid, tid, CASE WHEN tid = pid THEN 'process_main' ELSE 'busiest' END AS source
FROM query_table(top_level)
GROUP BY rank, pid, tid
QUALIFY row_number() OVER (PARTITION BY rank ORDER BY tid = pid DESC, sum(end_ns - start_ns) DESC,
                                                      pid NULLS LAST, tid NULLS LAST) = 1;

-- main_threads(run): each rank's training thread, the one host thread the step-level views read
-- (cpu_comm_blocked's own work and blocked time, inferred_steps' repeating op, the timeline's first
-- CPU lane). First choice first:
--   'profiler_step'  the thread carrying the rank's ProfilerStep#N ranges (of several, the one
--                    with the most step time)
--   'process_main'   on a rank without them, the process's main thread, where a training loop
--                    runs: Kineto writes it with the process id as its tid (of several processes,
--                    the one with the most top-level op time, stepless_top_level_ops)
--   'busiest'        else the thread with the most top-level op time
-- Ties: the lowest pid, then tid. One row per rank with host ops.
-- Columns:
--   rank     INTEGER
--   pid, tid VARCHAR  as in events (NULL where the trace has none)
--   source   VARCHAR  'profiler_step' | 'process_main' | 'busiest'
CREATE OR REPLACE MACRO main_threads(run) AS TABLE
WITH step_threads AS (
    SELECT rank, pid, tid, 'profiler_step' AS source
    FROM events
    WHERE run_id = run AND kind IN ('cpu_op', 'user_annotation') AND is_profiler_step(name) AND dur_ns IS NOT NULL
    GROUP BY rank, pid, tid
    QUALIFY row_number() OVER (PARTITION BY rank ORDER BY sum(dur_ns) DESC, pid NULLS LAST, tid NULLS LAST) = 1
), top_level AS (
    SELECT * FROM stepless_top_level_ops(run)
)
SELECT * FROM step_threads
UNION ALL
SELECT * FROM stepless_main_threads('top_level');

-- inferred_steps(run): training iterations of the ranks WITHOUT ProfilerStep ranges (a profile
-- taken without a schedule, torch.autograd.profiler captures, inference), found where the rank's
-- host activity repeats. The marker that repeats, first choice first:
--   'dataloader'  enumerate(DataLoader)#...__next__: the loop fetching its next batch
--   'optimizer'   Optimizer.step#...: the end of each training step
--   'op'          a top-level op (not inside another op) of the rank's training thread
--                 (main_threads) that recurs over the whole loop: of the names
--                 whose first-to-last occurrence spans at least 90% of the widest such span, the
--                 rarest (once per iteration), the earliest on a tie
-- A marker must occur at least 3 times on one thread (of several threads or names, the most
-- frequent). An iteration runs from one occurrence's start to the next one's; the first
-- iteration (CUDA context creation, lazy module loading, the first batch) is start-up, not a
-- step, and so are the iterations right after it that last over twice the median (at most half
-- of them); they are left out, as is the last occurrence, which starts no complete iteration.
-- Columns:
--   run_id, rank
--   step        INTEGER  the iteration's number (the first, start-up, is 0), the same on every
--               rank that infers from the same loop
--   start_ns, end_ns, dur_ns
--   source      'inferred:dataloader' | 'inferred:optimizer' | 'inferred:op'
--   marker      the name of the repeating event
CREATE OR REPLACE MACRO inferred_steps(run) AS TABLE
WITH stepless_ranks AS MATERIALIZED (
    SELECT DISTINCT rank FROM events WHERE run_id = run
    EXCEPT
    SELECT rank FROM profiler_steps(run)
), host_ops AS MATERIALIZED (
    -- (a semi-join on the few step-less ranks: a run whose ranks all have ProfilerSteps reads
    -- no op names here)
    SELECT rank, tid, kind, name, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns
    FROM events
    WHERE run_id = run AND kind IN ('cpu_op', 'user_annotation', 'python_function') AND dur_ns IS NOT NULL
      AND rank IN (SELECT rank FROM stepless_ranks)
), named_markers AS (
    SELECT rank, tid, name, start_ns,
           CASE WHEN starts_with(name, 'enumerate(DataLoader)') THEN 'dataloader' ELSE 'optimizer' END AS what
    FROM host_ops
    WHERE (starts_with(name, 'enumerate(DataLoader)') AND ends_with(name, '__next__'))
       OR starts_with(name, 'Optimizer.step#')
), named_candidates AS (
    SELECT rank, tid, name, what, count(DISTINCT start_ns) AS occurrences, min(start_ns) AS first_ns,
           CASE what WHEN 'dataloader' THEN 1 ELSE 2 END AS preference
    FROM named_markers
    GROUP BY rank, tid, name, what
    HAVING count(DISTINCT start_ns) >= library_threshold('INFERRED_STEP_MIN_REPEATS')
), top_level AS MATERIALIZED (
    SELECT * FROM stepless_top_level_ops(run)
), recurring_ops AS (
    -- on the training thread (main_threads' choice on a rank without ProfilerSteps)
    SELECT t.rank, t.tid, t.name, count(DISTINCT t.start_ns) AS occurrences, min(t.start_ns) AS first_ns,
           max(t.start_ns) - min(t.start_ns) AS spread_ns
    FROM top_level t JOIN stepless_main_threads('top_level') m
         ON m.rank = t.rank AND m.pid IS NOT DISTINCT FROM t.pid AND m.tid IS NOT DISTINCT FROM t.tid
    WHERE t.rank NOT IN (SELECT rank FROM named_candidates)
    GROUP BY t.rank, t.tid, t.name
    HAVING count(DISTINCT t.start_ns) >= library_threshold('INFERRED_STEP_MIN_REPEATS')
), candidates AS (
    SELECT * FROM named_candidates
    UNION ALL
    SELECT rank, tid, name, 'op', occurrences, first_ns, 3
    FROM recurring_ops
    QUALIFY spread_ns >= library_threshold('INFERRED_STEP_MIN_SPREAD_FRACTION') * max(spread_ns) OVER (PARTITION BY rank)
), chosen AS (
    -- named markers: the most frequent; top-level ops: the rarest recurring one
    SELECT rank, tid, name, what
    FROM candidates
    QUALIFY row_number() OVER (PARTITION BY rank ORDER BY preference,
                               CASE WHEN what = 'op' THEN occurrences ELSE -occurrences END, first_ns, name) = 1
), occurrences AS (
    SELECT DISTINCT h.rank, c.what, c.name, h.start_ns
    FROM host_ops h JOIN chosen c ON c.rank = h.rank AND c.tid IS NOT DISTINCT FROM h.tid AND c.name = h.name
), iterations AS (
    SELECT * FROM (
        SELECT rank, what, name, start_ns,
               lead(start_ns) OVER (PARTITION BY rank ORDER BY start_ns) AS end_ns,
               row_number() OVER (PARTITION BY rank ORDER BY start_ns) - 1 AS step
        FROM occurrences)
    WHERE end_ns IS NOT NULL AND step >= 1
), start_up AS (
    -- iterations right after the first that still last over twice the rank's median iteration
    -- (first collectives connecting, allocator and autotuning warming up) are start-up too; at
    -- most half of them
    SELECT *, bool_and(end_ns - start_ns > library_threshold('START_UP_ITERATION_MEDIANS') * median_ns) OVER (PARTITION BY rank ORDER BY step
                                                                 ROWS UNBOUNDED PRECEDING)
                  AND step <= n_iterations / 2 AS is_start_up
    FROM (SELECT *, median(end_ns - start_ns) OVER (PARTITION BY rank) AS median_ns,
                 count(*) OVER (PARTITION BY rank) AS n_iterations
          FROM iterations)
)
SELECT run AS run_id, rank, CAST(step AS INTEGER) AS step, start_ns, end_ns, end_ns - start_ns AS dur_ns,
       'inferred:' || what AS source, name AS marker
FROM start_up
WHERE NOT is_start_up;


-- is_engine_step_name(name): BOOLEAN, a host range named as a serving engine's iteration: vLLM's
-- execute_model, LLMEngine.step / EngineCore.step, SGLang's run_batch / forward_batch*, or a range
-- named for its phase (prefill, extend (SGLang's prefill), decode) as engines and users annotate them.
CREATE OR REPLACE MACRO is_engine_step_name(name) AS
    regexp_matches(name, '(?i)^(execute_model|(LLMEngine|EngineCore|engine)[._]?step|run_batch|forward_batch\w*)$')
    OR regexp_matches(name, '(?i)(^|[^a-z])(prefill|extend|decode)([^a-z]|$)');

-- step_phase_of(name): 'prefill' | 'decode' | NULL, the inference phase a range's name says (SGLang
-- calls prefill "extend").
CREATE OR REPLACE MACRO step_phase_of(name) AS
    CASE WHEN regexp_matches(name, '(?i)(^|[^a-z])(prefill|extend)([^a-z]|$)') THEN 'prefill'
         WHEN regexp_matches(name, '(?i)(^|[^a-z])decode([^a-z]|$)') THEN 'decode' END;

-- engine_iterations(run): on an inference run (run_workload), each rank's engine iterations (a
-- decode or prefill step, an engine step, a denoising step), where its main thread (main_threads)
-- shows a range that recurs through the profiled window. Serving traces hold one ProfilerStep over
-- many iterations, or none; the unit a serving engineer reasons in is the iteration. First choice first:
--   'engine_step'  ranges named as the engine's iteration (is_engine_step_name): all of them at the
--                  shallowest depth they occur at, together (a prefill and the decodes after it
--                  are one loop)
--   'repeated_op'  on a rank with ProfilerSteps, a range inside them that recurs at one depth (its
--                  name), its occurrences covering at least ENGINE_ITERATION_MIN_COVERAGE of the
--                  ProfilerSteps' time: the model's forward per iteration (a torch.compile region, a
--                  CUDA-graph replay, a module's forward annotated); of several, the shallowest,
--                  then the most covering, then the rarest. aten:: ops are one operator of a forward,
--                  never an iteration. (A rank without ProfilerSteps has inferred_steps' recurring
--                  top-level op, with its start-up rule.)
-- Either must occur at least INFERRED_STEP_MIN_REPEATS times, its occurrences must not overlap, and
-- it must occur more often than the rank's ProfilerSteps (where each ProfilerStep holds one
-- iteration, the ProfilerStep is the iteration already and stays). Nothing recurring: no rows (the
-- rank keeps its ProfilerSteps or inferred_steps). An iteration runs from one occurrence's start to
-- the next one's, the last to its own end; every one is a step (a serving loop is warm when profiled,
-- so no start-up rule: a slow first iteration shows as a slow step).
-- Columns:
--   run_id, rank
--   step        INTEGER  1, 2, ... in time order
--   start_ns, end_ns, dur_ns
--   source      'engine:step' | 'engine:op'
--   marker      the recurring range's name (of the iteration's own occurrence)
CREATE OR REPLACE MACRO engine_iterations(run) AS TABLE
WITH main AS MATERIALIZED (
    SELECT m.* FROM main_threads(run) m
    WHERE (SELECT workload FROM run_workload(run)) = 'inference'
), host AS MATERIALIZED (
    SELECT row_number() OVER () AS id, e.rank, e.name, e.ts_ns AS start_ns, e.ts_ns + e.dur_ns AS end_ns
    FROM events e JOIN main m ON m.rank = e.rank AND m.pid IS NOT DISTINCT FROM e.pid AND m.tid IS NOT DISTINCT FROM e.tid
    WHERE e.run_id = run AND e.kind IN ('cpu_op', 'user_annotation') AND e.dur_ns > 0
), thread_ranges AS (
    SELECT rank AS grp, id, start_ns, end_ns FROM host
), nested AS MATERIALIZED (
    SELECT h.*, d.depth
    FROM event_depth('thread_ranges') d JOIN host h ON h.id = d.id
), windows AS (
    -- the ProfilerSteps' time a recurring range must cover most of, and their number it must outnumber
    SELECT n.rank, any_value(p.steps_ns) AS window_ns, coalesce(any_value(p.n_steps), 0) AS n_profiler_steps
    FROM nested n LEFT JOIN (SELECT rank, sum(dur_ns) AS steps_ns, count(*) AS n_steps
                             FROM profiler_steps(run) GROUP BY rank) p ON p.rank = n.rank
    GROUP BY n.rank
), repeated AS (
    SELECT n.rank, n.depth, n.name
    FROM nested n JOIN windows w ON w.rank = n.rank
    WHERE w.n_profiler_steps > 0 AND NOT starts_with(n.name, 'aten::') AND NOT is_profiler_step(n.name) AND NOT is_engine_step_name(n.name)
    GROUP BY n.rank, n.depth, n.name, w.window_ns
    HAVING count(*) >= library_threshold('INFERRED_STEP_MIN_REPEATS')
       AND sum(n.end_ns - n.start_ns) >= library_threshold('ENGINE_ITERATION_MIN_COVERAGE') * w.window_ns
), occurrences AS (
    -- each candidate loop's occurrences: the engine-named ranges at their shallowest depth (one
    -- candidate, key ''), and each recurring range (key its name)
    SELECT rank, 'step' AS what, '' AS key, depth, name, start_ns, end_ns
    FROM nested
    WHERE is_engine_step_name(name)
    QUALIFY depth = min(depth) OVER (PARTITION BY rank)
    UNION ALL
    SELECT n.rank, 'op', n.name, n.depth, n.name, n.start_ns, n.end_ns
    FROM nested n JOIN repeated r ON r.rank = n.rank AND r.depth = n.depth AND r.name = n.name
), ordered AS (
    SELECT *, lead(start_ns) OVER loop AS next_start_ns, row_number() OVER loop AS step
    FROM occurrences
    WINDOW loop AS (PARTITION BY rank, what, key ORDER BY start_ns, end_ns)
), loops AS (
    -- the candidates that are a loop (enough occurrences, none overlapping the next, more than
    -- the ProfilerSteps); per rank the first by preference
    SELECT o.rank, o.what, o.key
    FROM ordered o JOIN windows w ON w.rank = o.rank
    GROUP BY o.rank, o.what, o.key, o.depth, w.n_profiler_steps
    HAVING bool_and(o.next_start_ns IS NULL OR o.end_ns <= o.next_start_ns)
       AND count(*) >= library_threshold('INFERRED_STEP_MIN_REPEATS') AND count(*) > w.n_profiler_steps
    QUALIFY row_number() OVER (PARTITION BY o.rank ORDER BY o.what = 'step' DESC, o.depth,
                               sum(o.end_ns - o.start_ns) DESC, count(*), o.key) = 1
)
SELECT run AS run_id, o.rank, CAST(o.step AS INTEGER) AS step, o.start_ns,
       coalesce(o.next_start_ns, o.end_ns) AS end_ns, coalesce(o.next_start_ns, o.end_ns) - o.start_ns AS dur_ns,
       'engine:' || o.what AS source, o.name AS marker
FROM ordered o JOIN loops l ON l.rank = o.rank AND l.what = o.what AND l.key = o.key;


-- steps(run): the steps every cost is per: on an inference run, a rank's engine iterations where
-- its trace shows them (engine_iterations); else its ProfilerStep#N windows where it has them, else
-- its inferred iterations (inferred_steps); a rank with none of these has no steps.
-- Columns:
--   run_id, rank
--   step        INTEGER  N of ProfilerStep#N, or the iteration's number
--   start_ns, end_ns, dur_ns
--   source      'engine:step' | 'engine:op' | 'profiler_step' | 'inferred:dataloader' |
--               'inferred:optimizer' | 'inferred:op'
--   marker      the repeating event's name (NULL for ProfilerSteps)
--   phase       'prefill' | 'decode' | 'mixed' | NULL (unknown): on an inference run, what the
--               user annotations starting inside the step name (step_phase_of): one phase, or both
CREATE OR REPLACE MACRO steps(run) AS TABLE
WITH engine AS MATERIALIZED (
    SELECT * FROM engine_iterations(run)
), chosen AS MATERIALIZED (
    SELECT * FROM engine
    UNION ALL BY NAME
    SELECT *, 'profiler_step' AS source, NULL::VARCHAR AS marker FROM profiler_steps(run)
    WHERE rank NOT IN (SELECT rank FROM engine)
    UNION ALL BY NAME
    SELECT * FROM inferred_steps(run) WHERE rank NOT IN (SELECT rank FROM engine)
), phase_ranges AS (
    SELECT rank, ts_ns, step_phase_of(name) AS phase
    FROM events
    WHERE run_id = run AND kind = 'user_annotation' AND step_phase_of(name) IS NOT NULL
      AND (SELECT workload FROM run_workload(run)) = 'inference'
), phases AS (
    SELECT s.rank, s.step, CASE WHEN count(DISTINCT p.phase) > 1 THEN 'mixed' ELSE any_value(p.phase) END AS phase
    FROM chosen s JOIN phase_ranges p ON p.rank = s.rank AND p.ts_ns >= s.start_ns AND p.ts_ns < s.end_ns
    GROUP BY s.rank, s.step
)
SELECT s.*, p.phase
FROM chosen s LEFT JOIN phases p ON p.rank = s.rank AND p.step = s.step;


-- host_step_windows(run): the host-clock windows per-step figures count CPU calls in (launches,
-- synchronisations): a rank's steps(run), or for a rank without steps one window over all time
-- (step NULL: its figures divide by 1, so everything counts). GPU-clock rows (kernels, copies,
-- idle gaps) are counted in gpu_steps(run) instead (lib/gpu_steps.sql). Windows for interval_clip.
-- Columns: grp (= rank), rank, step, start_ns, end_ns
CREATE OR REPLACE MACRO host_step_windows(run) AS TABLE
WITH s AS MATERIALIZED (
    SELECT rank, step, start_ns, end_ns FROM steps(run)
)
SELECT rank AS grp, rank, step, start_ns, end_ns FROM s
UNION ALL
-- +-2^61 ns: beyond any trace's timestamps, and the window's length still fits a BIGINT
SELECT rank, rank, NULL::INTEGER, -2305843009213693952, 2305843009213693952
FROM ranks WHERE run_id = run AND rank NOT IN (SELECT rank FROM s);


-- step_units(run): per rank, what its steps are (steps(run)): where they come from, the recurring
-- range, how many, their mean, and how many of them each phase names (the unit a report speaks in).
-- Columns:
--   rank
--   source         steps(run)'s source
--   marker         the recurring range's most frequent name (NULL for ProfilerSteps)
--   n_steps        BIGINT
--   mean_step_ns   DOUBLE
--   prefill_steps, decode_steps, mixed_steps  BIGINT  steps whose phase is that (the rest: unknown)
CREATE OR REPLACE MACRO step_units(run) AS TABLE
SELECT rank, any_value(source) AS source, mode(marker) AS marker, count(*) AS n_steps, avg(dur_ns) AS mean_step_ns,
       count(*) FILTER (WHERE phase = 'prefill') AS prefill_steps,
       count(*) FILTER (WHERE phase = 'decode') AS decode_steps,
       count(*) FILTER (WHERE phase = 'mixed') AS mixed_steps
FROM steps(run)
GROUP BY rank;
