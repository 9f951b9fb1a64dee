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


-- whatif_host_nodes(run): the host chain's events, one row each, nested events left out (a
-- runtime call inside a DataLoader wait is the loader's time).
-- Columns:
--   rank, start_ns, end_ns, correlation
--   call_kind  TINYINT, a runtime call's kind by name: 1 sync, 2 copy, 3 cross-stream wait, 0 other
--   loader_in_main  BOOLEAN, a DataLoader wait of a loader without workers (_SingleProcessDataLoaderIter)
--   node   'call' (a runtime/driver call: launch, copy, sync or other; the replay tells them apart
--          by correlation and name), 'loader' (enumerate(DataLoader)...__next__),
--          'comm_wait' (the training thread of a CPU rank blocked while gloo works: cpu_comm_blocked),
--          'comm_issue' (a gloo collective's start: when the CPU rank arrived at it; its
--          correlation column holds the gloo span's start, which identifies the collective)
CREATE OR REPLACE MACRO whatif_host_nodes(run) AS TABLE
WITH calls AS (
    SELECT rank, tid, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns, name, correlation, 'call' AS node
    FROM events
    WHERE run_id = run AND kind IN ('runtime', 'driver') AND dur_ns IS NOT NULL AND dur_ns >= 0
), loader AS (
    SELECT rank, NULL::VARCHAR AS tid, start_ns, end_ns, name, NULL::BIGINT AS correlation, 'loader' AS node
    FROM dataloader_spans(run)
), gloo AS (
    SELECT rank, start_ns, end_ns FROM collective_instances(run) WHERE source = 'cpu'
), comm_wait AS (
    SELECT rank, NULL::VARCHAR AS tid, start_ns, end_ns, 'comm_wait' AS name, NULL::BIGINT AS correlation,
           'comm_wait' AS node
    FROM cpu_comm_blocked(run, 'gloo') WHERE blocked AND dur_ns > 0
), comm_issue AS (
    -- the rank's arrival: the gloo span's start, or the start of the blocked piece it starts in
    -- (the training thread stops a moment before gloo's own span begins)
    SELECT g.rank, NULL::VARCHAR, least(g.start_ns, coalesce(w.start_ns, g.start_ns)) AS start_ns,
           least(g.start_ns, coalesce(w.start_ns, g.start_ns)) AS end_ns, 'comm_issue', g.start_ns, 'comm_issue'
    FROM gloo g LEFT JOIN comm_wait w ON w.rank = g.rank AND g.start_ns BETWEEN w.start_ns AND w.end_ns
), nodes AS (
    SELECT * FROM calls UNION ALL SELECT * FROM loader UNION ALL SELECT * FROM comm_wait
    UNION ALL SELECT * FROM comm_issue
)
SELECT rank, start_ns, end_ns, correlation, node,
       -- what a runtime call is, by name: 1 a sync, 2 a copy, 3 a cross-stream wait, 0 other
       CASE WHEN node <> 'call' THEN 0
            WHEN (contains(name, 'Synchronize'))
                 AND regexp_matches(name, '^(cuda|hip)(Stream|Device|Event)Synchronize$') THEN 1
            WHEN starts_with(name, 'cudaMemcpy') OR starts_with(name, 'hipMemcpy') THEN 2
            WHEN name IN ('cudaStreamWaitEvent', 'hipStreamWaitEvent') THEN 3
            ELSE 0 END::TINYINT AS call_kind,
       node = 'loader' AND contains(name, 'SingleProcess') AS loader_in_main
FROM (SELECT *, max(end_ns) FILTER (WHERE node IN ('loader', 'comm_wait'))
                    OVER (PARTITION BY rank ORDER BY start_ns, end_ns DESC
                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS wait_end_ns
      FROM nodes)
-- a call inside a loader wait or a blocked piece is part of that wait
WHERE NOT (node = 'call' AND wait_end_ns IS NOT NULL AND end_ns <= wait_end_ns);


-- whatif_gpu_ops(run): every kernel, copy and memset, with what the fix models need to know.
-- Columns:
--   rank, stream, start_ns, end_ns, correlation
--   category   'compute' | 'comm' | 'memory' (gpu_activity)
--   gpu_kind   'kernel' | 'memcpy' | 'memset'
--   fp32_matmul  BOOLEAN, an FP32 matmul on CUDA cores (is_fp32_simt_matmul)
--   copy_dir   'HtoD' | 'DtoH' | ... for copies
--   pageable   BOOLEAN, a copy from or to pageable host memory
CREATE OR REPLACE MACRO whatif_gpu_ops(run) AS TABLE
SELECT rank, coalesce(stream, -1) AS stream, start_ns, end_ns, correlation, category, kind AS gpu_kind,
       kind = 'kernel' AND is_fp32_simt_matmul(name) AS fp32_matmul,
       CASE WHEN kind = 'memcpy' THEN copy_direction(name, args) END AS copy_dir,
       kind = 'memcpy' AND contains(name, 'Pageable') AS pageable
FROM gpu_activity(run);


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
