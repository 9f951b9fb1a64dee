-- requires: lib/intervals.sql lib/steps.sql lib/gpu_steps.sql lib/copies.sql metrics/rank_breakdown.sql
-- Host-to-device copies: how much copy time the GPU sits exposed on,
-- and how the copies are made (pageable vs pinned, blocking vs async, bandwidth vs the link).


-- h2d_summary(run): one row per rank with host-to-device copies (counted activity only).
-- Columns:
--   rank, copies, bytes, copy_ns (summed copy durations), all of the rank's copies
--   copies_in_steps, bytes_in_steps, sync_copies_in_steps   the copies the rank's steps issued (launch
--                     call inside a step, host_step_windows; without a launch call in the trace,
--                     starting inside a step on the GPU clock), their bytes, and how many of them a
--                     blocking call issued: what per-step figures count
--   copy_in_steps_ns  summed copy time inside the rank's steps on the GPU clock (gpu_steps; a rank
--                     without steps: its GPU span): metrics/rank_breakdown.sql's
--                     rank_step_costs.h2d_in_steps_ns, the ranks table's H2D per step
--   exposed_ns        union(HtoD copies) minus union(compute kernels): copy time nothing hides
--                     (a pinned, non_blocking copy on a side stream would overlap compute),
--                     inside the rank's steps on the GPU clock only
--   pageable_copies, pageable_share   copies from pageable memory, and their share of HtoD bytes (0..1)
--   sync_copies       copies issued by a blocking call (cudaMemcpy, not ...Async)
--   gbps              achieved bandwidth over the copies of at least TINY_COPY_MAX_BYTES (bytes /
--                     copy time; NULL when none is that large: a tiny copy's time is latency)
--   pageable_gbps, pinned_gbps   the same split by source memory
--   largest_bytes, largest_start_ns, largest_end_ns, largest_stream   the biggest copy (the
--                     window to look at; by duration where copies carry no byte count)
--   worst_step        the step with most exposed copy time
CREATE OR REPLACE MACRO h2d_summary(run) AS TABLE
WITH c AS MATERIALIZED (
    SELECT row_number() OVER () AS copy_no, rank AS grp, * FROM copies(run) WHERE counted AND host_to_device
), windows AS MATERIALIZED (
    SELECT rank AS grp, step, start_ns, end_ns FROM gpu_steps(run) WHERE rank IN (SELECT rank FROM c)
), host_windows AS (
    SELECT grp, start_ns, end_ns FROM host_step_windows(run) WHERE rank IN (SELECT rank FROM c)
), issued AS (
    -- the copy's launch call (1 ns at its start); a copy without one in the trace: its GPU start
    SELECT copy_no, grp, launch_start_ns AS start_ns, launch_start_ns + 1 AS end_ns FROM c WHERE launch_start_ns IS NOT NULL
), unissued AS (
    SELECT copy_no, grp, start_ns, start_ns + 1 AS end_ns FROM c WHERE launch_start_ns IS NULL
), copies_in_steps AS (
    -- a copy is the step's that issued it (its launch call starts in the host step, as gpu_steps
    -- assigns GPU work to steps); its time counts where it runs (copy_time_in_steps)
    SELECT c.rank, count(*) AS copies_in_steps, sum(c.bytes) AS bytes_in_steps,
           count_if(c.synchronous) AS sync_copies_in_steps
    FROM c
    SEMI JOIN (SELECT copy_no FROM interval_clip('issued', 'host_windows')
               UNION ALL SELECT copy_no FROM interval_clip('unissued', 'windows')) s ON s.copy_no = c.copy_no
    GROUP BY c.rank
), copy_time_in_steps AS (
    SELECT rank, h2d_in_steps_ns AS copy_in_steps_ns FROM rank_step_costs(run)
), copy_iv AS (
    SELECT rank AS grp, start_ns, end_ns FROM c
), compute_iv AS (
    -- only ranks that copy at all: the sweep below is then free on runs without HtoD copies
    SELECT rank AS grp, start_ns, end_ns FROM gpu_activity(run)
    WHERE counted AND category = 'compute' AND rank IN (SELECT rank FROM c)
), all_exposed AS (
    SELECT grp, start_ns, end_ns FROM interval_subtract('copy_iv', 'compute_iv')
), exposed_pieces AS (
    -- only the part inside the rank's steps on the GPU clock (see gap_causes)
    SELECT grp, start_ns, end_ns, end_ns - start_ns AS dur_ns FROM interval_clip('all_exposed', 'windows')
), exposed AS (
    SELECT grp AS rank, sum(dur_ns) AS exposed_ns FROM exposed_pieces GROUP BY grp
), exposed_by_step AS (
    SELECT p.grp AS rank, st.step, sum(p.dur_ns) AS exposed_ns
    FROM exposed_pieces p ASOF JOIN windows st ON p.grp = st.grp AND p.start_ns >= st.start_ns
    GROUP BY ALL
), worst AS (
    SELECT rank, arg_max(step, exposed_ns) AS worst_step FROM exposed_by_step GROUP BY rank
)
SELECT c.rank, count(*) AS copies, sum(c.bytes) AS bytes, sum(c.dur_ns) AS copy_ns,
       coalesce(any_value(s.copies_in_steps), 0) AS copies_in_steps, any_value(s.bytes_in_steps) AS bytes_in_steps,
       coalesce(any_value(s.sync_copies_in_steps), 0) AS sync_copies_in_steps,
       coalesce(any_value(t.copy_in_steps_ns), 0) AS copy_in_steps_ns,
       coalesce(any_value(e.exposed_ns), 0) AS exposed_ns,
       count_if(c.pageable) AS pageable_copies,
       CASE WHEN sum(c.bytes) > 0 THEN sum(c.bytes) FILTER (WHERE c.pageable) / sum(c.bytes)
            ELSE avg(c.pageable::INT) END AS pageable_share,
       count_if(c.synchronous) AS sync_copies,
       -- bandwidth only where bytes make it meaningful: copies of at least TINY_COPY_MAX_BYTES
       sum(c.bytes) FILTER (WHERE c.bytes >= library_threshold('TINY_COPY_MAX_BYTES'))
           / nullif(sum(c.dur_ns) FILTER (WHERE c.bytes >= library_threshold('TINY_COPY_MAX_BYTES')), 0) AS gbps,
       sum(c.bytes) FILTER (WHERE c.pageable AND c.bytes >= library_threshold('TINY_COPY_MAX_BYTES'))
           / nullif(sum(c.dur_ns) FILTER (WHERE c.pageable AND c.bytes >= library_threshold('TINY_COPY_MAX_BYTES')), 0) AS pageable_gbps,
       sum(c.bytes) FILTER (WHERE NOT c.pageable AND c.bytes >= library_threshold('TINY_COPY_MAX_BYTES'))
           / nullif(sum(c.dur_ns) FILTER (WHERE NOT c.pageable AND c.bytes >= library_threshold('TINY_COPY_MAX_BYTES')), 0) AS pinned_gbps,
       -- the biggest copy (by bytes; the longest where no copy says its bytes, as ROCm's);
       -- of equals, the first: a deterministic window
       max(c.bytes) AS largest_bytes,
       arg_max(c.start_ns, (coalesce(c.bytes, -1), c.dur_ns, -c.start_ns)) AS largest_start_ns,
       arg_max(c.end_ns, (coalesce(c.bytes, -1), c.dur_ns, -c.start_ns)) AS largest_end_ns,
       arg_max(c.stream, (coalesce(c.bytes, -1), c.dur_ns, -c.start_ns)) AS largest_stream,
       any_value(w.worst_step) AS worst_step
FROM c
LEFT JOIN copies_in_steps s ON s.rank = c.rank
LEFT JOIN copy_time_in_steps t ON t.rank = c.rank
LEFT JOIN exposed e ON e.rank = c.rank
LEFT JOIN worst w ON w.rank = c.rank
GROUP BY c.rank;
