-- GPU idle gaps and their causes (issue #3, analysis 1), plus HTA-style launch statistics.
--
-- A gap is a hole in the union of a device's GPU activity (all streams merged, HTA's counted
-- activity only) between its first and last activity; the gaps of a rank add up to
-- rank_breakdown.idle_ns. Each gap gets exactly ONE cause, decided from the CPU side, so the
-- findings built on them (dataloader_stall, h2d_stall, host_sync, launch_gap) never count time twice:
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
    -- ids grow with start time within a device: the sweep below finds a piece's gap as the
    -- largest id started so far
    SELECT grp, row_number() OVER (ORDER BY grp.rank, grp.device, start_ns) AS id, start_ns, end_ns, dur_ns
    FROM interval_gaps('act')
), devices AS (
    SELECT DISTINCT grp FROM act
), l AS (
    SELECT * FROM launches(run) WHERE counted
), cpu_spans AS (
    -- the host activity that can explain a gap, copied onto every device of its rank
    SELECT d.grp, 'loader' AS what, s.start_ns, s.end_ns
    FROM dataloader_spans(run) s JOIN devices d ON d.grp.rank = s.rank
    UNION ALL
    SELECT d.grp, 'h2d', l.launch_start_ns, l.launch_end_ns
    FROM l JOIN devices d ON d.grp.rank = l.rank
    WHERE l.gpu_kind = 'memcpy' AND regexp_matches(l.gpu_name, '^Memcpy\s+HtoD')
      AND (contains(l.gpu_name, 'Pageable') OR NOT (contains(lower(l.launch_name), 'async')
                                                   OR contains(lower(l.launch_name), 'withstream')))
    UNION ALL
    SELECT d.grp, 'sync', s.start_ns, s.end_ns FROM sync_calls(run) s JOIN devices d ON d.grp.rank = s.rank
), edges AS (
    SELECT grp, start_ns AS ts, id AS gap_id, 1 AS d_gap, 0 AS d_loader, 0 AS d_h2d, 0 AS d_sync FROM gaps
    UNION ALL
    SELECT grp, end_ns, NULL, -1, 0, 0, 0 FROM gaps
    UNION ALL
    SELECT grp, unnest([start_ns, end_ns]), NULL, 0,
           CASE WHEN what = 'loader' THEN unnest([1, -1]) ELSE 0 END,
           CASE WHEN what = 'h2d' THEN unnest([1, -1]) ELSE 0 END,
           CASE WHEN what = 'sync' THEN unnest([1, -1]) ELSE 0 END
    FROM cpu_spans WHERE end_ns >= start_ns
), swept AS (
    -- one sweep over all edges: which sets are open on each piece of the time line (raw CPU
    -- spans may overlap; a count above zero is "inside")
    SELECT ts AS start_ns, lead(ts) OVER w AS end_ns,
           max(gap_id) OVER (w ROWS UNBOUNDED PRECEDING) AS gap_id,
           sum(d_gap) OVER (w ROWS UNBOUNDED PRECEDING) AS open_gap,
           sum(d_loader) OVER (w ROWS UNBOUNDED PRECEDING) AS open_loader,
           sum(d_h2d) OVER (w ROWS UNBOUNDED PRECEDING) AS open_h2d,
           sum(d_sync) OVER (w ROWS UNBOUNDED PRECEDING) AS open_sync
    FROM edges
    WINDOW w AS (PARTITION BY grp ORDER BY ts, d_gap, d_loader, d_h2d, d_sync)
), per_gap AS (
    SELECT gap_id,
           sum(end_ns - start_ns) FILTER (WHERE open_loader > 0) AS loader_ns,
           sum(end_ns - start_ns) FILTER (WHERE open_h2d > 0) AS h2d_ns,
           sum(end_ns - start_ns) FILTER (WHERE open_sync > 0) AS sync_ns,
           arg_min(open_h2d > 0, start_ns) AS h2d_at_start,      -- state on the gap's first piece
           arg_min(open_sync > 0, start_ns) AS sync_at_start
    FROM swept
    WHERE end_ns > start_ns AND open_gap > 0
    GROUP BY gap_id
), next_work AS (
    -- the GPU activity that ends the gap starts exactly at its end (it is the next interval);
    -- of several starting together, the one launched first
    SELECT g.id, arg_min(l.launch_name, l.launch_start_ns) AS launch_name,
           min(l.launch_start_ns) AS launch_start_ns, arg_min(l.gpu_name, l.launch_start_ns) AS gpu_name
    FROM gaps g JOIN l ON l.rank = g.grp.rank AND l.device = g.grp.device AND l.gpu_start_ns = g.end_ns
    GROUP BY g.id
), classified AS (
    SELECT g.grp, g.id, g.start_ns, g.end_ns, g.dur_ns,
           coalesce(p.loader_ns, 0) AS loader_ns, coalesce(p.sync_ns, 0) AS sync_ns,
           coalesce(p.sync_at_start, false) AS sync_at_start,
           coalesce(p.h2d_ns, 0) AS h2d_ns, coalesce(p.h2d_at_start, false) AS h2d_at_start,
           n.launch_name AS next_launch_name, n.launch_start_ns AS next_launch_start_ns, n.gpu_name AS next_gpu_name
    FROM gaps g
    LEFT JOIN per_gap p ON p.gap_id = g.id
    LEFT JOIN next_work n ON n.id = g.id
)
SELECT c.grp.rank AS rank, c.grp.device AS device, c.id AS gap_id, c.start_ns, c.end_ns, c.dur_ns,
       CASE WHEN c.start_ns < st.end_ns THEN st.step END AS step,
       c.loader_ns, c.h2d_ns, c.h2d_at_start, c.sync_ns, c.sync_at_start, c.next_launch_name,
       c.next_launch_start_ns, c.next_gpu_name,
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
--   long_idle_ns, long_gaps             the part in gaps of 1 ms or more (CPU busy elsewhere,
--                                       not per-launch overhead)
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
       coalesce(sum(g.dur_ns) FILTER (WHERE g.dur_ns >= 1000000), 0) AS long_idle_ns,
       count(*) FILTER (WHERE g.dur_ns >= 1000000) AS long_gaps,
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
