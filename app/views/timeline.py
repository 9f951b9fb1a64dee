"""Timeline: GPU streams and CPU threads around a finding's window (or a step), with the finding's
intervals highlighted, and the window exported as a small Chrome trace for Perfetto.

Only the visible span is queried, and re-queried as the user zooms (the slider, the zoom buttons
or a drag across the chart): bars shorter than a pixel of that span are merged and the rest capped
(analyzers.read.queries.timeline_window), so this stays quick on a 1 GB trace and a narrow span shows
every event as its own bar, CPU ops at their nesting depth.
"""
from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from analyzers.read import queries
from analyzers.store import runs as run_store
from app import charts, state, ui

MAX_DEFAULT_RANKS = 8  # drawing every rank of a 128-rank job helps nobody; the user can add more

st.title("Timeline")
run_id = ui.need_run()
if run_id is None:
    st.stop()

bounds = state.time_bounds(state.db_path(), run_id)
if bounds is None:
    st.info("This run has no timed events to draw.")
    st.stop()

found = [f for f in state.findings(run_id) if f["start_ns"] is not None and f["end_ns"] is not None]
steps = state.step_breakdown(state.db_path(), run_id)
all_ranks = [int(r) for r in state.run_info(run_id)["ranks"]["rank"]]


def finding_intervals(finding: dict[str, Any]) -> list[tuple[int, int]]:
    """The finding's window plus any intervals its metrics list (as [start_ns, end_ns] pairs)."""
    spans = [(finding["start_ns"], finding["end_ns"])]
    for item in (finding["metrics"] or {}).get("intervals", []) or []:
        try:
            start, end = (item["start_ns"], item["end_ns"]) if isinstance(item, dict) else item[:2]
            spans.append((int(start), int(end)))
        except (KeyError, TypeError, ValueError, IndexError):
            continue
    return spans


sources = (["A finding"] if found else []) + ["A step", "Custom window"]
focus = st.session_state.pop("timeline_focus", None)
if focus is not None and found:
    st.session_state["timeline_source"] = "A finding"
    st.session_state["timeline_finding"] = focus
source = st.radio("Show", sources, horizontal=True, key="timeline_source")

