"""Manage runs: rename, tag, annotate, re-analyse or delete stored runs."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from analyzers import runs as run_store
from app import state

st.title("Manage runs")
state.page_start()
all_runs = state.list_runs()
if not all_runs:
    st.info("The store is empty.")
    st.page_link("views/load.py", label="Load traces", icon=":material/upload_file:")
    st.stop()

table = pd.DataFrame(all_runs)[["name", "run_id", "created_at", "n_ranks", "n_events", "tags", "notes", "source"]]
st.dataframe(table, hide_index=True, width="stretch")

run_id = state.current_run() or all_runs[0]["run_id"]
run = next((r for r in all_runs if r["run_id"] == run_id), all_runs[0])
st.subheader("Edit the run picked in the sidebar")
st.caption("Pick another run in the sidebar to edit it.")   # its name, as typed, is in the form below
with st.form(f"edit-{run['run_id']}"):
    new_name = st.text_input("Name", value=run["name"], max_chars=200)
    tags = st.text_input("Tags (comma separated)", value=", ".join(run.get("tags") or []),
                         help='e.g. "baseline, before-fix"')
    notes = st.text_area("Notes", value=run.get("notes") or "", max_chars=4000)
    if st.form_submit_button("Save", type="primary"):
        try:
            state.write(run_store.rename_run, run["run_id"], new_name)
            state.write(run_store.set_tags, run["run_id"], [t for t in tags.split(",")])
            state.write(run_store.set_notes, run["run_id"], notes)
        except ValueError as exc:
            st.error(str(exc))
        else:
            st.toast("Saved")
            st.rerun()

left, right = st.columns(2)
with left:
    st.markdown("**Re-analyse**: recompute this run's findings with the current analyzers.")
    if st.button("Re-analyse", icon=":material/refresh:"):
        with st.spinner("Analysing…"):
            state.reanalyze(run["run_id"])
        st.toast("Findings refreshed")
with right:
    st.markdown("**Delete**: removes the run, its events, findings and review marks.")
    confirm = st.checkbox("Yes, delete this run", key=f"confirm-{run['run_id']}")
    if st.button("Delete run", disabled=not confirm, icon=":material/delete:"):
        state.write(run_store.delete_run, run["run_id"])
        st.cache_data.clear()
        st.session_state.pop(state.RUN_KEY, None)
        st.rerun()
