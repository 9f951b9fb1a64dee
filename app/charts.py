"""Plotly figures for the pages. Drawing only: every number comes from analyzers.queries / metrics.

Plotly renders a subset of HTML in labels and hover text, and trace content (kernel names, pids)
is untrusted, so every string from a trace goes through `esc` before it reaches a figure.
"""
from __future__ import annotations

import html
from typing import Iterable

import pandas as pd
import plotly.graph_objects as go

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
}
LAYOUT = dict(margin=dict(l=10, r=10, t=40, b=10), legend=dict(orientation="h", y=-0.2), template="plotly_white")


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


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
                    hovertemplate="%{x}<br>" + name + ": %{y:.3f} ms<extra></extra>")
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
                           texttemplate="%{y:.1f}", textposition="outside", cliponaxis=False,
                           hovertemplate="%{x}: %{y:.3f} " + unit + "<extra></extra>"))
    fig.update_layout(title=title, yaxis_title=unit, height=300, **LAYOUT)
    if unit == "%":
        fig.update_yaxes(range=[0, 100])
    else:
        fig.update_yaxes(rangemode="tozero")
    return fig


def heatmap(frame: pd.DataFrame, column: str, title: str, colorscale: str = "Reds") -> go.Figure:
    """Rank x step heatmap of `column` (ms), colours from 0 ms; ranks as rows so a straggler is one
    bright row."""
    pivot = frame.assign(step_name=[step_label(s) for s in frame["step"]]).pivot_table(
        index="rank", columns="step_name", values=column, aggfunc="first", sort=False)
    fig = go.Figure(go.Heatmap(
        z=pivot.values, x=list(pivot.columns), y=[rank_label(r) for r in pivot.index], colorscale=colorscale,
        # from 0: a scale spanning only the data's range makes 2% noise look like a straggler
        zmin=0, zmax=float(pd.Series(pivot.values.ravel()).max(skipna=True) or 1.0),
        colorbar=dict(title="ms"), hovertemplate="%{y}, %{x}: %{z:.3f} ms<extra></extra>"))
    fig.update_layout(title=title, height=max(220, 60 + 28 * len(pivot.index)), **LAYOUT)
    fig.update_yaxes(autorange="reversed")
    return fig


def timeline(bars: pd.DataFrame, t0_ns: int, t1_ns: int,
             highlights: Iterable[tuple[int, int]] = ()) -> go.Figure:
    """Lanes (GPU streams, CPU threads) x time in ms from the window start; highlights shaded red."""
    fig = go.Figure()
    lanes = bars.drop_duplicates("lane_order").sort_values("lane_order")
    lane_names = [esc(l) for l in lanes["lane"]]
    for kind, group in bars.groupby("kind", sort=False):
        start_ms = (group["start_ns"] - t0_ns) / 1e6
        length_ms = (group["end_ns"] - group["start_ns"]) / 1e6
        hover = [f"{esc(n)}<br>{esc(k)} · {d:.3f} ms" for n, k, d in zip(group["name"], group["kind"], length_ms)]
        fig.add_bar(y=[esc(l) for l in group["lane"]], x=length_ms.clip(lower=(t1_ns - t0_ns) / 1e6 / 2000),
                    base=start_ms, orientation="h", name=esc(kind),
                    marker_color=KIND_COLORS.get(str(kind), "#607d8b"), marker_line_width=0,
                    hovertext=hover, hoverinfo="text")
    for start, end in highlights:
        fig.add_vrect(x0=(start - t0_ns) / 1e6, x1=(end - t0_ns) / 1e6, fillcolor="#e53935", opacity=0.12,
                      line_width=1, line_color="#e53935", layer="below")
    layout = {**LAYOUT, "legend": dict(orientation="h", y=1.02, yanchor="bottom", x=0)}
    fig.update_layout(barmode="overlay", height=max(260, 110 + 34 * len(lane_names)),
                      xaxis_title="ms from window start", **layout)
    fig.update_yaxes(categoryorder="array", categoryarray=lane_names[::-1])
    fig.update_xaxes(range=[0, (t1_ns - t0_ns) / 1e6])
    return fig


def compare_bars(kinds: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    names = [esc(k).replace("_", " ") for k in kinds["kind"]]
    fig.add_bar(x=names, y=kinds["before_ms"], name="before", marker_color="#90a4ae")
    fig.add_bar(x=names, y=kinds["after_ms"], name="after", marker_color="#2e7d32")
    fig.update_layout(barmode="group", title="Cost per finding kind (ms per step, one finding per cause)",
                      yaxis_title="ms per step", height=340, **LAYOUT)
    return fig


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
