"""Overview of a run: ranks, steps, mean step time, the step breakdown per rank, top findings."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from analyzers.analysis.context import ENGINE_NAMES
from analyzers.read import queries
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
costs = state.run_costs(run_id)
workload = (costs or {}).get("workload") or "unknown"
engine = ENGINE_NAMES.get((costs or {}).get("engine"), (costs or {}).get("engine"))
st.markdown(f"Workload: **{workload}**" + (f" ({ui.md(engine)})" if engine else "")
            + (f" · {ui.md(costs['workload_evidence'])}" if (costs or {}).get("workload_evidence") else "")
            + (" · fixes for other workloads are ruled out" if workload != "unknown" else ""),
            help="from what the trace records (analyzers/sql/lib/workload.sql): backward and optimizer ops mean "
                 "training; a serving engine on the Python stack, inference-named ranges, or model ops run "
                 "forward only mean inference")
unit = (costs or {}).get("step_unit") or {}
if workload == "inference" and unit.get("count"):
    st.markdown(f"Steps: **{unit['count']} {ui.md(unit['unit'])}{'s' if unit['count'] != 1 else ''}**"
                + (f" ({ui.md(unit['marker'])})" if unit.get("marker") else " (ProfilerStep#N)")
                + (f" · phases: {ui.md(', '.join(f'{n} {phase}' for phase, n in unit['phases'].items()))}"
                   if unit.get("phases") else ""),
                help="an inference run's step is its engine's iteration where the trace shows one (a range that "
                     "recurs through the profiled window on the main thread: analyzers/sql/lib/steps.sql "
                     "engine_iterations); per-step figures are per this unit")

per_rank = state.rank_breakdown(state.db_path(), run_id)
summary = state.rank_summary(state.db_path(), run_id)
figures = state.run_summary(run_id)
found = state.findings(run_id)
origin = (state.time_bounds(state.db_path(), run_id) or (None, None))[0]

ui.show_notes(run_id)

cols = st.columns(5)
cols[0].metric("Ranks", len(info["ranks"]), help=f"world size {info['world_size']}")
cols[1].metric("Steps per rank", int(per_rank["steps"].max()) if len(per_rank) else 0)
if len(per_rank) and not state.is_cpu_only(run_id):
    cols[2].metric("Mean step time (GPU clock)", ui.duration(figures["gpu_step_ms"]),
                   help="mean over ranks of the GPU-clock step (from a step's first GPU work to the next "
                        "step's), the step the chart below breaks down; the host's ProfilerStep time, which "
                        "findings' % of step use, is the table's 'host step' column")
elif figures["host_step_ms"] is not None:
    cols[2].metric("Mean step time", ui.duration(figures["host_step_ms"]),
                   help="mean ProfilerStep duration over ranks (a CPU-only trace: the host's steps)")
else:
    cols[2].metric("Mean step time", "–")
if figures["idle_pct"] is not None:
    cols[3].metric("GPU idle", f"{figures['idle_pct']:.1f} %",
                   help="HTA's definition: % of each rank's whole GPU span, first to last GPU activity, GPU work "
                        "launched before the first step included, mean over ranks; the chart's idle is per GPU-clock "
                        "step, and 'cause not identified' only the idle inside host steps no finding explains")
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
        st.caption("Steps on the GPU clock: from a step's first GPU work to the next step's. Each instant "
                   "counts once: compute, else communication no compute hides, else memory copies, else idle; "
                   "the parts add up to the step time above.")
    else:
        st.info("No step windows and no GPU activity to break down.")
with right:
    st.subheader("Top findings")
    if not found:
        st.success("No problems found above the thresholds.")
    for finding in found[:5]:
        with st.container(border=True):
            cost_text, share_text = ui.cost_words(finding)
            st.markdown(f"{ui.severity(finding['severity'])} **{ui.kind_title(finding['kind'])}** — "
                        f"{cost_text} ({share_text})")
            st.caption(ui.md(ui.where(finding, origin)))
    if found and costs and costs.get("saves_at_most_pct") is not None:
        step_word = "step" if cpu_only else "host step"
        st.markdown(f"Fixing all of these saves at most **{costs['saves_at_most_ms']:,.2f} ms/step** "
                    f"({costs['saves_at_most_pct']:.1f} % of the {costs['step_ms']:,.2f} ms "
                    f"{step_word}): each cause counted once, consequences not added.")
    if costs and costs.get("unexplained_idle_ms") is not None:
        st.markdown(f"GPU idle, cause not identified: **{costs['unexplained_idle_ms']:,.2f} ms/step** "
                    "(gaps inside the host steps that no finding above the thresholds explains: a part of the "
                    "idle the tile and the chart show, which count the whole GPU span and the GPU-clock steps).")
    if found:
        st.page_link("views/findings.py", label="All findings and their fixes", icon=":material/stethoscope:")

whatif = state.whatif(run_id)
waterfall = queries.whatif_waterfall(whatif)
if waterfall and len(waterfall) > 1:
    st.subheader("What the fixes will buy")
    run_whatif = whatif["run"]
    st.caption(f"The run's dependency graph replayed: {run_whatif['replayed_step_ms']:,.2f} ms per step against "
               f"{run_whatif['measured_step_ms']:,.2f} ms measured ({run_whatif['replay_error_pct']:+.1f} %). Each "
               "fix is a change of the graph (its assumptions on the Findings page), the largest predicted saving "
               "first; all fixes are replayed together, not added up.")
    fall, path = st.columns([3, 2])
    titles = {f["id"]: ui.kind_title(f["kind"]) for f in found}
    fall.plotly_chart(charts.whatif_waterfall(waterfall, titles), width="stretch")
    if run_whatif.get("critical_path_ms"):
        path.plotly_chart(charts.critical_path_bar(run_whatif["critical_path_ms"]), width="stretch")
        path.caption("Per step, what the critical path (the chain of work that decides when the step ends) "
                     "is made of: shortening anything else does not shorten the step.")

st.subheader("Per rank (HTA definitions)")
st.caption("Percentages of each rank's GPU span (its first to last GPU activity), as Holistic Trace Analysis "
           "defines them; times per host step.")
if len(summary):
    ui.table(summary, column_config={
        "rank": st.column_config.NumberColumn("rank", format="%d"),
        "steps": st.column_config.NumberColumn("steps", format="%d"),
        "step_time_ms": st.column_config.NumberColumn("host step", format="%.2f ms",
                                                      help="mean ProfilerStep duration on the host: what findings' % of step use"),
        "idle_pct": st.column_config.NumberColumn("GPU idle", format="%.1f %%"),
        "compute_pct": st.column_config.NumberColumn("compute", format="%.1f %%"),
        "non_compute_pct": st.column_config.NumberColumn("non-compute", format="%.1f %%",
                                                         help="communication and memory kernels"),
        "comm_time_ms": st.column_config.NumberColumn("comm / step", format="%.2f ms"),
        "comm_overlap_pct": st.column_config.NumberColumn("comm overlapped", format="%.1f %%",
                                                          help="% of the rank's whole communication time (the whole trace, as HTA counts it) that "
                                                               "compute kernels overlap; a comm_exposed finding's overlap counts inside the steps only"),
        "h2d_time_ms": st.column_config.NumberColumn("H2D copies / step", format="%.2f ms"),
    })
st.subheader("Rank files")
st.caption("One trace file per rank, as loaded: the GPU each rank ran on and the Kineto schema it was written with.")
ui.table(pd.DataFrame(info["ranks"]), column_config={
    "rank": st.column_config.NumberColumn("rank", format="%d"),
    "n_events": st.column_config.NumberColumn("events", format="localized"),
    "file_name": st.column_config.TextColumn("file", width="large"), "device_name": st.column_config.TextColumn("GPU"),
    "schema_version": st.column_config.TextColumn("Kineto schema")})
