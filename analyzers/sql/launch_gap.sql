-- GPU idle gaps and their causes (issue #3, analysis 1), plus HTA-style launch statistics.
--
-- A gap is a hole in the union of a device's GPU activity (all streams merged, HTA's counted
-- activity only) between its first and last activity; the gaps of a rank add up to
-- rank_breakdown.idle_ns. Each gap gets exactly ONE cause, decided from the CPU side, so the
-- findings built on them (dataloader_stall, host_sync, launch_gap) never count time twice:
--   'dataloader'  the training loop sat in enumerate(DataLoader)...__next__ for at least
--                 CAUSE_MIN_COVER_FRACTION of the gap (the GPU starved for input)
--   'h2d_copy'    the CPU was inside a blocking host-to-device copy call (a copy from pageable
--                 memory, which the driver stages through a pinned buffer on the CPU, or a
--                 synchronous cudaMemcpy) when the GPU went idle, or for that fraction of the gap
--   'host_sync'   the CPU was blocked in a synchronising call (cudaStreamSynchronize,
--                 cudaDeviceSynchronize, cudaEventSynchronize, a blocking cudaMemcpy as `.item()`
--                 or `.cpu()` issue, or their hip* twins) when the GPU went idle, or such calls
--                 cover at least that fraction of the gap: the queue ran dry because the CPU waited
--   'launch_bound' the CPU issued the call launching the next GPU work only after the GPU had
--                 gone idle: the CPU cannot launch fast enough (tiny kernels, Python overhead,
--                 per-parameter optimizer loops)
--   'gpu_wait'    the next work was already queued when the GPU went idle (launch latency, or a
--                 cross-stream/event dependency); checked first: with work queued, nothing the CPU
--                 was doing at the time kept the GPU idle


-- sync_calls(run): host calls that block the CPU until the GPU has drained work.
-- Columns: rank, name, start_ns, end_ns, external_id (ties the call to the aten op that made it)
CREATE OR REPLACE MACRO sync_calls(run) AS TABLE
SELECT rank, name, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns, external_id
FROM events
WHERE run_id = run AND kind IN ('runtime', 'driver') AND dur_ns IS NOT NULL
  AND regexp_matches(name, '^(cuda|hip)((Stream|Device|Event)Synchronize|Memcpy|Memcpy2D|MemcpyDtoH|MemcpyHtoD)$');


-- dataloader_spans(run): host time the training loop spent waiting for the next batch.
-- Columns: rank, name, start_ns, end_ns, step (the ProfilerStep whose window contains its start)
CREATE OR REPLACE MACRO dataloader_spans(run) AS TABLE
WITH spans AS (
    SELECT rank, name, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns
    FROM events
    WHERE run_id = run AND kind IN ('cpu_op', 'user_annotation', 'python_function')
      AND dur_ns IS NOT NULL AND starts_with(name, 'enumerate(DataLoader)')
)
SELECT s.rank, s.name, s.start_ns, s.end_ns, CASE WHEN s.start_ns < st.end_ns THEN st.step END AS step
FROM spans s ASOF LEFT JOIN steps(run) st ON s.rank = st.rank AND s.start_ns >= st.start_ns;


