"""Team mode and the dashboard's safety (issue #12), through streamlit.testing (AppTest) and the
upload route itself: the token login, what each role sees, the OIDC role from an allow-list,
loading by path only under the data root, the upload route's checks, and plain messages where
the store cannot be used or a run has gone."""
from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from starlette.applications import Starlette
from streamlit.testing.v1 import AppTest

from analyzers.common.safe_text import page_markdown as md
from analyzers.store.database import connect
from app import auth, data_root, uploads
from tests.support.app_store import AFTER_RUN, BEFORE_RUN, build_store
from tests.support.app_pages import HOME, goto, open_app, plain, texts
from tests.support.kineto_traces import _rank_trace

VIEWER_TOKEN_USER, MAINTAINER_TOKEN_USER = "vera", "max"


@pytest.fixture()
def hand_built(tmp_path):
    db = tmp_path / "store.duckdb"
    build_store(db)
    return db


@pytest.fixture()
def tokens(tmp_path, monkeypatch) -> dict[str, str]:
    """Token mode with a viewer and a maintainer token: {role: token}."""
    path = tmp_path / "tokens.json"
    monkeypatch.setenv(auth.AUTH_ENV, "token")
    monkeypatch.setenv(auth.TOKENS_FILE_ENV, str(path))
    return {auth.VIEWER: auth.add_token(path, VIEWER_TOKEN_USER, auth.VIEWER),
            auth.MAINTAINER: auth.add_token(path, MAINTAINER_TOKEN_USER, auth.MAINTAINER)}


def sign_in(monkeypatch, db: Path, token: str, run_id: str | None = BEFORE_RUN) -> AppTest:
    monkeypatch.setenv("TRACEDOCTOR_DB", str(db))
    monkeypatch.setenv("TRACEDOCTOR_SAMPLES", "none")
    at = AppTest.from_file(HOME, default_timeout=120)
    if run_id is not None:
        at.session_state["run_id"] = run_id
    at.run()
    [t for t in at.text_input if t.label == "Access token"][0].input(token)
    [b for b in at.button if b.label == "Sign in"][0].click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def labels(at: AppTest) -> set[str]:
    return {b.label for b in at.button}


# --------------------------------------------------------------------------- tokens and roles

def test_tokens_file_keeps_only_hashes_and_matches_in_constant_time(tmp_path):
    path = tmp_path / "tokens.json"
    token = auth.add_token(path, "alice", auth.MAINTAINER)
    stored = path.read_text()
    assert token not in stored and auth.hash_token(token) in stored
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    entries = auth.read_token_entries(path)
    assert auth.user_for_token(token, entries) == auth.User("alice", auth.MAINTAINER)
    assert auth.user_for_token(token + "x", entries) is None
    assert auth.user_for_token("", entries) is None
    with pytest.raises(ValueError):
        auth.add_token(path, "bob", "admin")


