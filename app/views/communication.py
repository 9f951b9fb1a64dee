"""Communication: overlap per rank, collectives (type, bytes, duration, algbw, busbw), exposed time per step."""
from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from app import charts, state, ui

st.title("Communication")
run_id = ui.need_run()
if run_id is None:
    st.stop()

summary = state.rank_summary(state.db_path(), run_id)
coll = state.collectives(state.db_path(), run_id)
if not len(coll):
    st.info("No communication kernels (NCCL/RCCL) in this run: a single-process job or CPU-only trace.")
    st.stop()

left, right = st.columns(2)
with left:
    with_comm = summary[summary["comm_overlap_pct"].notna()] if len(summary) else summary
    if len(with_comm):
        st.plotly_chart(charts.per_rank_bars(with_comm["comm_overlap_pct"], with_comm["rank"],
                                             "Communication overlapped by compute (% of comm time)", unit="%"),
                        width="stretch", key="overlap")
with right:
    steps = state.step_breakdown(state.db_path(), run_id)
    fig = go.Figure()
    for rank, group in steps.groupby("rank"):
        fig.add_scatter(x=[charts.step_label(s) for s in group["step"]], y=group["comm_exposed_ms"],
                        mode="lines+markers", name=f"rank {rank}")
    fig.update_layout(title="Communication no compute hides, per step (ms; waiting for other ranks included)",
                      yaxis_title="ms", height=300, **charts.LAYOUT)
    fig.update_yaxes(rangemode="tozero")
    st.plotly_chart(fig, width="stretch", key="exposed")

st.subheader("Collectives by type")
ui.table(state.collective_summary(state.db_path(), run_id), column_config={
    "instances": st.column_config.NumberColumn("instances", format="%d"),
    "total_ms": st.column_config.NumberColumn("transfer ms", format="%.3f",
                                              help="each instance's true duration: its shortest instance across ranks"),
    "wait_ms": st.column_config.NumberColumn("waiting ms", format="%.3f",
                                             help="time inside the collectives spent waiting for other ranks"),
    "total_bytes": st.column_config.NumberColumn("total bytes", format="%d"),
    "mean_bytes": st.column_config.NumberColumn("mean bytes", format="%.0f"),
    "algbw_gbps": st.column_config.NumberColumn("algbw GB/s", format="%.2f"),
    "busbw_gbps": st.column_config.NumberColumn("busbw GB/s", format="%.2f"),
})
st.caption("Bandwidths from true durations (each collective's shortest instance across ranks), so waiting for "
           "another rank does not pass for a slow link: the figures the communication finding reports.")
st.subheader("Collective kernels (longest first)")
if coll["bytes"].isna().all():
    st.caption("This trace carries no message sizes (older NCCL / PyTorch), so bytes and bandwidth are empty.")
ui.table(coll,
         column_order=["rank", "collective", "duration_ms", "true_ms", "wait_ms", "bytes", "algbw_gbps",
                       "busbw_gbps", "measured_busbw_gbps", "group_size", "start_ms", "stream", "name"],
         column_config={
    "start_ms": st.column_config.NumberColumn("start (ms into trace)", format="%.3f"),
    "duration_ms": st.column_config.NumberColumn("duration ms", format="%.3f"),
    "true_ms": st.column_config.NumberColumn("transfer ms", format="%.3f",
                                             help="the shortest instance of this collective across ranks"),
    "wait_ms": st.column_config.NumberColumn("waiting ms", format="%.3f"),
    "algbw_gbps": st.column_config.NumberColumn("algbw GB/s", format="%.2f"),
    "busbw_gbps": st.column_config.NumberColumn("busbw GB/s", format="%.2f", help="from the transfer time"),
    "group_size": st.column_config.NumberColumn("ranks in group", format="%d"),
    "measured_busbw_gbps": st.column_config.NumberColumn("busbw incl. waiting", format="%.2f",
                                                         help="from the kernel's own duration, waiting included"),
})
st.caption("algbw = bytes / time; busbw = algbw × 2(n−1)/n for all-reduce, (n−1)/n for all-gather, "
           "reduce-scatter and all-to-all, 1 otherwise (as nccl-tests reports it).")
