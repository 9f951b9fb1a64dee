-- requires: lib/intervals.sql lib/steps.sql
-- Memory: the profiler's [memory] instant events (profile_memory=True) and the allocator
-- snapshots and memory timelines stored beside a run (schema.sql memory_*). The only
-- definitions of allocated, reserved, peaks, live allocations and fragmentation: pages, reports,
-- the CLI and the memory analyses read these.


-- memory_events(run): one row per [memory] instant event (cat cpu_instant_event, ph i).
-- Bytes > 0 is an allocation, < 0 a free; the totals are the allocator's after the event: on a
-- GPU its allocated/reserved stats (everything the process holds on the device). On CPU torch
-- counts only what it saw while profiling memory, and the count carries over from earlier
-- profiling sessions of the process (their frees are never seen): total_allocated there is
-- re-based to what was allocated since the trace began (the first event's total less its
-- bytes is 0), which is what torch's own memory timeline counts; Total Reserved is 0 on CPU.
-- Columns:
--   run_id, rank
--   seq              BIGINT   order of the event on its rank (ts, then the profiler's Ev Idx)
--   ts_ns, tid
--   device_type      INTEGER  c10 DeviceType: 0 CPU, 1 CUDA, 20 PrivateUse1 (NPU, ...)
--   device_id        INTEGER  -1 for CPU
--   device           VARCHAR  'cpu', 'cuda:0', 'device20:0'
--   addr, bytes, total_allocated, total_reserved   BIGINT
--   raw_total_allocated    BIGINT   Total Allocated as the trace writes it
--   free_seq, free_ts_ns   BIGINT   of an allocation: the free that ends it (the next event of the
--                          same address on the rank and device, when it is a free); NULL for
--                          frees and for blocks still held when the trace ends
CREATE OR REPLACE MACRO memory_events(run) AS TABLE
WITH raw AS MATERIALIZED (   -- else the Bytes filter is pushed into the scan: each args parsed twice
    SELECT run_id, rank, ts_ns, tid,
           json_transform(args, '{"Device Type": "INTEGER", "Device Id": "INTEGER", "Addr": "BIGINT",
                                  "Bytes": "BIGINT", "Total Allocated": "BIGINT", "Total Reserved": "BIGINT",
                                  "Ev Idx": "BIGINT"}') AS a
    FROM events
    WHERE run_id = run AND kind = 'instant' AND name = '[memory]'
)
, typed AS (
    SELECT run_id, rank,
           row_number() OVER (PARTITION BY rank ORDER BY ts_ns, a."Ev Idx") AS seq,
           ts_ns, tid,
           coalesce(a."Device Type", 0) AS device_type,
           coalesce(a."Device Id", -1) AS device_id,
           CASE coalesce(a."Device Type", 0) WHEN 0 THEN 'cpu' WHEN 1 THEN 'cuda:' || coalesce(a."Device Id", 0)
                ELSE 'device' || a."Device Type" || ':' || coalesce(a."Device Id", 0) END AS device,
           a."Addr" AS addr, a."Bytes" AS bytes,
           a."Total Allocated" AS raw_total_allocated, coalesce(a."Total Reserved", 0) AS total_reserved
    FROM raw
    WHERE a."Bytes" IS NOT NULL
)
SELECT run_id, rank, seq, ts_ns, tid, device_type, device_id, device, addr, bytes,
       CASE WHEN device_type = 0
            THEN raw_total_allocated - first_value(raw_total_allocated - bytes) OVER
                     (PARTITION BY rank, device_type, device_id ORDER BY seq)
            ELSE raw_total_allocated END AS total_allocated,
       total_reserved, raw_total_allocated,
       CASE WHEN bytes > 0 AND lead(bytes) OVER same_block < 0 THEN lead(seq) OVER same_block END AS free_seq,
       CASE WHEN bytes > 0 AND lead(bytes) OVER same_block < 0 THEN lead(ts_ns) OVER same_block END AS free_ts_ns
FROM typed
WINDOW same_block AS (PARTITION BY rank, device_type, device_id, addr ORDER BY seq);


-- memory_device_totals(run): the device's memory from the trace's deviceProperties
-- (totalGlobalMem of the GPU whose id is the device's); NULL for CPU and unknown devices.
-- Columns: rank, device_id, device_total_bytes
CREATE OR REPLACE MACRO memory_device_totals(run) AS TABLE
SELECT rank, TRY_CAST(json_extract_string(p.prop, '$.id') AS INTEGER) AS device_id,
       TRY_CAST(json_extract_string(p.prop, '$.totalGlobalMem') AS BIGINT) AS device_total_bytes
FROM (SELECT rank, unnest(CAST(device_properties AS JSON[])) AS prop
      FROM ranks WHERE run_id = run AND json_type(device_properties) = 'ARRAY') p;


-- memory_event_ops(run): for each [memory] event, the cpu_op running on its thread: the
-- innermost one enclosing it and the outermost. Set-based, no pairwise join (a million events
-- against a million ops stays a sort): lib/intervals.sql event_depth nests the ops and, as points,
-- the events (an allocation at an op's first instant is inside it, one at its end is not); the op
-- around an event is the latest op one level up that started before it (ASOF join), the outermost
-- the latest of depth 0. ProfilerStep#N ranges are steps, not ops.
-- Columns: every column of memory_events, then op, top_op (NULL outside any op), so a reader of
-- both computes memory_events once.
CREATE OR REPLACE MACRO memory_event_ops(run) AS TABLE
WITH me AS MATERIALIZED (
    SELECT * FROM memory_events(run)
), ev AS (
    SELECT rank, seq, ts_ns, hash(rank, coalesce(tid, '')) AS thread FROM me
), ops AS MATERIALIZED (
    SELECT row_number() OVER () AS op_id, hash(e.rank, coalesce(e.tid, '')) AS thread, e.name,
           e.ts_ns AS start_ns, e.ts_ns + e.dur_ns AS end_ns
    FROM events e
    WHERE e.run_id = run AND e.kind = 'cpu_op' AND e.dur_ns IS NOT NULL AND e.dur_ns > 0
      AND e.rank IN (SELECT DISTINCT rank FROM ev)
      AND NOT is_profiler_step(e.name)
), thread_events AS (
    -- the ops, and the memory events as points (ids below 0)
    SELECT thread AS grp, op_id AS id, start_ns, end_ns FROM ops
    UNION ALL
    SELECT thread, -1 - seq, ts_ns, NULL FROM ev
), nested AS MATERIALIZED (
    SELECT grp AS thread, id, depth, seq AS sweep_seq FROM event_depth('thread_events')
), opened AS (
    SELECT n.thread, n.depth, n.sweep_seq, o.name, o.end_ns FROM nested n JOIN ops o ON o.op_id = n.id
), points AS (
    SELECT e.rank, e.seq, e.ts_ns AS t, n.thread, n.depth, n.sweep_seq
    FROM nested n JOIN ev e ON e.thread = n.thread AND n.id = -1 - e.seq
), inner_op AS (
    SELECT p.rank, p.seq, CASE WHEN o.end_ns >= p.t THEN o.name END AS op
    FROM points p ASOF LEFT JOIN opened o ON o.thread = p.thread AND o.depth = p.depth - 1 AND o.sweep_seq < p.sweep_seq
), outer_op AS (
    SELECT p.rank, p.seq, CASE WHEN o.end_ns >= p.t THEN o.name END AS top_op
    FROM points p ASOF LEFT JOIN (SELECT * FROM opened WHERE depth = 0) o
      ON o.thread = p.thread AND o.sweep_seq < p.sweep_seq
)
SELECT m.*, CASE WHEN p.depth > 0 THEN i.op END AS op, CASE WHEN p.depth > 0 THEN t.top_op END AS top_op
FROM me m JOIN inner_op i USING (rank, seq) JOIN outer_op t USING (rank, seq) JOIN points p USING (rank, seq);


-- memory_allocation_spans(run): each allocation with its free (memory_events' free_seq,
-- free_ts_ns). A free whose allocation the trace does not hold (made before profiling) is left out.
-- Columns:
--   run_id, rank, device_type, device_id, device, addr, bytes, tid
--   alloc_seq, alloc_ts_ns, free_seq, free_ts_ns   free_* NULL: still held when the trace ends
CREATE OR REPLACE MACRO memory_allocation_spans(run) AS TABLE
SELECT run_id, rank, device_type, device_id, device, addr, bytes, tid, seq AS alloc_seq, ts_ns AS alloc_ts_ns,
       free_seq, free_ts_ns
FROM memory_events(run) WHERE bytes > 0;


-- memory_allocations(run): memory_allocation_spans with the op that made each allocation: the
-- innermost cpu_op on the allocating thread that encloses the event ('(no op)' outside any), and
-- the host step it was made in.
-- Columns:
--   run_id, rank, device_type, device_id, device, addr, bytes
--   alloc_seq, alloc_ts_ns, free_seq, free_ts_ns   free_* NULL: still held when the trace ends
--   op          VARCHAR  innermost enclosing cpu_op (aten::empty under aten::randn)
--   top_op      VARCHAR  outermost enclosing cpu_op on that thread (aten::randn, a module's forward)
--   step        INTEGER  the host step holding the allocation (NULL outside steps)
CREATE OR REPLACE MACRO memory_allocations(run) AS TABLE
SELECT a.run_id, a.rank, a.device_type, a.device_id, a.device, a.addr, a.bytes,
       a.seq AS alloc_seq, a.ts_ns AS alloc_ts_ns, a.free_seq, a.free_ts_ns,
       coalesce(a.op, '(no op)') AS op, coalesce(a.top_op, '(no op)') AS top_op,
       (SELECT any_value(s.step) FROM steps(run) s
        WHERE s.rank = a.rank AND s.start_ns <= a.ts_ns AND a.ts_ns < s.end_ns) AS step
FROM memory_event_ops(run) a WHERE a.bytes > 0;


-- memory_device_summary(run): per rank and device, what ranks[].memory reports.
-- Columns:
--   rank, device_type, device_id, device
--   events, allocations, frees                  BIGINT
--   allocated_bytes, freed_bytes                the sums of the allocations and frees
--   peak_allocated_bytes, peak_reserved_bytes   the highest totals
--   peak_ts_ns                                  when allocated first reached its peak
--   first_ts_ns, last_ts_ns
--   start_allocated_bytes, end_allocated_bytes  allocated after the first and the last event
--   device_total_bytes                          the device's memory (deviceProperties), NULL when unknown
CREATE OR REPLACE MACRO memory_device_summary(run) AS TABLE
SELECT e.rank, e.device_type, e.device_id, any_value(e.device) AS device,
       count(*) AS events, count(*) FILTER (WHERE e.bytes > 0) AS allocations,
       count(*) FILTER (WHERE e.bytes < 0) AS frees,
       coalesce(sum(e.bytes) FILTER (WHERE e.bytes > 0), 0) AS allocated_bytes,
       coalesce(-sum(e.bytes) FILTER (WHERE e.bytes < 0), 0) AS freed_bytes,
       max(e.total_allocated) AS peak_allocated_bytes,
       max(e.total_reserved) AS peak_reserved_bytes,
       arg_max(e.ts_ns, (e.total_allocated, -e.seq)) AS peak_ts_ns,
       min(e.ts_ns) AS first_ts_ns, max(e.ts_ns) AS last_ts_ns,
       arg_min(e.total_allocated, e.seq) AS start_allocated_bytes,
       arg_max(e.total_allocated, e.seq) AS end_allocated_bytes,
       any_value(t.device_total_bytes) AS device_total_bytes
FROM memory_events(run) e
LEFT JOIN memory_device_totals(run) t ON t.rank = e.rank AND e.device_type = 1 AND t.device_id = e.device_id
GROUP BY e.rank, e.device_type, e.device_id;


-- memory_steps(run): allocated and reserved step by step (host steps), per rank and device.
-- Columns:
--   rank, device_type, device_id, device, step, start_ns, end_ns
--   start_allocated_bytes   allocated when the step began (after the last event before it;
--                           the first event's total less its bytes when none came before)
--   end_allocated_bytes     allocated when the step ended
--   peak_allocated_bytes    the highest allocated inside the step (start_allocated when no event)
--   peak_ts_ns
--   peak_reserved_bytes, end_reserved_bytes
--   reserved_changes        events inside the step that changed reserved (segments allocated or released)
--   reserved_churn_bytes    the sum of those changes' sizes
--   events                  [memory] events inside the step
CREATE OR REPLACE MACRO memory_steps(run) AS TABLE
WITH ev AS (
    SELECT *, total_reserved - lag(total_reserved, 1, total_reserved) OVER
                  (PARTITION BY rank, device_type, device_id ORDER BY seq) AS reserved_delta
    FROM memory_events(run)
), devices AS (
    SELECT DISTINCT rank, device_type, device_id, device FROM ev
), st AS (
    SELECT d.*, s.step, s.start_ns, s.end_ns FROM devices d JOIN steps(run) s USING (rank)
), inside AS (
    SELECT st.rank, st.device_type, st.device_id, st.step,
           max(e.total_allocated) AS peak_alloc, arg_max(e.ts_ns, (e.total_allocated, -e.seq)) AS peak_ts,
           max(e.total_reserved) AS peak_res,
           arg_max(e.total_allocated, e.seq) AS last_alloc, arg_max(e.total_reserved, e.seq) AS last_res,
           count(*) AS events,
           count(*) FILTER (WHERE e.reserved_delta <> 0) AS reserved_changes,
           coalesce(sum(abs(e.reserved_delta)), 0) AS reserved_churn
    FROM st JOIN ev e ON e.rank = st.rank AND e.device_type = st.device_type AND e.device_id = st.device_id
                     AND e.ts_ns >= st.start_ns AND e.ts_ns < st.end_ns
    GROUP BY ALL
), before AS (
    SELECT st.rank, st.device_type, st.device_id, st.step,
           arg_max(e.total_allocated, e.seq) AS alloc_before, arg_max(e.total_reserved, e.seq) AS res_before
    FROM st JOIN ev e ON e.rank = st.rank AND e.device_type = st.device_type AND e.device_id = st.device_id
                     AND e.ts_ns < st.start_ns
    GROUP BY ALL
), first_in AS (
    SELECT st.rank, st.device_type, st.device_id, st.step,
           arg_min(e.total_allocated - e.bytes, e.seq) AS alloc_first
    FROM st JOIN ev e ON e.rank = st.rank AND e.device_type = st.device_type AND e.device_id = st.device_id
                     AND e.ts_ns >= st.start_ns AND e.ts_ns < st.end_ns
    GROUP BY ALL
)
SELECT st.rank, st.device_type, st.device_id, st.device, st.step, st.start_ns, st.end_ns,
       coalesce(b.alloc_before, f.alloc_first) AS start_allocated_bytes,
       coalesce(i.last_alloc, b.alloc_before) AS end_allocated_bytes,
       greatest(coalesce(i.peak_alloc, b.alloc_before), coalesce(b.alloc_before, f.alloc_first)) AS peak_allocated_bytes,
       i.peak_ts AS peak_ts_ns,
       greatest(coalesce(i.peak_res, b.res_before), b.res_before) AS peak_reserved_bytes,
       coalesce(i.last_res, b.res_before) AS end_reserved_bytes,
       coalesce(i.reserved_changes, 0) AS reserved_changes,
       coalesce(i.reserved_churn, 0) AS reserved_churn_bytes,
       coalesce(i.events, 0) AS events
FROM st LEFT JOIN inside i USING (rank, device_type, device_id, step)
LEFT JOIN before b USING (rank, device_type, device_id, step)
LEFT JOIN first_in f USING (rank, device_type, device_id, step);


-- memory_live_at(run, at_rank, at_device_type, at_device_id, at_ts): the allocations held at a
-- moment (made at or before it, freed after it or never), by the op that made them.
-- Columns: op, allocations, bytes, largest_bytes, steps (the steps they were made in)
CREATE OR REPLACE MACRO memory_live_at(run, at_rank, at_device_type, at_device_id, at_ts) AS TABLE
SELECT op, count(*) AS allocations, sum(bytes) AS bytes, max(bytes) AS largest_bytes,
       list(DISTINCT step ORDER BY step) FILTER (WHERE step IS NOT NULL) AS steps
FROM memory_allocations(run)
WHERE rank = at_rank AND device_type = at_device_type AND device_id = at_device_id
  AND alloc_ts_ns <= at_ts AND (free_ts_ns IS NULL OR free_ts_ns > at_ts)
GROUP BY op;


-- memory_categories_at_peak(run): at each rank's and device's peak of allocated, the live
-- allocations (memory_allocation_spans held at peak_ts_ns) by category, inferred from when and on
-- which thread each was allocated (torch records no category with a [memory] event):
--   optimizer_state        allocated inside an Optimizer.step#* range on its thread (the
--                          optimizer's state, and its working memory where the peak is in the step)
--   gradient               allocated in its step's backward on its thread and still held when
--                          that backward ends (or never freed)
--   backward_temporary     allocated in the backward and freed before it ends
--   activation             allocated in a step before its backward begins on that thread
--                          (the forward; every allocation of a step without a backward)
--   parameter_or_input     allocated before the rank's first step (the model, its inputs)
--   unknown                anything else: between steps, after the backward outside the optimizer
-- A step's backward on a thread runs from its first to its last autograd op there (cpu_ops named
-- autograd::engine::evaluate_function: ..., or whose name holds "Backward"), which start in the step.
-- Columns: rank, device_type, device_id, device, peak_ts_ns, peak_allocated_bytes, category,
--          allocations, bytes, largest_bytes
CREATE OR REPLACE MACRO memory_categories_at_peak(run) AS TABLE
WITH peak AS (
    SELECT rank, device_type, device_id, device, peak_ts_ns, peak_allocated_bytes FROM memory_device_summary(run)
), live AS (
    SELECT a.*, p.peak_ts_ns, p.peak_allocated_bytes, hash(a.rank, coalesce(a.tid, '')) AS thread
    FROM memory_allocation_spans(run) a JOIN peak p USING (rank, device_type, device_id)
    WHERE a.alloc_ts_ns <= p.peak_ts_ns AND (a.free_ts_ns IS NULL OR a.free_ts_ns > p.peak_ts_ns)
), host AS (
    SELECT rank, hash(rank, coalesce(tid, '')) AS thread, name, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns,
           kind = 'cpu_op' AND (name LIKE 'autograd::engine::evaluate_function:%' OR name LIKE '%Backward%') AS is_backward
    FROM events
    WHERE run_id = run AND kind IN ('cpu_op', 'user_annotation') AND dur_ns IS NOT NULL AND dur_ns >= 0
      AND rank IN (SELECT DISTINCT rank FROM live)
      AND ((kind = 'cpu_op' AND (name LIKE 'autograd::engine::evaluate_function:%' OR name LIKE '%Backward%'))
           OR name LIKE 'Optimizer.step#%')
), backward AS (
    SELECT h.rank, h.thread, s.step, min(h.start_ns) AS start_ns, max(h.end_ns) AS end_ns
    FROM host h JOIN steps(run) s ON s.rank = h.rank AND s.start_ns <= h.start_ns AND h.start_ns < s.end_ns
    WHERE h.is_backward GROUP BY ALL
), placed AS (
    SELECT l.*,
           (SELECT any_value(s.step) FROM steps(run) s
            WHERE s.rank = l.rank AND s.start_ns <= l.alloc_ts_ns AND l.alloc_ts_ns < s.end_ns) AS step,
           (SELECT min(s.start_ns) FROM steps(run) s WHERE s.rank = l.rank) AS first_step_ns,
           EXISTS (SELECT 1 FROM host h WHERE NOT h.is_backward AND h.thread = l.thread
                   AND h.start_ns <= l.alloc_ts_ns AND l.alloc_ts_ns <= h.end_ns) AS in_optimizer
    FROM live l
), categorised AS (
    SELECT p.*,
           CASE WHEN p.in_optimizer THEN 'optimizer_state'
                WHEN b.start_ns <= p.alloc_ts_ns AND p.alloc_ts_ns <= b.end_ns
                THEN CASE WHEN p.free_ts_ns IS NULL OR p.free_ts_ns > b.end_ns THEN 'gradient' ELSE 'backward_temporary' END
                WHEN p.step IS NOT NULL AND (b.start_ns IS NULL OR p.alloc_ts_ns < b.start_ns) THEN 'activation'
                WHEN p.first_step_ns IS NOT NULL AND p.alloc_ts_ns < p.first_step_ns THEN 'parameter_or_input'
                ELSE 'unknown' END AS category
    FROM placed p LEFT JOIN backward b ON b.rank = p.rank AND b.thread = p.thread AND b.step = p.step
)
SELECT rank, device_type, device_id, device, any_value(peak_ts_ns) AS peak_ts_ns,
       any_value(peak_allocated_bytes) AS peak_allocated_bytes, category,
       count(*) AS allocations, sum(bytes) AS bytes, max(bytes) AS largest_bytes
FROM categorised GROUP BY rank, device_type, device_id, device, category;


-- memory_op_stats(run): the TensorBoard plugin's memory view per op, per rank and device.
-- self: the allocations and frees made by the op itself (innermost enclosing op); total: by the
-- op and every op it called, summed over its calls (a call inside a call of the same name counts
-- in both).
-- Columns:
--   rank, device, op
--   calls                      how many times the op ran (on threads that allocated on the device)
--   self_allocations, self_allocated_bytes, self_frees, self_freed_bytes
--   total_allocations, total_allocated_bytes, total_freed_bytes
--   self_net_bytes             self allocated - self freed (> 0: the op leaves memory held)
--   peak_bytes                 of the op's own allocations, those held at the device's peak
CREATE OR REPLACE MACRO memory_op_stats(run) AS TABLE
WITH ev AS MATERIALIZED (
    SELECT rank, device_type, device_id, device, seq, ts_ns, hash(rank, coalesce(tid, '')) AS thread,
           bytes, free_ts_ns, coalesce(op, '(no op)') AS op
    FROM memory_event_ops(run)
), self AS (
    SELECT rank, device_type, device_id, any_value(device) AS device, op,
           count(*) FILTER (WHERE bytes > 0) AS self_allocations,
           coalesce(sum(bytes) FILTER (WHERE bytes > 0), 0) AS self_allocated_bytes,
           count(*) FILTER (WHERE bytes < 0) AS self_frees,
           coalesce(-sum(bytes) FILTER (WHERE bytes < 0), 0) AS self_freed_bytes
    FROM ev GROUP BY ALL
), devices AS (
    SELECT DISTINCT rank, thread, device_type, device_id FROM ev
), ops AS MATERIALIZED (
    SELECT d.rank, d.thread, d.device_type, d.device_id, e.name AS op, e.ts_ns AS start_ns, e.ts_ns + e.dur_ns AS end_ns
    FROM events e JOIN devices d ON d.rank = e.rank AND d.thread = hash(e.rank, coalesce(e.tid, ''))
    WHERE e.run_id = run AND e.kind = 'cpu_op' AND e.dur_ns IS NOT NULL AND e.dur_ns >= 0
), op_names AS (
    -- the sweep sorts a number for each op's name, not the name
    SELECT op, row_number() OVER () AS op_id FROM (SELECT DISTINCT op FROM ops)
), edges AS (
    -- one sweep over the events and the ops' two ends, thread by thread and device by device: at one
    -- instant an op's start comes before the events (edge -1) and its end after them (edge 1), so
    -- the running sums read at its start count what ran strictly before it, at its end what ran up
    -- to its end; both ends lie in one thread's part of the sweep, so what came before that part
    -- cancels out (no PARTITION BY: DuckDB sorts one big partition on one thread, ~8x slower)
    SELECT rank, thread, device_type, device_id, ts_ns AS t, 0 AS edge, NULL::BIGINT AS op_id,
           greatest(bytes, 0) AS alloc, greatest(-bytes, 0) AS freed, (bytes > 0)::INTEGER AS allocs
    FROM ev
    UNION ALL
    SELECT rank, thread, device_type, device_id, start_ns, -1, op_id, 0, 0, 0 FROM ops JOIN op_names USING (op)
    UNION ALL
    SELECT rank, thread, device_type, device_id, end_ns, 1, op_id, 0, 0, 0 FROM ops JOIN op_names USING (op)
), swept AS (
    SELECT rank, device_type, device_id, op_id, edge,
           sum(alloc) OVER w AS alloc_cum, sum(freed) OVER w AS free_cum, sum(allocs) OVER w AS n_cum
    FROM edges
    WINDOW w AS (ORDER BY thread, device_type, device_id, t, edge ROWS UNBOUNDED PRECEDING)
), total AS (
    -- summed over an op's calls: (running sum at its end) - (running sum at its start)
    SELECT rank, device_type, device_id, any_value(n.op) AS op, count(*) FILTER (WHERE edge = -1) AS calls,
           CAST(sum(edge * n_cum) AS BIGINT) AS total_allocations,
           CAST(sum(edge * alloc_cum) AS BIGINT) AS total_allocated_bytes,
           CAST(sum(edge * free_cum) AS BIGINT) AS total_freed_bytes
    FROM swept JOIN op_names n USING (op_id) WHERE edge <> 0 GROUP BY rank, device_type, device_id, op_id
), at_peak AS (
    SELECT a.rank, a.device_type, a.device_id, a.op, sum(a.bytes) AS peak_bytes
    FROM ev a JOIN memory_device_summary(run) p
      ON p.rank = a.rank AND p.device_type = a.device_type AND p.device_id = a.device_id
     AND a.bytes > 0 AND a.ts_ns <= p.peak_ts_ns AND (a.free_ts_ns IS NULL OR a.free_ts_ns > p.peak_ts_ns)
    GROUP BY ALL
)
SELECT s.rank, s.device, s.op, coalesce(t.calls, 0) AS calls,
       s.self_allocations, s.self_allocated_bytes, s.self_frees, s.self_freed_bytes,
       coalesce(t.total_allocations, s.self_allocations) AS total_allocations,
       coalesce(t.total_allocated_bytes, s.self_allocated_bytes) AS total_allocated_bytes,
       coalesce(t.total_freed_bytes, s.self_freed_bytes) AS total_freed_bytes,
       s.self_allocated_bytes - s.self_freed_bytes AS self_net_bytes,
       coalesce(p.peak_bytes, 0) AS peak_bytes
FROM self s
LEFT JOIN total t USING (rank, device_type, device_id, op)
LEFT JOIN at_peak p USING (rank, device_type, device_id, op);


-- memory_snapshot_summary(run): one row per allocator snapshot stored with the run.
-- allocated = the blocks in state active_allocated; reserved = the segments' total_size;
-- free inside segments = the inactive blocks; fragmentation = reserved - allocated.
-- Columns:
--   snapshot_id, rank, file_name
--   allocated_bytes, reserved_bytes, fragmentation_bytes, fragmentation_pct (of reserved)
--   segments, blocks, active_blocks, inactive_blocks
--   inactive_bytes, largest_free_block_bytes   free blocks inside segments, and the largest
--   expandable_segments                         segments with is_expandable
--   devices                                     distinct devices
--   oom_requested_bytes, oom_device_free_bytes  the allocation that failed (an oom entry in
--                                               device_traces; the last one) and what was free then; NULL: no OOM
--   trace_entries
CREATE OR REPLACE MACRO memory_snapshot_summary(run) AS TABLE
WITH seg AS (
    SELECT snapshot_id, count(*) AS segments, coalesce(sum(total_size), 0) AS reserved_bytes,
           count(*) FILTER (WHERE is_expandable) AS expandable_segments, count(DISTINCT device) AS devices
    FROM memory_segments WHERE run_id = run GROUP BY snapshot_id
), blk AS (
    SELECT snapshot_id, count(*) AS blocks,
           count(*) FILTER (WHERE state = 'active_allocated') AS active_blocks,
           count(*) FILTER (WHERE state = 'inactive') AS inactive_blocks,
           coalesce(sum(size) FILTER (WHERE state = 'active_allocated'), 0) AS allocated_bytes,
           coalesce(sum(size) FILTER (WHERE state = 'inactive'), 0) AS inactive_bytes,
           coalesce(max(size) FILTER (WHERE state = 'inactive'), 0) AS largest_free_block_bytes
    FROM memory_blocks WHERE run_id = run GROUP BY snapshot_id
), tr AS (
    SELECT snapshot_id, count(*) AS trace_entries,
           arg_max(size, seq) FILTER (WHERE action = 'oom') AS oom_requested_bytes,
           arg_max(device_free, seq) FILTER (WHERE action = 'oom') AS oom_device_free_bytes
    FROM memory_trace WHERE run_id = run GROUP BY snapshot_id
)
SELECT s.snapshot_id, s.rank, s.file_name,
       coalesce(b.allocated_bytes, 0) AS allocated_bytes, coalesce(g.reserved_bytes, 0) AS reserved_bytes,
       coalesce(g.reserved_bytes, 0) - coalesce(b.allocated_bytes, 0) AS fragmentation_bytes,
       CASE WHEN g.reserved_bytes > 0
            THEN 100.0 * (g.reserved_bytes - coalesce(b.allocated_bytes, 0)) / g.reserved_bytes END AS fragmentation_pct,
       coalesce(g.segments, 0) AS segments, coalesce(b.blocks, 0) AS blocks,
       coalesce(b.active_blocks, 0) AS active_blocks, coalesce(b.inactive_blocks, 0) AS inactive_blocks,
       coalesce(b.inactive_bytes, 0) AS inactive_bytes,
       coalesce(b.largest_free_block_bytes, 0) AS largest_free_block_bytes,
       coalesce(g.expandable_segments, 0) AS expandable_segments, coalesce(g.devices, 0) AS devices,
       t.oom_requested_bytes, t.oom_device_free_bytes, coalesce(t.trace_entries, 0) AS trace_entries
FROM memory_snapshots s
LEFT JOIN seg g USING (snapshot_id) LEFT JOIN blk b USING (snapshot_id) LEFT JOIN tr t USING (snapshot_id)
WHERE s.run_id = run;


-- memory_timeline_peak(run): export_memory_timeline files stored with the run: per rank, the
-- bytes of each category at the moment the timeline's total is highest.
-- Columns: rank, file_name, peak_ts_ns, peak_total_bytes, category, bytes
CREATE OR REPLACE MACRO memory_timeline_peak(run) AS TABLE
WITH running AS (
    SELECT rank, file_name, seq, ts_ns, category,
           sum(bytes) OVER (PARTITION BY rank, file_name ORDER BY seq) AS total
    FROM memory_timeline WHERE run_id = run
), peak AS (
    SELECT rank, file_name, arg_max(seq, (total, -seq)) AS peak_seq, max(total) AS peak_total_bytes,
           arg_max(ts_ns, (total, -seq)) AS peak_ts_ns
    FROM running GROUP BY ALL
)
SELECT p.rank, p.file_name, p.peak_ts_ns, p.peak_total_bytes, t.category, sum(t.bytes) AS bytes
FROM peak p JOIN memory_timeline t ON t.run_id = run AND t.rank = p.rank AND t.file_name = p.file_name
                                   AND t.seq <= p.peak_seq
GROUP BY ALL;
