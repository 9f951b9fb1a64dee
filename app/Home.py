"""TraceDoctor dashboard: `streamlit run app/Home.py`.

The entry script: loads the bundled sample runs once, lets the user pick a run in the sidebar and
routes to the pages (Streamlit's st.navigation). Presentation only; analysis lives in analyzers/.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `streamlit run app/Home.py` puts only app/ on the path
    sys.path.insert(0, str(REPO_ROOT))

import streamlit as st  # noqa: E402

from app import state  # noqa: E402

st.set_page_config(page_title="TraceDoctor", page_icon=":material/stethoscope:", layout="wide")

PAGES = {
    "Review": [
        st.Page("views/overview.py", title="Overview", icon=":material/dashboard:", default=True),
        st.Page("views/findings.py", title="Findings", icon=":material/stethoscope:"),
        st.Page("views/timeline.py", title="Timeline", icon=":material/timeline:"),
        st.Page("views/ranks.py", title="Ranks", icon=":material/grid_on:"),
        st.Page("views/communication.py", title="Communication", icon=":material/sync_alt:"),
        st.Page("views/compare.py", title="Compare runs", icon=":material/compare_arrows:"),
        st.Page("views/report.py", title="Report", icon=":material/description:"),
    ],
    "Data": [
        st.Page("views/load.py", title="Load traces", icon=":material/upload_file:"),
        st.Page("views/runs.py", title="Manage runs", icon=":material/folder_managed:"),
        st.Page("views/gpus.py", title="This machine's GPUs", icon=":material/memory:"),
    ],
}

navigation = st.navigation(PAGES)
try:
    state.ensure_samples_loaded()
    with st.sidebar:
        st.markdown("### :material/stethoscope: TraceDoctor")
        st.caption("Why is my PyTorch training job slower than it should be?")
    navigation.run()  # each page draws the run picker first (state.page_start)
finally:
    state.release_run_cursor()   # the store closes when no click needs it: the CLI can write to it
