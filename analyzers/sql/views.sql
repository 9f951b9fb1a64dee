-- Per-run views over `events` (schema.sql): table macros taking the run id as a value
-- parameter, e.g. `SELECT * FROM gpu_activity($run_id)`. Every analysis reads these instead
-- of raw events, so Kineto-generation differences are handled once, here.


-- steps(run): ProfilerStep#N windows per rank, as the CPU saw them.
-- A step annotated on several threads (or twice) keeps its widest window.
-- Columns:
--   run_id, rank
--   step        INTEGER  N of ProfilerStep#N
--   start_ns, end_ns, dur_ns
CREATE OR REPLACE MACRO steps(run) AS TABLE
SELECT run_id, rank,
       CAST(regexp_extract(name, '^ProfilerStep\s*#\s*(\d+)', 1) AS INTEGER) AS step,
       min(ts_ns) AS start_ns, max(ts_ns + dur_ns) AS end_ns, max(ts_ns + dur_ns) - min(ts_ns) AS dur_ns
FROM events
WHERE run_id = run AND kind IN ('cpu_op', 'user_annotation')
  -- starts_with first: a cheap test that rejects the million other op names before the regex
  AND starts_with(name, 'ProfilerStep') AND regexp_matches(name, '^ProfilerStep\s*#\s*\d+') AND dur_ns IS NOT NULL
GROUP BY run_id, rank, step;