-- gpu_idle_gaps(run): every idle gap of every GPU with its cause.
-- Columns:
--   rank, device, gap_id, start_ns, end_ns, dur_ns
--   step            the ProfilerStep whose window contains the gap's start (NULL if none)
--   loader_ns       part of the gap the CPU spent in DataLoader spans
--   h2d_ns, h2d_at_start   same for blocking host-to-device copy calls
--   sync_ns         part of the gap covered by blocking sync calls
--   sync_at_start   BOOLEAN, a blocking sync call was running when the GPU went idle
--   next_launch_name, next_launch_start_ns   the CPU call that launched the work ending the gap
--   next_gpu_name   that work
--   cause           'dataloader' | 'h2d_copy' | 'host_sync' | 'launch_bound' | 'gpu_wait'
--                   (see top of file; tested in that order)
CREATE OR REPLACE MACRO gpu_idle_gaps(run, min_cover_fraction) AS TABLE
WITH act AS (
    SELECT {'rank': rank, 'device': device} AS grp, start_ns, end_ns FROM gpu_activity(run) WHERE counted
), gaps AS (
    SELECT grp, row_number() OVER (ORDER BY grp.rank, grp.device, start_ns) AS id, start_ns, end_ns, dur_ns
    FROM interval_gaps('act')
), devices AS (
    SELECT DISTINCT grp FROM act
), loader AS (
    SELECT d.grp, l.start_ns, l.end_ns FROM dataloader_spans(run) l JOIN devices d ON d.grp.rank = l.rank
), syncs AS (
    SELECT d.grp, s.start_ns, s.end_ns FROM sync_calls(run) s JOIN devices d ON d.grp.rank = s.rank
), h2d_calls AS (
    SELECT d.grp, c.launch_start_ns AS start_ns, c.launch_end_ns AS end_ns
    FROM copies(run) c JOIN devices d ON d.grp.rank = c.rank
    WHERE c.direction = 'HtoD' AND (c.pageable OR c.synchronous) AND c.launch_start_ns IS NOT NULL
), h2d_cover AS (
    SELECT id, covered_ns FROM interval_covered('gaps', 'h2d_calls')
), h2d_union AS (
    SELECT grp, start_ns, end_ns FROM interval_union('h2d_calls')
), h2d_at_start AS (
    SELECT g.id, s.end_ns >= g.start_ns AS running
    FROM gaps g ASOF JOIN h2d_union s ON g.grp = s.grp AND g.start_ns >= s.start_ns
), loader_cover AS (
    SELECT id, covered_ns FROM interval_covered('gaps', 'loader')
), sync_cover AS (
    SELECT id, covered_ns FROM interval_covered('gaps', 'syncs')
), sync_union AS (
    SELECT grp, start_ns, end_ns FROM interval_union('syncs')
), sync_at_start AS (
    SELECT g.id, s.end_ns >= g.start_ns AS running
    FROM gaps g ASOF JOIN sync_union s ON g.grp = s.grp AND g.start_ns >= s.start_ns
), next_work AS (
    -- the GPU activity that ends the gap starts exactly at its end (it is the next interval)
    SELECT {'rank': rank, 'device': device} AS grp, gpu_start_ns, launch_name, launch_start_ns, gpu_name
    FROM launches(run) WHERE counted
    QUALIFY row_number() OVER (PARTITION BY rank, device, gpu_start_ns ORDER BY launch_start_ns) = 1
), classified AS (
    SELECT g.grp, g.id, g.start_ns, g.end_ns, g.dur_ns,
           coalesce(lc.covered_ns, 0) AS loader_ns, coalesce(sc.covered_ns, 0) AS sync_ns,
           coalesce(ss.running, false) AS sync_at_start,
           coalesce(hc.covered_ns, 0) AS h2d_ns, coalesce(hs.running, false) AS h2d_at_start,
           n.launch_name AS next_launch_name, n.launch_start_ns AS next_launch_start_ns, n.gpu_name AS next_gpu_name
    FROM gaps g
    LEFT JOIN loader_cover lc ON lc.id = g.id
    LEFT JOIN sync_cover sc ON sc.id = g.id
    LEFT JOIN sync_at_start ss ON ss.id = g.id
    LEFT JOIN h2d_cover hc ON hc.id = g.id
    LEFT JOIN h2d_at_start hs ON hs.id = g.id
    LEFT JOIN next_work n ON n.grp = g.grp AND n.gpu_start_ns = g.end_ns
)
SELECT c.grp.rank AS rank, c.grp.device AS device, c.id AS gap_id, c.start_ns, c.end_ns, c.dur_ns,
       CASE WHEN c.start_ns < st.end_ns THEN st.step END AS step,
       c.loader_ns, c.h2d_ns, c.h2d_at_start, c.sync_ns, c.sync_at_start, c.next_launch_name, c.next_launch_start_ns, c.next_gpu_name,
       -- CPU-side causes only apply when the GPU had nothing queued: work launched before
       -- the GPU went idle waited on something else (launch latency, another stream)
       CASE WHEN c.next_launch_start_ns < c.start_ns THEN 'gpu_wait'
            WHEN c.loader_ns >= min_cover_fraction * c.dur_ns THEN 'dataloader'
            WHEN c.h2d_at_start OR c.h2d_ns >= min_cover_fraction * c.dur_ns THEN 'h2d_copy'
            WHEN c.sync_at_start OR c.sync_ns >= min_cover_fraction * c.dur_ns THEN 'host_sync'
            ELSE 'launch_bound' END AS cause
