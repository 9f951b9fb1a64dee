"""Manage runs: rename, tag, annotate, re-analyse or delete stored runs; the trash (restore or
delete for good) and the audit log. Viewers see the list; the rest is for maintainers."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from analyzers.store import runs as run_store
from app import auth, data_root, state, ui, uploads

st.title("Manage runs")
state.page_start()
all_runs = state.list_runs()
maintainer = auth.can("edit")


def trash_section() -> None:
    """Runs deleted in the last TRASH_RETENTION_DAYS: restore one, or delete it for good."""
    state.write(run_store.purge_trash, actor="retention")   # what is past the retention goes first (no visitor did it)
    trashed = run_store.list_trash(state.cur())
    st.subheader("Trash")
    if not trashed:
        st.caption(f"Empty. A deleted run stays here for {run_store.TRASH_RETENTION_DAYS:g} days, then it is "
                   "deleted for good.")
        return
    st.caption(f"Deleted runs stay here for {run_store.TRASH_RETENTION_DAYS:g} days, then they are deleted for good.")
    ui.table(pd.DataFrame(trashed)[["name", "run_id", "deleted_at", "deleted_by"]])
    by_id = {r["run_id"]: r for r in trashed}
    picked = st.selectbox("Run in the trash", list(by_id), key="trash_pick",
                          format_func=lambda rid: f"{by_id[rid]['name']} · {rid[:8]}")
    left, right = st.columns(2)
    if left.button("Restore", icon=":material/restore_from_trash:", key="restore"):
        state.write(run_store.restore_run, picked, actor=auth.actor())
        st.cache_data.clear()
        state.select_run(picked)
        st.toast("Restored")
        st.rerun()
    confirm = right.checkbox("Yes, delete it for good", key=f"confirm-purge-{picked}")
    if right.button("Delete for good", disabled=not confirm, icon=":material/delete_forever:", key="purge"):
        state.write(run_store.purge_run, picked, actor=auth.actor())
        st.cache_data.clear()
        st.rerun()


def audit_section() -> None:
    st.subheader("Audit log")
    rows = run_store.audit_log(state.cur(), limit=200)
    if not rows:
        st.caption("Nothing recorded yet.")
        return
    st.caption("Who loaded, renamed, tagged, marked, deleted or restored what (the latest 200).")
    ui.table(pd.DataFrame(rows)[["at", "actor", "action", "run_id", "detail"]])


if not all_runs:
    st.info("No runs stored.")
    ui.load_link()
else:
    table = pd.DataFrame(all_runs)[["name", "run_id", "created_at", "n_ranks", "n_events", "tags", "notes", "source"]]
    # where a run came from, without the server's upload directories (or, in team mode, its data root)
    table["source"] = table["source"].map(lambda text: data_root.shown_source(uploads.shown_source(text)))
    ui.table(table)

if all_runs and maintainer:
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
            try:   # only what changed: each change is one line in the audit log
                if new_name != run["name"]:
                    state.write(run_store.rename_run, run["run_id"], new_name, actor=auth.actor())
                new_tags = [t for t in tags.split(",")]
                if sorted({t.strip() for t in new_tags if t.strip()}) != sorted(run.get("tags") or []):
                    state.write(run_store.set_tags, run["run_id"], new_tags, actor=auth.actor())
                if notes != (run.get("notes") or ""):
                    state.write(run_store.set_notes, run["run_id"], notes, actor=auth.actor())
            except ValueError as exc:
                st.error(ui.md(exc))
            else:
                st.toast("Saved")
                st.rerun()

    left, right = st.columns(2)
    with left:
        st.markdown("**Re-analyse**: recompute this run's findings with the current analyzers.")
        if st.button("Re-analyse", icon=":material/refresh:"):
            with st.spinner("Analysing…"):
                state.reanalyze(run["run_id"], auth.actor())
            st.toast("Findings refreshed")
    with right:
        st.markdown(f"**Delete**: moves the run to the trash (below); it can be restored for "
                    f"{run_store.TRASH_RETENTION_DAYS:g} days.")
        confirm = st.checkbox("Yes, delete this run", key=f"confirm-{run['run_id']}")
        if st.button("Delete run", disabled=not confirm, icon=":material/delete:"):
            state.write(run_store.delete_run, run["run_id"], actor=auth.actor())
            st.cache_data.clear()
            st.session_state.pop(state.RUN_KEY, None)
            st.rerun()
elif all_runs:
    st.caption("Renaming, deleting and restoring runs is for maintainers of this server; you can mark findings "
               "on the **Findings** page.")

if auth.can("restore"):
    st.divider()
    trash_section()
if auth.can("audit"):
    st.divider()
    audit_section()
