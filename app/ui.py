"""Small presentation helpers shared by the pages (text only; no numbers computed here)."""
from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from analyzers.common.contract import where_text
from analyzers.analysis.kinds import analysis_specs
from analyzers.store.runs import MARK_LABELS   # one naming of review marks for the pages and the reports
from analyzers.common.safe_text import csv_cell, page_markdown
from analyzers.common import units
from app import auth, state

KIND_TITLES = {kind: spec.title for kind, spec in analysis_specs().items()}   # declared by each analysis
SEVERITY_BADGES = {"high": ":red-badge[high]", "medium": ":orange-badge[medium]", "low": ":gray-badge[low]"}


def severity(value: str) -> str:
    """A colored Markdown badge for a severity (unknown values escaped)."""
    return SEVERITY_BADGES.get(value, md(value))

md = page_markdown   # trace text made inert for st.markdown (analyzers.common.safe_text)


def _csv_safe_value(value: Any) -> Any:
    if isinstance(value, (list, tuple)):   # a list cell (tags, ranks) is written joined: each item checked
        return [csv_cell(item) for item in value]
    return csv_cell(value)


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with every text cell a spreadsheet would run as a formula (= + - @ tab CR at its
    start) shown with a leading ', as analyzers.common.safe_text.csv_cell writes it: object, string and
    category columns and the items of list cells; numbers pass unchanged."""
    safe = frame.copy()
    for column in safe.columns:
        dtype = safe[column].dtype
        if dtype == object or pd.api.types.is_string_dtype(dtype) or isinstance(dtype, pd.CategoricalDtype):
            safe[column] = safe[column].astype(object).map(_csv_safe_value)
    return safe


def human_bytes(value: Any) -> str:
    """597688320 -> '570.0 MiB' (binary units); '' for a missing size."""
    return units.human_bytes(None if pd.isna(value) else value, decimals=1, missing="")


def table(frame: pd.DataFrame, bytes_columns: tuple[str, ...] = (), **kwargs: Any) -> None:
    """Every table the pages show: st.dataframe of the frame made csv_safe, since its toolbar's
    "Download as CSV" writes the cells (a run named `=HYPERLINK(..)` reads `'=HYPERLINK(..)`).
    bytes_columns are shown in binary units ("570.0 MiB") and still sort by their numbers; numeric
    columns named *_pct with one decimal ("59.7")."""
    safe = csv_safe(frame)
    formats: dict[str, Any] = {c: human_bytes for c in bytes_columns if c in safe.columns}
    formats.update({c: _one_decimal for c in safe.columns
                    if isinstance(c, str) and c.endswith("_pct") and pd.api.types.is_float_dtype(safe[c])})
    shown = safe.style.format(formats) if formats else safe
    st.dataframe(shown, **{"hide_index": True, "width": "stretch", **kwargs})


def _one_decimal(value: Any) -> str:
    return "" if pd.isna(value) else f"{value:.1f}"


def cost_words(finding: dict[str, Any]) -> tuple[str, str]:
    """A finding's cost and its share, in words: "1.23 ms/step", "5.0 % of step"; a memory finding
    (metrics.cost_bytes) costs bytes: "32.0 MiB", "12.5 % of device memory" (or "memory")."""
    metrics = finding.get("metrics") or {}
    if metrics.get("cost_bytes") is not None:
        pct = metrics.get("cost_pct_of_device_memory")
        return human_bytes(metrics["cost_bytes"]), ("memory" if pct is None else f"{pct:.1f} % of device memory")
    return f"{finding['cost_ms_per_step']:,.2f} ms/step", f"{finding['cost_pct']:.1f} % of step"


def duration(ms: float) -> str:
    """A step time for a metric tile: '31.20 ms', or '726.89 s' from 10 s on (a tile shows ~10 characters)."""
    return f"{ms / 1000:,.2f} s" if abs(ms) >= 10_000 else f"{ms:,.2f} ms"


def speed_change(speedup: float, slowdown: float) -> tuple[str, str]:
    """('1.25× faster', 'green') / ('1.61× slower', 'red') / ('no change', 'gray') from the after
    run's mean step against the before run's (speedup = before / after, slowdown = after / before)."""
    if round(speedup, 2) == 1.0 and round(slowdown, 2) == 1.0:
        return "no change (1.00×)", "gray"
    if speedup > 1:
        return f"{speedup:,.2f}× faster", "green"
    return f"{slowdown:,.2f}× slower", "red"


def gpu_mix(device_names: list[Any]) -> str:
    """The GPUs of a run's ranks in words ('4× NVIDIA A100-SXM4-80GB', '2× A100, 2× V100'); '' when
    no rank names one (a CPU-only trace, or a trace without deviceProperties)."""
    names = [str(n) for n in device_names if n is not None and not (isinstance(n, float) and pd.isna(n))]
    counts = pd.Series(names, dtype=object).value_counts(sort=False)
    return ", ".join(f"{n}× {name}" for name, n in sorted(counts.items()))


def count(n: int, noun: str) -> str:
    """'1 finding', '3 findings'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def evidence_difference(template: str, metrics: dict[str, Any]) -> str:
    """An AnalysisSpec's evidence `differs` text with the finding's metrics filled in; "" when the
    finding lacks a figure it names (a CPU-only run's GPU idle, say)."""
    try:
        return template.format_map({k: v for k, v in metrics.items() if v is not None}) if template else ""
    except (KeyError, ValueError, TypeError):
        return ""


def show_notes(run_id: str) -> None:
    """The run's analysis caveats (the CLI JSON's "notes"), beside the numbers they qualify."""
    for note in state.run_notes(run_id):
        st.info(md(note), icon=":material/info:")


def kind_title(kind: str) -> str:
    return KIND_TITLES.get(kind, kind.replace("_", " "))


where = where_text   # ranks · step · stream · window (analyzers.common.contract)


def need_run() -> str | None:
    """The current run id, or a friendly pointer to the Load page (returns None then)."""
    run_id = state.page_start()
    if run_id is not None and state.events_problem(run_id):
        st.stop()   # said by page_start: no partial figures
    if run_id is None and may_load():
        st.info("No run loaded yet. Open **Load traces** to upload profiler traces "
                "(one file per rank) or type a directory path.")
        load_link()
    elif run_id is None:
        st.info("No run loaded yet. A maintainer of this server loads the team's traces.")
    return run_id


def may_load() -> bool:
    return auth.can("upload") or auth.can("load_path")


def load_link() -> None:
    """A link to Load traces, for those whose role has that page (a viewer's navigation lacks it)."""
    if may_load():
        st.page_link("views/load.py", label="Load traces", icon=":material/upload_file:")
