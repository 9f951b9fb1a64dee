-- requires: lib/rank_balance.sql lib/collectives.sql
-- comm_by_collective(run): per rank and collective type, what moved and how fast.
-- Columns: rank, collective, instances, sized_instances, total_bytes, mean_bytes, true_ns,
--   wait_ns, algbw_gbps, busbw_gbps (true durations; NULL without sizes), group_size
CREATE OR REPLACE MACRO comm_by_collective(run) AS TABLE
SELECT rank, collective, count(*) AS instances, count(bytes) AS sized_instances,
       sum(bytes) AS total_bytes, avg(bytes) AS mean_bytes,
       sum(true_dur_ns) AS true_ns, sum(wait_ns) FILTER (WHERE matched) AS wait_ns,
       collective_algbw_gbps(bytes, true_dur_ns) AS algbw_gbps,
       collective_busbw_gbps(bytes, bus_factor, true_dur_ns) AS busbw_gbps,
       max(group_size) AS group_size
FROM collective_instances(run)
WHERE source = 'gpu'
GROUP BY rank, collective;


-- collective_kernels(run): one row per communication kernel (lib/collectives.sql), for the
-- Communication page's list, with its match across ranks where collective_instances has one.
-- Columns: rank, collective, name, stream, group_size, bytes, start_ns, dur_ns,
--   true_dur_ns (the shortest matched instance across ranks: the transfer; dur_ns when the
--               kernel is unmatched or outside the profiled steps), wait_ns (dur_ns - true_dur_ns)
--   algbw_gbps, busbw_gbps   bytes / true_dur_ns (x bus factor): the link's speed, waiting excluded
--   measured_busbw_gbps      bytes / dur_ns x bus factor: what the kernel's own duration gives
CREATE OR REPLACE MACRO collective_kernels(run) AS TABLE
WITH matched AS (
    SELECT rank, start_ns, stream, min(true_dur_ns) AS true_dur_ns
    FROM collective_instances(run) WHERE source = 'gpu' GROUP BY ALL
), kernels AS (
    SELECT c.rank, replace(c.collective, '_', '') AS collective, c.name, c.stream, c.group_size, c.bytes,
           c.start_ns, c.dur_ns, coalesce(m.true_dur_ns, c.dur_ns) AS true_dur_ns,
           c.bus_factor
    FROM collectives(run) c
    LEFT JOIN matched m ON m.rank = c.rank AND m.start_ns = c.start_ns AND m.stream IS NOT DISTINCT FROM c.stream
)
SELECT rank, collective, name, stream, group_size, bytes, start_ns, dur_ns, true_dur_ns,
       dur_ns - true_dur_ns AS wait_ns,
       CASE WHEN true_dur_ns > 0 THEN bytes / true_dur_ns END AS algbw_gbps,
       CASE WHEN true_dur_ns > 0 THEN bytes * bus_factor / true_dur_ns END AS busbw_gbps,
       CASE WHEN dur_ns > 0 THEN bytes * bus_factor / dur_ns END AS measured_busbw_gbps
FROM kernels;
