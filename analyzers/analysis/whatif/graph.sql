-- requires: lib/steps.sql lib/gpu_activity.sql lib/gaps.sql lib/rank_balance.sql
-- The what-if replay's dependency graph, per rank (analyzers/analysis/whatif/replay.py simulates it).
--
-- A rank is one host chain (its launching threads merged in time order: on a GPU job the
-- training thread and the autograd thread take turns) and its GPU streams. The host chain holds
-- the events the replay moves or waits on; the host time between them is CPU work, replayed as
-- measured. Edges: host chain order; launch -> GPU work (correlation); GPU work in stream order;
-- cross-stream waits (cuda_sync 'Stream Wait Event' -> the work before the awaited record);
-- blocking host calls -> the GPU work they wait for; DataLoader waits; collectives matched across
-- ranks (collective_instances), which finish when their last rank arrives.


-- whatif_host_nodes(run): the host chain's events, one row each. A runtime call nested in a
-- DataLoader wait or a blocked piece is that wait's time: graph.py leaves it out (a running max
-- over the chain in time order, cheaper in numpy than a window over every call).
-- Columns:
--   rank, start_ns, end_ns, correlation
--   node   TINYINT: 0 a runtime/driver call (launch, copy, sync or other; the replay tells them apart
--          by correlation and name), 1 a DataLoader wait (enumerate(DataLoader)...__next__),
--          2 a comm_wait (the training thread of a CPU rank blocked while gloo works: cpu_comm_blocked),
--          3 a comm_issue (a gloo collective's start: when the CPU rank arrived at it; its
--          correlation column holds the gloo span's start, which identifies the collective)
--   call_kind  TINYINT, a runtime call's kind by name: 1 sync, 2 copy, 3 cross-stream wait, 0 other
--   loader_in_main  BOOLEAN, a DataLoader wait of a loader without workers (_SingleProcessDataLoaderIter)
CREATE OR REPLACE MACRO whatif_host_nodes(run) AS TABLE
WITH calls AS (
    SELECT rank, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns, name, correlation, 0 AS node
    FROM events
    WHERE run_id = run AND kind IN ('runtime', 'driver') AND dur_ns IS NOT NULL AND dur_ns >= 0
), loader AS (
    SELECT rank, start_ns, end_ns, name, NULL::BIGINT AS correlation, 1 AS node
    FROM dataloader_spans(run)
), gloo AS (
    SELECT rank, start_ns, end_ns FROM collective_instances(run) WHERE source = 'cpu'
), comm_wait AS (
    SELECT rank, start_ns, end_ns, 'comm_wait' AS name, NULL::BIGINT AS correlation, 2 AS node
    FROM cpu_comm_blocked(run, 'gloo') WHERE blocked AND dur_ns > 0
), comm_issue AS (
    -- the rank's arrival: the gloo span's start, or the start of the blocked piece it starts in
    -- (the training thread stops a moment before gloo's own span begins)
    SELECT g.rank, least(g.start_ns, coalesce(w.start_ns, g.start_ns)) AS start_ns,
           least(g.start_ns, coalesce(w.start_ns, g.start_ns)) AS end_ns, 'comm_issue', g.start_ns, 3
    FROM gloo g LEFT JOIN comm_wait w ON w.rank = g.rank AND g.start_ns BETWEEN w.start_ns AND w.end_ns
), nodes AS (
    SELECT * FROM calls UNION ALL SELECT * FROM loader UNION ALL SELECT * FROM comm_wait
    UNION ALL SELECT * FROM comm_issue
)
SELECT rank, start_ns, end_ns, correlation, node::TINYINT AS node,
       -- what a runtime call is, by name: 1 a sync, 2 a copy, 3 a cross-stream wait, 0 other
       CASE WHEN node <> 0 THEN 0
            WHEN (contains(name, 'Synchronize'))
                 AND regexp_matches(name, '^(cuda|hip)(Stream|Device|Event)Synchronize$') THEN 1
            WHEN starts_with(name, 'cudaMemcpy') OR starts_with(name, 'hipMemcpy') THEN 2
            WHEN name IN ('cudaStreamWaitEvent', 'hipStreamWaitEvent') THEN 3
            ELSE 0 END::TINYINT AS call_kind,
       node = 1 AND contains(name, 'SingleProcess') AS loader_in_main
FROM nodes;


-- whatif_gpu_ops(run): every kernel, copy and memset, with what the fix models need to know.
-- Columns:
--   rank, stream, start_ns, end_ns, correlation
--   category   TINYINT: 0 compute, 1 comm, 2 memory (gpu_activity's category)
--   is_copy    BOOLEAN, a memcpy (whatif_copy_dirs has its direction)
--   fp32_matmul  BOOLEAN, an FP32 matmul on CUDA cores (is_fp32_simt_matmul, once per kernel name)
--   pageable   BOOLEAN, a copy from or to pageable host memory
CREATE OR REPLACE MACRO whatif_gpu_ops(run) AS TABLE
WITH ops AS (
    SELECT rank, stream, start_ns, end_ns, correlation, category, kind, name FROM gpu_activity(run)
), kernel_names AS (
    SELECT name, is_fp32_simt_matmul(name) AS fp32_matmul FROM (SELECT DISTINCT name FROM ops WHERE kind = 'kernel')
)
SELECT o.rank, coalesce(o.stream, -1) AS stream, o.start_ns, o.end_ns, o.correlation,
       CASE o.category WHEN 'comm' THEN 1 WHEN 'memory' THEN 2 ELSE 0 END::TINYINT AS category,
       o.kind = 'memcpy' AS is_copy, coalesce(k.fp32_matmul, false) AS fp32_matmul,
       o.kind = 'memcpy' AND contains(o.name, 'Pageable') AS pageable
FROM ops o LEFT JOIN kernel_names k ON k.name = o.name;


-- whatif_copy_dirs(run): each copy's direction ('HtoD' | 'DtoH' | ...: copy_direction), in the
-- whatif_gpu_ops order of its copies (kept apart: reading every op's args costs more than the rest).
-- Columns: rank, stream, start_ns, end_ns, correlation, copy_dir
CREATE OR REPLACE MACRO whatif_copy_dirs(run) AS TABLE
SELECT rank, coalesce(stream, -1) AS stream, start_ns, end_ns, correlation, copy_direction(name, args) AS copy_dir
FROM gpu_activity(run)
WHERE kind = 'memcpy';


-- whatif_stream_waits(run): cross-stream edges as newer Kineto records them (cuda_sync 'Stream
-- Wait Event': the stream waits for the event recorded by the call with correlation record_corr);
-- and which stream or event a host sync waits on ('Stream Sync', 'Event Sync').
-- Columns: rank, correlation (of the host call), sync_kind, stream, wait_on_stream, record_corr
CREATE OR REPLACE MACRO whatif_stream_waits(run) AS TABLE
SELECT rank, correlation, json_extract_string(args, '$.cuda_sync_kind') AS sync_kind,
       TRY_CAST(json_extract(args, '$.stream') AS BIGINT) AS stream,
       TRY_CAST(json_extract(args, '$.wait_on_stream') AS BIGINT) AS wait_on_stream,
       TRY_CAST(json_extract(args, '$.wait_on_cuda_event_record_corr_id') AS BIGINT) AS record_corr
FROM events
WHERE run_id = run AND kind = 'cuda_sync' AND correlation IS NOT NULL;


-- whatif_collectives(run): the collectives the replay couples ranks with (collective_instances):
-- matched instances finish on every rank when the last rank has arrived and the transfer is done.
-- Columns: rank, source ('gpu' | 'cpu'), start_ns, end_ns, coll_key (the same on every rank of a
-- matched instance; NULL unmatched), true_dur_ns (the transfer), matched_ranks
CREATE OR REPLACE MACRO whatif_collectives(run) AS TABLE
SELECT rank, source, start_ns, end_ns,
       CASE WHEN matched THEN pg || '/' || coalesce(step, -1) || '/' || seq END AS coll_key,
       true_dur_ns, matched_ranks
FROM collective_instances(run);
