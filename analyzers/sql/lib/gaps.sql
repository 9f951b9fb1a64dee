-- requires: lib/intervals.sql lib/steps.sql lib/gpu_activity.sql lib/gpu_steps.sql lib/copies.sql lib/host_time.sql
-- GPU idle gaps and their causes: the idle time launch_gap, host_sync, runtime_stall,
-- dataloader_stall and h2d_stall divide between them.
--
-- A gap is a hole in the union of a device's GPU activity (all streams merged, HTA's counted
-- activity only) between its first and last activity; the gaps of a rank add up to
-- rank_breakdown.idle_ns. Each gap gets exactly ONE cause, decided from the CPU side, so the
-- findings built on them (dataloader_stall, h2d_stall, host_sync, launch_gap) never count time twice:
--   'graph_capture' the gap overlaps a CUDA/HIP graph capture (graph_capture_windows): the host was
--                 recording launches into a graph, so the GPU had nothing to run; no finding claims it
--   'dataloader'  the training loop sat in enumerate(DataLoader)...__next__ for at least
--                 CAUSE_MIN_COVER_FRACTION of the gap (the GPU starved for input)
--   'h2d_copy'    the CPU was inside a blocking host-to-device copy call (a copy from pageable
--                 memory, which the driver stages through a pinned buffer on the CPU, or a
--                 synchronous cudaMemcpy) of at least TINY_COPY_MAX_BYTES when the GPU went idle,
--                 or for that fraction of the gap (a tinier one is a host sync: its latency, not
--                 its bytes, holds the host)
--   'host_sync'   the CPU was blocked in a synchronising call (cudaStreamSynchronize,
--                 cudaDeviceSynchronize, cudaEventSynchronize, a blocking cudaMemcpy as `.item()`
--                 or `.cpu()` issue, or their hip* twins, hipMemcpyWithStream included) when the
--                 GPU went idle, or such calls cover at least that fraction of the gap: the queue
--                 ran dry because the CPU waited
--   'runtime_stall' slow runtime/driver calls that neither launch, sync nor copy (see
--                 runtime_stall_calls: memory management such as the cudaFree and cudaMalloc of an
--                 emptied caching allocator, slow first launches, CUDA start-up) cover at least that
--                 fraction of the gap
--   'untraced'    the process was outside every profiled span (untraced_host_time: recurring holes
--                 of at least UNTRACED_MIN_HOLE_NS in the steps) for that fraction of the gap:
--                 Python, I/O or sleeps between ops kept the CPU from launching
--   'launch_bound' the call launching the next GPU work returned only after the GPU had gone
--                 idle: the CPU cannot launch fast enough (tiny kernels, Python overhead,
--                 per-parameter optimizer loops)
--   'gpu_wait'    the next work was already queued (its launch call had returned) when the GPU
--                 went idle (launch latency, or a cross-stream/event dependency); checked right
--                 after graph_capture: with work queued, nothing the CPU was doing at the time kept
--                 the GPU idle. The gaps between the kernels one cudaGraphLaunch replays are such
--                 gaps (that one call queued them all), never a launch gap


-- sync_calls(run): host calls that block the CPU until the GPU has drained work.
-- Columns: rank, name, start_ns, end_ns, external_id (ties the call to the aten op that made it)
CREATE OR REPLACE MACRO sync_calls(run) AS TABLE
SELECT rank, name, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns, external_id
FROM events
WHERE run_id = run AND kind IN ('runtime', 'driver') AND dur_ns IS NOT NULL
  -- (every name the regex accepts contains one of these: a cheap pre-test for the regex)
  AND (contains(name, 'Synchronize') OR contains(name, 'Memcpy'))
  -- hipMemcpyWithStream: ROCm's copy-and-wait (ATen's memcpy_and_sync), blocking like cudaMemcpy
  AND regexp_matches(name, '^(cuda|hip)((Stream|Device|Event)Synchronize|Memcpy|Memcpy2D|MemcpyDtoH|MemcpyHtoD|MemcpyWithStream)$');


