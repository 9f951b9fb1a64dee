-- requires:
-- What each finding kind costs a run, from its stored findings (the store's findings table,
-- written by the analysis): the one definition Compare, the fix demos and the reports read.


-- run_kind_costs(run): one row per finding kind the run has.
-- Columns:
--   kind            VARCHAR  the finding kind (launch_gap, h2d_stall, ...)
--   findings        BIGINT   its findings (one per cause; consequences included)
--   cost_ns         DOUBLE   ns per step: the summed cost_ns of its root-cause findings; a
--                            consequence (caused_by set) is its cause's cost again, not added
--   worst_pct       DOUBLE   % of step time: the costliest of its findings' cost_pct
--   worst_rank_pct  DOUBLE   % of step time: per rank, its findings' summed cost_pct (a kind may be
--                            reported per step or per stream; a finding about the whole run, rank
--                            NULL, is a rank of its own), the worst rank's; per-rank percentages
--                            do not add across ranks. NULL when no finding has a cost_pct
--   cost_bytes      BIGINT   the largest metrics.cost_bytes (memory findings), else NULL
CREATE OR REPLACE MACRO run_kind_costs(run) AS TABLE
WITH f AS (
    SELECT kind, rank, caused_by, cost_ns, cost_pct,
           TRY_CAST(json_extract(metrics, '$.cost_bytes') AS BIGINT) AS cost_bytes
    FROM findings WHERE run_id = run
), per_rank AS (
    SELECT kind, rank, sum(cost_pct) AS pct FROM f WHERE cost_pct IS NOT NULL GROUP BY ALL
), worst_rank AS (
    SELECT kind, max(pct) AS worst_rank_pct FROM per_rank GROUP BY kind
)
SELECT f.kind, count(*) AS findings,
       coalesce(sum(f.cost_ns) FILTER (WHERE f.caused_by IS NULL), 0)::DOUBLE AS cost_ns,
       max(f.cost_pct) AS worst_pct, any_value(w.worst_rank_pct) AS worst_rank_pct,
       max(f.cost_bytes) AS cost_bytes
FROM f LEFT JOIN worst_rank w ON w.kind = f.kind
GROUP BY f.kind;