def test_add_token_command_prints_the_token_once(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert auth.main(["add-token", "--user", "carol", "--role", "viewer", "--file", str(path)]) == 0
    token = capsys.readouterr().out.strip()
    assert auth.user_for_token(token, auth.read_token_entries(path)) == auth.User("carol", auth.VIEWER)


def test_the_login_refuses_a_wrong_token_and_shows_nothing_else(hand_built, tokens, monkeypatch):
    at = sign_in(monkeypatch, hand_built, "not-a-token")
    assert any("not valid" in e.value for e in at.error)
    assert not at.metric and not at.dataframe   # no page of the dashboard drew
    assert [t.label for t in at.text_input] == ["Access token"]


def test_a_viewer_reads_and_marks_but_cannot_change_or_load(hand_built, tokens, monkeypatch):
    at = sign_in(monkeypatch, hand_built, tokens[auth.VIEWER])
    assert any(m.label == "Findings" for m in at.metric)          # the overview drew
    assert "Signed in as **vera** (viewer)" in [c.value for c in at.caption]
    goto(at, "views/runs.py")
    assert not {"Save", "Delete run", "Re-analyse", "Restore", "Delete for good"} & labels(at)
    assert "Trash" not in [s.value for s in at.subheader] and "Audit log" not in [s.value for s in at.subheader]
    goto(at, "views/findings.py")
    [s for s in at.selectbox if s.label == "Review"][0].set_value("to_fix")
    [b for b in at.button if b.label == "Save mark"][0].click()
    at.run()
    assert not at.exception
    from analyzers.store.runs import audit_log, get_marks

    con = connect(hand_built)
    try:
        assert get_marks(con, BEFORE_RUN)["launch_gap:r0:s7"]["status"] == "to_fix"
        assert audit_log(con)[0]["actor"] == VIEWER_TOKEN_USER
    finally:
        con.close()


def test_the_load_page_refuses_a_viewer_even_when_reached(hand_built, tokens, monkeypatch):
    at = sign_in(monkeypatch, hand_built, tokens[auth.VIEWER])
    # the page is not in a viewer's navigation; run on its own it still refuses
    monkeypatch.setenv("TRACEDOCTOR_DB", str(hand_built))
    page = AppTest.from_file(str(Path(HOME).parent / "views" / "load.py"), default_timeout=60)
    page.session_state[auth.SESSION_TOKEN_KEY] = at.session_state[auth.SESSION_TOKEN_KEY]
    page.run()
    assert not page.exception
    assert any("Your role cannot load traces" in i.value for i in page.info)
    assert not [t for t in page.text_input if t.label == "File or directory path"]


def test_a_maintainer_deletes_restores_and_reads_the_audit_log(hand_built, tokens, monkeypatch):
    at = goto(sign_in(monkeypatch, hand_built, tokens[auth.MAINTAINER], run_id=AFTER_RUN), "views/runs.py")
    at.checkbox(key=f"confirm-{AFTER_RUN}").check()
    at.run()
    [b for b in at.button if b.label == "Delete run"][0].click()
    at.run()
    assert not at.exception
    assert "Trash" in [s.value for s in at.subheader]
    at.button(key="restore").click()
    at.run()
    from analyzers.store.runs import audit_log

    con = connect(hand_built)
    try:
        rows = [(r["action"], r["actor"]) for r in audit_log(con)[:2]]
    finally:
        con.close()
    assert rows == [("restore", MAINTAINER_TOKEN_USER), ("delete", MAINTAINER_TOKEN_USER)]


def test_re_analyses_and_refused_path_probes_are_in_the_audit_log(hand_built, tokens, monkeypatch, tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    monkeypatch.setenv("TRACEDOCTOR_DATA_ROOT", str(root))
    at = goto(sign_in(monkeypatch, hand_built, tokens[auth.MAINTAINER], run_id=AFTER_RUN), "views/runs.py")
    [b for b in at.button if b.label == "Re-analyse"][0].click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    load_path(goto(at, "views/load.py"), "/etc/passwd")
    from analyzers.store.runs import audit_log

    con = connect(hand_built)
    try:
        rows = [(r["action"], r["actor"], r["run_id"]) for r in audit_log(con)[:2]]
        detail = audit_log(con)[0]["detail"]
    finally:
        con.close()
    assert rows == [("load_path_refused", MAINTAINER_TOKEN_USER, None),
                    ("reanalyse", MAINTAINER_TOKEN_USER, AFTER_RUN)], rows
    assert "/etc/passwd" in detail


def test_viewers_see_no_server_path_in_a_runs_source(tmp_path, tokens, monkeypatch):
    """A run loaded with the CLI from a server path: Manage runs shows its source by name only."""
    from analyzers.ingest import ingest_paths

    samples = Path(HOME).resolve().parents[1] / "sample_traces"
    db = tmp_path / "s.duckdb"
    con = connect(db)
    run_id = ingest_paths(con, [str(samples / "cpu_dataloader_tuning_after")]).run_id
    con.close()
    at = goto(sign_in(monkeypatch, db, tokens[auth.VIEWER], run_id=run_id), "views/runs.py")
    assert not at.exception
    shown = " ".join(str(v) for frame in at.dataframe for v in frame.value["source"])
    assert "cpu_dataloader_tuning_after" in shown and str(samples) not in shown, shown


def test_team_mode_misconfigured_says_so_and_keeps_the_details_in_the_log(hand_built, tmp_path, monkeypatch,
                                                                          caplog):
    """Every visitor reads this page before signing in: the reason (a file's path, an errno)
    goes to the server's log only."""
    unreadable = tmp_path / "secret_dir" / "tokens.json"
    unreadable.mkdir(parents=True)   # a folder where the file should be: "Is a directory: '<path>'"
    for env in ({auth.AUTH_ENV: "kerberos"}, {auth.AUTH_ENV: "token", auth.TOKENS_FILE_ENV: ""},
                {auth.AUTH_ENV: "token", auth.TOKENS_FILE_ENV: str(unreadable)}):
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        caplog.clear()
        at = open_app(monkeypatch, hand_built)
        assert not at.exception, [e.value for e in at.exception]
        shown = texts(at)
        assert "Team mode is not set up on this server" in shown
        assert str(tmp_path) not in shown and "kerberos" not in shown and "Errno" not in shown, shown
        assert "team mode is not set up" in caplog.text   # the one who runs it finds the reason
    assert str(unreadable) in caplog.text


def test_a_server_in_local_mode_refuses_to_listen_beyond_this_machine(monkeypatch):
    monkeypatch.delenv(auth.AUTH_ENV, raising=False)
    for address in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert auth.is_loopback(address) and auth.startup_problem(address) is None, address
    for address in ("0.0.0.0", "::", "", None, "192.168.1.5", "example.com"):
        problem = auth.startup_problem(address)
        assert problem and auth.AUTH_ENV in problem and "127.0.0.1" in problem, address
    monkeypatch.setenv(auth.AUTH_ENV, "token")
    monkeypatch.setenv(auth.TOKENS_FILE_ENV, "/nonexistent/tokens.json")
    assert auth.startup_problem("0.0.0.0") is None   # a team server with a login may listen anywhere
    monkeypatch.setenv(auth.TOKENS_FILE_ENV, "")
    assert "Team mode is not set up" in auth.startup_problem("0.0.0.0")
    monkeypatch.setenv(auth.AUTH_ENV, "oidc")
    monkeypatch.delenv(auth.MAINTAINERS_ENV, raising=False)
    monkeypatch.delenv(auth.VIEWERS_ENV, raising=False)
    assert auth.VIEWERS_ENV in auth.startup_problem("0.0.0.0")   # nobody could sign in
    monkeypatch.setenv(auth.MAINTAINERS_ENV, "lead@example.com")
    assert auth.startup_problem("0.0.0.0") is None   # maintainers only, with a warning in the log


def test_streamlit_run_from_another_directory_refuses_local_mode_on_every_interface(tmp_path):
    """`streamlit run /abs/app/Home.py` from any directory, asked to listen on 0.0.0.0 (as a
    stray ./.streamlit/config.toml there could), does not serve in local mode."""
    import os
    import subprocess
    import sys

    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "config.toml").write_text('[server]\nheadless = true\n')
    env = {**os.environ, "TRACEDOCTOR_AUTH": "", "TRACEDOCTOR_DB": str(tmp_path / "s.duckdb"),
           "TRACEDOCTOR_SAMPLES": "none", "STREAMLIT_SERVER_ADDRESS": "0.0.0.0"}
    done = subprocess.run([sys.executable, "-m", "streamlit", "run", str(Path(HOME).resolve()),
                           "--server.headless", "true", "--server.port", "0", "--server.fileWatcherType", "none"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Refusing to serve" in done.stderr and "TRACEDOCTOR_AUTH" in done.stderr


# --------------------------------------------------------------------------- OIDC

def oidc_app(monkeypatch, db: Path, user: dict, viewers: str | None = "@example.com") -> AppTest:
    monkeypatch.setenv(auth.AUTH_ENV, "oidc")
    monkeypatch.setenv(auth.MAINTAINERS_ENV, "lead@example.com")
    if viewers is None:
        monkeypatch.delenv(auth.VIEWERS_ENV, raising=False)
    else:
        monkeypatch.setenv(auth.VIEWERS_ENV, viewers)
    monkeypatch.setenv("TRACEDOCTOR_DB", str(db))
    monkeypatch.setenv("TRACEDOCTOR_SAMPLES", "none")
    at = AppTest.from_file(HOME, default_timeout=120)
    at.user = {"is_logged_in": True, **user}
    at.session_state["run_id"] = BEFORE_RUN
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.parametrize("email, viewers, role", [
    ("lead@example.com", "@example.com", auth.MAINTAINER), ("dev@example.com", "@example.com", auth.VIEWER),
    ("someone@elsewhere.org", "@example.com", None),
    # no viewer list: maintainers only, never everyone the identity provider knows
    ("lead@example.com", None, auth.MAINTAINER), ("dev@example.com", None, None),
    ("someone@elsewhere.org", None, None)])
def test_oidc_roles_come_from_the_allow_lists(hand_built, monkeypatch, email, viewers, role):
    at = oidc_app(monkeypatch, hand_built, {"email": email, "email_verified": True}, viewers)
    if role is None:
        assert any("may not use this dashboard" in e.value for e in at.error)
        assert not at.metric
    else:
        assert f"Signed in as **{md(email)}** ({role})" in [c.value for c in at.caption]


@pytest.mark.parametrize("verified", [None, False, "true", 1])
def test_oidc_admits_no_address_the_identity_provider_has_not_verified(hand_built, monkeypatch, verified):
    user = {"email": "lead@example.com"} | ({} if verified is None else {"email_verified": verified})
    at = oidc_app(monkeypatch, hand_built, user)
    assert any("may not use this dashboard" in e.value and "verified" in e.value for e in at.error)
    assert not at.metric and not [c for c in at.caption if "Signed in as" in c.value]


def test_names_and_addresses_are_shown_as_text_not_markdown(hand_built, tmp_path, monkeypatch):
    email = "x](http://evil.example)**@example.com"
    at = oidc_app(monkeypatch, hand_built, {"email": email, "email_verified": False})
    refused = [e.value for e in at.error if "may not use" in e.value]
    assert refused and refused[0].startswith(md(email)) and "](http" not in refused[0]
    path = tmp_path / "tokens.json"
    monkeypatch.setenv(auth.AUTH_ENV, "token")
    monkeypatch.setenv(auth.TOKENS_FILE_ENV, str(path))
    token = auth.add_token(path, "**eve** [home](http://evil.example)", auth.VIEWER)
    at = sign_in(monkeypatch, hand_built, token)
    assert f"Signed in as **{md('**eve** [home](http://evil.example)')}** (viewer)" in [c.value for c in at.caption]


def test_oidc_asks_to_sign_in_first(hand_built, monkeypatch):
    monkeypatch.setenv(auth.AUTH_ENV, "oidc")
    monkeypatch.setenv("TRACEDOCTOR_DB", str(hand_built))
    at = AppTest.from_file(HOME, default_timeout=60)
    at.user = {"is_logged_in": False}
    at.run()
    assert "Sign in" in labels(at) and not at.metric


# --------------------------------------------------------------------------- the data root

def write_trace(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_rank_trace(0, 1))
    return path


def load_path(at: AppTest, typed: str) -> AppTest:
    [t for t in at.text_input if t.label == "File or directory path"][0].input(typed)
    at.run()
    [b for b in at.button if b.label == "Analyse this path"][0].click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_team_mode_without_a_data_root_offers_no_path_loading(tmp_path, tokens, monkeypatch):
    monkeypatch.delenv("TRACEDOCTOR_DATA_ROOT", raising=False)
    at = goto(sign_in(monkeypatch, tmp_path / "s.duckdb", tokens[auth.MAINTAINER], run_id=None), "views/load.py")
    assert [t.label for t in at.tabs] == ["Upload files"]
    assert not [t for t in at.text_input if t.label == "File or directory path"]


def test_the_data_root_refuses_paths_and_links_outside_it(tmp_path, tokens, monkeypatch):
    pytest.importorskip("analyzers.ingest")
    root = tmp_path / "data"
    write_trace(root / "job1" / "rank0.json")
    secret = write_trace(tmp_path / "outside" / "secret.json")
    (root / "job2").mkdir()
    (root / "job2" / "rank0.json").symlink_to(secret)
    (root / "escape").symlink_to(tmp_path / "outside")
    monkeypatch.setenv("TRACEDOCTOR_DATA_ROOT", str(root))
    at = goto(sign_in(monkeypatch, tmp_path / "s.duckdb", tokens[auth.MAINTAINER], run_id=None), "views/load.py")
    assert [t.label for t in at.tabs] == ["Upload files", "A path on this machine"]
    for typed in (str(secret), "../outside/secret.json", "escape/secret.json", "/etc", str(tmp_path / "nothing")):
        load_path(at, typed)
        assert any("outside the data root" in plain(e.value) for e in at.error), (typed, [e.value for e in at.error])
    load_path(at, "job2")
    assert any("a link that leads outside the data root" in plain(e.value) for e in at.error)
    load_path(at, "job_missing")
    assert any("no such file or directory under the data root" in plain(e.value) for e in at.error)
    assert not at.success
    load_path(at, "job1")
    assert any("Loaded run" in s.value for s in at.success)
    page = texts(at)
    assert str(tmp_path) not in page   # a shared server's layout is not shown


@pytest.mark.parametrize("swapped", ["file", "folder"])
def test_a_link_swapped_in_after_the_root_check_reads_nothing_outside(tmp_path, tokens, monkeypatch, swapped):
    """A file (or the folder itself) replaced by a link out of the data root between the check and
    ingest's own scan: the outside trace is refused by name and nothing of it is stored."""
    pytest.importorskip("analyzers.ingest")
    root = tmp_path / "data"
    inside = write_trace(root / "job" / "rank0.json")
    outside = tmp_path / "outside"
    secret = outside / "rank0.json"
    secret.parent.mkdir()
    secret.write_bytes(_rank_trace(0, 1).replace(b'"name"', b'"name" ', 1) + b" ")   # other content: another run
    monkeypatch.setenv("TRACEDOCTOR_DATA_ROOT", str(root))
    checked = data_root.resolve

    def check_then_swap(typed: str) -> Path:
        target = checked(typed)
        if swapped == "file":
            inside.unlink()
            inside.symlink_to(secret)
        else:
            shutil.rmtree(root / "job")
            (root / "job").symlink_to(outside)
        return target

    monkeypatch.setattr(data_root, "resolve", check_then_swap)
    db = tmp_path / "s.duckdb"
    at = goto(sign_in(monkeypatch, db, tokens[auth.MAINTAINER], run_id=None), "views/load.py")
    load_path(at, "job")
    assert any("a link that leads outside the data root" in plain(e.value) for e in at.error), \
        [e.value for e in at.error]
    assert not at.success and not any("Loaded run" in s.value for s in at.success)


def test_a_run_whose_partition_file_is_gone_is_a_note_not_figures(tmp_path, tokens, monkeypatch):
    """A rank's Parquet file deleted under a team server: the run's pages say which rank cannot be
    read (no server path), show none of its figures, and raise nothing."""
    from analyzers.store import partitions
    from analyzers.ingest import ingest_paths

    db = tmp_path / "s.duckdb"
    con = connect(db)
    run_id = ingest_paths(con, [str(Path(HOME).parents[1] / "sample_traces" / "cpu_balanced_sampler_before")],
                          events_root=str(tmp_path / "events")).run_id
    os.remove(partitions.locations(con, run_id, 1)[0])
    con.close()
    at = sign_in(monkeypatch, db, tokens[auth.VIEWER], run_id=run_id)
    for page in ("views/overview.py", "views/findings.py", "views/ranks.py"):
        at = goto(at, page)
        assert not at.exception, [e.value for e in at.exception]
        assert any("rank 1 of this run cannot be read" in plain(e.value) for e in at.error), [e.value for e in at.error]
        assert str(tmp_path) not in texts(at)
        assert not at.get("plotly_chart") and not at.dataframe


def test_local_mode_reads_any_path_as_before(tmp_path, monkeypatch):
    pytest.importorskip("analyzers.ingest")
    trace = write_trace(tmp_path / "anywhere" / "rank0.json")
    monkeypatch.delenv("TRACEDOCTOR_DATA_ROOT", raising=False)
    at = goto(open_app(monkeypatch, tmp_path / "s.duckdb"), "views/load.py")
    load_path(at, str(trace.parent))
    assert any("Loaded run" in s.value for s in at.success)


# --------------------------------------------------------------------------- the upload route

def put(ticket_id: str | None, file_id: str, body: bytes, offset: int, size: int, name: str) -> httpx.Response:
    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=Starlette(routes=uploads.routes()))
        async with httpx.AsyncClient(transport=transport, base_url="http://dashboard") as client:
            headers = {"X-Upload-Offset": str(offset), "X-Upload-Size": str(size), "X-Upload-Name": name}
            if ticket_id is not None:
                headers[uploads.TICKET_HEADER] = ticket_id
            return await client.put(uploads.route_path().replace("{file_id}", file_id), content=body, headers=headers)

    return asyncio.run(send())


@pytest.fixture()
def ticket():
    opened = uploads.open_ticket()
    yield opened
    uploads.close_ticket(opened.ticket_id)


def test_uploads_are_capped_per_user_and_in_total(monkeypatch):
    """One user's open uploads share the per-load cap (a second ticket is no way around it), and
    all uploads on the server share TRACEDOCTOR_MAX_UPLOAD_TOTAL_MB; declared sizes count before
    a byte is stored."""
    monkeypatch.setenv(uploads.MAX_UPLOAD_ENV, "3")
    monkeypatch.setenv(uploads.MAX_UPLOAD_TOTAL_ENV, "5")
    mine = [uploads.open_ticket(owner="max") for _ in range(2)]
    theirs = [uploads.open_ticket(owner=name) for name in ("ann", "bob")]
    try:
        two_mb = 2 << 20
        assert put(mine[0].ticket_id, "abcdefgh01", b"x", 0, two_mb, "a.json").status_code == 200
        refused = put(mine[1].ticket_id, "abcdefgh02", b"x", 0, two_mb, "b.json")
        assert refused.status_code == 413 and "one user's" in refused.text
        assert put(theirs[0].ticket_id, "abcdefgh03", b"x", 0, two_mb, "c.json").status_code == 200
        full = put(theirs[1].ticket_id, "abcdefgh04", b"x", 0, two_mb, "d.json")
        assert full.status_code == 507, full.text
    finally:
        for ticket in mine + theirs:
            uploads.close_ticket(ticket.ticket_id)


def test_the_upload_route_needs_a_live_ticket(ticket):
    assert put(None, "abcdefgh01", b"x", 0, 1, "a.json").status_code == 403
    assert put("guessed", "abcdefgh01", b"x", 0, 1, "a.json").status_code == 403
    assert put(ticket.ticket_id, "abcdefgh01", b"x", 0, 1, "a.json").status_code == 200
    uploads.close_ticket(ticket.ticket_id)
    assert put(ticket.ticket_id, "abcdefgh02", b"x", 0, 1, "a.json").status_code == 403
    assert not ticket.directory.exists()


def test_upload_names_never_leave_the_upload_directory(ticket):
    for i, name in enumerate(["../../etc/cron.d/x.json", "..\\..\\evil.json", "..", "/abs/rank0.json", "a\x00b.json"]):
        response = put(ticket.ticket_id, f"file{i:06d}", b"{}", 0, 2, name)
        assert response.status_code == 200, response.text
    names = sorted(f.name for f in ticket.completed())
    assert names == ["ab.json", "evil.json", "rank0.json", "upload", "x.json"]
    for uploaded in ticket.completed():
        assert uploaded.path.resolve().is_relative_to(ticket.directory.resolve())
    assert put(ticket.ticket_id, "../escape", b"{}", 0, 2, "x.json").status_code in (400, 404)


def test_uploads_resume_and_keep_to_the_declared_size_and_the_cap(ticket, monkeypatch):
    assert put(ticket.ticket_id, "resumable1", b"0123", 0, 10, "r.json").json() == {"received": 4, "complete": False}
    stale = put(ticket.ticket_id, "resumable1", b"0123", 0, 10, "r.json")   # a retried slice
    assert stale.status_code == 409 and stale.json()["received"] == 4
    assert put(ticket.ticket_id, "resumable1", b"456789", 4, 10, "r.json").json() == {"received": 10, "complete": True}
    assert ticket.files["resumable1"].path.read_bytes() == b"0123456789"
    assert put(ticket.ticket_id, "toolong001", b"0123456789", 0, 4, "t.json").status_code == 413
    monkeypatch.setenv(uploads.MAX_UPLOAD_ENV, "1")
    refused = put(ticket.ticket_id, "toobig0001", b"", 0, 2 << 20, "big.json")
    assert refused.status_code == 413 and "1 MB" in refused.json()["error"]


# --------------------------------------------------------------------------- plain messages

@pytest.mark.parametrize("team", [False, True])
def test_a_store_that_cannot_be_opened_is_said_plainly(tmp_path, monkeypatch, team):
    blocker = tmp_path / "not_a_folder"   # root writes anywhere: a file in the way stands for read-only
    blocker.write_text("")
    db = blocker / "store.duckdb"
    monkeypatch.setenv("TRACEDOCTOR_DB", str(db))
    monkeypatch.setenv("TRACEDOCTOR_SAMPLES", "none")
    at = AppTest.from_file(HOME, default_timeout=60)
    if team:
        monkeypatch.setenv(auth.AUTH_ENV, "oidc")
        monkeypatch.setenv(auth.VIEWERS_ENV, "@example.com")
        at.user = {"is_logged_in": True, "email": "dev@example.com", "email_verified": True}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert any("cannot be opened or written" in e for e in errors), errors
    assert any(str(db) in e for e in errors) != team   # the path for the one who runs it, not a team


def test_a_store_file_deleted_while_the_server_runs_is_started_afresh(tmp_path, monkeypatch):
    from app import state

    db = tmp_path / "store.duckdb"
    build_store(db)
    monkeypatch.setattr(state, "LINGER_S", 0.05)
    at = open_app(monkeypatch, db, run_id=BEFORE_RUN)
    deadline = time.monotonic() + 10
    while state.lease().is_open and time.monotonic() < deadline:
        time.sleep(0.05)
    db.unlink()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "No run loaded yet" in texts(at)


def test_trace_text_cells_are_shown_csv_safe(hand_built, monkeypatch):
    con = connect(hand_built)
    con.execute("UPDATE runs SET name = '=HYPERLINK(\"http://x\",\"y\")', notes = '@SUM(1)' WHERE run_id = ?",
                [BEFORE_RUN])
    con.close()
    at = goto(open_app(monkeypatch, hand_built, run_id=BEFORE_RUN), "views/runs.py")
    table = at.dataframe[0].value
    row = table[table["run_id"] == BEFORE_RUN].iloc[0]
    assert row["name"] == "'=HYPERLINK(\"http://x\",\"y\")" and row["notes"] == "'@SUM(1)"


def test_a_token_session_cookie_is_signed_expires_and_follows_the_tokens_file(tmp_path):
    path = tmp_path / "tokens.json"
    token = auth.add_token(path, "alice", auth.MAINTAINER)
    entries = auth.read_token_entries(path)
    cookie = auth.session_cookie(auth.hash_token(token), now=1000.0)
    assert token not in cookie
    assert auth.user_for_cookie(cookie, entries, now=1001.0) == auth.User("alice", auth.MAINTAINER)
    assert auth.user_for_cookie(cookie, entries, now=1000.0 + auth.SESSION_HOURS * 3600 + 1) is None
    body, _, signature = cookie.partition(".")
    forged = auth.session_cookie("0" * 64, now=1000.0).partition(".")[0] + "." + signature
    assert auth.user_for_cookie(forged, entries, now=1001.0) is None
    assert auth.user_for_cookie(body, entries, now=1001.0) is None and auth.user_for_cookie(None, entries) is None
    assert auth.user_for_cookie(cookie, [], now=1001.0) is None   # its line removed from the file


def test_a_new_session_with_the_cookie_is_signed_in_and_sign_out_sticks(hand_built, tokens, monkeypatch):
    cookie = auth.session_cookie(auth.hash_token(tokens[auth.VIEWER]))
    monkeypatch.setattr(auth.st.context.__class__, "cookies", property(lambda self: {auth.SESSION_COOKIE: cookie}))
    at = open_app(monkeypatch, hand_built, run_id=BEFORE_RUN)
    assert "Signed in as **vera** (viewer)" in [c.value for c in at.caption]
    at.button(key="sign-out").click()
    at.run()
    at.run()
    assert [t.label for t in at.text_input] == ["Access token"]


def test_a_signed_out_cookie_replayed_signs_nobody_in(hand_built, tokens, monkeypatch):
    """L1: sign-out makes the session cookie worthless at once (not 12 h later), also for a new
    session that replays it, and also after the server restarts with the same secret."""
    cookie = auth.session_cookie(auth.hash_token(tokens[auth.VIEWER]))
    monkeypatch.setattr(auth.st.context.__class__, "cookies", property(lambda self: {auth.SESSION_COOKIE: cookie}))
    at = open_app(monkeypatch, hand_built, run_id=BEFORE_RUN)
    at.button(key="sign-out").click()
    at.run()
    assert auth.cookie_token_hash(cookie) is None
    replay = open_app(monkeypatch, hand_built, run_id=BEFORE_RUN)
    assert [t.label for t in replay.text_input] == ["Access token"]
    auth._signed_out.clear()              # a restart: the sign-out is read back from its file
    auth._signed_out_stamp[0] = None
    assert auth.cookie_token_hash(cookie) is None


def test_the_session_cookie_is_set_by_the_server_http_only(tokens):
    """L1: the browser trades a one-time code for the cookie at the session route, which sets it
    HttpOnly and SameSite=Strict (no page script can read it); a code works once; DELETE clears
    the cookie and signs it out."""
    from starlette.testclient import TestClient

    server = Starlette(routes=auth.routes())
    cookie = auth.session_cookie(auth.hash_token(tokens[auth.VIEWER]))
    code = auth.issue_cookie_code(cookie)
    with TestClient(server) as client:
        response = client.post(auth.SESSION_ROUTE, content=code)
        assert response.status_code == 204
        header = response.headers["set-cookie"]
        assert header.startswith(f"{auth.SESSION_COOKIE}={cookie}") and "HttpOnly" in header
        assert "samesite=strict" in header.lower()
        assert client.post(auth.SESSION_ROUTE, content=code).status_code == 403   # once only
        cleared = client.delete(auth.SESSION_ROUTE, cookies={auth.SESSION_COOKIE: cookie})
        assert cleared.status_code == 204 and "Max-Age=0" in cleared.headers["set-cookie"]
    assert auth.cookie_token_hash(cookie) is None


def test_a_viewer_on_an_empty_store_gets_no_link_to_a_page_it_lacks(tmp_path, tokens, monkeypatch):
    at = sign_in(monkeypatch, tmp_path / "empty.duckdb", tokens[auth.VIEWER], run_id=None)
    for page in ("views/overview.py", "views/timeline.py", "views/compare.py", "views/runs.py"):
        goto(at, page)   # no exception: a link to Load traces would be one
        if page in ("views/overview.py", "views/timeline.py"):
            assert "A maintainer of this server loads" in texts(at)


@pytest.mark.parametrize("deleted, shown", [((AFTER_RUN,), BEFORE_RUN), ((AFTER_RUN, BEFORE_RUN), None)])
def test_a_run_deleted_by_someone_else_is_said_plainly(hand_built, monkeypatch, deleted, shown):
    from analyzers.store.runs import delete_run

    at = open_app(monkeypatch, hand_built, run_id=AFTER_RUN)
    con = connect(hand_built)
    try:
        for run_id in deleted:
            delete_run(con, run_id, actor="someone else")
    finally:
        con.close()
    goto(at, "views/timeline.py")
    assert any("no longer stored" in w.value for w in at.warning)
    if shown:
        assert at.session_state["run_id"] == shown
    else:
        assert "No run loaded yet" in texts(at)


# --------------------------------------------------------------------------- revoking a token

def rewrite_tokens(path: Path, change) -> None:
    """Edit the tokens file in place (as an admin's editor would: same inode)."""
    import json

    data = json.loads(path.read_text())
    data["tokens"] = [e for e in (change(dict(e)) for e in data["tokens"]) if e is not None]
    path.write_text(json.dumps(data, indent=2))


def test_removing_a_token_signs_its_open_session_out_at_the_next_click(hand_built, tokens, monkeypatch, tmp_path):
    at = sign_in(monkeypatch, hand_built, tokens[auth.MAINTAINER])
    assert "Signed in as **max** (maintainer)" in [c.value for c in at.caption]
    path = tmp_path / "tokens.json"
    rewrite_tokens(path, lambda e: {**e, "role": auth.VIEWER} if e["user"] == MAINTAINER_TOKEN_USER else e)
    at.run()
    assert "Signed in as **max** (viewer)" in [c.value for c in at.caption]   # the new role, at once
    goto(at, "views/runs.py")
    assert "Delete run" not in labels(at)
    rewrite_tokens(path, lambda e: None if e["user"] == MAINTAINER_TOKEN_USER else e)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.label for t in at.text_input] == ["Access token"] and not at.metric
    at.run()   # and it stays signed out
    assert [t.label for t in at.text_input] == ["Access token"]


def test_the_tokens_file_is_parsed_again_only_when_it_changes(tmp_path, monkeypatch):
    path = tmp_path / "tokens.json"
    monkeypatch.setenv(auth.TOKENS_FILE_ENV, str(path))
    assert auth.token_entries() == []
    auth.add_token(path, "alice", auth.VIEWER)
    first = auth.token_entries()
    assert [e["user"] for e in first] == ["alice"] and auth.token_entries() is first   # cached
    auth.add_token(path, "bob", auth.VIEWER)
    assert [e["user"] for e in auth.token_entries()] == ["alice", "bob"]


def test_an_upload_ticket_of_a_revoked_token_stops_working(tokens, tmp_path):
    path = tmp_path / "tokens.json"
    opened = uploads.open_ticket(auth.hash_token(tokens[auth.MAINTAINER]))
    try:
        assert put(opened.ticket_id, "revoked001", b"{", 0, 2, "a.json").status_code == 200
        rewrite_tokens(path, lambda e: {**e, "role": auth.VIEWER} if e["user"] == MAINTAINER_TOKEN_USER else e)
        assert put(opened.ticket_id, "revoked001", b"}", 1, 2, "a.json").status_code == 403
        assert uploads.get_ticket(opened.ticket_id) is None and not opened.directory.exists()
    finally:
        uploads.close_ticket(opened.ticket_id)
    opened = uploads.open_ticket(auth.hash_token(tokens[auth.MAINTAINER]))
    try:
        rewrite_tokens(path, lambda e: None if e["user"] == MAINTAINER_TOKEN_USER else e)
        assert put(opened.ticket_id, "revoked002", b"{}", 0, 2, "a.json").status_code == 403
    finally:
        uploads.close_ticket(opened.ticket_id)


# --------------------------------------------------------------------------- upload names and full disks

def test_long_upload_names_are_cut_keeping_their_extension(ticket):
    for i, (name, ending) in enumerate([("a" * 300 + ".json", ".json"), ("é" * 130 + ".json.gz", ".json.gz"),
                                        ("日本" * 80 + ".tar.gz", ".tar.gz"), ("b" * 400, "b")]):
        response = put(ticket.ticket_id, f"longname{i:02d}", b"{}", 0, 2, quote(name))
        assert response.status_code == 200, response.text
        stored = ticket.files[f"longname{i:02d}"]
        assert len(stored.name.encode()) <= uploads.MAX_NAME_BYTES and stored.name.endswith(ending)
        assert stored.path.read_bytes() == b"{}"


def test_a_file_the_server_cannot_create_is_refused_in_words_and_a_retry_works(ticket, monkeypatch):
    import errno

    real_touch = Path.touch

    def too_long(self, *args, **kwargs):
        raise OSError(errno.ENAMETOOLONG, "File name too long", str(self))

    monkeypatch.setattr(Path, "touch", too_long)
    refused = put(ticket.ticket_id, "retryname1", b"{}", 0, 2, "r.json")
    assert refused.status_code == 400 and "File name too long" in refused.json()["error"]
    assert str(ticket.directory) not in refused.text
    monkeypatch.setattr(Path, "touch", real_touch)
    retried = put(ticket.ticket_id, "retryname1", b"{}", 0, 2, "r.json")   # its folder is already there
    assert retried.status_code == 200 and retried.json()["complete"]


@pytest.fixture()
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs (skips where mounting is not permitted)."""
    import shutil
    import subprocess

    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_never_completes_an_upload_with_zeros(small_tmpfs, monkeypatch):
    """A slice that hits ENOSPC: `received` is what is really on disk (no buffered bytes counted,
    no zeros padded in), and the upload resumes from there once space is free."""
    import os

    monkeypatch.setenv("TRACEDOCTOR_TMPDIR", str(small_tmpfs))
    opened = uploads.open_ticket()
    data = bytes(range(256)) * 24   # 6144 bytes: a whole page, then part of a second
    try:
        first = put(opened.ticket_id, "fulldisk01", data[:4096], 0, len(data), "full.json")
        assert first.json() == {"received": 4096, "complete": False}
        filler = small_tmpfs / "filler"
        with open(filler, "wb", buffering=0) as out:   # fill the rest of the tmpfs
            try:
                while out.write(b"\0" * 4096):
                    pass
            except OSError:
                pass
        full = put(opened.ticket_id, "fulldisk01", data[4096:], 4096, len(data), "full.json")
        assert full.status_code == 507, full.text
        uploaded = opened.files["fulldisk01"]
        on_disk = uploaded.path.read_bytes()
        assert uploaded.received == len(on_disk) == os.stat(uploaded.path).st_size
        assert on_disk == data[:len(on_disk)]   # no zeros where bytes were lost
        filler.unlink()
        resumed = put(opened.ticket_id, "fulldisk01", data[uploaded.received:], uploaded.received, len(data),
                      "full.json")
        assert resumed.json() == {"received": len(data), "complete": True}
        assert uploaded.path.read_bytes() == data
    finally:
        uploads.close_ticket(opened.ticket_id)


def test_short_writes_are_followed_and_received_follows_the_disk(ticket, monkeypatch):
    import errno
    import os

    real_write, calls = os.write, []

    def short_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:3]))   # a short write
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(uploads.os, "write", short_then_full)
    assert put(ticket.ticket_id, "shortwrite", b"0123456789", 0, 20, "s.json").json() == \
        {"received": 10, "complete": False}
    full = put(ticket.ticket_id, "shortwrite", b"abcdefghij", 10, 20, "s.json")
    assert full.status_code == 507 and full.json()["received"] == 10
    assert ticket.files["shortwrite"].path.read_bytes() == b"0123456789"
    assert put(ticket.ticket_id, "shortwrite", b"abcdefghij", 10, 20, "s.json").json() == \
        {"received": 20, "complete": True}


def test_uploads_take_as_many_files_as_a_directory_load():
    from analyzers.ingest.sources import Limits

    assert uploads.MAX_FILES == Limits().max_files_per_dir


# --------------------------------------------------------------------------- plain messages, no server details

def test_a_team_page_never_quotes_the_store_path_or_breaks_on_an_empty_error(tmp_path, monkeypatch):
    from app import state

    secret = str(tmp_path / "srv" / "store.duckdb")
    for cause in (RuntimeError(f'IO Error: Cannot open file "{secret}": Resource busy'), RuntimeError()):
        def refuse(cause=cause):
            raise state.StoreUnavailable(cause)

        monkeypatch.setattr(state, "ensure_samples_loaded", refuse)
        at = oidc_app(monkeypatch, tmp_path / "s.duckdb", {"email": "lead@example.com", "email_verified": True})
        shown = texts(at)
        assert "cannot be opened or written" in shown and secret not in shown and "Resource busy" not in shown
    assert str(state.StoreUnavailable(RuntimeError())) == "RuntimeError"


def test_a_nul_byte_or_an_overlong_path_is_refused_in_words(tmp_path, monkeypatch):
    monkeypatch.delenv("TRACEDOCTOR_DATA_ROOT", raising=False)
    at = goto(open_app(monkeypatch, tmp_path / "s.duckdb"), "views/load.py")
    for typed in ("/etc/pass\x00wd", "/" + "x" * 5000):
        load_path(at, typed)
        assert at.error, typed
    from app import data_root

    with pytest.raises(data_root.PathRefused, match="NUL"):
        data_root.resolve("a\x00b")
    monkeypatch.setenv("TRACEDOCTOR_DATA_ROOT", str(tmp_path))
    with pytest.raises(data_root.PathRefused, match="NUL"):
        data_root.resolve("a\x00b")


def test_the_data_root_is_shown_as_it_is_in_local_mode(tmp_path, monkeypatch):
    root = tmp_path / "trace_root-1"
    root.mkdir()
    monkeypatch.delenv(auth.AUTH_ENV, raising=False)
    monkeypatch.setenv("TRACEDOCTOR_DATA_ROOT", str(root))
    at = goto(open_app(monkeypatch, tmp_path / "s.duckdb"), "views/load.py")
    assert any(f"(`{root}`)" in c.value for c in at.caption), [c.value for c in at.caption]


def test_code_spans_show_any_text_exactly():
    from app.data_root import code_span

    assert code_span(r"C:\traces\job_1") == r"`C:\traces\job_1`"
    assert code_span("a`b") == "``a`b``" and code_span("`x") == "`` `x ``"


def test_a_sign_in_whose_cookie_code_holds_two_underscores_draws_the_page(hand_built, tokens, monkeypatch):
    """The cookie writer is drawn with a key per sign-in code, a url-safe secret that now and then
    holds "__" (refused by Streamlit in a component's key): the signed-in page must draw anyway."""
    import secrets

    real = secrets.token_urlsafe
    monkeypatch.setattr(secrets, "token_urlsafe", lambda nbytes=32: "__" + real(nbytes))
    at = sign_in(monkeypatch, hand_built, tokens[auth.VIEWER])
    assert any("Signed in as" in plain(m.value) for m in list(at.markdown) + list(at.caption)), labels(at)
