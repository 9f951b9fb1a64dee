-- requires: lib/gaps.sql
-- launch_stats(run, delay_outlier_ns, runtime_outlier_ns, tiny_kernel_ns): per rank, HTA's
-- get_cuda_kernel_launch_stats figures over kernel launches (cudaLaunchKernel/ExC, hip*,
-- including memcpy/memset launches as HTA's include_memory_events does), counted activity only.
-- Columns:
--   rank, launches
--   mean_launch_delay_ns, p50_launch_delay_ns, p95_launch_delay_ns
--   delay_outliers          launches whose delay > delay_outlier_ns (HTA: 100 us)
--   runtime_outliers        CPU launch calls longer than runtime_outlier_ns (HTA: 50 us)
--   short_kernel_share      share of kernels shorter than their own launch call (GPU time < CPU time)
--   tiny_kernel_share       share of kernels shorter than tiny_kernel_ns
--   mean_kernel_ns, mean_launch_cpu_ns
--   elementwise_kernel_share  share of kernels that are elementwise/vectorized (fusion candidates)
--   optimizer_kernel_share    share launched inside an Optimizer.step span (per-parameter loops)
CREATE OR REPLACE MACRO launch_stats(run, delay_outlier_ns, runtime_outlier_ns, tiny_kernel_ns) AS TABLE
WITH l AS (
    SELECT * FROM launches(run)
    WHERE counted AND launch_name IN ('cudaLaunchKernel', 'cudaLaunchKernelExC', 'cudaMemcpyAsync', 'cudaMemsetAsync',
                                      'cudaLaunchCooperativeKernel', 'cuLaunchKernel', 'cuLaunchKernelEx',
                                      'hipLaunchKernel', 'hipExtModuleLaunchKernel', 'hipModuleLaunchKernel',
                                      'hipMemcpyAsync', 'hipMemsetAsync', 'hipMemcpyWithStream')
), optimizer_spans AS (
    SELECT rank, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns
    FROM events
    WHERE run_id = run AND kind IN ('cpu_op', 'user_annotation') AND dur_ns IS NOT NULL
      AND starts_with(name, 'Optimizer.step#')
), in_optimizer AS (
    SELECT l.rank, l.correlation, o.end_ns IS NOT NULL AND l.launch_start_ns < o.end_ns AS inside
    FROM l ASOF LEFT JOIN optimizer_spans o ON l.rank = o.rank AND l.launch_start_ns >= o.start_ns
    WHERE l.gpu_kind = 'kernel'
)
SELECT l.rank, count(*) AS launches,
       avg(launch_delay_ns) AS mean_launch_delay_ns,
       quantile_cont(launch_delay_ns, 0.5) AS p50_launch_delay_ns,
       quantile_cont(launch_delay_ns, 0.95) AS p95_launch_delay_ns,
       count_if(launch_delay_ns > delay_outlier_ns) AS delay_outliers,
       count_if(launch_dur_ns > runtime_outlier_ns) AS runtime_outliers,
       avg(CASE WHEN gpu_kind = 'kernel' THEN (gpu_dur_ns < launch_dur_ns)::INT END) AS short_kernel_share,
       avg(CASE WHEN gpu_kind = 'kernel' THEN (gpu_dur_ns < tiny_kernel_ns)::INT END) AS tiny_kernel_share,
       avg(CASE WHEN gpu_kind = 'kernel' THEN gpu_dur_ns END) AS mean_kernel_ns,
       avg(launch_dur_ns) AS mean_launch_cpu_ns,
       avg(CASE WHEN gpu_kind = 'kernel' THEN (contains(gpu_name, 'elementwise') OR contains(gpu_name, 'vectorized')
                                                OR contains(gpu_name, 'reduce_kernel'))::INT END) AS elementwise_kernel_share,
       (SELECT avg(inside::INT) FROM in_optimizer o WHERE o.rank = l.rank) AS optimizer_kernel_share
FROM l
GROUP BY l.rank;


-- tiny_kernel_runs(run, tiny_kernel_ns, max_gap_ns, min_kernels): runs of back-to-back tiny
-- kernels on one device (each shorter than tiny_kernel_ns, at most max_gap_ns apart), at least
-- min_kernels long: what a CUDA graph or a fused kernel would collapse into one launch.
-- Columns: rank, device, run_id_in_rank, kernels, start_ns, end_ns, busy_ns (sum of kernel time),
--          idle_ns (end - start - busy: the launch overhead a graph would remove), top_kernel
CREATE OR REPLACE MACRO tiny_kernel_runs(run, tiny_kernel_ns, max_gap_ns, min_kernels) AS TABLE
WITH kernels AS MATERIALIZED (
    SELECT row_number() OVER () AS kernel_no, rank, device, name, start_ns, end_ns, dur_ns
    FROM gpu_activity(run) WHERE counted AND kind = 'kernel'
), k AS (
    -- the windows carry no kernel names (long strings made them 3x slower); names are joined
    -- back below for the kernels of the runs kept
    SELECT kernel_no, rank, device, start_ns, end_ns, dur_ns,
           lag(end_ns) OVER (PARTITION BY rank, device ORDER BY start_ns) AS prev_end,
           lag(dur_ns) OVER (PARTITION BY rank, device ORDER BY start_ns) AS prev_dur
    FROM kernels
), marked AS (
    SELECT *, sum(CASE WHEN dur_ns < tiny_kernel_ns AND prev_dur < tiny_kernel_ns
                            AND start_ns - prev_end <= max_gap_ns THEN 0 ELSE 1 END)
                  OVER (PARTITION BY rank, device ORDER BY start_ns ROWS UNBOUNDED PRECEDING) AS run_no
    FROM k
), runs AS (
    SELECT * FROM (
        SELECT rank, device, run_no, count(*) AS kernels, min(start_ns) AS start_ns,
               max(end_ns) AS end_ns, sum(dur_ns) AS busy_ns,
               greatest(max(end_ns) - min(start_ns) - sum(dur_ns), 0) AS idle_ns
        FROM marked
        WHERE dur_ns < tiny_kernel_ns
        GROUP BY rank, device, run_no
    )
    WHERE kernels >= min_kernels
), top AS (
    SELECT m.rank, m.device, m.run_no, mode(n.name) AS top_kernel
    FROM marked m
    SEMI JOIN runs r ON r.rank = m.rank AND r.device IS NOT DISTINCT FROM m.device AND r.run_no = m.run_no
    JOIN kernels n ON n.kernel_no = m.kernel_no
    WHERE m.dur_ns < tiny_kernel_ns
    GROUP BY m.rank, m.device, m.run_no
)
SELECT r.rank, r.device, r.run_no AS run_id_in_rank, r.kernels, r.start_ns, r.end_ns, r.busy_ns, r.idle_ns, t.top_kernel
FROM runs r
JOIN top t ON t.rank = r.rank AND t.device IS NOT DISTINCT FROM r.device AND t.run_no = r.run_no;