FROM classified c
ASOF LEFT JOIN steps(run) st ON c.grp.rank = st.rank AND c.start_ns >= st.start_ns;


-- gap_causes(run, min_cover_fraction): idle time per rank and cause, with the worst step.
-- Columns:
--   rank, cause, gaps (count), idle_ns (total), longest_gap_ns
--   worst_step, worst_step_idle_ns       the step losing most to this cause
--   worst_start_ns, worst_end_ns         the longest gap of that cause (the window to look at)
CREATE OR REPLACE MACRO gap_causes(run, min_cover_fraction) AS TABLE
WITH g AS (
    SELECT * FROM gpu_idle_gaps(run, min_cover_fraction)
), per_step AS (
    SELECT rank, cause, step, sum(dur_ns) AS idle_ns FROM g WHERE step IS NOT NULL GROUP BY ALL
), worst_step AS (
    SELECT rank, cause, arg_max(step, idle_ns) AS worst_step, max(idle_ns) AS worst_step_idle_ns
    FROM per_step GROUP BY ALL
)
SELECT g.rank, g.cause, count(*) AS gaps, sum(g.dur_ns) AS idle_ns, max(g.dur_ns) AS longest_gap_ns,
       any_value(w.worst_step) AS worst_step, any_value(w.worst_step_idle_ns) AS worst_step_idle_ns,
       arg_max(g.start_ns, g.dur_ns) AS worst_start_ns, arg_max(g.end_ns, g.dur_ns) AS worst_end_ns
FROM g LEFT JOIN worst_step w ON w.rank = g.rank AND w.cause = g.cause
GROUP BY g.rank, g.cause;


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
    WHERE counted AND regexp_matches(launch_name, '^(cuda|hip|hipExtModule|cu)(LaunchKernel|LaunchKernelExC|MemcpyAsync|MemsetAsync|ModuleLaunchKernel|LaunchCooperativeKernel)')
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
       avg(CASE WHEN gpu_kind = 'kernel' THEN regexp_matches(gpu_name, 'elementwise|vectorized|unrolled_elementwise|reduce_kernel')::INT END) AS elementwise_kernel_share,
       (SELECT avg(inside::INT) FROM in_optimizer o WHERE o.rank = l.rank) AS optimizer_kernel_share
FROM l
GROUP BY l.rank;


-- tiny_kernel_runs(run, tiny_kernel_ns, max_gap_ns, min_kernels): runs of back-to-back tiny
-- kernels on one device (each shorter than tiny_kernel_ns, at most max_gap_ns apart), at least
-- min_kernels long: what a CUDA graph or a fused kernel would collapse into one launch.
-- Columns: rank, device, run_id_in_rank, kernels, start_ns, end_ns, busy_ns (sum of kernel time),
--          idle_ns (end - start - busy: the launch overhead a graph would remove), top_kernel
CREATE OR REPLACE MACRO tiny_kernel_runs(run, tiny_kernel_ns, max_gap_ns, min_kernels) AS TABLE
WITH k AS (
    SELECT rank, device, name, start_ns, end_ns, dur_ns,
           lag(end_ns) OVER (PARTITION BY rank, device ORDER BY start_ns) AS prev_end,
           lag(dur_ns) OVER (PARTITION BY rank, device ORDER BY start_ns) AS prev_dur
    FROM gpu_activity(run) WHERE counted AND kind = 'kernel'
), marked AS (
    SELECT *, sum(CASE WHEN dur_ns < tiny_kernel_ns AND prev_dur < tiny_kernel_ns
                            AND start_ns - prev_end <= max_gap_ns THEN 0 ELSE 1 END)
                  OVER (PARTITION BY rank, device ORDER BY start_ns ROWS UNBOUNDED PRECEDING) AS run_no
    FROM k
)
SELECT * FROM (
    SELECT rank, device, run_no AS run_id_in_rank, count(*) AS kernels, min(start_ns) AS start_ns,
           max(end_ns) AS end_ns, sum(dur_ns) AS busy_ns,
           greatest(max(end_ns) - min(start_ns) - sum(dur_ns), 0) AS idle_ns, mode(name) AS top_kernel
    FROM marked
    WHERE dur_ns < tiny_kernel_ns
    GROUP BY rank, device, run_no
)
WHERE kernels >= min_kernels;
