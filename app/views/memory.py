"""Memory: allocated and reserved over time per rank and device with step boundaries and each
step's peak; at the peak, the live allocations by the op that made them and by category (inferred
from where each was allocated); the per-op table (what
the TensorBoard plugin's Memory view showed); allocator snapshots (segments and blocks,
fragmentation, the stack frames of the largest live blocks, the allocation that failed at OOM);
export_memory_timeline categories. Every figure comes from analyzers.read.memory_queries over
sql/lib/memory.sql; this page only picks and draws.
"""
from __future__ import annotations

import json

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from analyzers.read import memory_queries as mq
from analyzers.common.safe_text import clip
from app import state, ui

MIB = float(1 << 20)
CATEGORY_NAMES = {"optimizer_state": "optimizer state", "gradient": "gradients",
                  "backward_temporary": "backward temporaries", "activation": "activations",
                  "parameter_or_input": "parameters / inputs", "unknown": "unknown"}
CATEGORY_COLORS = {"optimizer_state": "#9467bd", "gradient": "#d62728", "backward_temporary": "#ff7f0e",
                   "activation": "#1f77b4", "parameter_or_input": "#2ca02c"}

st.title("Memory")
run_id = ui.need_run()
if run_id is None:
    st.stop()


@st.cache_data(show_spinner="Reading this run's memory…", max_entries=64)
def _read(path: str, version: str, what: str, run: str, *args) -> pd.DataFrame:
    """Keyed by store, code version and what is asked."""
    return pd.DataFrame(getattr(mq, what)(state.cur(), run, *args))


def read(what: str, *args) -> pd.DataFrame:
    return _read(state.db_path(), state.code_version(), what, run_id, *args)


for finding in state.findings(run_id):
    if finding["metrics"].get("cost_bytes") is not None:
        pct = finding["metrics"].get("cost_pct_of_device_memory")
        st.warning(f"**{ui.kind_title(finding['kind'])}** — {ui.md(finding['summary'])} "
                   f"({ui.human_bytes(finding['metrics']['cost_bytes'])}"
                   + (f", {pct:.1f} % of the device's memory" if pct is not None else "") + ")")

devices = read("device_summaries")
snapshots = read("snapshot_summaries")
timeline = read("timeline_categories")
if not len(devices) and not len(snapshots) and not len(timeline):
    st.info("This run carries no memory data. Profile with `profile_memory=True` (and `record_shapes=True`) for "
            "allocated/reserved over time, and load an allocator snapshot (`torch.cuda.memory._dump_snapshot()`) "
            "beside the traces for segments, blocks and fragmentation.")
    st.stop()

