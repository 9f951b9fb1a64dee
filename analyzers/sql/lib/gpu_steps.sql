-- requires: lib/steps.sql lib/gpu_activity.sql
-- Steps on the GPU's clock. The host runs ahead of the GPU, so a step's host window
-- (steps(run): ProfilerSteps or inferred iterations) does not hold its own GPU work; the step
-- breakdown needs the window in which the GPU ran that step. Findings are per host step
-- (steps(run) counts them); the GPU time they count per step is the GPU time inside these
-- windows (fp32_matmul, rank_balance), and pages that draw where a step's GPU time went use them
-- and say so.


-- gpu_steps(run): one window per rank and step on the GPU clock.
-- A step runs on the GPU from the first GPU activity launched (same correlation id) by a call
-- inside its host step until the next step starts; the last step, with no next, lasts until its
-- last activity ends or its host step does, whichever is later (no next step's work could start
-- before that; a host running ahead of the GPU and waiting for it at the end makes its last host
-- step long, and counting that length from the GPU start would add idle the GPU never had). A step whose host window
-- launched no GPU work starts at its host start (clock 'host'). A rank without steps (no
-- ProfilerStep ranges and no iterations to infer) gets one pseudo-step (step NULL) from its first
-- to its last GPU activity.
-- Columns:
--   rank, step (NULL for the pseudo-step)
--   start_ns, end_ns, dur_ns
--   clock       'gpu' | 'host' (no launched GPU work: the host window) | 'gpu_span' (pseudo-step)
CREATE OR REPLACE MACRO gpu_steps(run) AS TABLE
WITH host AS (
    SELECT rank, step, start_ns, end_ns FROM steps(run)
), launched AS (
    -- each launch's CPU call placed in the host step that contains it (ASOF: the last step
    -- starting no later than the call)
    SELECT h.rank, h.step, min(l.gpu_start_ns) AS first_start, max(l.gpu_end_ns) AS last_end
    FROM launches(run) l
    ASOF JOIN host h ON h.rank = l.rank AND l.launch_start_ns >= h.start_ns
    WHERE l.launch_start_ns < h.end_ns
    GROUP BY h.rank, h.step
), starts AS (
    -- every host step starts where its first launched GPU work does, or at its host start when
    -- it launched nothing; it ends where the next step starts, so the windows tile the run
    SELECT h.rank, h.step, h.end_ns - h.start_ns AS host_dur_ns, l.last_end,
           coalesce(l.first_start, h.start_ns) AS start_ns, h.end_ns AS host_end_ns,
           CASE WHEN l.first_start IS NOT NULL THEN 'gpu' ELSE 'host' END AS clock
    FROM host h LEFT JOIN launched l ON l.rank = h.rank AND l.step = h.step
), windows AS (
    SELECT rank, step, start_ns,
           coalesce(lead(start_ns) OVER (PARTITION BY rank ORDER BY step),
                    CASE WHEN clock = 'gpu' THEN greatest(last_end, host_end_ns) ELSE host_end_ns END) AS end_ns,
           clock
    FROM starts
    UNION ALL
    SELECT rank, NULL::INTEGER, min(start_ns), max(end_ns), 'gpu_span' FROM gpu_activity(run)
    WHERE rank NOT IN (SELECT rank FROM host)
    GROUP BY rank
)
SELECT rank, step, start_ns, end_ns, end_ns - start_ns AS dur_ns, clock FROM windows WHERE end_ns > start_ns;
