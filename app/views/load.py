"""Load traces: drop rank files (streamed to the server's disk) or type a path on the server.

One load = one run (all ranks of one job). Files that fail are listed with the reason while the
rest load; identical content is recognised and reused instead of stored twice.
"""
from __future__ import annotations

from typing import Callable

import streamlit as st

from app import auth, data_root, state, ui, uploads

TICKET_KEY = "_upload_ticket"

st.title("Load traces")
state.page_start()
auth.require("load traces", "upload", "load_path")
st.markdown("PyTorch profiler traces (Kineto JSON), one file per rank: `.json`, `.json.gz`, `.zip` or "
            "`.tar.gz` of rank files. All files of one load form one run.")


def run_ingest(paths: list[str], name: str | None, action: str, detail: str,
               shown: Callable[[str], str]) -> None:
    """Ingest, remember the outcome for the next run (with file names as the user knows them)
    and rerun; the store's audit log gets one line (action, who, detail)."""
    bar = st.progress(0.0, text="Starting…")

    def progress(stage: str, file: str, fraction: float) -> None:
        label = shown(str(file)) if file else ""
        bar.progress(min(max(float(fraction or 0.0), 0.0), 1.0), text=f"{stage}: {label}" if label else f"{stage}…")

    try:
        outcome = state.ingest(paths, name=name or None, progress=progress, audit=(action, auth.actor(), detail))
    except state.StoreUnavailable:
        raise
    except Exception as exc:  # ingest promises not to raise on bad input; this guards the page anyway
        outcome = {"run_id": None, "reused": False, "files": [], "warnings": [], "findings": 0,
                   "errors": [{"file": detail, "error": str(exc)}], "analysis_error": None}
    for problem in outcome["errors"] + outcome["warnings"]:
        problem["file"] = shown(str(problem["file"]))
    st.session_state["load_result"] = outcome
    if outcome["run_id"]:
        state.select_run(outcome["run_id"])
    bar.empty()


def session_ticket() -> uploads.UploadTicket | None:
    """This session's open upload (a new one after each load, or after signing in with another
    token); None, said on the page, when the server has nowhere to put uploads."""
    owner = auth.session_token_hash()
    ticket = uploads.get_ticket(st.session_state.get(TICKET_KEY))
    if ticket is not None and ticket.token_sha256 != owner:
        uploads.close_ticket(ticket.ticket_id)
        ticket = None
    if ticket is None:
        try:
            ticket = uploads.open_ticket(owner)
        except OSError as exc:
            st.error(f"Uploads cannot be stored on this server right now ({ui.md(exc.strerror or exc)}); "
                     "check TRACEDOCTOR_TMPDIR and its free space.", icon=":material/error:")
            return None
        st.session_state[TICKET_KEY] = ticket.ticket_id
    return ticket


def upload_tab() -> None:
    ticket = session_ticket()
    if ticket is None:
        return
    uploads.uploader(ticket, key=f"uploader-{ticket.ticket_id[:12]}")
    done, pending = ticket.completed(), ticket.pending()
    if done:
        total_mb = sum(f.size for f in done) / 2**20
        st.caption(f"{ui.count(len(done), 'file')} on the server ({total_mb:,.1f} MB): "
                   + ", ".join(ui.md(f.name) for f in done))
    if pending:
        st.caption(f"{ui.count(len(pending), 'file')} still uploading (or stopped; drop it again to retry).")
    name = st.text_input("Run name (optional)", key="upload_name", placeholder="default: the first file's name")
    left, right, _ = st.columns([1, 1, 2])
    analyse = left.button("Analyse uploaded files", type="primary", disabled=not done or bool(pending),
                          icon=":material/stethoscope:")
    if right.button("Discard uploaded files", disabled=not ticket.files, icon=":material/delete_sweep:"):
        uploads.close_ticket(ticket.ticket_id)
        st.rerun()
    if analyse:
        try:
            run_ingest([str(f.path) for f in done], name or done[0].name, "upload",
                       ", ".join(f.name for f in done), ticket.shown_name)
        finally:
            uploads.close_ticket(ticket.ticket_id)   # the store has what it needs; the copies go
        st.rerun()


def path_tab() -> None:
    root = data_root.data_root()
    if root is not None:
        where = "" if auth.is_team_mode() else f" ({data_root.code_span(str(root))})"   # shown exactly as it is
        st.caption(f"Paths are read under this server's data root{where}; relative paths start there.")
    typed = st.text_input("File or directory path", placeholder="/data/profiles/job42/" if root is None else "job42/",
                          help="For traces too big to upload: the server reads them in place.")
    path_name = st.text_input("Run name (optional)", key="path_name")
    if st.button("Analyse this path", disabled=not typed.strip(), icon=":material/stethoscope:"):
        try:
            target = data_root.resolve(typed)
        except data_root.PathRefused as refused:
            st.error(ui.md(refused))
            return
        run_ingest([str(target)], path_name or None, "load_path", data_root.shown(target), data_root.shown)
        st.rerun()


sources = ([("Upload files", upload_tab)] if auth.can("upload") else []) + \
          ([("A path on this machine", path_tab)] if auth.can("load_path") and data_root.path_loading_enabled() else [])
for tab, (_, draw) in zip(st.tabs([label for label, _ in sources]), sources):
    with tab:
        draw()

result = st.session_state.get("load_result")
if result:
    st.divider()
    if result.get("run_id"):
        verb = "Already stored (same content): reusing" if result.get("reused") else "Loaded"
        st.success(f"{verb} run `{result['run_id']}` from {len(result.get('files', []))} file(s), "
                   f"{result.get('findings', 0)} finding(s).")
        left, right, _ = st.columns([1, 1, 2])
        left.page_link("views/findings.py", label="See the findings", icon=":material/stethoscope:")
        right.page_link("views/overview.py", label="Overview", icon=":material/dashboard:")
    else:
        st.error("Nothing could be loaded.")
    if result.get("analysis_error"):
        st.error(ui.md(result["analysis_error"]))
    # the whole name as ingest gives it (an archive member after its archive: `a.zip:../../x.json`)
    for problem in result.get("errors", []):
        st.error(f"**{ui.md(problem['file'])}**: {ui.md(problem['error'])}")
    for problem in result.get("warnings", []):
        st.warning(f"**{ui.md(problem['file'])}**: {ui.md(problem['error'])}")