highlights: list[tuple[int, int]] = []
default_ranks = all_ranks[:MAX_DEFAULT_RANKS]
if source == "A finding":
    by_id = {f["id"]: f for f in found}
    if st.session_state.get("timeline_finding") not in by_id:
        st.session_state["timeline_finding"] = found[0]["id"]
    finding_id = st.selectbox(
        "Finding", list(by_id), key="timeline_finding",
        format_func=lambda fid: f"{ui.kind_title(by_id[fid]['kind'])} · {by_id[fid]['cost_ms_per_step']:.2f} ms/step · "
                                f"{ui.where(by_id[fid], bounds[0])}")
    finding = by_id[finding_id]
    pad = max((finding["end_ns"] - finding["start_ns"]) // 5, 10_000)
    t0, t1 = finding["start_ns"] - pad, finding["end_ns"] + pad
    highlights = finding_intervals(finding)
    if finding["rank"] is not None and finding["kind"] != "rank_imbalance":  # a straggler needs its peers
        default_ranks = [finding["rank"]]
elif source == "A step" and len(steps):
    labels = [f"rank {r} · {charts.step_label(s)}" for r, s in zip(steps["rank"], steps["step"])]
    index = st.selectbox("Step", range(len(steps)), format_func=labels.__getitem__)
    row = steps.iloc[index]
    t0, t1 = int(row["t0_ns"]), int(row["t1_ns"])
    default_ranks = [int(row["rank"])]
else:
    span_ms = (bounds[1] - bounds[0]) / 1e6
    left, right = st.columns(2)
    start_ms = left.number_input("From (ms into the trace)", 0.0, span_ms, 0.0, format="%.3f")
    end_ms = right.number_input("To (ms into the trace)", 0.0, span_ms, min(span_ms, 50.0), format="%.3f")
    if end_ms <= start_ms:
        st.warning("The window's end must come after its start.")
        st.stop()
    t0, t1 = bounds[0] + int(start_ms * 1e6), bounds[0] + int(end_ms * 1e6)

# never before the trace's first event or after its last (a finding at the start, padded, would)
t0, t1 = queries.clamp_window(int(t0), int(t1), bounds)


def to_ms(ns: int) -> float:
    """ns as ms into the trace: the origin of the chart's axis, the captions and every input."""
    return (ns - bounds[0]) / 1e6


# Zoom: the visible span within the window, in ms into the trace. The slider, the buttons and a
# drag across the chart all set it; each change re-queries at that span, so short events separate.
zoom_key = f"timeline_zoom-{run_id}-{t0}-{t1}"
window_ms = (to_ms(t0), to_ms(t1))
slider_step = max((window_ms[1] - window_ms[0]) / 2000, 1e-6)


def set_zoom(start_ms: float, end_ms: float) -> None:
    start_ms, end_ms = max(start_ms, window_ms[0]), min(end_ms, window_ms[1])
    if end_ms - start_ms >= slider_step:
        st.session_state[zoom_key] = (start_ms, end_ms)


def zoom_by(factor: float) -> None:
    start_ms, end_ms = st.session_state.get(zoom_key, window_ms)
    middle, half = (start_ms + end_ms) / 2, (end_ms - start_ms) * factor / 2
    if factor > 1:   # zooming out near an edge keeps the span and slides away from the edge
        middle = min(max(middle, window_ms[0] + half), window_ms[1] - half)
    set_zoom(middle - half, middle + half)


def zoom_to_selection(chart_key: str) -> None:
    boxes = st.session_state[chart_key].selection.get("box") or []
    xs = boxes[0].get("x") if boxes else None
    if xs and len(xs) >= 2:
        set_zoom(float(min(xs)), float(max(xs)))


left, right = st.columns([3, 1])
ranks = left.multiselect("Ranks", all_ranks, default=default_ranks, key=f"timeline_ranks-{source}-{t0}")
with right:
    include_python = st.checkbox("Python stacks", value=False, help="python_function events (can be many)")
    whatif_doc = state.whatif(run_id)
    show_path = st.checkbox(
        "Critical path", value=bool(((whatif_doc or {}).get("path") or {}).get("rank")),
        disabled=not ((whatif_doc or {}).get("path") or {}).get("rank"),
        help="A lane on top: where the replay's critical path runs, on the host (its calls and the CPU "
             "time between them) or on the GPU (ops, queued or waiting). Work off it could take longer "
             "without moving the step.")
    show_flows = st.checkbox(
        "Launch → GPU arrows", value=False,
        help=f"A line from each CPU launch call (cudaLaunchKernel, cudaMemcpyAsync, …) to the GPU work it "
             f"started, matched by correlation id, where both are in view; at most {queries.TIMELINE_MAX_FLOWS}. "
             f"On a large trace this takes a second or two.")
if not ranks:
    st.info("Pick at least one rank.")
    st.stop()

if window_ms[1] - window_ms[0] > 2 * slider_step:
    zoom_col, in_col, out_col, reset_col = st.columns([8, 1, 1, 1], vertical_alignment="bottom")
    st.session_state.setdefault(zoom_key, window_ms)
    zoom_col.slider("Visible span (ms into the trace)", window_ms[0], window_ms[1],
                    step=slider_step, format="%.3f", key=zoom_key,
                    help="Narrow it (or drag across the chart) to re-draw that span in detail: events shorter "
                         "than a pixel are merged into grey bars, so zooming in separates them.")
    in_col.button("", icon=":material/zoom_in:", help="Zoom in ×4 around the middle", on_click=zoom_by,
                  args=(0.25,), key=f"{zoom_key}-in", width="stretch")
    out_col.button("", icon=":material/zoom_out:", help="Zoom out ×4", on_click=zoom_by, args=(4.0,),
                   key=f"{zoom_key}-out", width="stretch")
    reset_col.button("", icon=":material/fit_screen:", help="Show the whole window", on_click=set_zoom,
                     args=window_ms, key=f"{zoom_key}-reset", width="stretch")
view_ms = st.session_state.get(zoom_key, window_ms)
# a slider end within half a step of the window's edge is that edge (ms floats lose the last ns)
v0 = t0 if view_ms[0] - window_ms[0] < slider_step / 2 else bounds[0] + round(view_ms[0] * 1e6)
v1 = t1 if window_ms[1] - view_ms[1] < slider_step / 2 else bounds[0] + round(view_ms[1] * 1e6)
v0, v1 = queries.clamp_window(v0, v1, (t0, t1))


@st.cache_data(show_spinner=False, max_entries=16)
def window_flows(path: str, run_id: str, t0_ns: int, t1_ns: int, ranks: tuple[int, ...]):
    return queries.timeline_flows(state.cur(), run_id, t0_ns, t1_ns, list(ranks))


bars = state.timeline_window(state.db_path(), run_id, v0, v1, tuple(sorted(ranks)), include_python)
path_bars = queries.whatif_path_bars(whatif_doc, v0, v1, ranks) if show_path and len(bars) else None
flows = window_flows(state.db_path(), run_id, v0, v1, tuple(sorted(ranks))) if show_flows and len(bars) else None
merged = bars[bars["kind"] == "merged"] if len(bars) else bars
pixel_us = (v1 - v0) * queries.TIMELINE_PIXEL_FRACTION / 1e3
st.caption(
    f"Window {to_ms(t0):,.3f}–{to_ms(t1):,.3f} ms into the trace ({(t1 - t0) / 1e6:,.3f} ms)"
    + (f", showing {to_ms(v0):,.3f}–{to_ms(v1):,.3f} ms ({(v1 - v0) / 1e6:,.3f} ms)" if (v0, v1) != (t0, t1) else "")
    + f" · {len(bars):,} bars drawn"
    + (f" · {int(merged['n_events'].sum()):,} events shorter than {pixel_us:,.2f} µs merged into "
       f"{len(merged):,} grey bars: zoom in to separate them" if len(merged) else " · every event its own bar")
    + (f" · {len(flows):,} launch arrows" if flows is not None else "")
    + (" · the critical path's lane on top" if path_bars is not None and len(path_bars) else "")
    + (". Shaded red: the finding's window." if highlights else "."))
if len(bars):
    chart_key = f"timeline-chart-{v0}-{v1}"
    # the path's all-empty columns left out: concat fills them, and pandas deprecates typing them from empties
    drawn = (pd.concat([path_bars.dropna(axis=1, how="all"), bars], ignore_index=True)
             if path_bars is not None and len(path_bars) else bars)
    st.plotly_chart(charts.timeline(drawn, v0, v1, bounds[0], highlights, flows), width="stretch", key=chart_key,
                    on_select=lambda: zoom_to_selection(chart_key), selection_mode="box",
                    config={"displayModeBar": False})
    st.caption("Drag across the chart to zoom into that span. Rows under a lane are nesting levels "
               f"(capped at {queries.TIMELINE_MAX_DEPTH}).")
    events = bars[bars["kind"] != "merged"]
    with st.expander(f"The {len(events):,} events drawn, longest first (full names)"):
        ui.table(   # trace names: csv-safe in the table's download
            events.assign(duration_ms=(events["end_ns"] - events["start_ns"]) / 1e6,
                          start_ms=(events["start_ns"] - bounds[0]) / 1e6)
            .sort_values("duration_ms", ascending=False)[["lane", "depth", "kind", "name", "start_ms", "duration_ms"]],
            column_config={"start_ms": st.column_config.NumberColumn("starts (ms into the trace)", format="%.4f"),
                           "duration_ms": st.column_config.NumberColumn("duration (ms)", format="%.4f")})
else:
    st.info("Nothing runs in this span on these ranks.")

# The export is built when the button is clicked, outside this script run and its thread: it takes
# a cursor of its own (sharing this session's cursor across threads hung the download).
store_lease = state.lease()


def export_chrome_trace() -> bytes | str:
    cursor = store_lease.acquire(wait_s=state.BUSY_WAIT_S)
    try:
        # a run deleted since the page was drawn: no empty trace; the download says it failed and
        # the rerun the click starts tells why (state.page_start)
        run_store.require_run(cursor, run_id)
        return queries.export_window_trace(cursor, run_id, v0, v1, sorted(ranks))
    finally:
        store_lease.release(cursor)


st.download_button(
    "Download this span as a Chrome trace (open it in ui.perfetto.dev)",
    data=export_chrome_trace,
    file_name=f"tracedoctor_{run_id[:8]}_{v0}_{v1}.json", mime="application/json", icon=":material/download:",
)
