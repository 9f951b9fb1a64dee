"""Overview of a run: ranks, steps, mean step time, the step breakdown per rank, top findings."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from app import charts, state, ui

st.title("Overview")
run_id = ui.need_run()
if run_id is None:
    st.stop()

info = state.run_info(run_id)
if info is None:
    st.warning("This run is no longer in the store.")
    st.stop()

st.markdown(f"**{ui.md(info['name'])}** · run `{run_id}`"
            + (f" · tags: {ui.md(', '.join(info['tags']))}" if info.get("tags") else ""))
if info.get("notes"):
    st.caption(ui.md(info["notes"]))

per_rank = state.rank_breakdown(state.db_path(), run_id)
summary = state.rank_summary(state.db_path(), run_id)
found = state.findings(run_id)
origin = (state.time_bounds(state.db_path(), run_id) or (None, None))[0]

cols = st.columns(5)
cols[0].metric("Ranks", len(info["ranks"]), help=f"world size {info['world_size']}")
cols[1].metric("Steps per rank", int(per_rank["steps"].max()) if len(per_rank) else 0)
if len(summary) and summary["step_time_ms"].notna().any():
    cols[2].metric("Mean step time", f"{summary['step_time_ms'].mean():,.2f} ms",
                   help="mean ProfilerStep duration over ranks (analyzers.metrics.rank_summary)")
else:
    cols[2].metric("Mean step time", "–")
if len(summary) and summary["idle_pct"].notna().any():
    cols[3].metric("GPU idle", f"{summary['idle_pct'].mean():.1f} %", help="HTA definition: % of the GPU span")
else:
    cols[3].metric("GPU idle", "–", help="no GPU activity in this trace")
cols[4].metric("Findings", len(found),
               help="costed problems, ranked by GPU time lost per step")

cpu_only = state.is_cpu_only(run_id)
if cpu_only:
    st.info("This run has no GPU activity (kernels, copies): a CPU-only trace. "
            "Step times are shown; GPU findings do not apply.")

left, right = st.columns([3, 2])
with left:
    if cpu_only:
        st.plotly_chart(charts.per_rank_bars(summary["step_time_ms"], summary["rank"], "Mean step time per rank (CPU-only trace)"),
                        width="stretch")
    elif len(per_rank):
        st.plotly_chart(charts.breakdown_bars(per_rank, "Where a step's time goes, per rank (mean ms per step)"),
                        width="stretch")
        st.caption("Each instant of a step counts once: compute, else exposed communication, "
                   "else memory copies, else idle. The parts add up to the step time.")
    else:
        st.info("No step windows and no GPU activity to break down.")
with right:
    st.subheader("Top findings")
    if not found:
        st.success("No problems found above the thresholds.")
    for finding in found[:5]:
        with st.container(border=True):
            st.markdown(f"{ui.severity(finding['severity'])} **{ui.kind_title(finding['kind'])}** — "
                        f"{finding['cost_ms_per_step']:,.2f} ms/step ({finding['cost_pct']:.1f} % of step)")
            st.caption(ui.md(ui.where(finding, origin)))
    if found:
        st.page_link("views/findings.py", label="All findings and their fixes", icon=":material/stethoscope:")

st.subheader("Per rank (HTA definitions)")
if len(summary):
    st.dataframe(summary, hide_index=True, width="stretch", column_config={
        "step_time_ms": st.column_config.NumberColumn("step time (ms)", format="%.3f"),
        "idle_pct": st.column_config.NumberColumn("idle %", format="%.2f"),
        "compute_pct": st.column_config.NumberColumn("compute %", format="%.2f"),
        "non_compute_pct": st.column_config.NumberColumn("non-compute %", format="%.2f"),
        "comm_time_ms": st.column_config.NumberColumn("comm (ms/step)", format="%.3f"),
        "comm_overlap_pct": st.column_config.NumberColumn("comm overlap %", format="%.2f"),
        "h2d_time_ms": st.column_config.NumberColumn("H2D (ms/step)", format="%.3f"),
    })
st.dataframe(pd.DataFrame(info["ranks"]), hide_index=True, width="stretch")
