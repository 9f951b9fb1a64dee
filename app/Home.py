"""TraceDoctor dashboard: `streamlit run app/Home.py`.

This file is both the server and the entry script. `streamlit run` imports it as a module and
finds `streamlit_app`, a streamlit.starlette.App: Streamlit's server plus the route uploads
stream to (app/uploads.py). That App then runs this file as `__main__` on every click: the entry
script, which signs the user in (team mode), loads the bundled sample runs once and routes to the
pages the user's role may open (Streamlit's st.navigation). Presentation only; analysis lives in
analyzers/.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `streamlit run app/Home.py` puts only app/ on the path
    sys.path.insert(0, str(REPO_ROOT))

import streamlit as st  # noqa: E402

from app import auth  # noqa: E402

REVIEW_PAGES = [
    ("views/overview.py", "Overview", ":material/dashboard:"),
    ("views/findings.py", "Findings", ":material/stethoscope:"),
    ("views/timeline.py", "Timeline", ":material/timeline:"),
    ("views/kernels.py", "Operators & kernels", ":material/bar_chart:"),
    ("views/memory.py", "Memory", ":material/memory_alt:"),
    ("views/ranks.py", "Ranks", ":material/grid_on:"),
    ("views/communication.py", "Communication", ":material/sync_alt:"),
    ("views/compare.py", "Compare runs", ":material/compare_arrows:"),
    ("views/report.py", "Report", ":material/description:"),
]
LOAD_PAGE = ("views/load.py", "Load traces", ":material/upload_file:")
DATA_PAGES = [("views/runs.py", "Manage runs", ":material/folder_managed:"),
              ("views/gpus.py", "This machine's GPUs", ":material/memory:")]


def pages(user: auth.User) -> dict[str, list]:
    """The pages this user's role may open; a page left out cannot be reached by its URL either."""
    data = ([LOAD_PAGE] if user.can("upload") or user.can("load_path") else []) + DATA_PAGES
    return {
        "Review": [st.Page(path, title=title, icon=icon, default=path == REVIEW_PAGES[0][0])
                   for path, title, icon in REVIEW_PAGES],
        "Data": [st.Page(path, title=title, icon=icon) for path, title, icon in data],
    }


def main() -> None:
    # imported in a script run, not when the server imports this file: its caches need Streamlit's runtime
    from app import state

    # an emoji favicon is drawn by the browser; a :material: one is fetched from a font host
    st.set_page_config(page_title="TraceDoctor", page_icon="🩺", layout="wide")
    try:
        user = auth.current_user()
    except auth.AuthConfigError as exc:   # every visitor reads this page: the details go to the log
        logging.getLogger("tracedoctor").error("team mode is not set up: %s", exc)
        st.error("Team mode is not set up on this server. Whoever runs it finds the reason in its log.",
                 icon=":material/settings:")
        return
    if user is None:
        st.navigation([st.Page(auth.login_page, title="Sign in", icon=":material/login:")]).run()
        return
    navigation = st.navigation(pages(user))
    try:
        state.ensure_samples_loaded()
        with st.sidebar:
            st.markdown("### :material/stethoscope: TraceDoctor")
            st.caption("Why is my PyTorch training job slower than it should be?")
            auth.sidebar_account()
        navigation.run()  # each page draws the run picker first (state.page_start)
    except state.StoreUnavailable as exc:
        logging.getLogger("tracedoctor").error("store %s: %s", state.db_path(), exc.cause)
        if auth.is_team_mode():   # a shared server's paths (DuckDB's message quotes them) are not for its users
            st.error("The run store cannot be opened or written. Ask whoever runs this server to check its "
                     "TRACEDOCTOR_DB; the details are in its log.", icon=":material/database:")
        else:
            st.error(f"The run store `{state.db_path()}` cannot be opened or written ({exc}). Point "
                     "TRACEDOCTOR_DB at a file you may write, or fix its permissions, then reload.",
                     icon=":material/database:")
    except Exception as exc:
        if not state.is_store_io_error(exc):
            raise
        # the store's file failed under the open connection (deleted from a network disk, say):
        # reopened at the next click rather than failing on every page until a restart
        logging.getLogger("tracedoctor").error("store %s: %s", state.db_path(), exc)
        state.lease().mark_stale()
        st.error("The run store could not be read (its file was deleted, replaced or is unreachable). "
                 "It is reopened at your next click; reload this page.", icon=":material/database:")
    finally:
        state.release_run_cursor()   # the store closes when no click needs it: the CLI can write to it


def show_script_error(exc: BaseException) -> bool:
    """The server's handler for an error a page did not expect: in team mode the page says so in
    plain words and the traceback (server paths and all) goes to the server's log only."""
    if not auth.is_team_mode():
        return False   # local mode: the user is the one who runs the server; show it all
    logging.getLogger("tracedoctor").error("page error", exc_info=exc)
    st.error("Something went wrong on the server; the details are in its log.", icon=":material/error:")
    return True


if __name__ == "__main__":   # the entry script, run by Streamlit on every click
    main()
elif __name__ != "__mp_main__":   # imported by `streamlit run` (or an ASGI server): the server app
    # (__mp_main__: a multiprocessing child of a process that ran this script re-imports it; it
    # must not build a server, nor refuse to start one)
    from starlette.middleware import Middleware
    from streamlit import config as _config
    from streamlit.starlette import App

    from app import gate, uploads

    # before it serves anything (Streamlit has bound its port by now, but no request is answered
    # until this import returns): local mode (no login) on an address other machines reach, or a
    # team mode that cannot let anyone in, stops here with the reason
    _problem = auth.startup_problem(_config.get_option("server.address"))
    if _problem:
        print(f"TraceDoctor: {_problem}", file=sys.stderr)
        raise SystemExit(2)
    streamlit_app = App(__file__, routes=uploads.routes() + auth.routes(), middleware=[Middleware(gate.Gate)],
                        on_script_error=show_script_error)
