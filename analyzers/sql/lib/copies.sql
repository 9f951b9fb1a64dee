-- requires: lib/gpu_activity.sql
-- copies(run): memory copies with direction, memory kinds and achieved bandwidth.
-- Columns:
--   run_id, rank, device, stream, name, start_ns, end_ns, dur_ns, correlation, counted
--   direction   'HtoD' | 'DtoH' | 'DtoD' | 'HtoH' | 'PtoP' ... (from the name, else args.kind)
--   host_to_device  BOOLEAN, is_h2d_copy: a host-to-device copy
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
       copy_direction(g.name, g.args) AS direction, is_h2d_copy(g.kind, g.name, g.args) AS host_to_device,
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
