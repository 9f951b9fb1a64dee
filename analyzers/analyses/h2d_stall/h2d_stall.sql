-- requires: lib/intervals.sql lib/steps.sql lib/copies.sql
-- Host-to-device copies: how much copy time the GPU sits exposed on,
-- and how the copies are made (pageable vs pinned, blocking vs async, bandwidth vs the link).


-- h2d_summary(run): one row per rank with host-to-device copies (counted activity only).
-- Columns:
--   rank, copies, bytes, copy_ns (summed copy durations)
--   exposed_ns        union(HtoD copies) minus union(compute kernels): copy time nothing hides
--                     (a pinned, non_blocking copy on a side stream would overlap compute);
--                     on a rank with ProfilerSteps, inside its step_range only
--   pageable_copies, pageable_share   copies from pageable memory, and their share of HtoD bytes (0..1)
--   sync_copies       copies issued by a blocking call (cudaMemcpy, not ...Async)
--   gbps              achieved bandwidth over all copies with a byte count (bytes / copy time)
--   pageable_gbps, pinned_gbps   the same split by source memory
--   largest_bytes, largest_start_ns, largest_end_ns, largest_stream   the biggest copy (the
--                     window to look at; by duration where copies carry no byte count)
--   worst_step        the step with most exposed copy time
CREATE OR REPLACE MACRO h2d_summary(run) AS TABLE
WITH c AS (
    SELECT * FROM copies(run) WHERE counted AND direction = 'HtoD'
), copy_iv AS (
    SELECT rank AS grp, start_ns, end_ns FROM c
), compute_iv AS (
    -- only ranks that copy at all: the sweep below is then free on runs without HtoD copies
    SELECT rank AS grp, start_ns, end_ns FROM gpu_activity(run)
    WHERE counted AND category = 'compute' AND rank IN (SELECT rank FROM c)
), all_exposed AS (
    SELECT grp AS rank, start_ns, end_ns FROM interval_subtract('copy_iv', 'compute_iv')
), exposed_pieces AS (
    -- on a rank with ProfilerSteps, only the part inside its step_range (see gap_causes)
    SELECT rank AS grp, start_ns, end_ns, end_ns - start_ns AS dur_ns FROM in_step_range(run, 'all_exposed')
), exposed AS (
    SELECT grp AS rank, sum(dur_ns) AS exposed_ns FROM exposed_pieces GROUP BY grp
), exposed_by_step AS (
    SELECT p.grp AS rank, st.step, sum(p.dur_ns) AS exposed_ns
    FROM exposed_pieces p ASOF JOIN steps(run) st ON p.grp = st.rank AND p.start_ns >= st.start_ns
    GROUP BY ALL
), worst AS (
    SELECT rank, arg_max(step, exposed_ns) AS worst_step FROM exposed_by_step GROUP BY rank
)
SELECT c.rank, count(*) AS copies, sum(c.bytes) AS bytes, sum(c.dur_ns) AS copy_ns,
       coalesce(any_value(e.exposed_ns), 0) AS exposed_ns,
       count_if(c.pageable) AS pageable_copies,
       CASE WHEN sum(c.bytes) > 0 THEN sum(c.bytes) FILTER (WHERE c.pageable) / sum(c.bytes)
            ELSE avg(c.pageable::INT) END AS pageable_share,
       count_if(c.synchronous) AS sync_copies,
       sum(c.bytes) / nullif(sum(c.dur_ns) FILTER (WHERE c.bytes IS NOT NULL), 0) AS gbps,
       sum(c.bytes) FILTER (WHERE c.pageable) / nullif(sum(c.dur_ns) FILTER (WHERE c.pageable AND c.bytes IS NOT NULL), 0) AS pageable_gbps,
       sum(c.bytes) FILTER (WHERE NOT c.pageable) / nullif(sum(c.dur_ns) FILTER (WHERE NOT c.pageable AND c.bytes IS NOT NULL), 0) AS pinned_gbps,
       -- the biggest copy (by bytes; the longest where no copy says its bytes, as ROCm's);
       -- of equals, the first: a deterministic window
       max(c.bytes) AS largest_bytes,
       arg_max(c.start_ns, (coalesce(c.bytes, -1), c.dur_ns, -c.start_ns)) AS largest_start_ns,
       arg_max(c.end_ns, (coalesce(c.bytes, -1), c.dur_ns, -c.start_ns)) AS largest_end_ns,
       arg_max(c.stream, (coalesce(c.bytes, -1), c.dur_ns, -c.start_ns)) AS largest_stream,
       any_value(w.worst_step) AS worst_step
FROM c
LEFT JOIN exposed e ON e.rank = c.rank
LEFT JOIN worst w ON w.rank = c.rank
GROUP BY c.rank;