-- sync_calls_in_steps(run): the sync_calls the per-step figures count, on the host clock
-- (host_step_windows: the rank's steps; all time on a rank without steps): the part of each call
-- inside the steps, one row per piece (a call spanning a break between steps gives several).
-- Calls of zero length block nothing and are left out.
-- Columns:
--   rank, call_no (one per call), name, external_id
--   start_ns, end_ns, dur_ns   the piece inside the steps (blocked time per step sums dur_ns)
--   counted     BOOLEAN, the piece holding the call's start: a call is the step's whose window
--               holds its start (calls per step count these)
CREATE OR REPLACE MACRO sync_calls_in_steps(run) AS TABLE
WITH calls AS (
    SELECT row_number() OVER () AS call_no, rank AS grp, start_ns AS call_start_ns, * FROM sync_calls(run)
), windows AS (
    SELECT grp, start_ns, end_ns FROM host_step_windows(run)
)
SELECT rank, call_no, name, external_id, start_ns, end_ns, end_ns - start_ns AS dur_ns,
       start_ns = call_start_ns AS counted
FROM interval_clip('calls', 'windows');


-- runtime_stall_calls(run, min_ns): runtime/driver calls that keep the CPU from launching
-- without being a launch, a sync or a copy:
--   'allocator'  memory management, any duration: device/host allocation and release
--                (cudaMalloc/cudaFree reach the driver only when the caching allocator misses or
--                was emptied; cudaFree also synchronises the whole device), pinning, VMM mapping
--   'launch'     a launch call of at least min_ns (a few us is normal): the first launch of a
--                kernel loads its code (lazy module loading, JIT); with the GPU idle, a full
--                launch queue cannot be the reason
--   'other'      any other call of at least min_ns that is not a sync or a copy: CUDA start-up
--                (context creation in the first call), stream/event creation, device queries
-- Columns: rank, name, start_ns, end_ns, what ('allocator' | 'launch' | 'other')
CREATE OR REPLACE MACRO runtime_stall_calls(run, min_ns) AS TABLE
WITH calls AS (
    SELECT rank, name, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns, dur_ns,
           regexp_matches(name, '^(cuda|hip)(Malloc|Free|HostAlloc|MallocHost|FreeHost|HostMalloc|HostFree|'
                                || 'HostRegister|HostUnregister|MallocManaged|MallocPitch|Malloc3D|MallocArray|FreeArray)$')
           -- (stream-ordered cudaMallocAsync/cuMemAllocAsync do not block: not listed)
           OR regexp_matches(name, '^cuMem(Alloc|Free|Create|Map|Unmap|Release|AddressReserve|AddressFree|'
                                   || 'SetAccess|HostAlloc|FreeHost|HostRegister|HostUnregister|AllocHost|AllocManaged)(_v2)?$')
               AS is_allocator
    FROM events
    WHERE run_id = run AND kind IN ('runtime', 'driver') AND dur_ns > 0
)
SELECT rank, name, start_ns, end_ns,
       CASE WHEN is_allocator THEN 'allocator' WHEN contains(name, 'Launch') THEN 'launch' ELSE 'other' END AS what
FROM calls
WHERE is_allocator
   OR (dur_ns >= min_ns AND NOT contains(name, 'Synchronize') AND NOT contains(name, 'Memcpy')
       AND NOT contains(name, 'Memset') AND NOT contains(name, 'EventQuery') AND NOT contains(name, 'StreamQuery'));


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
--   step            the step whose host window contains the gap's start (NULL if none): the step
--                   the CPU was in when the GPU went idle, where the causes below are decided
--   loader_ns       part of the gap the CPU spent in DataLoader spans
--   h2d_ns, h2d_at_start   same for blocking host-to-device copy calls
--   sync_ns         part of the gap covered by blocking sync calls
--   sync_at_start   BOOLEAN, a blocking sync call was running when the GPU went idle
--   runtime_ns, runtime_at_start   same for runtime_stall_calls (slow non-launch runtime calls)
--   untraced_ns     part of the gap inside untraced_host_time holes
--   next_launch_name, next_launch_start_ns   the CPU call that launched the work ending the gap
--   next_gpu_name   that work
--   cause           'graph_capture' | 'dataloader' | 'h2d_copy' | 'host_sync' | 'runtime_stall' |
--                   'untraced' | 'launch_bound' | 'gpu_wait'
--                   (see top of file; tested in that order)
CREATE OR REPLACE MACRO gpu_idle_gaps(run, min_cover_fraction, runtime_stall_min_ns) AS TABLE
WITH act_dev AS (
    -- one BIGINT key per (rank, device), ordered like (rank, device NULLS LAST): windows
    -- partition and sort on it much faster than on a struct
    SELECT rank, device, rank::BIGINT * 8589934592 + coalesce(device::BIGINT + 2147483648, 4294967296) AS grp,
           start_ns, end_ns
    FROM gpu_activity(run) WHERE counted
), act AS (
    SELECT grp, start_ns, end_ns FROM act_dev
), dev_keys AS (
    SELECT DISTINCT grp, rank, device FROM act_dev
), devices AS (
    SELECT {'rank': rank, 'device': device} AS grp, grp AS key FROM dev_keys
), gaps AS (
    -- ids are consecutive and grow with start time within a device (a key): the gaps a CPU
    -- span overlaps are one id range
    SELECT d.grp, g.grp AS key, row_number() OVER (ORDER BY g.grp, g.start_ns) AS id, g.start_ns, g.end_ns, g.dur_ns
    FROM interval_gaps('act') g JOIN devices d ON d.key = g.grp
), l AS (
    SELECT * FROM launches(run) WHERE counted
), cpu_spans AS (
    -- the host activity that can explain a gap, per rank and kind
    SELECT {'rank': rank, 'what': 'loader'} AS grp, start_ns, end_ns FROM dataloader_spans(run)
    UNION ALL
    -- blocking host-to-device copies: a tiny one (under TINY_COPY_MAX_BYTES) holds the host for a
    -- sync's latency, not for its bytes: a host sync, whatever call issued it
    SELECT {'rank': rank, 'what': CASE WHEN coalesce(bytes, 9223372036854775807) < library_threshold('TINY_COPY_MAX_BYTES')
                                       THEN 'sync' ELSE 'h2d' END}, launch_start_ns, launch_end_ns
    FROM copies(run)
    WHERE counted AND host_to_device AND launch_start_ns IS NOT NULL AND (pageable OR synchronous)
      -- a copy node replayed by a graph launch: the launch call is asynchronous, not a staging copy
      AND NOT contains(launch_name, 'GraphLaunch')
    UNION ALL
    SELECT {'rank': rank, 'what': 'sync'}, start_ns, end_ns FROM sync_calls(run)
    UNION ALL
    SELECT {'rank': rank, 'what': 'runtime'}, start_ns, end_ns FROM runtime_stall_calls(run, runtime_stall_min_ns)
    UNION ALL
    SELECT {'rank': rank, 'what': 'untraced'}, start_ns, end_ns
    FROM untraced_host_time(run, library_threshold('UNTRACED_MIN_HOLE_NS')) WHERE recurring
), islands AS (
    -- spans of one kind may overlap: their union ("inside any of them"), onto every device of the rank
    SELECT d.key, u.grp.what AS what, u.start_ns, u.end_ns
    FROM interval_union('cpu_spans') u JOIN devices d ON d.grp.rank = u.grp.rank
    WHERE u.dur_ns > 0
), gap_ids AS (
    SELECT key, min(id) AS first_id FROM gaps GROUP BY key
), island_ranges AS (
    -- the gaps an island overlaps, found by two ASOF lookups instead of a range join (the number
    -- of (island, gap) pairs is at most islands + gaps per kind: both sets are disjoint)
    SELECT i.key, i.what, i.start_ns, i.end_ns,
           CASE WHEN a.id IS NULL THEN f.first_id WHEN a.end_ns > i.start_ns THEN a.id ELSE a.id + 1 END AS from_id,
           b.id AS to_id
    FROM islands i
    JOIN gap_ids f ON f.key = i.key
    ASOF LEFT JOIN gaps a ON a.key = i.key AND i.start_ns >= a.start_ns    -- last gap starting at or before the island
    ASOF LEFT JOIN gaps b ON b.key = i.key AND i.end_ns > b.start_ns       -- last gap starting before its end
), pairs AS (
    SELECT r.what, r.start_ns AS island_start, r.end_ns AS island_end, unnest(range(r.from_id, r.to_id + 1)) AS gap_id
    FROM island_ranges r
    WHERE r.to_id IS NOT NULL AND r.from_id <= r.to_id
), per_gap AS (
    -- covered time per kind; "at start": an island holds the gap's first instant
    -- (half-open intervals: a span ending exactly when the gap starts does not)
    SELECT p.gap_id,
           sum(least(p.island_end, g.end_ns) - greatest(p.island_start, g.start_ns)) FILTER (WHERE p.what = 'loader') AS loader_ns,
           sum(least(p.island_end, g.end_ns) - greatest(p.island_start, g.start_ns)) FILTER (WHERE p.what = 'h2d') AS h2d_ns,
           sum(least(p.island_end, g.end_ns) - greatest(p.island_start, g.start_ns)) FILTER (WHERE p.what = 'sync') AS sync_ns,
           sum(least(p.island_end, g.end_ns) - greatest(p.island_start, g.start_ns)) FILTER (WHERE p.what = 'runtime') AS runtime_ns,
           sum(least(p.island_end, g.end_ns) - greatest(p.island_start, g.start_ns)) FILTER (WHERE p.what = 'untraced') AS untraced_ns,
           bool_or(p.island_start <= g.start_ns AND g.start_ns < p.island_end) FILTER (WHERE p.what = 'h2d') AS h2d_at_start,
           bool_or(p.island_start <= g.start_ns AND g.start_ns < p.island_end) FILTER (WHERE p.what = 'sync') AS sync_at_start,
           bool_or(p.island_start <= g.start_ns AND g.start_ns < p.island_end) FILTER (WHERE p.what = 'runtime') AS runtime_at_start
    FROM pairs p JOIN gaps g ON g.id = p.gap_id
    WHERE least(p.island_end, g.end_ns) > greatest(p.island_start, g.start_ns)
    GROUP BY p.gap_id
), next_work AS (
    -- the GPU activity that ends the gap starts exactly at its end (it is the next interval);
    -- of several starting together, the one launched first
    SELECT g.id, arg_min(l.launch_name, l.launch_start_ns) AS launch_name,
           min(l.launch_start_ns) AS launch_start_ns, arg_min(l.launch_end_ns, l.launch_start_ns) AS launch_end_ns,
           arg_min(l.gpu_name, l.launch_start_ns) AS gpu_name
    FROM gaps g JOIN l ON l.rank = g.grp.rank AND l.device = g.grp.device AND l.gpu_start_ns = g.end_ns
    GROUP BY g.id
), captured_gaps AS (
    -- gaps overlapping a graph capture of their rank (captures are few: a plain range join)
    SELECT DISTINCT g.id
    FROM gaps g JOIN graph_capture_windows(run) w
      ON w.rank = g.grp.rank AND w.start_ns < g.end_ns AND g.start_ns < w.end_ns
), classified AS (
    SELECT g.grp, g.id, g.start_ns, g.end_ns, g.dur_ns, cg.id IS NOT NULL AS in_capture,
           coalesce(p.loader_ns, 0) AS loader_ns, coalesce(p.sync_ns, 0) AS sync_ns,
           coalesce(p.sync_at_start, false) AS sync_at_start,
           coalesce(p.h2d_ns, 0) AS h2d_ns, coalesce(p.h2d_at_start, false) AS h2d_at_start,
           coalesce(p.runtime_ns, 0) AS runtime_ns, coalesce(p.runtime_at_start, false) AS runtime_at_start,
           coalesce(p.untraced_ns, 0) AS untraced_ns,
           n.launch_name AS next_launch_name, n.launch_start_ns AS next_launch_start_ns,
           n.launch_end_ns AS next_launch_end_ns, n.gpu_name AS next_gpu_name
    FROM gaps g
    LEFT JOIN per_gap p ON p.gap_id = g.id
    LEFT JOIN next_work n ON n.id = g.id
    LEFT JOIN captured_gaps cg ON cg.id = g.id
)
SELECT c.grp.rank AS rank, c.grp.device AS device, c.id AS gap_id, c.start_ns, c.end_ns, c.dur_ns,
       CASE WHEN c.start_ns < st.end_ns THEN st.step END AS step,
       c.loader_ns, c.h2d_ns, c.h2d_at_start, c.sync_ns, c.sync_at_start, c.runtime_ns, c.runtime_at_start,
       c.untraced_ns, c.next_launch_name,
       c.next_launch_start_ns, c.next_gpu_name,
       -- CPU-side causes only apply when the GPU had nothing queued: work launched before
       -- the GPU went idle waited on something else (launch latency, another stream)
       -- (queued = its launch call had returned; a call still running when the GPU went idle,
       -- such as a slow first launch, kept the work from the GPU)
       CASE WHEN c.in_capture THEN 'graph_capture'
            WHEN c.next_launch_end_ns <= c.start_ns THEN 'gpu_wait'
            WHEN c.loader_ns >= min_cover_fraction * c.dur_ns THEN 'dataloader'
            WHEN c.h2d_at_start OR c.h2d_ns >= min_cover_fraction * c.dur_ns THEN 'h2d_copy'
            WHEN c.sync_at_start OR c.sync_ns >= min_cover_fraction * c.dur_ns THEN 'host_sync'
            -- coverage only: a few-us allocator call that happens to span the gap's start must
            -- not claim a long gap the CPU spent elsewhere
            WHEN c.runtime_ns >= min_cover_fraction * c.dur_ns THEN 'runtime_stall'
            WHEN c.untraced_ns >= min_cover_fraction * c.dur_ns THEN 'untraced'
            ELSE 'launch_bound' END AS cause
FROM classified c
ASOF LEFT JOIN steps(run) st ON c.grp.rank = st.rank AND c.start_ns >= st.start_ns;


-- gap_causes(run, min_cover_fraction, runtime_stall_min_ns, long_gap_ns): idle time per rank and cause, with the worst step.
-- Only the idle time inside the rank's steps on the GPU clock (gpu_steps; a rank without steps:
-- its pseudo-step over the whole GPU span) counts: a gap before the first step (warm-up,
-- start-up) or after the last one is no step's cost, and divided by the step count it made costs
-- larger than the steps themselves; ProfilerSteps and inferred iterations give the same figures.
-- Gaps crossing the steps' edge count their inside part.
-- Columns:
--   rank, cause, gaps (count), idle_ns (total), longest_gap_ns
--   long_idle_ns, long_gaps             the part in gaps of long_gap_ns or more (CPU busy elsewhere,
--                                       not per-launch overhead)
--   worst_step, worst_step_idle_ns       the step losing most to this cause
--   worst_start_ns, worst_end_ns         the longest gap of that cause (the window to look at)
CREATE OR REPLACE MACRO gap_causes(run, min_cover_fraction, runtime_stall_min_ns, long_gap_ns) AS TABLE
WITH all_gaps AS (
    SELECT rank AS grp, * FROM gpu_idle_gaps(run, min_cover_fraction, runtime_stall_min_ns)
), windows AS (
    SELECT rank AS grp, start_ns, end_ns FROM gpu_steps(run)
), g AS (
    -- the step of a clipped gap: the host step the CPU was in at its (new) start (as gpu_idle_gaps)
    SELECT c.* EXCLUDE (grp) REPLACE (c.end_ns - c.start_ns AS dur_ns, st.step AS step)
    FROM interval_clip('all_gaps', 'windows') c
    ASOF LEFT JOIN steps(run) st ON st.rank = c.rank AND c.start_ns >= st.start_ns
), per_step AS (
    SELECT rank, cause, step, sum(dur_ns) AS idle_ns FROM g WHERE step IS NOT NULL GROUP BY ALL
), worst_step AS (
    SELECT rank, cause, arg_max(step, (idle_ns, -step)) AS worst_step, max(idle_ns) AS worst_step_idle_ns
    FROM per_step GROUP BY ALL
)
SELECT g.rank, g.cause, count(*) AS gaps, sum(g.dur_ns) AS idle_ns, max(g.dur_ns) AS longest_gap_ns,
       coalesce(sum(g.dur_ns) FILTER (WHERE g.dur_ns >= long_gap_ns), 0) AS long_idle_ns,
       count(*) FILTER (WHERE g.dur_ns >= long_gap_ns) AS long_gaps,
       any_value(w.worst_step) AS worst_step, any_value(w.worst_step_idle_ns) AS worst_step_idle_ns,
       -- of equally long gaps, the first (a deterministic window)
       arg_max(g.start_ns, (g.dur_ns, -g.start_ns)) AS worst_start_ns,
       arg_max(g.end_ns, (g.dur_ns, -g.start_ns)) AS worst_end_ns
FROM g LEFT JOIN worst_step w ON w.rank = g.rank AND w.cause = g.cause
GROUP BY g.rank, g.cause;