if len(devices):
    st.subheader("Allocated and reserved over time")
    choices = [(int(r.rank), r.device) for r in devices.itertuples()]
    rank, device = st.selectbox("Rank and device", choices, format_func=lambda c: f"rank {c[0]} · {c[1]}")
    row = devices[(devices["rank"] == rank) & (devices["device"] == device)].iloc[0]
    total = row["device_total_bytes"]
    tiles = st.columns(4)
    tiles[0].metric("Peak allocated", ui.human_bytes(row["peak_allocated_bytes"]))
    tiles[1].metric("Peak reserved", ui.human_bytes(row["peak_reserved_bytes"]) if row["peak_reserved_bytes"] else "–")
    tiles[2].metric("Device memory", ui.human_bytes(total) if pd.notna(total) and total else "not in the trace")
    tiles[3].metric("Allocations / frees", f"{int(row['allocations']):,} / {int(row['frees']):,}")

    curve = read("memory_curve")
    curve = curve[(curve["rank"] == rank) & (curve["device"] == device)]
    steps = read("memory_steps")
    steps = steps[(steps["rank"] == rank) & (steps["device"] == device)] if len(steps) else steps
    origin = int(curve["ts_ns"].min()) if len(curve) else 0
    fig = go.Figure()
    fig.add_scatter(x=(curve["ts_ns"] - origin) / 1e6, y=curve["allocated_bytes"] / MIB, name="allocated",
                    mode="lines", line={"shape": "hv", "color": "#1f77b4"})
    if curve["reserved_bytes"].max() > 0:
        fig.add_scatter(x=(curve["ts_ns"] - origin) / 1e6, y=curve["reserved_bytes"] / MIB, name="reserved",
                        mode="lines", line={"shape": "hv", "color": "#ff7f0e"})
    for s in steps.itertuples():
        fig.add_vline(x=(s.start_ns - origin) / 1e6, line={"width": 1, "dash": "dot", "color": "grey"})
        if pd.notna(s.peak_ts_ns):
            fig.add_scatter(x=[(s.peak_ts_ns - origin) / 1e6], y=[s.peak_allocated_bytes / MIB], mode="markers+text",
                            marker={"color": "crimson", "size": 8}, text=[f"step {s.step}"], textposition="top center",
                            showlegend=False, hovertemplate=f"step {s.step} peak: %{{y:,.1f}} MiB<extra></extra>")
    fig.update_layout(height=380, margin={"t": 30, "b": 40}, xaxis_title="ms into the trace", yaxis_title="MiB",
                      legend={"orientation": "h", "y": 1.1})
    st.plotly_chart(fig, width="stretch", key="memory-curve")
    st.caption("Dotted lines: step starts; red dots: each step's peak of allocated. Each point is the highest value "
               "in its slice of time, so no peak is lost however many events the trace holds."
               + (" On CPU, allocated counts what was allocated since the trace began." if device == "cpu" else ""))
    if len(steps):
        ui.table(steps[["step", "start_allocated_bytes", "peak_allocated_bytes", "end_allocated_bytes",
                        "peak_reserved_bytes", "reserved_changes", "events"]],
                 bytes_columns=("start_allocated_bytes", "peak_allocated_bytes", "end_allocated_bytes",
                                "peak_reserved_bytes"), hide_index=True)

    st.subheader("Held at the peak, by the op that allocated it")
    live = read("live_at_peak", rank, device)
    if len(live):
        live = live.assign(op=live["op"].map(clip))
        bars = go.Figure(go.Bar(x=live["bytes"].head(15) / MIB, y=live["op"].head(15), orientation="h",
                                marker_color="#1f77b4"))
        bars.update_layout(height=60 + 24 * min(len(live), 15), margin={"t": 10, "b": 30}, xaxis_title="MiB",
                           yaxis={"autorange": "reversed"})
        st.plotly_chart(bars, width="stretch", key="memory-live")
        ui.table(live, bytes_columns=("bytes", "largest_bytes"), hide_index=True)
        st.caption("An allocation is matched to its free by address; its op is the innermost op running on the "
                   "thread that allocated it.")
    else:
        st.caption("Nothing allocated inside the trace is held at the peak.")

    by_category, by_op = st.columns([2, 3])
    with by_category:
        st.subheader("Held at the peak, by category")
        categories = read("categories_at_peak", rank, device)
        if len(categories):
            shown = categories.assign(category=categories["category"].map(CATEGORY_NAMES).fillna(categories["category"]))
            bars = go.Figure(go.Bar(x=shown["bytes"] / MIB, y=shown["category"], orientation="h",
                                    marker_color=[CATEGORY_COLORS.get(c, "#7f7f7f") for c in categories["category"]]))
            bars.update_layout(height=60 + 30 * len(shown), margin={"t": 10, "b": 30}, xaxis_title="MiB",
                               yaxis={"autorange": "reversed"})
            st.plotly_chart(bars, width="stretch", key="memory-categories-at-peak")
            ui.table(shown[["category", "allocations", "bytes", "largest_bytes"]],
                     bytes_columns=("bytes", "largest_bytes"), hide_index=True)
            st.caption("Inferred from where each allocation was made (the profiler records no category): inside "
                       "Optimizer.step, optimizer state; in the backward, a gradient if still held when the "
                       "backward ends, else a backward temporary; earlier in a step, an activation; before the "
                       "first step, parameters or inputs.")
        else:
            st.caption("Nothing allocated inside the trace is held at the peak.")
    with by_op:
        st.subheader("Memory by op")
        ops = read("op_stats", rank)
        ops = ops[ops["device"] == device]
        ui.table(ops.drop(columns=["rank", "device"]).assign(op=ops["op"].map(clip)),
                 bytes_columns=("self_allocated_bytes", "self_freed_bytes", "total_allocated_bytes",
                                "total_freed_bytes", "self_net_bytes", "peak_bytes"), hide_index=True)
        st.caption("self: allocations and frees made by the op itself; total: by the op and the ops it called. "
                   "peak: of the op's own allocations, what is held at the device's peak.")

