-- Normalise rank files' events into the `events` table (see analyzers/store/schema.sql).
-- Parameters: $run_id, $parts (files each holding a JSON array: byte ranges of the traces'
-- traceEvents lists, cut at event boundaries so DuckDB parses them on all threads) and $ranks
-- (the rank of each part). One statement loads all ranks of a run: several INSERTs into one
-- transaction leave partial row groups that DuckDB rewrites at the next checkpoint.
-- Placeholders filled by analyzers/ingest/core.py with fixed SQL (never trace content):
-- <events_table> the stored events table's full name (`events` may be a view adding partitions),
-- <source> the read_json scan (plus ts_text when exact), <ts_ns> the timestamp expression.
-- Every array element becomes one row; elements that are not usable events (not an object,
-- no `ph`, no numeric `ts`, a complete event without a non-negative `dur`) get kind
-- '__dropped__' so the caller can count and delete them inside the same transaction.
INSERT INTO <events_table>
WITH raw AS (
    SELECT * FROM <source>
    JOIN (SELECT unnest($parts) AS filename, unnest($ranks) AS part_rank) AS part_ranks USING (filename)
),
typed AS (
    SELECT
        part_rank, ph, cat, name, pid, tid,
        id AS flow_id,
        args,
        json_transform(args, '{"device": "BIGINT", "stream": "BIGINT", "correlation": "BIGINT",
                                "External id": "BIGINT", "bytes": "BIGINT"}') AS a,
        <ts_ns> AS ts_ns,
        -- durations are far below 2^43 µs, where float64 still resolves well under 1 ns
        CASE WHEN dur IS NULL OR NOT isfinite(dur) OR abs(dur) >= 9.0e15 THEN NULL
             ELSE TRY_CAST(round(dur * 1000) AS BIGINT) END AS dur_ns,
        lower(cat) AS lcat
    FROM raw
),
kinded AS (
    SELECT *,
        CASE
            WHEN ph IN ('s', 'f', 't') OR lcat IN ('async', 'ac2g', 'async_cpu_to_gpu', 'fwdbwd', 'flow') THEN 'flow'
            WHEN ph = 'M' THEN 'metadata'
            WHEN ph = 'C' THEN 'counter'
            -- MTIA's on-device events are Kineto's CONCURRENT_KERNEL (libkineto ActivityType alias)
            WHEN lcat IN ('kernel', 'mtia_ccp_events') THEN 'kernel'
            WHEN lcat IN ('gpu_memcpy', 'memcpy') THEN 'memcpy'
            WHEN lcat IN ('gpu_memset', 'memset') THEN 'memset'
            WHEN lcat IN ('cuda_runtime', 'runtime', 'mtia_runtime', 'xpu_runtime', 'privateuse1_runtime') THEN 'runtime'
            WHEN lcat IN ('cuda_driver', 'driver') THEN 'driver'
            WHEN lcat IN ('cpu_op', 'operator') THEN 'cpu_op'
            WHEN lcat = 'user_annotation' THEN 'user_annotation'
            WHEN lcat = 'gpu_user_annotation' THEN 'gpu_user_annotation'
            WHEN lcat = 'python_function' THEN 'python_function'
            WHEN lcat = 'cuda_sync' THEN 'cuda_sync'
            WHEN lcat = 'trace' THEN 'trace'
            WHEN ph IN ('i', 'I') THEN 'instant'
            ELSE 'other'
        END AS kind
    FROM typed
)
SELECT
    $run_id,
    part_rank,
    CASE WHEN ph IS NOT NULL
              AND (ph = 'M' OR ts_ns IS NOT NULL)
              AND (ph <> 'X' OR coalesce(dur_ns >= 0, false))
         THEN kind ELSE '__dropped__' END,
    cat,
    ph,
    name,
    ts_ns,
    CASE WHEN ph IN ('i', 'I') THEN coalesce(dur_ns, 0) ELSE dur_ns END,
    pid,
    tid,
    CASE WHEN kind IN ('kernel', 'memcpy', 'memset', 'cuda_sync', 'gpu_user_annotation')
         THEN TRY_CAST(coalesce(a.device, TRY_CAST(pid AS BIGINT)) AS INTEGER) END,
    CASE WHEN kind IN ('kernel', 'memcpy', 'memset', 'cuda_sync', 'gpu_user_annotation')
         THEN TRY_CAST(coalesce(a.stream, TRY_CAST(tid AS BIGINT),
                                TRY_CAST(regexp_extract(tid, '^\s*stream\s+(\d+)', 1) AS BIGINT)) AS INTEGER) END,
    CASE WHEN kind = 'flow' THEN coalesce(TRY_CAST(flow_id AS BIGINT), a.correlation)
         ELSE a.correlation END,
    -- new traces write "External id", 2021 traces "external id" (one structure cannot hold both)
    CASE WHEN a."External id" IS NOT NULL THEN a."External id"
         WHEN contains(args, '"external id"')   -- cheap test first: json_extract on every row is not
             THEN TRY_CAST(json_extract_string(args, '$."external id"') AS BIGINT) END,
    CASE WHEN kind IN ('memcpy', 'memset') THEN a.bytes END,
    args
FROM kinded