-- step_range(run): per rank with ProfilerSteps, from the start of its first step to the end of
-- its last. Costs "per step" count only what lies inside (warm-up work before the first step,
-- a checkpoint after the last one, are no step's time).
-- Columns: rank, start_ns, end_ns
CREATE OR REPLACE MACRO step_range(run) AS TABLE
SELECT rank, min(start_ns) AS start_ns, max(end_ns) AS end_ns FROM steps(run) GROUP BY rank;


-- in_step_range(run, tbl): the rows of table/CTE `tbl` (any columns, with rank, start_ns,
-- end_ns) clipped to their rank's step_range; rows wholly outside it are dropped, rows of ranks
-- without steps pass unchanged. Adds has_steps (BOOLEAN). A dur_ns column is NOT updated.
CREATE OR REPLACE MACRO in_step_range(run, tbl) AS TABLE
SELECT * FROM (
    SELECT i.* REPLACE (greatest(i.start_ns, coalesce(r.start_ns, i.start_ns)) AS start_ns,
                        least(i.end_ns, coalesce(r.end_ns, i.end_ns)) AS end_ns),
           r.rank IS NOT NULL AS has_steps
    FROM query_table(tbl) i LEFT JOIN step_range(run) r ON r.rank = i.rank
)
WHERE end_ns > start_ns;


-- gpu_activity(run): every kernel, memcpy and memset of the run, one row each.
-- Columns:
--   run_id, rank, device, stream, kind ('kernel' | 'memcpy' | 'memset'), name
--   start_ns, end_ns, dur_ns
--   correlation, external_id, bytes (copies and sets only), args (JSON, verbatim)
--   category    'comm' (NCCL/RCCL kernels: name ~ '^nccl.*Kernel', which covers ncclKernel_*
--               and ncclDevKernel_*), 'memory' (name ~ '^Memcpy|^Memset|^dma'), else 'compute';
--               the same patterns as Holistic Trace Analysis' temporal breakdown
--   counted     BOOLEAN, HTA's rule for which GPU activity belongs to the profiled steps: when the
--               run has two or more distinct ProfilerStep#N names, only activity whose launching
--               CPU call (same correlation) is in the trace and starts no later than the end of
--               the rank's last ProfilerStep counts; otherwise all activity counts
CREATE OR REPLACE MACRO gpu_activity(run) AS TABLE
WITH activity AS (
    SELECT run_id, rank, device, stream, kind, name, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns,
           dur_ns, correlation, external_id, bytes, args
    FROM events
    WHERE run_id = run AND kind IN ('kernel', 'memcpy', 'memset') AND dur_ns IS NOT NULL
), step_names AS (
    SELECT count(DISTINCT step) AS n_step_names FROM steps(run)
), last_step_end AS (
    SELECT rank, max(end_ns) AS last_end_ns FROM steps(run) GROUP BY rank
), launched_in_steps AS (
    -- correlation ids whose CPU call started before the rank's last ProfilerStep ended
    SELECT DISTINCT e.rank, e.correlation
    FROM events e JOIN last_step_end l ON e.rank = l.rank
    WHERE e.run_id = run AND e.kind IN ('runtime', 'driver') AND e.correlation IS NOT NULL
      AND e.ts_ns <= l.last_end_ns
)
SELECT a.*,
       CASE WHEN starts_with(a.name, 'nccl') AND regexp_matches(a.name, '^nccl.*Kernel') THEN 'comm'
            WHEN starts_with(a.name, 'Memcpy') OR starts_with(a.name, 'Memset') OR starts_with(a.name, 'dma') THEN 'memory'
            ELSE 'compute' END AS category,
       (SELECT n_step_names FROM step_names) < 2 OR l.correlation IS NOT NULL AS counted
FROM activity a
LEFT JOIN launched_in_steps l ON a.rank = l.rank AND a.correlation = l.correlation;


-- launches(run): each GPU activity joined to the CPU runtime/driver call that started it (same
-- correlation id, the call starting before the work), e.g. cudaLaunchKernel -> kernel,
-- cudaMemcpyAsync -> memcpy. GPU activity without a launch call in the trace is left out.
-- Columns:
--   run_id, rank, correlation
--   launch_name, launch_tid, launch_start_ns, launch_end_ns, launch_dur_ns   (the CPU call)
--   gpu_kind, gpu_name, category, device, stream, gpu_start_ns, gpu_end_ns, gpu_dur_ns, bytes, counted
--   launch_delay_ns  time from the end of the CPU call to the start of the GPU work, floored at
--                    0 (HTA's get_cuda_kernel_launch_stats definition)
CREATE OR REPLACE MACRO launches(run) AS TABLE
WITH runtime_calls AS (
    SELECT rank, correlation, name, tid, ts_ns, dur_ns FROM events
    WHERE run_id = run AND kind = 'runtime' AND correlation IS NOT NULL
), driver_calls AS (
    SELECT rank, correlation, name, tid, ts_ns, dur_ns FROM events
    WHERE run_id = run AND kind = 'driver' AND correlation IS NOT NULL
), activity AS MATERIALIZED (
    SELECT row_number() OVER () AS activity_no,
           run_id, rank, device, stream, kind, name, start_ns, end_ns, dur_ns, correlation, bytes, category, counted
    FROM gpu_activity(run)
), runtime_paired AS (
    -- ASOF: the latest call with the same id that started before the GPU work did. Ids are
    -- unique per rank in a normal trace; where they repeat (concatenated traces) this still
    -- pairs each activity with its own launch instead of multiplying rows. Only the keys go
    -- through the ASOF joins (they sort what they carry; kernel names and args made them 2-3x
    -- slower).
    SELECT g.activity_no, g.rank, g.correlation, g.start_ns, r.name, r.tid, r.ts_ns, r.dur_ns
    FROM (SELECT activity_no, rank, correlation, start_ns FROM activity) g
    ASOF LEFT JOIN runtime_calls r ON g.rank = r.rank AND g.correlation = r.correlation AND g.start_ns >= r.ts_ns
), paired AS (
    -- The runtime call wins over a driver call carrying the same id, so only activity without
    -- a (complete) runtime match looks for a driver call: usually none, and that join is free.
    SELECT activity_no, name AS launch_name, tid AS launch_tid, ts_ns AS launch_start_ns, dur_ns AS launch_dur_ns
    FROM runtime_paired
    WHERE ts_ns IS NOT NULL AND name IS NOT NULL AND tid IS NOT NULL
    UNION ALL
    SELECT r.activity_no,
           coalesce(r.name, d.name) AS launch_name, coalesce(r.tid, d.tid) AS launch_tid,
           coalesce(r.ts_ns, d.ts_ns) AS launch_start_ns,
           CASE WHEN r.ts_ns IS NOT NULL THEN r.dur_ns ELSE d.dur_ns END AS launch_dur_ns
    FROM (SELECT * FROM runtime_paired WHERE NOT (ts_ns IS NOT NULL AND name IS NOT NULL AND tid IS NOT NULL)) r
    ASOF LEFT JOIN driver_calls d ON r.rank = d.rank AND r.correlation = d.correlation AND r.start_ns >= d.ts_ns
), matched AS (
    SELECT g.*, p.* EXCLUDE (activity_no)
    FROM paired p JOIN activity g ON g.activity_no = p.activity_no
    WHERE p.launch_start_ns IS NOT NULL
)
SELECT run_id, rank, correlation, launch_name, launch_tid, launch_start_ns,
       launch_start_ns + coalesce(launch_dur_ns, 0) AS launch_end_ns, launch_dur_ns,
       kind AS gpu_kind, name AS gpu_name, category, device, stream,
       start_ns AS gpu_start_ns, end_ns AS gpu_end_ns, dur_ns AS gpu_dur_ns, bytes, counted,
       greatest(start_ns - (launch_start_ns + coalesce(launch_dur_ns, 0)), 0) AS launch_delay_ns
FROM matched
WHERE launch_start_ns IS NOT NULL;


-- copies(run): memory copies with direction, memory kinds and achieved bandwidth.
-- Columns:
--   run_id, rank, device, stream, name, start_ns, end_ns, dur_ns, correlation, counted
--   direction   'HtoD' | 'DtoH' | 'DtoD' | 'HtoH' | 'PtoP' ... (from the name, else args.kind)
--   src_memory, dst_memory  'Pageable' | 'Pinned' | 'Device' | 'Host' ... (from "(A -> B)"), NULL if absent
--   pageable    BOOLEAN, either side is pageable host memory (the copy is staged and blocks the host)
--   bytes       NULL where the trace does not say
--   gbps        achieved bandwidth, bytes / ns = GB/s (1e9 bytes per second); NULL without bytes
--   launch_name the CPU call that issued it (cudaMemcpyAsync, cudaMemcpy, hipMemcpyWithStream...)
--   launch_start_ns, launch_end_ns
--   synchronous BOOLEAN, issued by a blocking call (a cudaMemcpy without "Async", which is what
--               `.item()`/`.cpu()` and `.to(device)` from pageable memory do; hipMemcpyWithStream)
CREATE OR REPLACE MACRO copies(run) AS TABLE
SELECT g.run_id, g.rank, g.device, g.stream, g.name, g.start_ns, g.end_ns, g.dur_ns, g.correlation, g.counted,
       coalesce(nullif(regexp_extract(g.name, '^Memcpy\s+(\w+)', 1), ''),
                json_extract_string(g.args, '$.kind')) AS direction,
       nullif(regexp_extract(g.name, '\((\w+)\s*->\s*(\w+)\)', 1), '') AS src_memory,
       nullif(regexp_extract(g.name, '\((\w+)\s*->\s*(\w+)\)', 2), '') AS dst_memory,
       coalesce(src_memory = 'Pageable' OR dst_memory = 'Pageable', false) AS pageable,
       g.bytes,
       CASE WHEN g.dur_ns > 0 AND g.bytes IS NOT NULL THEN g.bytes / g.dur_ns END AS gbps,
       l.launch_name, l.launch_start_ns, l.launch_end_ns,
       -- hipMemcpyWithStream is synchronous: ATen's memcpy_and_sync on ROCm (a blocking
       -- .item()/.cpu()/.to()) in place of cudaMemcpyAsync + cudaStreamSynchronize
       coalesce(l.launch_name IS NOT NULL AND NOT contains(lower(l.launch_name), 'async'), false) AS synchronous
FROM gpu_activity(run) g
LEFT JOIN (SELECT * FROM launches(run) WHERE gpu_kind = 'memcpy') l ON g.rank = l.rank AND g.correlation = l.correlation
                           AND g.start_ns = l.gpu_start_ns AND g.stream IS NOT DISTINCT FROM l.stream
WHERE g.kind = 'memcpy';


-- collectives(run): NCCL/RCCL kernels with what they moved; size fields come from the args
-- newer PyTorch writes (Collective name, In msg nelems, dtype, Group size) and are NULL where
-- the trace has none.
-- Columns:
--   run_id, rank, device, stream, name, start_ns, end_ns, dur_ns, correlation, counted
--   collective   args."Collective name", else parsed from the kernel name
--                (ncclKernel_AllReduce_... / ncclDevKernel_AllReduce_... -> 'allreduce'), lower case
--   nelems       args."In msg nelems"
--   dtype        args.dtype as written (Float, BFloat16, Half, ...)
--   dtype_bytes  element size of dtype, NULL when unknown
--   group_size   args."Group size"
--   bytes        nelems * dtype_bytes
--   algbw_gbps   bytes / duration (GB/s); busbw_gbps = algbw * nccl-tests' bus factor
--                (2(n-1)/n all-reduce, (n-1)/n all-gather / reduce-scatter / all-to-all, 1 otherwise)
CREATE OR REPLACE MACRO collectives(run) AS TABLE
WITH comm AS (
    SELECT g.run_id, g.rank, g.device, g.stream, g.name, g.start_ns, g.end_ns, g.dur_ns,
           g.correlation, g.counted, g.args
    FROM gpu_activity(run) g
    WHERE g.category = 'comm'
), sized AS (
    SELECT * EXCLUDE (args),
           lower(coalesce(nullif(args->>'Collective name', ''),
                          nullif(regexp_extract(name, '^nccl(?:Dev)?Kernel_([A-Za-z]+)', 1), ''))) AS collective,
           TRY_CAST(args->>'In msg nelems' AS BIGINT) AS nelems,
           args->>'dtype' AS dtype,
           CASE lower(args->>'dtype')
                WHEN 'float' THEN 4 WHEN 'float32' THEN 4 WHEN 'int' THEN 4 WHEN 'int32' THEN 4
                WHEN 'double' THEN 8 WHEN 'long' THEN 8 WHEN 'int64' THEN 8 WHEN 'float64' THEN 8
                WHEN 'half' THEN 2 WHEN 'bfloat16' THEN 2 WHEN 'float16' THEN 2 WHEN 'short' THEN 2
                WHEN 'byte' THEN 1 WHEN 'char' THEN 1 WHEN 'bool' THEN 1 WHEN 'int8' THEN 1 WHEN 'uint8' THEN 1
                WHEN 'float8_e4m3fn' THEN 1 WHEN 'float8_e5m2' THEN 1
           END AS dtype_bytes,
           TRY_CAST(args->>'Group size' AS INTEGER) AS group_size
    FROM comm
)
SELECT *, nelems * dtype_bytes AS bytes,
       CASE WHEN dur_ns > 0 THEN nelems * dtype_bytes / dur_ns END AS algbw_gbps,
       CASE WHEN dur_ns > 0 THEN nelems * dtype_bytes / dur_ns
                 * CASE WHEN group_size IS NULL OR group_size < 1 THEN NULL
                        WHEN collective IN ('allreduce', 'all_reduce') THEN 2.0 * (group_size - 1) / group_size
                        WHEN collective IN ('allgather', 'all_gather', 'reducescatter', 'reduce_scatter',
                                            'alltoall', 'all_to_all', 'all_to_allv', 'alltoallv', 'allgather_into_tensor_coalesced',
                                            'reduce_scatter_tensor_coalesced', '_allgather_base', '_reduce_scatter_base')
                             THEN 1.0 * (group_size - 1) / group_size
                        ELSE 1.0 END
       END AS busbw_gbps
FROM sized;
