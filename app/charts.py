"""Plotly figures for the pages. Drawing only: every number comes from analyzers.read.queries / metrics.

Plotly renders a subset of HTML in labels and hover text, and trace content (kernel names, pids)
is untrusted, so every string from a trace goes through `esc` before it reaches a figure.
"""
from __future__ import annotations

import html
from typing import Iterable

import pandas as pd
import plotly.graph_objects as go

from analyzers.common.safe_text import clip, html_text

PART_COLORS = {
    "compute_ms": ("compute", "#2e7d32"),
    "comm_exposed_ms": ("communication (exposed)", "#ef6c00"),
    "memory_ms": ("memory copies / sets", "#1565c0"),
    "idle_ms": ("GPU idle", "#9e9e9e"),
}
KIND_COLORS = {
    "kernel": "#2e7d32", "memcpy": "#1565c0", "memset": "#42a5f5", "gpu_user_annotation": "#b39ddb",
    "cuda_sync": "#c62828", "runtime": "#8d6e63", "driver": "#a1887f", "cpu_op": "#78909c",
    "user_annotation": "#cfd8dc", "python_function": "#ffe082", "merged": "#bdbdbd", "communication": "#ef6c00",
    "critical path: host": "#6a1b9a", "critical path: GPU": "#d81b60",
}
LAYOUT = dict(margin=dict(l=10, r=10, t=40, b=10), legend=dict(orientation="h", y=-0.2), template="plotly_white")


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def wrap(text: str, width: int = 24) -> str:
    """Text broken onto lines of about `width` characters with <br> (axis labels; already escaped)."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "<br>".join(lines + [line])


def rank_label(rank: object) -> str:
    return f"rank {rank}"


def step_label(step: object) -> str:
    return "whole trace" if step is None or pd.isna(step) else f"step {int(step)}"


def breakdown_bars(frame: pd.DataFrame, title: str, category_col: str = "rank",
                   labels: Iterable[str] | None = None) -> go.Figure:
    """Stacked bars, one per row of frame: compute / exposed comm / memory / idle (ms per step)."""
    x = list(labels) if labels is not None else [rank_label(r) for r in frame[category_col]]
    fig = go.Figure()
    for column, (name, color) in PART_COLORS.items():
        fig.add_bar(x=x, y=frame[column], name=name, marker_color=color,
                    hovertemplate="%{x}<br>" + name + ": %{y:.2f} ms<extra></extra>")
    fig.update_layout(barmode="stack", title=title, yaxis_title="ms per step", height=360, **LAYOUT)
    return fig


def per_step_bars(frame: pd.DataFrame, column: str, title: str, highlight_step: int | None = None,
                  color: str = "#ef6c00") -> go.Figure:
    """One bar per step of one rank's `column` (ms); the finding's step drawn darker."""
    labels = [step_label(s) for s in frame["step"]]
    colors = ["#b71c1c" if highlight_step is not None and s == highlight_step else color for s in frame["step"]]
    fig = go.Figure(go.Bar(x=labels, y=frame[column], marker_color=colors,
                           hovertemplate="%{x}: %{y:.3f} ms<extra></extra>"))
    fig.update_layout(title=title, yaxis_title="ms", height=300, **LAYOUT)
    return fig


def per_rank_bars(values: pd.Series, ranks: pd.Series, title: str, unit: str = "ms",
                  highlight_rank: int | None = None, labels: list[str] | None = None) -> go.Figure:
    """One bar per rank (or per labelled category when labels are given)."""
    colors = ["#b71c1c" if highlight_rank is not None and r == highlight_rank else "#546e7a" for r in ranks]
    fig = go.Figure(go.Bar(x=[esc(x) for x in labels] if labels else [rank_label(r) for r in ranks], y=values,
                           marker_color=colors,
                           texttemplate="%{y:.2f}" if unit == "ms" else "%{y:.1f}", textposition="outside", cliponaxis=False,
                           hovertemplate="%{x}: %{y:.3f} " + unit + "<extra></extra>"))
    fig.update_layout(title=title, yaxis_title=unit, height=300, **LAYOUT)
    if unit == "%":
        fig.update_yaxes(range=[0, 100])
    else:
        fig.update_yaxes(rangemode="tozero")
    return fig


# Heatmaps print each cell's value when they have at most this many cells (beyond, the text is unreadable).
HEATMAP_MAX_LABELLED_CELLS = 240


def heatmap(frame: pd.DataFrame, column: str, title: str, colorscale: str = "Reds") -> go.Figure:
    """Rank x step heatmap of `column` (ms), colours from 0 ms; ranks as rows so a straggler is one
    bright row; small grids print each value, so equal ranks read as equal numbers."""
    pivot = frame.assign(step_name=[step_label(s) for s in frame["step"]]).pivot_table(
        index="rank", columns="step_name", values=column, aggfunc="first", sort=False)
    fig = go.Figure(go.Heatmap(
        z=pivot.values, x=list(pivot.columns), y=[rank_label(r) for r in pivot.index], colorscale=colorscale,
        # from 0: a scale spanning only the data's range makes 2% noise look like a straggler
        zmin=0, zmax=float(pd.Series(pivot.values.ravel()).max(skipna=True) or 1.0),
        colorbar=dict(title="ms"), hovertemplate="%{y}, %{x}: %{z:.2f} ms<extra></extra>",
        texttemplate="%{z:.2f}" if pivot.size <= HEATMAP_MAX_LABELLED_CELLS else None))
    fig.update_layout(title=title, height=max(220, 60 + 28 * len(pivot.index)), **LAYOUT)
    fig.update_yaxes(autorange="reversed")
    return fig


# Hover text shows this much of a trace name: a C++ kernel name runs to thousands of characters,
# wider than the chart; the full name is in the page's table of the window's events.
HOVER_NAME_LIMIT = 120
TIMELINE_ROW_PX = 22   # one nesting level of one lane
# A timeline bar at least this share of the window wide shows its name inside (clipped to this many
# characters; Plotly hides a label the bar cannot hold at 8 px).
TIMELINE_LABEL_MIN_FRACTION = 0.04
TIMELINE_LABEL_CHARS = 60


def collapse_templates(name: str) -> str:
    """name with every outermost template argument list shown as <...>
    ("void gemm<float, 128, Epilogue<...>>(int)" -> "void gemm<...>(int)"); unbalanced brackets
    (operator<, operator<<) leave it as it is."""
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            if depth == 0:
                out.append("<...")
            depth += 1
        elif ch == ">" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(">")
        elif depth == 0:
            out.append(ch)
    return name if depth else "".join(out)


def short_name(name: object, limit: int = HOVER_NAME_LIMIT) -> str:
    """A trace name for hover text: templates collapsed when it is too long, clipped to limit
    characters, HTML-escaped (controls and bidi overrides shown escaped)."""
    text = str(name)
    if len(text) > limit:
        text = collapse_templates(text)
    return html_text(clip(text, limit))


def timeline(bars: pd.DataFrame, t0_ns: int, t1_ns: int, origin_ns: int,
             highlights: Iterable[tuple[int, int]] = (), flows: pd.DataFrame | None = None) -> go.Figure:
    """Lanes (GPU streams, CPU threads), each with a sub-row per nesting depth, x time in ms into
    the trace (origin_ns = the trace's first event) over [t0_ns, t1_ns); highlights shaded red;
    flows (queries.timeline_flows) drawn as lines from the launch call to the GPU work it started."""
    fig = go.Figure()
    lanes = bars.groupby("lane_order", sort=True).agg(lane=("lane", "first"), rows=("depth", "max"),
                                                      rank=("rank", "first"), is_gpu=("is_gpu", "first"),
                                                      pid=("pid", "first"), tid=("tid", "first"))
    lanes["rows"] = lanes["rows"].astype(int) + 1
    lanes["first_row"] = lanes["rows"].cumsum() - lanes["rows"]
    n_rows = int(lanes["rows"].sum())
    rows = bars["lane_order"].map(lanes["first_row"]) + bars["depth"]
    to_ms = lambda ns: (ns - origin_ns) / 1e6   # noqa: E731
    min_width_ms = (t1_ns - t0_ns) / 1e6 / 2000   # a 1 ns kernel still shows as a sliver
    for kind, group in bars.groupby("kind", sort=False):
        length_ms = (group["end_ns"] - group["start_ns"]) / 1e6
        hover = [f"<b>{short_name(n)}</b><br>{esc(k)} · {d:,.4f} ms · at {s:,.4f} ms"
                 + (f" · depth {int(dp)}" if dp else "")
                 for n, k, d, s, dp in zip(group["name"], group["kind"], length_ms, to_ms(group["start_ns"]),
                                           group["depth"])]
        # a bar wide enough to read carries its name inside (one op filling the view says what it is)
        labels = [short_name(n, TIMELINE_LABEL_CHARS) if d >= TIMELINE_LABEL_MIN_FRACTION * (t1_ns - t0_ns) / 1e6 else ""
                  for n, d in zip(group["name"], length_ms)]
        fig.add_bar(y=rows[group.index], x=length_ms.clip(lower=min_width_ms), base=to_ms(group["start_ns"]),
                    orientation="h", width=0.8, name=esc(kind), marker_color=KIND_COLORS.get(str(kind), "#607d8b"),
                    marker_line_width=0, hovertext=hover, hoverinfo="text", text=labels, textposition="inside",
                    insidetextanchor="start", textfont=dict(size=11, color="white"), constraintext="inside")
    if flows is not None and len(flows):
        _add_flows(fig, bars, rows, lanes, flows, to_ms)
    # every other lane banded (drawn before the highlights, so they show over it)
    for i, (first_row, n) in enumerate(zip(lanes["first_row"], lanes["rows"])):
        if i % 2:
            fig.add_hrect(y0=first_row - 0.5, y1=first_row + n - 0.5, fillcolor="#f4f6f8", line_width=0, layer="below")
    for start, end in highlights:
        fig.add_vrect(x0=to_ms(start), x1=to_ms(end), fillcolor="#e53935", opacity=0.10,
                      line_width=1, line_color="#e53935", layer="below")
    layout = {**LAYOUT, "legend": dict(orientation="h", y=1.0, yanchor="bottom", x=0)}
    fig.update_layout(barmode="overlay", height=max(300, 130 + TIMELINE_ROW_PX * n_rows), bargap=0,
                      uniformtext=dict(minsize=8, mode="hide"),   # a label that does not fit is left out
                      xaxis_title="ms into the trace", dragmode="select", selectdirection="h",
                      hoverlabel=dict(align="left"), **layout)
    fig.update_yaxes(tickmode="array", tickvals=lanes["first_row"].tolist(),
                     ticktext=[esc(clip(lane, 60)) for lane in lanes["lane"]],
                     range=[n_rows - 0.5, -0.5], showgrid=False, zeroline=False, fixedrange=True)
    fig.update_xaxes(range=[to_ms(t0_ns), to_ms(t1_ns)], tickformat=",.3~f", showspikes=True,
                     spikemode="across", spikethickness=1, spikecolor="#9e9e9e")
    return fig


def _add_flows(fig: go.Figure, bars: pd.DataFrame, rows: pd.Series, lanes: pd.DataFrame,
               flows: pd.DataFrame, to_ms) -> None:
    """One line per launch -> GPU work pair whose two lanes are drawn: from the deepest bar of the
    launching thread under the call's start to the deepest bar of the stream under the work's start."""
    def row_at(rank, is_gpu, pid, tid, t_ns):
        lane = lanes[(lanes["rank"] == rank) & (lanes["is_gpu"] == is_gpu) & (lanes["tid"] == tid)
                     & ((lanes["pid"] == pid) if pid is not None else True)]
        if lane.empty:
            return None
        order = lane.index[0]
        under = bars[(bars["lane_order"] == order) & (bars["start_ns"] <= t_ns) & (bars["end_ns"] >= t_ns)]
        return float(rows[under["depth"].idxmax()]) if len(under) else float(lane["first_row"].iloc[0])

    xs, ys, hover = [], [], []
    for f in flows.itertuples(index=False):
        cpu_row = row_at(f.rank, False, None, str(f.launch_tid), f.launch_start_ns)
        gpu_row = row_at(f.rank, True, str(f.device), str(f.stream), f.gpu_start_ns)
        if cpu_row is None or gpu_row is None:
            continue
        xs += [to_ms(f.launch_start_ns), to_ms(f.gpu_start_ns), None]
        ys += [cpu_row, gpu_row, None]
        text = f"{short_name(f.launch_name)} → {short_name(f.gpu_name)}"
        hover += [text, text, None]
    if xs:
        fig.add_scatter(x=xs, y=ys, mode="lines+markers", name="launch → GPU", hovertext=hover, hoverinfo="text",
                        line=dict(color="#37474f", width=1), marker=dict(size=4, color="#37474f"),
                        opacity=0.7)


def before_after_bars(names: list[str], frame: pd.DataFrame, title: str, digits: int = 2,
                      row_px: int = 56) -> go.Figure:
    """Before / after ms per step (frame's before_ms, after_ms) as horizontal bar pairs, one per name."""
    fig = go.Figure()
    for column, name, color in (("before_ms", "before", "#90a4ae"), ("after_ms", "after", "#2e7d32")):
        fig.add_bar(y=names, x=frame[column], name=name, marker_color=color, orientation="h",
                    texttemplate=f"%{{x:.{digits}f}}", textposition="outside", cliponaxis=False,
                    hovertemplate="%{y}<br>" + name + f": %{{x:.{digits}f}} ms/step<extra></extra>")
    # room on the right for the value printed past the longest bar
    layout = {**LAYOUT, "margin": dict(LAYOUT["margin"], r=50)}
    fig.update_layout(barmode="group", title=title, height=max(300, 140 + row_px * len(names)), **layout)
    fig.update_yaxes(autorange="reversed", automargin=True)
    return fig


def family_bars(diff: pd.DataFrame) -> go.Figure:
    """Before / after GPU time per step of each kernel category (queries.operator_diff 'families')."""
    return before_after_bars([esc(n) for n in diff["name"]], diff, "GPU time per step by kernel category (ms)",
                             digits=3, row_px=44)


def compare_bars(kinds: pd.DataFrame, titles: Iterable[str] | None = None) -> go.Figure:
    """Before / after cost per finding kind as horizontal bar pairs, labelled with the kinds' titles."""
    names = [wrap(esc(t)) for t in titles] if titles is not None else [esc(k).replace("_", " ") for k in kinds["kind"]]
    return before_after_bars(names, kinds, "Cost per finding kind (ms per step, one finding per cause)")


def metric_series(metrics: dict) -> list[tuple[str, dict[str, float]]]:
    """The metrics that are per-step or per-rank series ({"12": 3.4, ...}, all numbers), to chart."""
    series = []
    for key, value in (metrics or {}).items():
        if isinstance(value, dict) and 1 < len(value) <= 500 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values()):
            series.append((str(key), {str(k): float(v) for k, v in value.items()}))
    return series


def metric_bars(key: str, series: dict[str, float]) -> go.Figure:
    """A bar per entry of one metrics series; the axis named after the key (by_step / by_rank)."""
    prefix = "step " if "step" in key.split("by_")[-1] else "rank " if "rank" in key.split("by_")[-1] else ""
    labels = [esc(prefix + k) for k in series]
    unit = "ms" if "_ms" in key else ""
    fig = go.Figure(go.Bar(x=labels, y=list(series.values()), marker_color="#546e7a",
                           hovertemplate="%{x}: %{y:.3f} " + unit + "<extra></extra>"))
    fig.update_layout(title=esc(key.replace("_", " ")), yaxis_title=unit, height=260, **LAYOUT)
    fig.update_xaxes(type="category")
    return fig


def whatif_waterfall(rows: list[dict], titles: dict[str, str]) -> go.Figure:
    """The step now, each fix's saving in the greedy order (fixes applied together), the step after all."""
    labels = [wrap(esc(titles.get(r["label"], r["label"]))) for r in rows[1:]]
    measures = ["absolute"] + ["relative"] * len(labels) + ["total"]
    x = ["step now"] + labels + ["after all fixes"]
    y = [rows[0]["step_ms"]] + [-r["saving_ms"] for r in rows[1:]] + [0]
    text = [f"{rows[0]['step_ms']:.1f}"] + [f"-{r['saving_ms']:.1f}" for r in rows[1:]] + [f"{rows[-1]['step_ms']:.1f}"]
    fig = go.Figure(go.Waterfall(x=x, y=y, measure=measures, text=text, textposition="outside",
                                 decreasing=dict(marker_color="#2e7d32"), totals=dict(marker_color="#1565c0"),
                                 increasing=dict(marker_color="#c62828"), cliponaxis=False,
                                 hovertemplate="%{x}: %{y:.2f} ms<extra></extra>"))
    fig.update_layout(title="Predicted step time, fixing in this order (ms, replayed)", showlegend=False,
                      height=360, **LAYOUT)
    return fig


PATH_COLORS = {
    "cpu": "#78909c", "launch": "#8d6e63", "runtime_stall": "#6d4c41", "sync": "#c62828", "copy": "#1565c0",
    "loader": "#f9a825", "comm_wait": "#ef6c00", "launch_latency": "#bcaaa4", "gpu_queue": "#cfd8dc",
    "gpu_compute": "#2e7d32", "gpu_comm": "#ff9800", "gpu_memory": "#42a5f5", "collective_wait": "#e65100",
}
PATH_LABELS = {
    "cpu": "CPU work", "launch": "runtime calls", "runtime_stall": "slow runtime calls", "sync": "sync overhead",
    "copy": "blocking copies", "loader": "DataLoader wait", "comm_wait": "waiting in collectives (CPU)",
    "launch_latency": "launch latency", "gpu_queue": "GPU queue gaps", "gpu_compute": "GPU compute",
    "gpu_comm": "GPU communication", "gpu_memory": "GPU copies", "collective_wait": "waiting for other ranks",
}


def critical_path_bar(path_ms: dict[str, float]) -> go.Figure:
    """What the step's critical path is made of (ms per step), one stacked bar."""
    fig = go.Figure()
    for key, value in path_ms.items():
        fig.add_bar(y=["critical path"], x=[value], name=PATH_LABELS.get(key, esc(key)), orientation="h",
                    marker_color=PATH_COLORS.get(key, "#9e9e9e"),
                    hovertemplate=PATH_LABELS.get(key, esc(key)) + ": %{x:.2f} ms/step<extra></extra>")
    fig.update_layout(barmode="stack", title="The step's critical path (ms per step, replayed)", height=220,
                      **LAYOUT)
    return fig
