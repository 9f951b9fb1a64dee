-- requires: lib/intervals.sql lib/steps.sql lib/gpu_steps.sql lib/gaps.sql
-- Per-step counts (launches, tiny-kernel runs, GELU chains) count only what starts inside the
-- rank's steps: CPU launch calls in its host steps (host_step_windows), GPU kernels in its steps
-- on the GPU clock (gpu_steps), so that start-up and the tail after the last step are no step's
-- and ProfilerSteps and inferred iterations give the same figures per step.
-- launch_stats(run, delay_outlier_ns, runtime_outlier_ns, tiny_kernel_ns): per rank, HTA's
-- get_cuda_kernel_launch_stats figures over kernel launches (cudaLaunchKernel/ExC, hip*,
-- including memcpy/memset launches as HTA's include_memory_events does), counted activity only.
-- Columns:
--   rank, launches
--   launches_in_steps       launches whose CPU call starts inside the rank's steps (host clock;
--                           all of them on a rank without steps): what launches per step counts
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
), calls AS (
    -- each launch call's start, as a 1 ns window
    SELECT rank AS grp, launch_start_ns AS start_ns, launch_start_ns + 1 AS end_ns
    FROM l
), windows AS (
    SELECT grp, start_ns, end_ns FROM host_step_windows(run)
), in_steps AS (
    SELECT grp AS rank, count(*) AS launches_in_steps FROM interval_clip('calls', 'windows') GROUP BY grp
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
       coalesce(any_value(s.launches_in_steps), 0) AS launches_in_steps,
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
FROM l LEFT JOIN in_steps s ON s.rank = l.rank
GROUP BY l.rank;


-- tiny_kernel_runs(run, tiny_kernel_ns, max_gap_ns, min_kernels): runs of back-to-back tiny
-- kernels on one device (each shorter than tiny_kernel_ns, at most max_gap_ns apart), at least
-- min_kernels long: what a CUDA graph or a fused kernel would collapse into one launch.
-- Columns: rank, device, run_id_in_rank, kernels, start_ns, end_ns, busy_ns (sum of kernel time),
--          idle_ns (end - start - busy: the launch overhead a graph would remove), top_kernel,
--          in_steps (BOOLEAN: the run starts inside the rank's steps on the GPU clock, gpu_steps;
--          per-step figures count only those runs)
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
), run_spans AS (
    SELECT rank AS grp, rank, device, run_no, start_ns, start_ns + 1 AS end_ns FROM runs
), windows AS (
    SELECT rank AS grp, start_ns, end_ns FROM gpu_steps(run) WHERE rank IN (SELECT rank FROM runs)
), runs_in_steps AS (
    SELECT DISTINCT rank, device, run_no FROM interval_clip('run_spans', 'windows')
), top AS (
    -- equally frequent kernels: the first to run (mode alone picks by the order rows arrive in)
    SELECT m.rank, m.device, m.run_no, mode(n.name ORDER BY n.start_ns, n.name) AS top_kernel
    FROM marked m
    SEMI JOIN runs r ON r.rank = m.rank AND r.device IS NOT DISTINCT FROM m.device AND r.run_no = m.run_no
    JOIN kernels n ON n.kernel_no = m.kernel_no
    WHERE m.dur_ns < tiny_kernel_ns
    GROUP BY m.rank, m.device, m.run_no
)
SELECT r.rank, r.device, r.run_no AS run_id_in_rank, r.kernels, r.start_ns, r.end_ns, r.busy_ns, r.idle_ns, t.top_kernel,
       i.run_no IS NOT NULL AS in_steps
FROM runs r
JOIN top t ON t.rank = r.rank AND t.device IS NOT DISTINCT FROM r.device AND t.run_no = r.run_no
LEFT JOIN runs_in_steps i ON i.rank = r.rank AND i.device IS NOT DISTINCT FROM r.device AND i.run_no = r.run_no;


-- gelu_chains(run): per rank, the GELU kernels (forward or backward) that run as a kernel of their
-- own with an elementwise kernel (a bias add, a dropout) right before or after them on the same
-- stream: the chain a fused bias+GELU+dropout kernel collapses into one. A GELU that a compiler
-- already fused with its neighbours (an Inductor triton_* kernel) has no such neighbour.
-- Columns: rank, gelu_kernels, chains (GELU kernels with an elementwise neighbour),
--          chains_in_steps (those starting inside the rank's steps on the GPU clock, gpu_steps:
--          what per-step figures count)
CREATE OR REPLACE MACRO gelu_chains(run) AS TABLE
WITH k AS MATERIALIZED (
    -- flags first: windows over long kernel names are slow (see tiny_kernel_runs)
    SELECT rank, device, stream, start_ns, contains(lower(name), 'gelu') AS gelu,
           contains(name, 'elementwise') OR contains(name, 'vectorized') OR contains(lower(name), 'dropout') AS elementwise
    FROM gpu_activity(run) WHERE counted AND kind = 'kernel'
), n AS (
    SELECT rank, gelu, start_ns,
           coalesce(lag(elementwise) OVER w, false) OR coalesce(lead(elementwise) OVER w, false) AS chained
    FROM k
    WINDOW w AS (PARTITION BY rank, device, stream ORDER BY start_ns)
), chained_gelu AS (
    -- each kernel's start, as a 1 ns window
    SELECT rank AS grp, start_ns, start_ns + 1 AS end_ns
    FROM n WHERE gelu AND chained
), windows AS (
    SELECT rank AS grp, start_ns, end_ns FROM gpu_steps(run) WHERE rank IN (SELECT grp FROM chained_gelu)
), in_steps AS (
    SELECT grp AS rank, count(*) AS chains_in_steps FROM interval_clip('chained_gelu', 'windows') GROUP BY grp
)
SELECT n.rank, count_if(n.gelu) AS gelu_kernels, count_if(n.gelu AND n.chained) AS chains,
       coalesce(any_value(i.chains_in_steps), 0) AS chains_in_steps
FROM n LEFT JOIN in_steps i ON i.rank = n.rank
GROUP BY n.rank;
