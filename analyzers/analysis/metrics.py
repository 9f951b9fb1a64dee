"""Per-rank figures of a run, computed in SQL (analyzers/sql/metrics/rank_breakdown.sql).

Definitions follow Holistic Trace Analysis (HTA 0.5.0 get_temporal_breakdown and
get_comm_comp_overlap) so the numbers can be checked against it; see ../shared/traces/README.md:
- GPU activity = kernels, memcpy and memset. When the run has two or more distinct ProfilerStep#N
  names, only activity launched (same correlation id) by a CPU call starting no later than the
  end of the rank's last ProfilerStep counts (HTA's filter).
- span = first to last counted GPU activity of the rank. idle = span minus the union of all
  activity; compute = union of kernels that are neither communication (^nccl.*Kernel) nor
  memory (^Memcpy|^Memset|^dma); non-compute = the rest of the busy time. Percentages of the span.
- comm_overlap_pct = time communication overlaps computation / communication time (both unions).
We keep nanosecond timestamps where HTA truncates to whole microseconds.
Per-step times (comm_time_ms, h2d_time_ms) are not HTA's: they count only what lies inside the
rank's steps on the GPU clock (rank_step_costs), so start-up is no step's cost.
"""
from __future__ import annotations

from typing import Any

import duckdb

from analyzers.sql.engine import ensure_loaded


def _rows_by_rank(con: duckdb.DuckDBPyConnection, macro: str, run_id: str) -> list[dict[str, Any]]:
    ensure_loaded(con)
    cur = con.execute(f"SELECT * FROM {macro}(?) ORDER BY rank", [run_id])     # macro: a name from this module
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


def rank_breakdown_rows(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """The raw nanosecond rows of rank_breakdown(run) (see metrics/rank_breakdown.sql for the columns)."""
    return _rows_by_rank(con, "rank_breakdown", run_id)


def rank_summary(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """Per rank: the figures of the report's "ranks" table (metrics/rank_breakdown.sql rank_summary).

    Keys:
      rank
      steps            number of steps (ProfilerStep#N windows, else inferred iterations)
      step_time_ms     mean step duration; the GPU span when the rank has no steps
      idle_pct, compute_pct, non_compute_pct   HTA temporal breakdown, % of the GPU span
      comm_time_ms     communication kernel time per step: the union of NCCL kernel intervals
                       (concurrent streams counted once) inside the rank's steps on the GPU clock
                       (rank_step_costs.comm_in_steps_ns) divided by the number of steps; on a gloo
                       rank without GPU activity, the time its collectives are in flight inside its
                       steps (cpu_comm_in_steps, rank_balance's comm_ns_per_step there)
      comm_overlap_pct % of the rank's whole communication time (HTA's rule, comm_ns) overlapped
                       by compute kernels, HTA's comm/comp overlap (None when the rank has no
                       communication)
      h2d_time_ms      host-to-device copy time per step: summed copy time inside the rank's
                       steps on the GPU clock (rank_step_costs.h2d_in_steps_ns) / steps
    Per-step figures count only what lies inside the steps they divide by, whether the steps are
    ProfilerSteps or inferred iterations; the percentages are HTA's whole-trace figures.
    GPU figures are None for a rank without GPU activity (a CPU-only trace).
    """
    return _rows_by_rank(con, "rank_summary", run_id)
