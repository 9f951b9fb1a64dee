"""Load traces: drop rank files (streamed to the server's disk) or type a path on the server.

One load = one run per job: the files of one job (all its ranks) form a run; a parent folder of
unrelated jobs is split into one run per job, and the page says what was made. Files that fail
are listed with the reason while the rest load; identical content is recognised and reused
instead of stored twice. Each attempt's outcome (or refusal) replaces the previous one in the
one result area below the tabs, and the run name fields start empty again after a load.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import streamlit as st

from analyzers.ingest.sources import is_url
from analyzers.ingest.sources import default_name
from analyzers.common.progress import progress_text
from app import auth, data_root, state, ui, uploads

TICKET_KEY = "_upload_ticket"
RESULT_KEY = "load_result"
LOADS_KEY = "_loads_done"     # bumped by every attempt: the name fields are new widgets afterwards
# Where each stage ends on the page's bar, so it moves steadily through one job's load.
STAGE_ENDS = {"reading": 0.15, "parsing": 0.5, "parsed": 0.5, "writing": 0.6, "analysing": 0.98, "analysed": 1.0}


@dataclass
class Attempt:
    """A load the user asked for: run after the tabs are drawn, inside the result area."""
    paths: list[str]
    name: str | None
    action: str                      # the audit log's word: "upload" or "load_path"
    detail: str                      # what the audit log and an unexpected error name
    shown: Callable[[str], str]      # a server path as the user knows it
    finish: Callable[[], None] = lambda: None   # run after the load, whatever its outcome
    confine_to: str | None = None    # read only files under this directory (the data root)


st.title("Load traces")
state.page_start()
auth.require("load traces", "upload", "load_path")
st.markdown("PyTorch profiler traces (Kineto JSON), one file per rank: `.json`, `.json.gz`, `.zip` or "
            "`.tar.gz` of rank files. The files of one job form one run; files of several jobs are "
            "stored as one run per job.")
where_loads_go = state.load_placement(show_paths=not auth.is_team_mode())
if where_loads_go:
    st.caption(ui.md(where_loads_go))


def attempt_key(base: str) -> str:
    """A widget key that is new after each load (its field starts empty again)."""
    return f"{base}-{st.session_state.get(LOADS_KEY, 0)}"


def bar_fraction(stage: str, fraction: float, job: tuple[int, int] | None) -> float:
    """How far the whole load is, from a progress event (analyzers/common/progress.py)."""
    stages = list(STAGE_ENDS)
    start = STAGE_ENDS[stages[stages.index(stage) - 1]] if stage in STAGE_ENDS and stages.index(stage) else 0.0
    end = STAGE_ENDS.get(stage, start)
    within = start + (end - start) * min(max(fraction, 0.0), 1.0)
    number, jobs = job or (1, 1)
    return min(1.0, ((number - 1) + within) / max(jobs, 1))


def run_attempt(attempt: Attempt) -> list[dict[str, Any]]:
    """Load and analyse with the progress shown (file by file, rank by rank, analysis by
    analysis); the outcome of each job, with file names as the user knows them."""
    status = st.status(f"Loading {ui.count(len(attempt.paths), 'path' if attempt.action == 'load_path' else 'file')}…",
                       expanded=True, state="running")
    with status:
        bar = st.progress(0.0, text="Starting…")
        stored = st.empty()     # the ranks stored so far, with their rows, while the analyses run

    def progress(stage: str, item: str, fraction: float, **details: Any) -> None:
        text = progress_text(stage, attempt.shown(str(item)) if item else "", fraction, **details)
        bar.progress(bar_fraction(stage, fraction, details.get("job")), text=ui.md(text))
        if stage == "writing" and details.get("rank") is not None:
            stored.caption(ui.md(text))

    try:
        outcomes = state.ingest(attempt.paths, name=attempt.name or None, progress=progress,
                                audit=(attempt.action, auth.actor(), attempt.detail), confine_to=attempt.confine_to)
    except state.StoreUnavailable:
        raise
    except Exception as exc:  # ingest promises not to raise on bad input; this guards the page anyway
        outcomes = [{"run_id": None, "name": None, "reused": False, "files": [], "warnings": [], "findings": 0,
                     "errors": [{"file": attempt.detail, "error": str(exc)}], "analysis_error": None}]
    finally:
        attempt.finish()
    for outcome in outcomes:
        for problem in outcome["errors"] + outcome["warnings"]:
            problem["file"] = attempt.shown(str(problem["file"]))
    loaded = [o for o in outcomes if o["run_id"]]
    if loaded:
        state.select_run(loaded[0]["run_id"])
    status.update(label="Loaded" if loaded else "Nothing loaded", state="complete" if loaded else "error")
    return outcomes


def refused(where: str, reason: str) -> list[dict[str, Any]]:
    """An attempt refused before loading anything, shaped as a load outcome."""
    return [{"run_id": None, "name": None, "reused": False, "files": [], "warnings": [], "findings": 0,
             "errors": [{"file": where, "error": reason}], "analysis_error": None}]


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
            ticket = uploads.open_ticket(owner, auth.actor())
        except OSError as exc:
            st.error(f"Uploads cannot be stored on this server right now ({ui.md(exc.strerror or exc)}); "
                     "check TRACEDOCTOR_TMPDIR and its free space.", icon=":material/error:")
            return None
        st.session_state[TICKET_KEY] = ticket.ticket_id
    return ticket


def upload_tab() -> Attempt | None:
    ticket = session_ticket()
    if ticket is None:
        return None
    uploads.uploader(ticket, key=auth.component_key("uploader", ticket.ticket_id))
    done, pending = ticket.completed(), ticket.pending()
    if done:
        total_mb = sum(f.size for f in done) / 2**20
        st.caption(f"{ui.count(len(done), 'file')} on the server ({total_mb:,.1f} MB): "
                   + ", ".join(ui.md(f.name) for f in done))
    if pending:
        st.caption(f"{ui.count(len(pending), 'file')} still uploading (or stopped; drop it again to retry).")
    default = default_name([f.name for f in done]) if done else "the first file's name"
    name = st.text_input("Run name (optional)", key=attempt_key("upload_name"), placeholder=f"default: {default}",
                         help="Files of several jobs are stored as one run per job, each named after its "
                              "folder or first file (after this name when given).")
    left, right, _ = st.columns([1, 1, 2])
    analyse = left.button("Analyse uploaded files", type="primary", disabled=not done or bool(pending),
                          icon=":material/stethoscope:")
    if right.button("Discard uploaded files", disabled=not ticket.files, icon=":material/delete_sweep:"):
        uploads.close_ticket(ticket.ticket_id)
        st.rerun()
    if not analyse:
        return None
    # the store keeps what it needs; the uploaded copies go once the load is over
    return Attempt([str(f.path) for f in done], name.strip() or None, "upload", ", ".join(f.name for f in done),
                   ticket.shown_name, finish=lambda: uploads.close_ticket(ticket.ticket_id))


def path_tab() -> Attempt | list[dict[str, Any]] | None:
    root = data_root.data_root()
    if root is not None:
        where = "" if auth.is_team_mode() else f" ({data_root.code_span(str(root))})"   # shown exactly as it is
        st.caption(f"Paths are read under this server's data root{where}; relative paths start there.")
    urls = root is None and not auth.is_team_mode()
    typed = st.text_input("File or directory path",
                          placeholder=("/data/profiles/job42/ or s3://bucket/job42/" if urls else "/data/profiles/job42/")
                          if root is None else "job42/",
                          help="For traces too big to upload: the server reads them in place. A folder of "
                               "several jobs is stored as one run per job."
                               + (" A URL (s3://bucket/job42/, with s3fs installed) is copied here first."
                                  if urls else ""))
    path_name = st.text_input("Run name (optional)", key=attempt_key("path_name"),
                              placeholder="default: the folder's or file's name")
    if not st.button("Analyse this path", disabled=not typed.strip(), icon=":material/stethoscope:"):
        return None
    if is_url(typed.strip()):     # an object store or web folder (s3://bucket/job42/), read through fsspec
        if auth.is_team_mode() or root is not None:
            return refused("", "URLs are read only in local mode without a data root: this server reads "
                               "paths under its data root")
        url = typed.strip()
        return Attempt([url], path_name.strip() or None, "load_path", url, lambda shown: shown)
    try:
        target = data_root.resolve(typed)
    except data_root.PathRefused as refusal:
        state.record_refusal("load_path_refused", auth.actor(), str(refusal))   # a probe of the server's disk is logged
        return refused("", str(refusal))
    return Attempt([str(target)], path_name.strip() or None, "load_path", data_root.shown(target), data_root.shown,
                   confine_to=None if root is None else str(root))


def show_result(outcomes: list[dict[str, Any]]) -> None:
    """The last attempt's outcome: the runs it made (one per job), then each file's problem."""
    loaded = [o for o in outcomes if o.get("run_id")]
    if len(outcomes) > 1:
        st.info(f"These files come from {len(outcomes)} different jobs (traced far apart in time, or their "
                f"distributedInfo disagrees), so they were stored as one run per job rather than one mixed run. "
                f"Pick one in the sidebar.", icon=":material/call_split:")

    def said(outcome: dict[str, Any]) -> str:
        verb = "Already stored (same content): reusing" if outcome.get("reused") else "Loaded"
        name = f" **{ui.md(outcome['name'])}**" if outcome.get("name") else ""
        renamed = (f" (renamed from **{ui.md(outcome['renamed_from'])}**, the name it was stored under)"
                   if outcome.get("renamed_from") else "")
        return (f"{verb} run{name} `{outcome['run_id']}`{renamed} from {len(outcome.get('files', []))} file(s), "
                f"{ui.count(outcome.get('findings', 0), 'finding')}.")

    if len(loaded) == 1:
        st.success(said(loaded[0]))
    elif loaded:
        st.success(f"Stored {len(loaded)} runs, one per job:\n" + "\n".join(f"- {said(o)}" for o in loaded))
    for outcome in loaded:
        if outcome.get("analysis_error"):
            st.error(f"**{ui.md(outcome.get('name') or outcome['run_id'])}**: {ui.md(outcome['analysis_error'])}")
    if loaded:
        left, right, _ = st.columns([1, 1, 2])
        left.page_link("views/findings.py", label="See the findings" + (" (of the first run; pick another in the "
                       "sidebar)" if len(loaded) > 1 else ""), icon=":material/stethoscope:")
        right.page_link("views/overview.py", label="Overview", icon=":material/dashboard:")
    else:
        st.error("Nothing could be loaded.")
    # the whole name as ingest gives it (an archive member after its archive: `a.zip:../../x.json`)
    for outcome in outcomes:
        for problem in outcome.get("errors", []):   # a refused path's reason names it already
            st.error(f"**{ui.md(problem['file'])}**: {ui.md(problem['error'])}" if problem["file"] else
                     ui.md(problem["error"]))
        for problem in outcome.get("warnings", []):
            st.warning(f"**{ui.md(problem['file'])}**: {ui.md(problem['error'])}")


sources = ([("Upload files", upload_tab)] if auth.can("upload") else []) + \
          ([("A path on this machine", path_tab)] if auth.can("load_path") and data_root.path_loading_enabled() else [])
asked: Attempt | list[dict[str, Any]] | None = None
for tab, (_, draw) in zip(st.tabs([label for label, _ in sources]), sources):
    with tab:
        asked = draw() or asked

# One outcome at a time: an attempt replaces the last one's outcome at once. The area is a new
# element per attempt (its key), so the last outcome does not linger greyed out below the progress.
attempts = st.session_state.get(LOADS_KEY, 0)
if asked is not None:
    with st.container(key=f"load-result-{attempts + 1}"):
        st.divider()
        outcome = run_attempt(asked) if isinstance(asked, Attempt) else asked
    st.session_state[RESULT_KEY] = outcome
    st.session_state[LOADS_KEY] = st.session_state.get(LOADS_KEY, 0) + 1
    st.rerun()
result = st.session_state.get(RESULT_KEY)
if result:
    with st.container(key=f"load-result-{attempts}"):
        st.divider()
        show_result(result if isinstance(result, list) else [result])