if len(timeline):
    st.subheader("By category (export_memory_timeline)")
    for (rank, name), part in timeline.groupby(["rank", "file_name"]):
        st.caption(f"rank {rank} · {clip(name)} · at its peak of {ui.human_bytes(part['peak_total_bytes'].iloc[0])}")
        pie = go.Figure(go.Bar(x=part["category"], y=part["bytes"] / MIB, marker_color="#2ca02c"))
        pie.update_layout(height=260, margin={"t": 10, "b": 30}, yaxis_title="MiB")
        st.plotly_chart(pie, width="stretch", key=f"memory-categories-{rank}-{name}")

if len(snapshots):
    st.subheader("Allocator snapshots")
    ui.table(snapshots.drop(columns=["snapshot_id"]),
             bytes_columns=("allocated_bytes", "reserved_bytes", "fragmentation_bytes", "inactive_bytes",
                            "largest_free_block_bytes", "oom_requested_bytes", "oom_device_free_bytes"), hide_index=True)
    chosen = st.selectbox("Snapshot", list(snapshots.itertuples()),
                          format_func=lambda s: f"{clip(s.file)} (rank {s.rank})")
    cols = st.columns(4)
    cols[0].metric("Reserved", ui.human_bytes(chosen.reserved_bytes))
    cols[1].metric("Allocated", ui.human_bytes(chosen.allocated_bytes))
    cols[2].metric("Reserved − allocated", ui.human_bytes(chosen.fragmentation_bytes),
                   f"{chosen.fragmentation_pct:.0f}% of reserved" if pd.notna(chosen.fragmentation_pct) else None,
                   delta_color="off")
    cols[3].metric("Largest free block", ui.human_bytes(chosen.largest_free_block_bytes))
    oom = mq.snapshot_oom(state.cur(), run_id, int(chosen.snapshot_id))
    if oom:
        st.error(f"Out of memory: an allocation of {ui.human_bytes(oom['requested_bytes'])} failed with "
                 f"{ui.human_bytes(oom['device_free_bytes'])} free on device {oom['device']}.")
        frames = json.loads(oom["frames"]) if oom["frames"] else []
        if frames:
            st.code("\n".join(clip(f"{f.get('filename')}:{f.get('line')} {f.get('name')}") for f in frames[:20]),
                    language="text")
    blocks = read("snapshot_blocks", int(chosen.snapshot_id))
    if len(blocks):
        colors = {"active_allocated": "#1f77b4", "inactive": "#d9d9d9", "active_pending_free": "#ff7f0e"}
        segs = read("snapshot_segments", int(chosen.snapshot_id))
        order = {int(s): i for i, s in enumerate(segs["segment_index"])}
        blocks = blocks.assign(offset=blocks.groupby("segment_index")["size"].cumsum() - blocks["size"])
        seg_map = go.Figure()
        for state_name, part in blocks.groupby("state"):
            seg_map.add_bar(y=[f"segment {int(s)}" for s in part["segment_index"]], x=part["size"] / MIB,
                            base=part["offset"] / MIB, orientation="h", name=state_name,
                            marker_color=colors.get(state_name, "#9467bd"),
                            hovertemplate="%{x:,.2f} MiB at %{base:,.2f} MiB<extra>" + state_name + "</extra>")
        seg_map.update_layout(height=80 + 26 * min(len(order), 30), barmode="overlay", margin={"t": 10, "b": 30},
                              xaxis_title="MiB into the segment", legend={"orientation": "h", "y": 1.08})
        st.plotly_chart(seg_map, width="stretch", key="memory-segments")
        st.caption("Each segment is memory the allocator reserved; blue blocks are allocated, grey ones free "
                   "(cached): free blocks too small for the next request are fragmentation.")
        ui.table(segs, bytes_columns=("total_size", "allocated_bytes", "free_bytes", "largest_free_bytes"),
                 hide_index=True)
    st.markdown("**Largest live blocks and where they were allocated**")
    for b in mq.largest_live_blocks(state.cur(), run_id, int(chosen.snapshot_id), limit=5):
        frames = json.loads(b["frames"]) if b["frames"] else []
        where = "\n".join(clip(f"{f.get('filename')}:{f.get('line')} {f.get('name')}") for f in frames[:12])
        with st.expander(f"{ui.human_bytes(b['size'])} in segment {b['segment_index']}"):
            st.code(where or "(no stack frames: record them with torch.cuda.memory._record_memory_history())",
                    language="text")
