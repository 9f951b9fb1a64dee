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
--   before_name       the traced span that ended where the hole starts (what the Python follows);
--                     NULL when the hole opens the step
--   after_name        the traced span starting where the hole ends; NULL when it closes the step
--   recurring         BOOLEAN, holes at this place (between the same two spans) open in at least
--                     two steps and half of the rank's steps, of three or more: work the loop does
--                     every step. A busy machine descheduling the process opens holes at random
--                     places instead; with fewer steps the two cannot be told apart. The hole
--                     between aten::ones_like and the first autograd::engine function (backward's
--                     set-up in the engine) is never recurring: no Python of the user's runs there.
CREATE OR REPLACE MACRO untraced_host_time(run, min_hole_ns) AS TABLE
WITH windows AS MATERIALIZED (
    SELECT rank AS grp, step, start_ns, end_ns FROM steps(run)
), bounds AS (
    SELECT grp, min(start_ns) AS lo, max(end_ns) AS hi, count(DISTINCT step) AS n_steps FROM windows GROUP BY grp
), spans AS MATERIALIZED (
    -- only what overlaps the rank's steps
    SELECT t.rank AS grp, t.name, t.start_ns, t.end_ns
    FROM traced_host_spans(run) t JOIN bounds b ON b.grp = t.rank AND t.end_ns > b.lo AND t.start_ns < b.hi
), holes AS MATERIALIZED (
    SELECT grp, start_ns, end_ns, dur_ns FROM interval_subtract('windows', 'spans') WHERE dur_ns >= min_hole_ns
), edge_names AS (
    -- the spans whose end opens a hole or whose start closes one (names are looked up for those only)
    SELECT s.grp, s.start_ns, s.end_ns, s.name
    FROM spans s JOIN (SELECT DISTINCT grp, start_ns AS t FROM holes UNION SELECT DISTINCT grp, end_ns FROM holes) e
      ON e.grp = s.grp AND (s.end_ns = e.t OR s.start_ns = e.t)
), placed AS (
    SELECT h.grp AS rank, w.step, h.start_ns, h.end_ns, h.dur_ns,
           (SELECT arg_max(n.name, n.start_ns) FROM edge_names n WHERE n.grp = h.grp AND n.end_ns = h.start_ns) AS before_name,
           (SELECT arg_max(n.name, n.end_ns) FROM edge_names n WHERE n.grp = h.grp AND n.start_ns = h.end_ns) AS after_name
    FROM holes h
    ASOF JOIN windows w ON w.grp = h.grp AND h.start_ns >= w.start_ns
)
SELECT p.*,
       b.n_steps >= 3 AND count(DISTINCT p.step) OVER (PARTITION BY p.rank, p.before_name, p.after_name)
                          >= greatest(2, 0.5 * b.n_steps)
       -- the autograd engine preparing backward (after the loss gradient's seed, before the first
       -- backward function): the engine's own time, which grows with the graph, not user Python
       AND NOT (p.before_name IS NOT DISTINCT FROM 'aten::ones_like'
                AND starts_with(coalesce(p.after_name, ''), 'autograd::engine::evaluate_function')) AS recurring
FROM placed p JOIN bounds b ON b.grp = p.rank;
