-- requires: lib/steps.sql lib/kernel_taxonomy.sql
-- gpu_activity(run): every kernel, memcpy and memset of the run, one row each.
-- Columns:
--   run_id, rank, device, stream, kind ('kernel' | 'memcpy' | 'memset'), name
--   start_ns, end_ns, dur_ns
--   correlation, external_id, bytes (copies and sets only), args (JSON, verbatim)
--   category    'comm' (is_comm_kernel: NCCL/RCCL '^nccl.*Kernel' as Holistic Trace Analysis'
--               temporal breakdown, and the other libraries' collectives of lib/kernel_taxonomy.sql:
--               MSCCL/MSCCL++, symmetric-memory multimem_*, vLLM cross_device_reduce_*, ...),
--               'memory' (name ~ '^Memcpy|^Memset|^dma', HTA's), else 'compute'. On traces whose
--               only collectives are NCCL-named (HTA's test data) the categories are HTA's.
--   counted     BOOLEAN, HTA's rule for which GPU activity belongs to the profiled steps: when the
--               run has two or more distinct ProfilerStep#N names, only activity whose launching
--               CPU call (same correlation) is in the trace and starts no later than the end of
--               the rank's last ProfilerStep counts; otherwise all activity counts (real ProfilerStep#N
--               ranges only, profiler_steps: inferred iterations leave HTA's figures unchanged)
CREATE OR REPLACE MACRO gpu_activity(run) AS TABLE
WITH activity AS (
    SELECT run_id, rank, device, stream, kind, name, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns,
           dur_ns, correlation, external_id, bytes, args
    FROM events
    WHERE run_id = run AND kind IN ('kernel', 'memcpy', 'memset') AND dur_ns IS NOT NULL
), step_names AS (
    SELECT n_step_names FROM profiler_step_names(run)
), last_step_end AS (
    SELECT rank, max(end_ns) AS last_end_ns FROM profiler_steps(run) GROUP BY rank
), launched_in_steps AS (
    -- correlation ids whose CPU call started before the rank's last ProfilerStep ended
    SELECT DISTINCT e.rank, e.correlation
    FROM events e JOIN last_step_end l ON e.rank = l.rank
    WHERE e.run_id = run AND e.kind IN ('runtime', 'driver') AND e.correlation IS NOT NULL
      AND e.ts_ns <= l.last_end_ns
)
SELECT a.*,
       CASE WHEN is_comm_kernel(a.name) THEN 'comm'
            WHEN starts_with(a.name, 'Memcpy') OR starts_with(a.name, 'Memset') OR starts_with(a.name, 'dma') THEN 'memory'
            ELSE 'compute' END AS category,
       (SELECT n_step_names FROM step_names) < 2 OR l.correlation IS NOT NULL AS counted
FROM activity a
LEFT JOIN launched_in_steps l ON a.rank = l.rank AND a.correlation = l.correlation;


-- launches(run): each GPU activity joined to the CPU runtime/driver call that started it (same
-- correlation id, the call starting before the work), e.g. cudaLaunchKernel -> kernel,
-- cudaMemcpyAsync -> memcpy. GPU activity without a launch call in the trace is left out.
-- The kernels a cudaGraphLaunch/hipGraphLaunch replays share its correlation id: each pairs with
-- that one call (launch_name says so; its launch_delay_ns is no launch overhead).
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


-- copy_direction(name, args): a memcpy's direction, 'HtoD' | 'DtoH' | 'DtoD' | 'HtoH' | 'PtoP' ...,
-- from its name ("Memcpy HtoD (Pageable -> Device)"), else from args.kind (older Kineto).
CREATE OR REPLACE MACRO copy_direction(name, args) AS
    coalesce(nullif(regexp_extract(name, '^Memcpy\s+(\w+)', 1), ''), json_extract_string(args, '$.kind'));

-- is_h2d_copy(kind, name, args): BOOLEAN, GPU activity (events.kind, name, args) that is a
-- host-to-device copy (copy_direction 'HtoD'). The one H2D rule: copies.host_to_device, the H2D
-- columns of rank_breakdown, h2d_stall and the idle-gap cause 'h2d_copy' read it.
CREATE OR REPLACE MACRO is_h2d_copy(kind, name, args) AS
    kind = 'memcpy' AND coalesce(copy_direction(name, args) = 'HtoD', false);


-- graph_capture_windows(run): host time spent capturing work into a CUDA/HIP graph, from each
-- cudaStreamBeginCapture (hipStreamBeginCapture, ...ToGraph) to the next EndCapture on the same
-- thread (to the rank's last event when the trace ends first). Launch calls inside only record
-- work into the graph: nothing runs on the GPU for them, so no idle time there is a launch gap.
-- Columns: rank, tid, start_ns, end_ns
CREATE OR REPLACE MACRO graph_capture_windows(run) AS TABLE
WITH capture_calls AS (
    SELECT rank, coalesce(tid, '') AS tid, ts_ns, ts_ns + coalesce(dur_ns, 0) AS end_ns,
           contains(name, 'BeginCapture') AS is_begin
    FROM events
    WHERE run_id = run AND kind IN ('runtime', 'driver') AND contains(name, 'Capture')
      AND regexp_matches(name, '^(cuda|hip)Stream(Begin|End)Capture')
), begins AS (
    SELECT rank, tid, ts_ns FROM capture_calls WHERE is_begin
), ends AS (
    SELECT rank, tid, ts_ns, end_ns FROM capture_calls WHERE NOT is_begin
), trace_end AS (
    SELECT rank, max(ts_ns + coalesce(dur_ns, 0)) AS end_ns FROM events
    WHERE run_id = run AND rank IN (SELECT rank FROM begins) AND ts_ns IS NOT NULL
    GROUP BY rank
)
SELECT b.rank, b.tid, b.ts_ns AS start_ns, coalesce(e.end_ns, t.end_ns) AS end_ns
FROM begins b
ASOF LEFT JOIN ends e ON e.rank = b.rank AND e.tid = b.tid AND b.ts_ns <= e.ts_ns
JOIN trace_end t ON t.rank = b.rank;
