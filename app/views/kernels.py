"""Operators & kernels: the run's costliest CPU ops, GPU kernels and module scopes (what the PyTorch
Profiler TensorBoard plugin's Operator and Kernel views showed), with tensor-core use, per rank, for
the whole run, one step or a finding's window.

Every figure comes from analyzers.read.queries (top_ops, top_kernels, top_modules over
sql/metrics/operators.sql); this page only picks the window and formats.
"""
from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from analyzers.read import queries
from analyzers.common.safe_text import clip
from app import charts, state, ui

BAR_LABEL_LIMIT = 60   # characters of a name on the chart's axis; the table shows it whole

st.title("Operators & kernels")
run_id = ui.need_run()
if run_id is None:
    st.stop()


@st.cache_data(show_spinner=False, max_entries=64)
def _top(path: str, version: str, what: str, run: str, window: tuple[int, int] | None, rank: int | None,
         step: int | None, by_rank: bool, limit: int) -> pd.DataFrame:
    """Keyed by store, code version (state.code_version) and what is asked."""
    read = {"ops": queries.top_ops, "kernels": queries.top_kernels, "modules": queries.top_modules}[what]
    return read(state.cur(), run, window=window, rank=rank, step=step, by_rank=by_rank, limit=limit)


@st.cache_data(show_spinner=False, max_entries=16)
def _perf(path: str, version: str, run: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-op performance model and the per-kernel rates and occupancy (whole run)."""
    kernel_rates = pd.DataFrame.from_dict(queries.perf_by_name(state.cur(), run, "kernels"), orient="index")
    return queries.op_perf(state.cur(), run, limit=None), kernel_rates


found = [f for f in state.findings(run_id) if f["start_ns"] is not None and f["end_ns"] is not None]
steps = state.step_breakdown(state.db_path(), run_id)
step_numbers = sorted({int(s) for s in steps["step"].dropna()})
all_ranks = [int(r) for r in state.run_info(run_id)["ranks"]["rank"]]
bounds = state.time_bounds(state.db_path(), run_id)

sources = ["Whole run"] + (["A step"] if step_numbers else []) + (["A finding's window"] if found else [])
focus = st.session_state.pop("kernels_focus", None)
by_id = {f["id"]: f for f in found}
if focus in by_id:
    st.session_state["kernels_source"] = "A finding's window"
    st.session_state["kernels_finding"] = focus
    ranks_of = by_id[focus]["ranks"] or ([] if by_id[focus]["rank"] is None else [by_id[focus]["rank"]])
    st.session_state["kernels_rank"] = ranks_of[0] if len(ranks_of) == 1 else None
if st.session_state.get("kernels_source") not in sources:
    st.session_state["kernels_source"] = sources[0]
if st.session_state.get("kernels_rank") not in [None, *all_ranks]:
    st.session_state["kernels_rank"] = None

left, middle, right = st.columns([2, 3, 2])
source = left.radio("Window", sources, key="kernels_source")
window: tuple[int, int] | None = None
step: int | None = None
with middle:
    if source == "A step":
        step = st.selectbox("Step", step_numbers, format_func=charts.step_label, key="kernels_step")
        st.caption("CPU ops in the step's host window; GPU kernels in its window on the GPU clock.")
    elif source == "A finding's window":
        if st.session_state.get("kernels_finding") not in by_id:
            st.session_state["kernels_finding"] = found[0]["id"]
        finding_id = st.selectbox(
            "Finding", list(by_id), key="kernels_finding",
            format_func=lambda fid: f"{ui.kind_title(by_id[fid]['kind'])} · {by_id[fid]['cost_ms_per_step']:,.2f} ms/step")
        finding = by_id[finding_id]
        window = (int(finding["start_ns"]), int(finding["end_ns"]))
        origin = bounds[0] if bounds else window[0]
        st.caption(f"{(window[0] - origin) / 1e6:,.3f}–{(window[1] - origin) / 1e6:,.3f} ms into the trace · "
                   f"{ui.md(ui.where(finding))}")
    else:
        st.caption("Ops that start in the ranks' steps and kernel time inside them (everything on a rank without "
                   "steps); shares are of the step time.")
with right:
    rank = st.selectbox("Rank", [None, *all_ranks], key="kernels_rank",
                        format_func=lambda r: "All ranks" if r is None else f"Rank {r}")
    by_rank = st.checkbox("One row per rank", key="kernels_by_rank", disabled=rank is not None or len(all_ranks) < 2,
                          help="Instead of summing each name over the ranks")
    limit = int(st.number_input("Rows", min_value=5, max_value=500, value=queries.TOP_N_DEFAULT, step=5,
                                key="kernels_limit"))
by_rank = bool(by_rank and rank is None)
share_label = "% of step" if source != "A finding's window" else "% of window"

with st.spinner("Reading ops, kernels and modules…"):
    ops, kernels, modules = (_top(state.db_path(), state.code_version(), what, run_id, window, rank, step, by_rank, limit)
                             for what in ("ops", "kernels", "modules"))
    perf, kernel_rates = _perf(state.db_path(), state.code_version(), run_id)
if len(kernel_rates):
    kernels = kernels.join(kernel_rates, on="name")


def name_column(title: str) -> Any:
    return st.column_config.TextColumn(title, width="large", help="Hover a cell to read the whole name")


def ms(title: str, help: str | None = None) -> Any:
    return st.column_config.NumberColumn(title, format="%.2f", help=help)


def pct(title: str, help: str | None = None) -> Any:
    return st.column_config.NumberColumn(title, format="%.1f%%", help=help)


def counts(title: str) -> Any:
    return st.column_config.NumberColumn(title, format="localized")


def top_bars(frame: pd.DataFrame, name_col: str, value_col: str, title: str, color: pd.Series | None = None) -> None:
    """Horizontal bars of the rows' value_col, longest on top (names clipped and escaped)."""
    shown = frame.head(min(len(frame), 15)).iloc[::-1]
    labels = [charts.esc(clip(n, BAR_LABEL_LIMIT)) + ("" if r is None or pd.isna(r) else f" · rank {int(r)}")
              for n, r in zip(shown[name_col], shown["rank"])]
    colors = "#2e7d32" if color is None else list(color.loc[shown.index])
    fig = go.Figure(go.Bar(x=shown[value_col], y=list(range(len(shown))), orientation="h", marker_color=colors,
                           hovertext=[charts.esc(clip(n, 300)) for n in shown[name_col]],
                           hovertemplate="%{hovertext}<br>%{x:,.2f} ms<extra></extra>",
                           texttemplate="%{x:,.2f}", textposition="outside", cliponaxis=False))
    fig.update_layout(**charts.LAYOUT, title=title, height=120 + 24 * len(shown), showlegend=False,
                      xaxis_title="ms", yaxis=dict(tickmode="array", tickvals=list(range(len(shown))), ticktext=labels))
    st.plotly_chart(fig, width="stretch", key=f"bars-{value_col}-{name_col}")


def with_rank(frame: pd.DataFrame, config: dict[str, Any]) -> dict[str, Any]:
    return ({"rank": counts("Rank")} | config) if by_rank else config


tab_names = ["Operators", "Kernels", "Performance"] + (["Modules"] if len(modules) else [])
tabs = st.tabs(tab_names)

with tabs[0]:
    if not len(ops):
        st.info("No CPU ops in this window" + ("" if rank is None else f" on rank {rank}") + ".")
    else:
        top_bars(ops, "name", "self_ms", f"Top CPU ops by self time ({len(ops.head(15))} of {len(ops)} shown)")
        eligible = ops["tensor_core_eligible"].fillna(False)
        ops_shown = ops.assign(tc=[("eligible" + ("" if pd.isna(p) else f", {p:.0f}% used")) if e else ""
                                   for e, p in zip(eligible, ops["tc_pct"])])
        columns = ["rank"] if by_rank else []
        columns += ["name", "calls", "self_ms", "total_ms", "mean_ms", "self_pct", "total_pct", "gpu_self_ms",
                    "gpu_total_ms", "tc"]
        ui.table(ops_shown[columns], column_config=with_rank(ops_shown, {
            "name": name_column("Op"), "calls": counts("Calls"),
            "self_ms": ms("Self, ms", "Time in the op itself, its child ops taken out"),
            "total_ms": ms("Total, ms", "Time from the op's start to its end, child ops included"),
            "mean_ms": ms("Mean, ms", "Total / calls"),
            "self_pct": pct(f"Self {share_label}"), "total_pct": pct(f"Total {share_label}"),
            "gpu_self_ms": ms("GPU own, ms", "GPU time of the kernels and copies the op launched itself"),
            "gpu_total_ms": ms("GPU incl., ms", "GPU time launched by the op and its child ops"),
            "tc": st.column_config.TextColumn("Tensor cores", help="Eligible: a matmul, convolution or attention op "
                                              "that can run on tensor cores; the share of its GPU time that did"),
        }))
        st.caption("Self time is the op's time minus its direct child ops on the same thread. Total counts an op "
                   "nested in one of the same name twice, as the TensorBoard plugin did.")

with tabs[1]:
    if not len(kernels):
        st.info("No GPU kernels in this window" + ("" if rank is None else f" on rank {rank}")
                + (" (a CPU-only trace)." if state.is_cpu_only(run_id) else "."))
    else:
        colors = pd.Series(["#6a1b9a" if tc else ("#c62828" if fp32 else "#78909c")
                            for tc, fp32 in zip(kernels["tensor_core"], kernels["fp32_cuda_core"])], index=kernels.index)
        top_bars(kernels, "name", "total_ms", "Top GPU kernels by time · purple: tensor cores, red: FP32 matmul "
                 "on CUDA cores", colors)
        kernels_shown = kernels.assign(tc=["yes" if tc else ("no, FP32: could" if fp32 else "")
                                           for tc, fp32 in zip(kernels["tensor_core"], kernels["fp32_cuda_core"])])
        columns = ["rank"] if by_rank else []
        columns += ["name", "calls", "total_ms", "mean_ms", "min_ms", "max_ms", "busy_pct", "step_pct", "streams", "tc",
                    "family", "dtype"]
        columns += [c for c in ("tflops", "tbps", "occupancy_pct", "registers_per_thread") if c in kernels_shown
                    and kernels_shown[c].notna().any()]
        ui.table(kernels_shown[columns], column_config=with_rank(kernels_shown, {
            "family": st.column_config.TextColumn("Family", help="What the kernel's name says it is "
                                                  "(analyzers/sql/lib/kernel_taxonomy.sql)"),
            "dtype": st.column_config.TextColumn("Data type", help="The data type its name spells, where it does"),
            "tflops": st.column_config.NumberColumn("TFLOP/s", format="%.3g", help="Achieved, whole run: the FLOPs of "
                                                    "the ops that launched it (their recorded shapes) over its time"),
            "tbps": st.column_config.NumberColumn("TB/s", format="%.3g", help="Achieved, whole run: bytes moved over time"),
            "occupancy_pct": pct("Occupancy", "Kineto's 'est. achieved occupancy %', mean over calls"),
            "registers_per_thread": st.column_config.NumberColumn("Registers", format="%d"),
            "name": name_column("Kernel"), "calls": counts("Calls"),
            "total_ms": ms("Total, ms", "Kernel time inside the window"), "mean_ms": ms("Mean, ms"),
            "min_ms": ms("Min, ms"), "max_ms": ms("Max, ms"),
            "busy_pct": pct("% of GPU busy", "Share of the time the GPU ran anything (kernels, copies, sets)"),
            "step_pct": pct(f"{share_label}"), "streams": counts("Streams"),
            "tc": st.column_config.TextColumn("Tensor cores", help="From the kernel's name (the TensorBoard plugin's "
                                              "list). 'Could': an FP32 matmul on CUDA cores; TF32 or BF16 would put "
                                              "it on tensor cores (the FP32 matmul finding)."),
        }))
        busy = kernels["busy_ms"].dropna()
        if len(busy):
            st.caption(f"GPU busy in this window: {busy.iloc[0]:,.2f} ms"
                       + ("" if by_rank else " (all ranks read, summed)") + ".")

with tabs[2]:
    if not len(perf):
        st.info("No modelled op here: the per-op model needs shapes (profile with record_shapes=True) and GPU work "
                "under GEMM, convolution, attention, normalisation or elementwise ops.")
    else:
        gpu = perf["gpu"].dropna()
        st.caption("Whole run, per op and input shapes: FLOPs and bytes from the recorded shapes and dtypes, over the "
                   "GPU time of the work the op launched (TraceLens' counting). "
                   + (f"Peaks of the {ui.md(gpu.iloc[0])} from its datasheet ({perf['peak_tbps'].iloc[0]:g} TB/s memory); "
                      "'lost' is the time above the roofline." if len(gpu) else
                      "The GPU is not in the peak table: rates without % of peak."))
        top_bars(perf.assign(rank=None), "name", "lost_ms" if len(gpu) else "gpu_ms",
                 "Time above the roofline per op and shape (ms)" if len(gpu) else "GPU time per op and shape (ms)")
        ui.table(perf[["name", "category", "shape", "dtype", "calls", "gflops", "mb", "mean_us", "tflops", "tbps",
                       "pct_peak_flops", "pct_peak_bw", "bound", "gpu_ms", "lost_ms"]], column_config={
            "name": name_column("Op"), "category": st.column_config.TextColumn("Category"),
            "shape": st.column_config.TextColumn("Input shapes"), "calls": counts("Calls"),
            "gflops": st.column_config.NumberColumn("GFLOP / call", format="%.4g"),
            "mb": st.column_config.NumberColumn("MiB / call", format="%.4g"),
            "mean_us": st.column_config.NumberColumn("GPU µs / call", format="%.2f"),
            "tflops": st.column_config.NumberColumn("TFLOP/s", format="%.3g"),
            "tbps": st.column_config.NumberColumn("TB/s", format="%.3g"),
            "pct_peak_flops": pct("% peak FLOP/s", "Of the dtype's dense tensor/matrix-core peak (GEMM, conv, "
                                  "attention), else the FP32 vector peak"),
            "pct_peak_bw": pct("% peak memory BW"),
            "bound": st.column_config.TextColumn("Roof", help="Which roof is lower at the op's FLOPs per byte"),
            "gpu_ms": ms("GPU, ms"), "lost_ms": ms("Lost, ms", "GPU time above the roofline (compute or memory)"),
        })

if len(modules):
    with tabs[3]:
        top_bars(modules, "path", "total_ms", "Top module / annotated scopes by time")
        columns = (["rank"] if by_rank else []) + ["path", "source", "calls", "total_ms", "total_pct", "gpu_total_ms"]
        ui.table(modules[columns], column_config=with_rank(modules, {
            "path": name_column("Module path"), "source": st.column_config.TextColumn(
                "From", help="module: nn.Module events (with_modules / with_stack); annotation: record_function ranges"),
            "calls": counts("Calls"), "total_ms": ms("Host time, ms"), "total_pct": pct(f"{share_label}"),
            "gpu_total_ms": ms("GPU, ms", "GPU time launched inside the scope on its thread"),
        }))
