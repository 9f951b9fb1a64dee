-- requires: lib/steps.sql lib/rank_balance.sql
-- Exposed communication: collective kernel time that no compute hides,
-- per rank, with what the collectives moved and how fast.
--
-- Exposed comm = union(comm kernels) minus union(compute kernels), per rank (HTA's
-- non-overlapped communication), as rank_balance (lib/rank_balance.sql) computes it. Part of it can
-- be waiting for a straggler: rank_balance measures that as the rank's exposure beyond the
-- straggler's, and it is charged to rank_imbalance, not here. Bandwidths use each collective's true duration (its
-- shortest instance across ranks, collective_instances) so that waiting does not pass for a slow
-- link; nccl-tests' formulas: algbw = bytes / time, busbw = algbw x bus factor (lib/collectives.sql).
--
-- Ranks whose collectives run on gloo (CPU, collective_instances' source = 'cpu') have no comm
-- kernels: there exposed comm is the time the training thread (the one carrying ProfilerStep#N)
-- is blocked in communication: while a collective is in flight (its gloo:* span, on whichever
-- gloo thread ran it) or the thread is inside a c10d op, and the thread runs no op of its own.
-- DDP's all-reduce runs on a gloo thread while backward continues: only the wait after it counts.
-- (cpu_comm_blocked, lib/rank_balance.sql: rank_balance measures gloo ranks' work with it too.)
--
-- Per-step figures count only what lies inside the rank's steps (rank_balance; collectives
-- issued inside a step for counts and bytes), whether the steps are ProfilerSteps or inferred.


-- comm_exposure(run, small_bytes, host_blocked_min_ns): one row per rank with communication: GPU
-- ranks with comm kernels, gloo ranks with ProfilerSteps (thresholds COMM_SMALL_MESSAGE_BYTES,
-- HOST_BLOCKED_MIN_NS).
-- Columns:
--   rank, steps_divisor, mean_step_ns, world_size (runs.world_size)
--   comm_source               'gpu' (NCCL/RCCL kernels) | 'cpu' (gloo: the training thread's view)
--   comm_ns_per_step          GPU: union of comm kernels; CPU: time a collective is in flight or
--                             the training thread is in a c10d op (both within steps: rank_balance)
--   overlap_pct               share of the comm time inside the steps under compute kernels, % (HTA's
--                             comm/comp overlap rule within the steps; rank_summary.comm_overlap_pct
--                             is HTA's whole-trace figure); CPU: under the training thread's own ops
--   exposed_ns_per_step       comm time no compute overlaps (waiting included); CPU: time the
--                             training thread is blocked in communication (cpu_comm_blocked)
--   imbalance_wait_ns_per_step  part of it that is waiting for the straggler (rank_balance.lost_ns_per_step,
--                             at most exposed_ns_per_step)
--   cost_ns                   exposed_ns_per_step - imbalance_wait_ns_per_step
--   wait_ns_per_step          in-collective wait from matched instances (evidence; may be hidden under compute)
--   matched                   BOOLEAN: instances were matched with other ranks (waiting is known)
--   collectives_per_step      instances issued inside a step, per step (all of them on a rank without steps)
--   sized_share               share of instances with a byte count
--   mean_msg_bytes, median_msg_bytes, small_msg_share (instances under small_bytes:
--                             latency-bound in NCCL)
--   bytes_per_step            bytes of the instances issued inside a step, per step
--   algbw_gbps, busbw_gbps    over all sized instances, from true durations; NULL without sizes
--   group_size                largest group size seen
--   worst_step                the step whose collectives take longest (true durations)
--   worst_start_ns, worst_end_ns        first start / last end of that step's collectives (the
--                             longest collective's window when there are no steps)
--   comm_stream               the stream of the longest collective (the communication stream; NULL on CPU)
--   by_collective             LIST per collective type, longest first: {collective, instances,
--                             total_bytes, mean_bytes, true_ns, wait_ns, algbw_gbps, busbw_gbps}
CREATE OR REPLACE MACRO comm_exposure(run, small_bytes, host_blocked_min_ns) AS TABLE
WITH inst AS MATERIALIZED (
    SELECT * FROM collective_instances(run)
), comm_sources AS (
    SELECT rank, CASE WHEN bool_or(source = 'gpu') THEN 'gpu' ELSE 'cpu' END AS comm_source FROM inst GROUP BY rank
), rb AS MATERIALIZED (
    -- GPU ranks: NCCL kernels; gloo ranks: the training thread's view (rank_balance measures both)
    SELECT b.*, cs.comm_source
    FROM rank_balance(run, host_blocked_min_ns) b
    JOIN comm_sources cs ON cs.rank = b.rank
    WHERE b.has_gpu OR cs.comm_source = 'cpu'
), per_step AS (
    SELECT rank, step, sum(true_dur_ns) AS true_ns, min(start_ns) AS start_ns, max(end_ns) AS end_ns
    FROM inst WHERE step IS NOT NULL GROUP BY rank, step
), worst AS (
    -- the step whose collectives move data longest: where the exposure shows best
    SELECT rank, arg_max(step, true_ns) AS worst_step, arg_max(start_ns, true_ns) AS worst_start_ns,
           arg_max(end_ns, true_ns) AS worst_end_ns
    FROM per_step GROUP BY rank
), longest AS (
    -- the longest collective: the window when there are no steps; its stream is the comm stream
    SELECT rank, arg_max(start_ns, (dur_ns, -start_ns)) AS start_ns, arg_max(end_ns, (dur_ns, -start_ns)) AS end_ns,
           arg_max(stream, (dur_ns, -start_ns)) AS stream
    FROM inst GROUP BY rank
), by_type AS (
    SELECT rank, collective, count(*) AS instances, sum(bytes) AS total_bytes, avg(bytes) AS mean_bytes,
           sum(true_dur_ns) AS true_ns, sum(wait_ns) FILTER (WHERE matched) AS wait_ns,
           collective_algbw_gbps(bytes, true_dur_ns) AS algbw_gbps,
           collective_busbw_gbps(bytes, bus_factor, true_dur_ns) AS busbw_gbps
    FROM inst GROUP BY rank, collective
), types AS (
    SELECT rank, list({'collective': collective, 'instances': instances, 'total_bytes': total_bytes,
                       'mean_bytes': mean_bytes, 'true_ns': true_ns, 'wait_ns': wait_ns,
                       'algbw_gbps': algbw_gbps, 'busbw_gbps': busbw_gbps} ORDER BY true_ns DESC) AS by_collective
    FROM by_type GROUP BY rank
), stepped_ranks AS (
    SELECT DISTINCT rank FROM steps(run)
), sizes AS (
    SELECT rank, count(*) AS n_instances, count(bytes) AS n_sized,
           -- per-step counts: the instances issued inside a step (every one on a rank without steps)
           count(*) FILTER (WHERE step IS NOT NULL OR rank NOT IN (SELECT rank FROM stepped_ranks)) AS n_in_steps,
           sum(bytes) FILTER (WHERE step IS NOT NULL OR rank NOT IN (SELECT rank FROM stepped_ranks)) AS bytes_in_steps,
           avg(bytes) AS mean_msg_bytes, median(bytes) AS median_msg_bytes,
           count(*) FILTER (WHERE bytes < small_bytes) / nullif(count(bytes), 0) AS small_msg_share,
           collective_algbw_gbps(bytes, true_dur_ns) AS algbw_gbps,
           collective_busbw_gbps(bytes, bus_factor, true_dur_ns) AS busbw_gbps,
           max(group_size) AS group_size,
           bool_or(matched) AS matched
    FROM inst GROUP BY rank
)
SELECT b.rank, b.steps_divisor, b.mean_step_ns,
       (SELECT world_size FROM runs WHERE run_id = run) AS world_size,
       b.comm_source, b.comm_ns_per_step,
       100.0 * (b.comm_ns_per_step - b.exposed_ns_per_step) / nullif(b.comm_ns_per_step, 0) AS overlap_pct,
       b.exposed_ns_per_step,
       least(b.lost_ns_per_step, b.exposed_ns_per_step) AS imbalance_wait_ns_per_step,
       greatest(b.exposed_ns_per_step - b.lost_ns_per_step, 0) AS cost_ns,
       b.wait_ns_per_step,
       coalesce(s.matched, false) AS matched,
       s.n_in_steps / b.steps_divisor AS collectives_per_step,
       s.n_sized / s.n_instances AS sized_share,
       s.mean_msg_bytes, s.median_msg_bytes, s.small_msg_share,
       s.bytes_in_steps / b.steps_divisor AS bytes_per_step,
       s.algbw_gbps, s.busbw_gbps, s.group_size,
       w.worst_step, coalesce(w.worst_start_ns, lg.start_ns) AS worst_start_ns,
       coalesce(w.worst_end_ns, lg.end_ns) AS worst_end_ns, lg.stream AS comm_stream,
       t.by_collective
FROM rb b
JOIN sizes s ON s.rank = b.rank
LEFT JOIN worst w ON w.rank = b.rank
LEFT JOIN longest lg ON lg.rank = b.rank
LEFT JOIN types t ON t.rank = b.rank
WHERE b.comm_ns_per_step > 0;


-- gradient_sync_rounds(run): per rank with DDP in its trace, how often per step its gradients are
-- all-reduced and how often the optimizer steps: the evidence for accumulating under no_sync.
-- A round is a DistributedDataParallel.forward whose backward issued an all-reduce (before the
-- next forward); optimizer steps are Optimizer.step#* annotations. Both counted inside steps.
-- Columns: rank, allreduce_rounds_per_step, optimizer_steps_per_step (0 when none was recorded)
CREATE OR REPLACE MACRO gradient_sync_rounds(run) AS TABLE
WITH step_windows AS (
    SELECT rank, step, start_ns, end_ns FROM steps(run)
), marks AS (
    SELECT rank, ts_ns, name = 'DistributedDataParallel.forward' AS is_forward
    FROM events
    WHERE run_id = run AND kind IN ('user_annotation', 'cpu_op')
      AND (name = 'DistributedDataParallel.forward' OR starts_with(name, 'Optimizer.step#'))
), in_steps AS (
    SELECT m.rank, m.ts_ns, m.is_forward
    FROM marks m ASOF JOIN step_windows s ON s.rank = m.rank AND m.ts_ns >= s.start_ns
    WHERE m.ts_ns < s.end_ns
), forwards AS (
    SELECT rank, ts_ns AS forward_ns FROM in_steps WHERE is_forward
), allreduces AS (
    SELECT rank, start_ns FROM collective_instances(run) WHERE collective = 'allreduce' AND step IS NOT NULL
), rounds AS (
    -- each all-reduce belongs to the latest forward before it: that forward's backward issued it
    SELECT a.rank, count(DISTINCT f.forward_ns) AS rounds
    FROM allreduces a ASOF JOIN forwards f ON f.rank = a.rank AND a.start_ns >= f.forward_ns
    GROUP BY a.rank
), per_rank AS (
    SELECT rank, count(*) FILTER (WHERE NOT is_forward) AS optimizer_steps, count(*) FILTER (WHERE is_forward) AS forwards
    FROM in_steps GROUP BY rank
), divisors AS (
    SELECT rank, count(*) AS n_steps FROM step_windows GROUP BY rank
)
SELECT p.rank, coalesce(r.rounds, 0) / d.n_steps AS allreduce_rounds_per_step,
       p.optimizer_steps / d.n_steps AS optimizer_steps_per_step
FROM per_rank p
JOIN divisors d ON d.rank = p.rank
LEFT JOIN rounds r ON r.rank = p.rank
WHERE p.forwards > 0;
