"""Communication: overlap per rank, collectives (type, bytes, duration, algbw, busbw), exposed time per step."""
from __future__ import annotations

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
                                             "Comm overlapped by compute (% of comm time, whole trace)", unit="%"),
                        width="stretch", key="overlap")
        st.caption("Over the whole trace, as HTA counts it; a comm_exposed finding's overlap counts inside the "
                   "steps only.")
with right:
    # A rank x step grid rather than one line per rank: ranks with equal figures would draw on top
    # of each other and hide; here each rank keeps its row and its numbers.
    steps = state.step_breakdown(state.db_path(), run_id)
    if len(steps):
        st.plotly_chart(charts.heatmap(steps, "comm_exposed_ms", "Communication no compute hides (ms per step)",
                                       "Oranges"), width="stretch", key="exposed")
        st.caption("Waiting in a collective for a slower rank counts here: a straggler's peers show the most.")

st.subheader("Collectives by type")
ui.table(state.collective_summary(state.db_path(), run_id), bytes_columns=("total_bytes", "mean_bytes"), column_config={
    "rank": st.column_config.NumberColumn("rank", format="%d"),
    "collective": st.column_config.TextColumn("collective"),
    "instances": st.column_config.NumberColumn("instances", format="%d"),
    "total_ms": st.column_config.NumberColumn("transfer", format="%.2f ms",
                                              help="each instance's true duration: its shortest instance across ranks"),
    "wait_ms": st.column_config.NumberColumn("waiting", format="%.2f ms",
                                             help="time inside the collectives spent waiting for other ranks"),
    "total_bytes": st.column_config.NumberColumn("total size", help="bytes moved, in binary units (MiB = 2²⁰ bytes)"),
    "mean_bytes": st.column_config.NumberColumn("mean size", help="bytes per instance, in binary units"),
    "algbw_gbps": st.column_config.NumberColumn("algbw", format="%.2f GB/s"),
    "busbw_gbps": st.column_config.NumberColumn("busbw", format="%.2f GB/s"),
})
st.caption("Bandwidths from true durations (each collective's shortest instance across ranks), so waiting for "
           "another rank does not pass for a slow link: the figures the communication finding reports.")
st.subheader("Collective kernels (longest first)")
if coll["bytes"].isna().all():
    st.caption("This trace carries no message sizes (older NCCL / PyTorch), so bytes and bandwidth are empty.")
ui.table(coll, bytes_columns=("bytes",),
         column_order=["rank", "collective", "duration_ms", "true_ms", "wait_ms", "bytes", "algbw_gbps",
                       "busbw_gbps", "measured_busbw_gbps", "group_size", "start_ms", "name"],
         column_config={
    "rank": st.column_config.NumberColumn("rank", format="%d", width="small"),
    "collective": st.column_config.TextColumn("collective"),
    "start_ms": st.column_config.NumberColumn("starts at", format="%.2f ms",
                                              help="ms after the run's first event (the timeline's trace time)"),
    "duration_ms": st.column_config.NumberColumn("duration", format="%.2f ms", help="the kernel's own duration"),
    "true_ms": st.column_config.NumberColumn("transfer", format="%.2f ms",
                                             help="the shortest instance of this collective across ranks"),
    "wait_ms": st.column_config.NumberColumn("waiting", format="%.2f ms",
                                             help="time in the kernel spent waiting for the other ranks"),
    "bytes": st.column_config.NumberColumn("size", width="small", help="message size in binary units"),
    "algbw_gbps": st.column_config.NumberColumn("algbw", format="%.2f GB/s"),
    "busbw_gbps": st.column_config.NumberColumn("busbw", format="%.2f GB/s", help="from the transfer time"),
    "group_size": st.column_config.NumberColumn("group", format="%d", width="small",
                                                help="ranks in the collective's process group"),
    "measured_busbw_gbps": st.column_config.NumberColumn("busbw w/ wait", format="%.2f GB/s",
                                                         help="from the kernel's own duration, waiting included"),
    "name": st.column_config.TextColumn("kernel", width=130, help="the NCCL kernel: algorithm (RING, TREE) and protocol (LL, LL128, SIMPLE)"),
})
st.caption("algbw = bytes / time; busbw = algbw × 2(n−1)/n for all-reduce, (n−1)/n for all-gather, "
           "reduce-scatter and all-to-all, 1 otherwise (as nccl-tests reports it).")
