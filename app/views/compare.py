"""Compare two runs (before / after a fix): per-finding-kind cost deltas and the step-time delta."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from analyzers.read import queries
from app import charts, run_pairs, state, ui

st.title("Compare runs")
state.page_start()
all_runs = state.list_runs()
if len(all_runs) < 2:
    st.info("Load at least two runs (for example before and after a fix) to compare them.")
    ui.load_link()
    st.stop()

ids = [r["run_id"] for r in all_runs]
labels = {r["run_id"]: state.run_label(r) for r in all_runs}
infos = {run_id: state.run_info(run_id) or {} for run_id in ids}   # rank files and their GPUs (ranks table)
devices = {run_id: list(info["ranks"]["device_name"]) if len(info.get("ranks", [])) else []
           for run_id, info in infos.items()}
pair = run_pairs.default_pair(all_runs, devices, state.current_run())
left, right = st.columns(2)
before = left.selectbox("Before", ids, index=ids.index(pair.before), format_func=labels.get, key="compare_before")
after = right.selectbox("After", ids, index=ids.index(pair.after), format_func=labels.get, key="compare_after")
if before == after:
    st.warning("Pick two different runs.")
    st.stop()
if (before, after) == (pair.before, pair.after):
    st.caption(f"Opened on {pair.reason}. Pick any two runs above.")

for run_id in (before, after):   # the run picked in the sidebar was checked by page_start; the other may not be
    if state.events_problem(run_id):
        st.error(ui.md(state.events_problem(run_id)), icon=":material/folder_off:")
        st.stop()
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
    st.warning(f"The {'before' if before_cpu else 'after'} run is a CPU-only trace (no kernels or copies) and the "
               f"{'after' if before_cpu else 'before'} run ran on GPUs: they are different set-ups, so the step "
               "times say little about a fix; GPU time is not broken down.")
# Rank counts are the rank files stored (the ranks table, as Overview shows them), not the job size a
# trace declares: one file of an 8-rank job is one rank here.
n_ranks = {side: len(devices[run_id]) for side, run_id in (("before", before), ("after", after))}
if n_ranks["before"] and n_ranks["after"] and n_ranks["before"] != n_ranks["after"]:
    st.warning(f"The runs have different numbers of ranks ({ui.count(n_ranks['before'], 'rank')} before, "
               f"{n_ranks['after']} after): the per-step figures are means over ranks of each rank's mean step, "
               "and a kind's cost is its worst rank's per step (one finding per cause), so neither grows with the "
               "number of ranks.")
job_sizes = {side: infos[run_id].get("world_size") for side, run_id in (("before", before), ("after", after))}
if n_ranks["before"] == n_ranks["after"] and job_sizes["before"] != job_sizes["after"] and all(job_sizes.values()):
    st.caption(f"Both runs hold {ui.count(n_ranks['before'], 'rank file')}, from jobs of {job_sizes['before']} "
               f"and {job_sizes['after']} ranks (as their traces declare).")
gpus = {side: ui.gpu_mix(devices[run_id]) for side, run_id in (("before", before), ("after", after))}
if not cpu_only and gpus["before"] and gpus["after"] and gpus["before"] != gpus["after"]:
    st.warning(f"The runs ran on different GPUs (before: {ui.md(gpus['before'])}; after: {ui.md(gpus['after'])}): "
               "the step times compare the hardware as well as the code.", icon=":material/memory:")
unnamed = [side for side, run_id in (("before", before), ("after", after))
           if not gpus[side] and not (before_cpu if side == "before" else after_cpu)]
if unnamed and not cpu_only:
    st.caption(f"The {' and '.join(unnamed)} run's trace does not name its GPU (no deviceProperties, an older "
               "profiler): whether both ran on the same GPU model cannot be checked.")

HELP = {"comm_exposed_ms": "Collective time no computation overlaps, including time spent waiting in a "
                           "collective for a slower rank (the findings split that wait off as rank_imbalance)."}
cols = st.columns([1.3, 1, 1, 1, 1])
ratio_label = "After vs before (mean step)"
if delta["speedup"] is None or delta["slowdown"] is None:
    cols[0].metric(ratio_label, "–")
else:
    verdict, color = ui.speed_change(delta["speedup"], delta["slowdown"])
    cols[0].metric(ratio_label, verdict,
                   f"{delta['mean_step_ms_before']:,.2f} → {delta['mean_step_ms_after']:,.2f} ms per step",
                   delta_color=color, delta_arrow="off",
                   help="the after run's mean step time against the before run's (the mean over ranks of each "
                        "rank's mean step): "
                        "before → after")
for col, (part, title) in zip(cols[1:], [("mean_step_ms", "Mean step time"), ("compute_ms", "Compute / step"),
                                         ("comm_exposed_ms", "Comm not hidden / step"), ("idle_ms", "GPU idle / step")]):
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

memory = comparison.get("memory") or {}
if memory.get("peak_allocated_before") is not None or memory.get("peak_allocated_after") is not None:
    peak_cols = st.columns(2)
    for col, what in zip(peak_cols, ("allocated", "reserved")):
        before_peak, after_peak = memory.get(f"peak_{what}_before"), memory.get(f"peak_{what}_after")
        if not after_peak and not before_peak:
            continue
        change = (f"{ui.human_bytes(after_peak - before_peak)} vs before" if before_peak is not None
                  and after_peak is not None else None)
        col.metric(f"Peak memory {what}", ui.human_bytes(after_peak) or "–", change, delta_color="inverse",
                   help="the highest over ranks and devices ([memory] events of profile_memory=True)")

kinds = comparison["kinds"]
left, right = st.columns(2)
with left:
    if len(kinds):
        st.plotly_chart(charts.compare_bars(kinds, [ui.kind_title(k) for k in kinds["kind"]]), width="stretch",
                        key="cmp-kinds")
    else:
        st.success("Neither run has findings.")
with right:
    if cpu_only and len(steps):
        st.plotly_chart(charts.per_rank_bars(steps["mean_step_ms"], list(steps.index), "Mean step time, side by side",
                                             labels=list(steps.index)), width="stretch", key="cmp-steps")
    elif len(steps):
        st.plotly_chart(charts.breakdown_bars(steps.reset_index(), "Mean step, side by side",
                                              labels=list(steps.index)), width="stretch", key="cmp-steps")
MS = "%.2f ms"
ui.table(kinds.assign(kind=[ui.kind_title(k) for k in kinds["kind"]]),
         column_order=["kind", "before_ms", "after_ms", "delta_ms", "before_pct", "after_pct", "before_bytes",
                       "after_bytes", "before_count", "after_count"],
         bytes_columns=("before_bytes", "after_bytes"),
         column_config={
    "kind": st.column_config.TextColumn("Finding", width="large"),
    "before_ms": st.column_config.NumberColumn("Before /step", format=MS, help="cost per step in the before run"),
    "after_ms": st.column_config.NumberColumn("After /step", format=MS, help="cost per step in the after run"),
    "delta_ms": st.column_config.NumberColumn("Change /step", format="%+.2f ms",
                                              help="after − before: negative is time won back"),
    "before_pct": st.column_config.NumberColumn("Before % step", format="%.1f %%",
                                                help="the worst finding's share of the before run's step"),
    "after_pct": st.column_config.NumberColumn("After % step", format="%.1f %%",
                                               help="the worst finding's share of the after run's step"),
    "before_bytes": st.column_config.NumberColumn("Before size", help="a memory finding's cost in the before run, in binary units"),
    "after_bytes": st.column_config.NumberColumn("After size", help="a memory finding's cost in the after run, in binary units"),
    "before_count": st.column_config.NumberColumn("# before", format="%d", help="findings of this kind, before"),
    "after_count": st.column_config.NumberColumn("# after", format="%d", help="findings of this kind, after"),
})
st.caption("Cost per kind = the time that kind's root cause loses per step (one finding per cause, its worst rank; "
           "a consequence such as a straggler's wait explained by its own stall is not added); % = its share of the step.")

predictions = queries.whatif_vs_measured(state.cur(), before, after)
if predictions:
    st.subheader("Predicted (the before run's replay) vs measured (the after run)")
    st.caption("What the before run's what-if replay predicted for each fix, beside the step the after run "
               "measured; the finding's cost is the naive prediction (cost = saving). The after run measures "
               "whichever fixes it applied: read the row of the fix you made.")
    ui.table(pd.DataFrame([{**r, "finding": "all fixes together" if r["kind"] is None else ui.kind_title(r["kind"])}
                           for r in predictions]).drop(columns=["kind"]), column_config={
        "finding": st.column_config.TextColumn("Fix of", width="large"),
        "predicted_step_ms": st.column_config.NumberColumn("Predicted step", format=MS),
        "predicted_saving_ms": st.column_config.NumberColumn("Predicted saving", format=MS),
        "measured_step_ms": st.column_config.NumberColumn("Measured step (after)", format=MS),
        "measured_saving_ms": st.column_config.NumberColumn("Measured saving", format=MS),
        "cost_ms": st.column_config.NumberColumn("Cost (naive saving)", format=MS)})

# --- per kernel / op diff (analyzers.read.queries.operator_diff; HTA's TraceDiff per name) ---
st.subheader("Top changed kernels and ops")


@st.cache_data(show_spinner=False, max_entries=32)
def _operator_diff(path: str, version: str, run_before: str, run_after: str, of_kind: str):
    """Keyed by store and code version (state.code_version), like every per-run figure."""
    return queries.operator_diff(state.cur(), run_before, run_after, of_kind)


other_gpu = bool(gpus["before"] and gpus["after"] and gpus["before"] != gpus["after"])
diff_kind = st.radio("Compare", ["families", "kernels", "ops"], horizontal=True, key="compare_diff_kind",
                     index=2 if before_cpu and after_cpu else 0 if other_gpu else 1,
                     format_func={"families": "Kernels by category", "kernels": "GPU kernels", "ops": "CPU ops"}.get,
                     help="By category (GEMM, attention, convolution, normalisation, elementwise, communication, "
                          "memory), kernels line up across GPU vendors and library versions whose names differ")
with st.spinner("Comparing kernels and ops…"):
    diff = _operator_diff(state.db_path(), state.code_version(), before, after, diff_kind)
if not len(diff):
    st.info("Neither run has " + ("CPU ops." if diff_kind == "ops" else "GPU kernels."))
else:
    if diff_kind == "families":
        diff = diff.drop(columns=["tensor_core"])
        st.plotly_chart(charts.family_bars(diff), width="stretch", key="cmp-families")
    else:
        diff = diff.assign(tensor_core=["yes" if tc else "" for tc in diff["tensor_core"]])
    ui.table(diff, column_config={
        "name": st.column_config.TextColumn({"kernels": "Kernel", "ops": "Op", "families": "Category"}[diff_kind],
                                            width="large", help="Hover a cell to read the whole name"),
        "before_ms": st.column_config.NumberColumn("Before, ms/step", format="%.2f"),
        "after_ms": st.column_config.NumberColumn("After, ms/step", format="%.2f"),
        "delta_ms": st.column_config.NumberColumn("Change, ms/step", format="%+.2f",
                                                  help="after − before: negative is time won back"),
        "before_calls": st.column_config.NumberColumn("Calls/step before", format="%.1f"),
        "after_calls": st.column_config.NumberColumn("Calls/step after", format="%.1f"),
        "delta_calls": st.column_config.NumberColumn("Change, calls/step", format="%+.1f"),
        "tensor_core": st.column_config.TextColumn(
            "Tensor cores" if diff_kind == "kernels" else "Tensor-core eligible"),
    })
    st.caption("Whole-run time per step of each " + ("kernel category (from the kernels' names, "
               "analyzers/sql/lib/kernel_taxonomy.sql)" if diff_kind == "families" else "name")
               + " on each side (summed over ranks, divided by the ranks' steps), largest change first. "
               + ("Categories line up runs whose kernels are named differently: another GPU vendor, another library."
                  if diff_kind == "families" else "A kernel renamed by a fix (FP32 sgemm to a TF32 tensor-core GEMM) "
                  "shows as one name gone and one new; 'Kernels by category' lines such runs up."))
