"""Timeline: GPU streams and CPU threads around a finding's window (or a step), with the finding's
intervals highlighted, and the window exported as a small Chrome trace for Perfetto.

Only the window is queried; bars shorter than a pixel are merged and the rest capped
(analyzers.queries.timeline_window), so this stays quick on a 1 GB trace.
"""
from __future__ import annotations

from typing import Any

import streamlit as st

from analyzers import queries
from analyzers import runs as run_store
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
    start_ms = left.number_input("From (ms after the first event)", 0.0, span_ms, 0.0, format="%.3f")
    end_ms = right.number_input("To (ms)", 0.0, span_ms, min(span_ms, 50.0), format="%.3f")
    if end_ms <= start_ms:
        st.warning("The window's end must come after its start.")
        st.stop()
    t0, t1 = bounds[0] + int(start_ms * 1e6), bounds[0] + int(end_ms * 1e6)

left, right = st.columns([3, 1])
ranks = left.multiselect("Ranks", all_ranks, default=default_ranks, key=f"timeline_ranks-{source}-{t0}")
include_python = right.checkbox("Python stacks", value=False, help="python_function events (can be many)")
if not ranks:
    st.info("Pick at least one rank.")
    st.stop()

bars = state.timeline_window(state.db_path(), run_id, int(t0), int(t1), tuple(sorted(ranks)), include_python)
st.caption(f"Window {(t0 - bounds[0]) / 1e6:,.3f}–{(t1 - bounds[0]) / 1e6:,.3f} ms into the trace "
           f"({(t1 - t0) / 1e6:,.3f} ms) · {len(bars)} bars drawn, "
           f"{int(bars.loc[bars['kind'] == 'merged', 'n_events'].sum()) if len(bars) else 0} short events merged "
           f"into grey bars." + (" Shaded red: the finding's window." if highlights else ""))
if len(bars):
    st.plotly_chart(charts.timeline(bars, int(t0), int(t1), highlights), width="stretch", key="timeline-chart")
else:
    st.info("Nothing runs in this window on these ranks.")

# The export is built when the button is clicked, outside this script run and its thread: it takes
# a cursor of its own (sharing this session's cursor across threads hung the download).
store_lease = state.lease()


def export_chrome_trace() -> bytes | str:
    cursor = store_lease.acquire(wait_s=state.BUSY_WAIT_S)
    try:
        # a run deleted since the page was drawn: no empty trace; the download says it failed and
        # the rerun the click starts tells why (state.page_start)
        run_store.require_run(cursor, run_id)
        return queries.export_window_trace(cursor, run_id, int(t0), int(t1), sorted(ranks))
    finally:
        store_lease.release(cursor)


st.download_button(
    "Download this window as a Chrome trace (open it in ui.perfetto.dev)",
    data=export_chrome_trace,
    file_name=f"tracedoctor_{run_id[:8]}_{int(t0)}_{int(t1)}.json", mime="application/json", icon=":material/download:",
)
