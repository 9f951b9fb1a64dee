"""Load traces: drag and drop rank files (or type a directory for traces too big to upload).

One load = one run (all ranks of one job). Files that fail are listed with the reason while the
rest load; identical content is recognised and reused instead of stored twice.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import streamlit as st

from app import state, ui

st.title("Load traces")
state.page_start()
st.markdown("PyTorch profiler traces (Kineto JSON), one file per rank: `.json`, `.json.gz`, `.zip` or "
            "`.tar.gz` of rank files. All files of one load form one run.")


def run_ingest(paths: list[str], name: str | None) -> None:
    bar = st.progress(0.0, text="Starting…")

    def progress(stage: str, file: str, fraction: float) -> None:
        name = Path(str(file)).name if file else ""
        bar.progress(min(max(float(fraction or 0.0), 0.0), 1.0), text=f"{stage}: {name}" if name else f"{stage}…")

    try:
        outcome = state.ingest(paths, name=name or None, progress=progress)
    except Exception as exc:  # ingest promises not to raise on bad input; this guards the page anyway
        outcome = {"run_id": None, "reused": False, "files": [], "warnings": [], "findings": 0,
                   "errors": [{"file": ", ".join(paths), "error": str(exc)}], "analysis_error": None}
    st.session_state["load_result"] = outcome
    if outcome["run_id"]:
        state.select_run(outcome["run_id"])
    bar.empty()
    st.session_state["uploader_generation"] = st.session_state.get("uploader_generation", 0) + 1
    st.rerun()


upload_tab, path_tab = st.tabs(["Upload files", "A path on this machine"])
with upload_tab:
    files = st.file_uploader("Drop rank files here", accept_multiple_files=True,
                             key=f"uploader-{st.session_state.get('uploader_generation', 0)}")
    name = st.text_input("Run name (optional)", key="upload_name",
                         placeholder="default: the first file's name")
    if st.button("Analyse uploaded files", type="primary", disabled=not files, icon=":material/stethoscope:"):
        workdir = Path(tempfile.mkdtemp(prefix="tracedoctor_upload_"))
        try:
            paths = []
            for index, upload in enumerate(files):
                safe_name = Path(upload.name).name or f"file{index}"  # never a path from the browser
                target = workdir / safe_name
                if target.exists():
                    target = workdir / f"{index}_{safe_name}"
                with target.open("wb") as out:
                    shutil.copyfileobj(upload, out, length=16 << 20)
                paths.append(str(target))
            run_ingest(paths, name or Path(files[0].name).name)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

with path_tab:
    typed = st.text_input("File or directory path", placeholder="/data/profiles/job42/",
                          help="For traces too big to upload: the server reads them in place.")
    path_name = st.text_input("Run name (optional)", key="path_name")
    if st.button("Analyse this path", disabled=not typed.strip(), icon=":material/stethoscope:"):
        target = Path(typed.strip()).expanduser()
        if not target.exists():
            st.error(f"{ui.md(typed.strip())}: no such file or directory on this machine.")
        else:
            run_ingest([str(target)], path_name or None)

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
    for problem in result.get("errors", []):
        st.error(f"**{ui.md(Path(problem['file']).name)}**: {ui.md(problem['error'])}")
    for problem in result.get("warnings", []):
        st.warning(f"**{ui.md(Path(problem['file']).name)}**: {ui.md(problem['error'])}")
