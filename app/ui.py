"""Small presentation helpers shared by the pages (text only; no numbers computed here)."""
from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from analyzers.contract import where_text
from analyzers.findings import analysis_specs
from analyzers.safe_text import csv_cell, page_markdown
from app import auth, state

KIND_TITLES = {kind: spec.title for kind, spec in analysis_specs().items()}   # declared by each analysis
MARK_LABELS = {None: "not reviewed", "to_fix": "to fix", "fixed": "fixed", "wont_fix": "won't fix"}
SEVERITY_BADGES = {"high": ":red-badge[high]", "medium": ":orange-badge[medium]", "low": ":gray-badge[low]"}


def severity(value: str) -> str:
    """A colored Markdown badge for a severity (unknown values escaped)."""
    return SEVERITY_BADGES.get(value, md(value))

md = page_markdown   # trace text made inert for st.markdown (analyzers.safe_text)


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with every text cell a spreadsheet would run as a formula (= + - @ tab CR at its
    start) shown with a leading ', as analyzers.safe_text.csv_cell writes it."""
    safe = frame.copy()
    for column in safe.columns[safe.dtypes == object]:
        safe[column] = safe[column].map(csv_cell)
    return safe


def table(frame: pd.DataFrame, **kwargs: Any) -> None:
    """st.dataframe for trace text: its toolbar's "Download as CSV" writes the cells as shown, so
    they are shown csv_safe (a run named `=HYPERLINK(..)` reads `'=HYPERLINK(..)`)."""
    st.dataframe(csv_safe(frame), **{"hide_index": True, "width": "stretch", **kwargs})


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


where = where_text   # ranks · step · stream · window (analyzers.contract)


def need_run() -> str | None:
    """The current run id, or a friendly pointer to the Load page (returns None then)."""
    run_id = state.page_start()
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
