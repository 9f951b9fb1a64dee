"""Compare two runs (before / after a fix): per-finding-kind cost deltas and the step-time delta."""
from __future__ import annotations

import streamlit as st

from analyzers import queries
from app import charts, state, ui

st.title("Compare runs")
state.page_start()
all_runs = state.list_runs()
if len(all_runs) < 2:
    st.info("Load at least two runs (for example before and after a fix) to compare them.")
    ui.load_link()
    st.stop()

ids = [r["run_id"] for r in all_runs]
labels = {r["run_id"]: state.run_label(r) for r in all_runs}
current = state.current_run()
left, right = st.columns(2)
before = left.selectbox("Before", ids, index=min(1, len(ids) - 1), format_func=labels.get, key="compare_before")
after = right.selectbox("After", ids, index=ids.index(current) if current in ids and current != before else 0,
                        format_func=labels.get, key="compare_after")
if before == after:
    st.warning("Pick two different runs.")
    st.stop()

for run_id in (before, after):   # the run picked in the sidebar was checked by page_start; the other may not be
    state.ensure_analysed(run_id)
comparison = queries.compare_runs(state.cur(), before, after)
steps = comparison["steps"].set_index("run")
delta = comparison["delta"]
# CPU-only traces (e.g. gloo demos) have step times but no GPU time to split into compute/idle.
# With either run CPU-only the GPU parts cannot be compared (one side has none): step times only.
before_cpu, after_cpu = state.is_cpu_only(before), state.is_cpu_only(after)
cpu_only = before_cpu or after_cpu
if before_cpu and after_cpu:
    st.info("Both runs are CPU-only traces (no kernels or copies): step times and finding costs are compared; "
            "there is no GPU time to break down.")
elif cpu_only:
    st.warning(f"The {'before' if before_cpu else 'after'} run is a CPU-only trace (no kernels or copies): "
               "only step times and finding costs compare; GPU time is not broken down.")
sizes = {side: (state.run_info(run_id) or {}).get("world_size") for side, run_id in (("before", before), ("after", after))}
if sizes["before"] and sizes["after"] and sizes["before"] != sizes["after"]:
    st.warning(f"The runs have different world sizes ({sizes['before']} vs {sizes['after']} ranks): the per-step "
               "figures are means over ranks and compare; the cost per kind adds up every rank's findings "
               "and grows with the number of ranks.")
HELP = {"comm_exposed_ms": "Collective time no computation overlaps, including time spent waiting in a "
                           "collective for a slower rank (the findings split that wait off as rank_imbalance)."}
cols = st.columns(5)
for col, (part, title) in zip(cols, [("mean_step_ms", "Mean step time"), ("compute_ms", "Compute / step"),
                                     ("comm_exposed_ms", "Comm not overlapped / step"), ("idle_ms", "GPU idle / step")]):
    if delta[f"{part}_after"] is None or (cpu_only and part != "mean_step_ms"):
        col.metric(title, "–")
    elif delta[f"{part}_before"] is None:
        col.metric(title, f"{delta[f'{part}_after']:,.2f} ms", help=HELP.get(part))
    else:
        # Less step time, exposed comm or idle is better; more compute is neither good nor bad, and
        # no change is no change (not a red arrow).
        change = delta[f"{part}_delta"]
        col.metric(title, f"{delta[f'{part}_after']:,.2f} ms", f"{change:+,.2f} ms vs before",
                   delta_color="off" if part == "compute_ms" or abs(change) < 0.005 else "inverse",
                   help=HELP.get(part))
cols[4].metric("Speed-up (mean step)", "–" if delta["speedup"] is None else f"×{delta['speedup']:.2f}")

kinds = comparison["kinds"]
left, right = st.columns(2)
with left:
    if len(kinds):
        st.plotly_chart(charts.compare_bars(kinds), width="stretch", key="cmp-kinds")
    else:
        st.success("Neither run has findings.")
with right:
    if cpu_only and len(steps):
        st.plotly_chart(charts.per_rank_bars(steps["mean_step_ms"], list(steps.index), "Mean step time, side by side",
                                             labels=list(steps.index)), width="stretch", key="cmp-steps")
    elif len(steps):
        st.plotly_chart(charts.breakdown_bars(steps.reset_index(), "Mean step, side by side",
                                              labels=list(steps.index)), width="stretch", key="cmp-steps")
COLUMNS = {"kind": ("Finding", None), "before_ms": ("Before, ms/step", "%.3f"), "after_ms": ("After, ms/step", "%.3f"),
           "delta_ms": ("Change, ms/step", "%+.3f"), "before_pct": ("Before, worst % of step", "%.1f"),
           "after_pct": ("After, worst % of step", "%.1f"), "before_count": ("Before, findings", None),
           "after_count": ("After, findings", None)}
ui.table(kinds.assign(kind=[ui.kind_title(k) for k in kinds["kind"]]),
         column_config={c: (st.column_config.NumberColumn(label, format=fmt) if fmt else label)
                        for c, (label, fmt) in COLUMNS.items() if c in kinds.columns})
st.caption("Cost per kind = the time that kind's root cause loses per step (one finding per cause, its worst rank; "
           "a consequence such as a straggler's wait explained by its own stall is not added); % = its share of the step.")
