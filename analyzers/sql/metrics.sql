-- Per-rank figures (issue #2), with Holistic Trace Analysis' definitions so that they can be
-- checked against HTA's own output (tests/test_hta_agreement.py).


-- rank_breakdown(run): one row per rank of the run (CPU-only ranks included, GPU columns NULL).
-- Only GPU activity with gpu_activity.counted (HTA's ProfilerStep filtering rule) is used.
-- Columns:
--   rank
--   n_steps          number of ProfilerStep#N windows (0 when the rank has none)
--   mean_step_ns     mean ProfilerStep duration; the GPU span when the rank has no steps
--   steps_divisor    n_steps, or 1 when there are none (per-step figures divide totals by it)
--   first_gpu_ns, last_gpu_ns, span_ns   first to last GPU activity (HTA's "kernel_time")
--   busy_ns          union of all GPU activity (kernels, memcpy, memset, every stream)
--   idle_ns          span_ns - busy_ns
--   compute_ns       union of compute kernels (not comm, not memory)
--   non_compute_ns   busy_ns - compute_ns (communication and memory not hidden under compute)
--   comm_ns          union of communication kernels
--   comm_overlap_ns  union(comm) ∩ union(compute)
--   h2d_ns           summed duration of host-to-device copies
--   gpu_events       number of counted GPU activities
CREATE OR REPLACE MACRO rank_breakdown(run) AS TABLE
WITH act AS (
    SELECT rank AS grp, start_ns, end_ns, category FROM gpu_activity(run) WHERE counted
), span AS (
    SELECT grp, min(start_ns) AS first_gpu_ns, max(end_ns) AS last_gpu_ns, count(*) AS gpu_events
    FROM act GROUP BY grp
), edges AS (
    -- one sweep for every figure (the interval_union / interval_intersect of intervals.sql,
    -- fused): per time point, how many compute / comm / memory intervals open or close there
    SELECT grp, ts, sum(d_compute) AS d_compute, sum(d_comm) AS d_comm, sum(d_memory) AS d_memory
    FROM (
        SELECT grp, unnest([start_ns, end_ns]) AS ts,
               CASE WHEN category = 'compute' THEN unnest([1, -1]) ELSE 0 END AS d_compute,
               CASE WHEN category = 'comm' THEN unnest([1, -1]) ELSE 0 END AS d_comm,
               CASE WHEN category = 'memory' THEN unnest([1, -1]) ELSE 0 END AS d_memory
        FROM act WHERE end_ns >= start_ns
    )
    GROUP BY grp, ts
), pieces AS (
    SELECT grp, lead(ts) OVER w - ts AS len,
           sum(d_compute) OVER (w ROWS UNBOUNDED PRECEDING) AS n_compute,
           sum(d_comm) OVER (w ROWS UNBOUNDED PRECEDING) AS n_comm,
           sum(d_memory) OVER (w ROWS UNBOUNDED PRECEDING) AS n_memory
    FROM edges
    WINDOW w AS (PARTITION BY grp ORDER BY ts)
), sums AS (
    SELECT grp,
           coalesce(sum(len) FILTER (WHERE n_compute > 0 OR n_comm > 0 OR n_memory > 0), 0) AS busy_ns,
           coalesce(sum(len) FILTER (WHERE n_compute > 0), 0) AS compute_ns,
           coalesce(sum(len) FILTER (WHERE n_comm > 0), 0) AS comm_ns,
           coalesce(sum(len) FILTER (WHERE n_comm > 0 AND n_compute > 0), 0) AS comm_overlap_ns
    FROM pieces WHERE len > 0
    GROUP BY grp
), h2d AS (
    -- direction as copies(run) reads it (name, else args.kind), without its launch join
    SELECT rank AS grp, sum(dur_ns) AS h2d_ns
    FROM gpu_activity(run)
    WHERE counted AND kind = 'memcpy'
      AND coalesce(nullif(regexp_extract(name, '^Memcpy\s+(\w+)', 1), ''), json_extract_string(args, '$.kind')) = 'HtoD'
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
