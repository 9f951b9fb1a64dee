-- requires: lib/gpu_activity.sql
-- collectives(run): communication kernels (is_comm_kernel: NCCL/RCCL and the others) with what they moved; size fields come from the args
-- newer PyTorch writes (Collective name, In msg nelems, dtype, Group size) and are NULL where
-- the trace has none.
-- Columns:
--   run_id, rank, device, stream, name, start_ns, end_ns, dur_ns, correlation, counted
--   collective   args."Collective name", else parsed from the kernel name
--                (comm_collective_from_name: ncclKernel_AllReduce_... -> 'allreduce',
--                multimem_all_reduce_kernel -> 'allreduce'), lower case;
--                NULL for ncclDevKernel_Generic without the args
--   nelems       args."In msg nelems"
--   dtype        args.dtype as written (Float, BFloat16, Half, ...)
--   dtype_bytes  element size of dtype, NULL when unknown
--   group_size   args."Group size"
--   bytes        nelems * dtype_bytes
--   bus_factor   nccl-tests' busbw / algbw factor: 2(n-1)/n all-reduce, (n-1)/n all-gather /
--                reduce-scatter / all-to-all, 1 otherwise; NULL without a group size
--   algbw_gbps   bytes / duration (GB/s); busbw_gbps = algbw * bus_factor
CREATE OR REPLACE MACRO collectives(run) AS TABLE
WITH comm AS (
    SELECT g.run_id, g.rank, g.device, g.stream, g.name, g.start_ns, g.end_ns, g.dur_ns,
           g.correlation, g.counted, g.args
    FROM gpu_activity(run) g
    WHERE g.category = 'comm'
), sized AS (
    SELECT * EXCLUDE (args),
           -- NCCL >= 2.19 and RCCL also run ncclDevKernel_Generic: the name says no collective
           lower(coalesce(nullif(args->>'Collective name', ''), comm_collective_from_name(name))) AS collective,
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
       CASE WHEN dur_ns > 0 THEN nelems * dtype_bytes / dur_ns * bus_factor END AS busbw_gbps
FROM (
    SELECT *,
           CASE WHEN group_size IS NULL OR group_size < 1 THEN NULL
                WHEN collective IN ('allreduce', 'all_reduce') THEN 2.0 * (group_size - 1) / group_size
                WHEN collective IN ('allgather', 'all_gather', 'reducescatter', 'reduce_scatter',
                                    'alltoall', 'all_to_all', 'all_to_allv', 'alltoallv', 'allgather_into_tensor_coalesced',
                                    'reduce_scatter_tensor_coalesced', '_allgather_base', '_reduce_scatter_base')
                     THEN 1.0 * (group_size - 1) / group_size
                ELSE 1.0 END AS bus_factor
    FROM sized
);


-- collective_algbw_gbps(bytes, dur_ns), collective_busbw_gbps(bytes, bus_factor, dur_ns):
-- AGGREGATES, DOUBLE GB/s (bytes per ns) over a group of collective instances: nccl-tests' algbw
-- (bytes / time) and busbw (bytes x bus_factor / time) of the instances that carry what the
-- numerator needs (a byte count; and a bus factor) and a positive duration (pass true_dur_ns:
-- the transfer, waiting excluded). Time of instances without a size is left out of the
-- denominator too; NULL when no instance qualifies. The one definition comm_by_collective and
-- comm_exposure read.
CREATE OR REPLACE MACRO collective_algbw_gbps(bytes, dur_ns) AS
    sum(bytes) FILTER (WHERE dur_ns > 0)
        / nullif(sum(dur_ns) FILTER (WHERE bytes IS NOT NULL AND dur_ns > 0), 0);
CREATE OR REPLACE MACRO collective_busbw_gbps(bytes, bus_factor, dur_ns) AS
    sum(bytes * bus_factor) FILTER (WHERE dur_ns > 0 AND bus_factor IS NOT NULL)
        / nullif(sum(dur_ns) FILTER (WHERE bytes IS NOT NULL AND bus_factor IS NOT NULL AND dur_ns > 0), 0);
