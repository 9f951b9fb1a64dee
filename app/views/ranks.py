"""Ranks: rank x step heatmaps of step time, compute and collective wait; the straggler stands out."""
from __future__ import annotations

import streamlit as st

from app import charts, state, ui

st.title("Ranks")
run_id = ui.need_run()
if run_id is None:
    st.stop()

steps = state.step_breakdown(state.db_path(), run_id)
per_rank = state.rank_breakdown(state.db_path(), run_id)
if not len(steps):
    st.info("This run has no steps and no GPU activity to compare across ranks.")
    st.stop()

for finding in state.findings(run_id):
    if finding["kind"] == "rank_imbalance":
        st.warning(f"**{ui.kind_title(finding['kind'])}** — {ui.md(finding['summary'])} "
                   f"({finding['cost_ms_per_step']:,.2f} ms/step, {finding['cost_pct']:.1f} % of step)")

st.plotly_chart(charts.heatmap(steps, "step_ms", "Step time on the GPU clock (ms)", "Reds"), width="stretch", key="hm-step")
left, right = st.columns(2)
left.plotly_chart(charts.heatmap(steps, "compute_ms", "Compute (ms)", "Greens"), width="stretch", key="hm-compute")
right.plotly_chart(charts.heatmap(steps, "comm_exposed_ms", "Collective wait: exposed communication (ms)", "Oranges"),
                   width="stretch", key="hm-comm")
st.plotly_chart(charts.breakdown_bars(per_rank, "Mean step per rank"), width="stretch", key="ranks-breakdown")
st.subheader("Per rank and step")
MS = {"format": "%.2f ms"}
ui.table(steps.drop(columns=["t0_ns", "t1_ns"]), column_config={
    "rank": st.column_config.NumberColumn("rank", format="%d"),
    "step": st.column_config.NumberColumn("step", format="%d"),
    "clock": st.column_config.TextColumn("window", help="gpu: the GPU-clock step; host: no GPU work launched, the "
                                         "host's ProfilerStep; gpu_span: no steps, the rank's whole GPU span"),
    "step_ms": st.column_config.NumberColumn("step time", **MS),
    "compute_ms": st.column_config.NumberColumn("compute", **MS),
    "comm_exposed_ms": st.column_config.NumberColumn("comm not hidden", **MS),
    "memory_ms": st.column_config.NumberColumn("memory copies", **MS),
    "idle_ms": st.column_config.NumberColumn("GPU idle", **MS),
    "comm_ms": st.column_config.NumberColumn("all comm", **MS, help="all communication in the step, hidden or not"),
    "gpu_busy_ms": st.column_config.NumberColumn("GPU busy", **MS, help="time any GPU work runs"),
})
st.caption("Steps on the GPU clock (from a step's first GPU work to the next step's): compute, comm not hidden, "
           "memory copies and idle add up to the step.")
