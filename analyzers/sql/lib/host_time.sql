-- requires: lib/intervals.sql lib/steps.sql
-- Host time no profiled span explains: the training process running Python (or blocked in
-- something) outside every op, annotation, runtime call and profiler bookkeeping span.


-- traced_host_spans(run): every span of the process's host activity the profiler recorded, on
-- any thread (backward runs on autograd threads, gloo collectives on their own): ops,
-- annotations (ProfilerStep ranges excluded: they cover the whole step), runtime and driver
-- calls, and the profiler's own overhead spans. python_function frames (with_stack) are not
-- among them: they are the Python whose time this file measures.
-- Columns: rank, name, start_ns, end_ns
CREATE OR REPLACE MACRO traced_host_spans(run) AS TABLE
SELECT rank, name, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns
FROM events
WHERE run_id = run AND dur_ns > 0
  AND (kind IN ('cpu_op', 'runtime', 'driver')
       OR (kind = 'user_annotation' AND NOT is_profiler_step(name))
       OR (kind = 'other' AND lower(cat) = 'overhead'));


-- untraced_host_time(run, min_hole_ns): the stretches of a rank's steps (host clock) in which no
-- traced_host_spans span was open on any thread, each at least min_hole_ns long (shorter holes
-- are the dispatcher's and the profiler's own few microseconds between ops).
-- Columns:
--   rank, step        the step whose window holds the hole's start
--   start_ns, end_ns, dur_ns
--   before_name       the traced span that ended last before the hole (what the Python follows)
--   after_name        the first traced span starting at or after the hole's end
--   recurring         BOOLEAN, holes at this place (between the same two spans) open in at least
--                     half of the rank's steps: work the loop does every step. A busy machine
--                     descheduling the process opens holes at random places instead.
CREATE OR REPLACE MACRO untraced_host_time(run, min_hole_ns) AS TABLE
WITH windows AS MATERIALIZED (
    SELECT rank AS grp, step, start_ns, end_ns FROM steps(run)
), spans AS MATERIALIZED (
    SELECT rank AS grp, name, start_ns, end_ns FROM traced_host_spans(run)
    WHERE rank IN (SELECT grp FROM windows)
), holes AS (
    SELECT grp, start_ns, end_ns, dur_ns FROM interval_subtract('windows', 'spans') WHERE dur_ns >= min_hole_ns
), span_ends AS (
    SELECT grp, end_ns, arg_max(name, start_ns) AS name FROM spans GROUP BY grp, end_ns
), span_starts AS (
    SELECT grp, start_ns, arg_max(name, end_ns) AS name FROM spans GROUP BY grp, start_ns
), placed AS (
    SELECT h.grp AS rank, w.step, h.start_ns, h.end_ns, h.dur_ns, b.name AS before_name, a.name AS after_name
    FROM holes h
    ASOF JOIN windows w ON w.grp = h.grp AND h.start_ns >= w.start_ns
    ASOF LEFT JOIN span_ends b ON b.grp = h.grp AND h.start_ns >= b.end_ns
    ASOF LEFT JOIN (SELECT grp, -start_ns AS neg_start, name FROM span_starts) a
        ON a.grp = h.grp AND -h.end_ns >= a.neg_start
), step_counts AS (
    SELECT grp AS rank, count(DISTINCT step) AS n_steps FROM windows GROUP BY grp
)
SELECT p.*, count(DISTINCT p.step) OVER (PARTITION BY p.rank, p.before_name, p.after_name) >= 0.5 * c.n_steps AS recurring
FROM placed p JOIN step_counts c ON c.rank = p.rank;
