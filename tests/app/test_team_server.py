"""A running team server attacked over HTTP and its websocket (issue #24: H1, M1, M2): `streamlit
run app/Home.py` in token mode on a free loopback port, driven with bounded raw requests and
BackMsgs the way a script that never signed in would, not through a browser or AppTest."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import psutil
import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.sync.client import connect as ws_connect

from tests.support.app_server import wait_for_dashboard
from tests.support.paths import REPO_ROOT

SAMPLE = REPO_ROOT / "sample_traces" / "cpu_dataloader_tuning_after"
SESSION_SECRET = "team-server-test-secret"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _ProxyTrap:
    """A loopback listener that the server is told is its HTTP(S) proxy: every outbound request
    the server makes arrives here (and is held, unanswered, as a slow internet would)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.5)
        self.connections = 0
        self.held: list[socket.socket] = []
        self.stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            self.held.append(conn)

    def close(self) -> None:
        self.stopped.set()
        for conn in self.held:
            conn.close()
        self.sock.close()


@pytest.fixture(scope="module")
def team_server(tmp_path_factory):
    """Token mode with one maintainer, one tiny sample run, every outbound request trapped:
    {base, proc, db, cookie, trap, log}."""
    from app.auth import add_token, hash_token

    workdir = tmp_path_factory.mktemp("team_server")
    tokens_file = workdir / "tokens.json"
    token = add_token(tokens_file, "max", "maintainer")
    manifest = workdir / "manifest.json"
    manifest.write_text(json.dumps([{"name": "tiny sample", "paths": [str(SAMPLE)], "label": "test"}]))
    trap = _ProxyTrap()
    port = _free_port()
    env = {**os.environ, "TRACEDOCTOR_DB": str(workdir / "store.duckdb"), "TRACEDOCTOR_SAMPLES": str(manifest),
           "TRACEDOCTOR_AUTH": "token", "TRACEDOCTOR_TOKENS_FILE": str(tokens_file),
           "TRACEDOCTOR_SESSION_SECRET": SESSION_SECRET,
           "HTTP_PROXY": trap.url, "HTTPS_PROXY": trap.url, "http_proxy": trap.url, "https_proxy": trap.url,
           "NO_PROXY": "", "no_proxy": ""}
    log_path = workdir / "streamlit.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app/Home.py", "--server.headless", "true",
             "--server.port", str(port), "--server.fileWatcherType", "none"],
            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_for_dashboard(proc, base, log_path, timeout_s=90)
    os.environ[  # the cookie is signed with the server's key: the same secret here
        "TRACEDOCTOR_SESSION_SECRET"] = SESSION_SECRET
    from app import auth

    auth._session_key.cache_clear()
    cookie = auth.session_cookie(hash_token(token))
    try:
        yield {"base": base, "port": port, "proc": proc, "db": workdir / "store.duckdb", "cookie": cookie,
               "trap": trap, "log": log_path}
    finally:
        os.environ.pop("TRACEDOCTOR_SESSION_SECRET", None)
        auth._session_key.cache_clear()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        trap.close()


def _xsrf_cookie(base: str) -> str:
    """The XSRF cookie anyone gets from the health route."""
    response = httpx.get(f"{base}/_stcore/health", timeout=5)
    return response.cookies.get("_streamlit_xsrf") or ""


def _rerun() -> bytes:
    msg = BackMsg()
    msg.rerun_script.query_string = ""
    return msg.SerializeToString()


class _Session:
    """A websocket session of the server, as a script drives it: (cookies) -> session id."""

    def __init__(self, server, cookies: dict[str, str] | None = None, origin: str | None = None):
        xsrf = _xsrf_cookie(server["base"])
        jar = {"_streamlit_xsrf": xsrf, **(cookies or {})}
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in jar.items())}
        self.ws = ws_connect(f"ws://127.0.0.1:{server['port']}/_stcore/stream",
                             subprotocols=["streamlit", xsrf], additional_headers=headers,
                             origin=origin or f"http://127.0.0.1:{server['port']}", open_timeout=10)
        self.session_id = self.run()

    def send(self, data: bytes) -> None:
        self.ws.send(data)

    def run(self, timeout: float = 120) -> str:
        """Run the script once; the session id, once it has finished."""
        self.ws.send(_rerun())
        session_id = ""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            forward = ForwardMsg()
            forward.ParseFromString(self.ws.recv(timeout=timeout))
            kind = forward.WhichOneof("type")
            if kind == "new_session":
                session_id = forward.new_session.initialize.session_id
            elif kind == "script_finished" and session_id:
                return session_id
        raise AssertionError("the script did not finish")

    def close(self) -> None:
        self.ws.close()


def _server_rss(server) -> int:
    return psutil.Process(server["proc"].pid).memory_info().rss


def test_streamlits_upload_route_takes_nothing_from_a_session_never_signed_in(team_server):
    """H1: 1 MB files to Streamlit's own upload route, from a session that never signed in (the XSRF
    cookie from the health route), are refused and the server's memory stays where it was."""
    session = _Session(team_server)
    try:
        xsrf = _xsrf_cookie(team_server["base"])
        before = _server_rss(team_server)
        statuses = set()
        with httpx.Client(base_url=team_server["base"], timeout=10,
                          cookies={"_streamlit_xsrf": xsrf}, headers={"X-Xsrftoken": xsrf}) as client:
            for number in range(100):
                response = client.put(f"/_stcore/upload_file/{session.session_id}/f{number}",
                                      files={"file": (f"f{number}.bin", os.urandom(1_000_000))})
                statuses.add(response.status_code)
        grown_mib = (_server_rss(team_server) - before) / (1 << 20)
    finally:
        session.close()
    assert statuses == {403}, statuses
    assert grown_mib < 40, f"the server grew by {grown_mib:.0f} MiB"


def test_a_session_never_signed_in_cannot_clear_caches_or_bring_a_deleted_run_back(team_server):
    """M1: a raw clear_cache from a session that never signed in is dropped: the sample run a
    maintainer deleted stays in the trash at the next signed-in click (and is not re-ingested)."""
    from analyzers.store import runs
    from analyzers.store.database import connect_waiting

    member = _Session(team_server, cookies={"tracedoctor_session": team_server["cookie"]})
    try:
        con = connect_waiting(team_server["db"], wait_s=30)
        try:
            [run_id] = [r["run_id"] for r in runs.list_runs(con)]
            runs.delete_run(con, run_id, actor="max")
        finally:
            con.close()
        stranger = _Session(team_server)
        msg = BackMsg()
        msg.clear_cache = True
        stranger.send(msg.SerializeToString())
        stranger.run()   # after the clear_cache was handled
        stranger.close()
        member.run()
        con = connect_waiting(team_server["db"], wait_s=30)
        try:
            listed = [r["run_id"] for r in runs.list_runs(con)]
            audit = con.execute("SELECT action, actor FROM audit_log WHERE run_id = ? ORDER BY \"at\"",
                                [run_id]).fetchall()
        finally:
            con.close()
    finally:
        member.close()
    assert run_id not in listed, audit
    assert all(action != "restore" for action, _ in audit), audit
    assert "dropped a clear_cache message" in team_server["log"].read_text()


def test_a_foreign_origin_is_refused_without_any_outbound_lookup(team_server):
    """M2: websocket handshakes with a foreign Origin are refused at once, the server makes no
    outbound request (its external-IP lookup), and the health route answers meanwhile."""
    trap = team_server["trap"]
    before = trap.connections
    refused, started = 0, time.monotonic()
    health_s: list[float] = []

    def handshake() -> None:
        nonlocal refused
        try:
            ws_connect(f"ws://127.0.0.1:{team_server['port']}/_stcore/stream", subprotocols=["streamlit"],
                       origin="http://attacker.example", open_timeout=15).close()
        except Exception:
            refused += 1

    threads = [threading.Thread(target=handshake) for _ in range(10)]
    for thread in threads:
        thread.start()
    for _ in range(3):
        tick = time.monotonic()
        httpx.get(f"{team_server['base']}/_stcore/health", timeout=15)
        health_s.append(time.monotonic() - tick)
    for thread in threads:
        thread.join(30)
    elapsed = time.monotonic() - started
    assert refused == 10
    assert trap.connections == before, "the server made an outbound request"
    assert max(health_s) < 1.0, health_s
    assert elapsed < 5, elapsed


def test_streamlits_media_and_component_routes_need_a_sign_in(team_server):
    """Streamlit's media, component and metrics routes answer a browser without a sign-in with 403;
    with the session cookie they are Streamlit's again (404 for a file that is not there)."""
    base = team_server["base"]
    for route in ("/media/0123456789abcdef.bin", "/component/x/index.html", "/_stcore/metrics",
                  "/_stcore/bidi-components/x/index.js"):
        assert httpx.get(base + route, timeout=10).status_code == 403, route
        signed = httpx.get(base + route, timeout=10, cookies={"tracedoctor_session": team_server["cookie"]})
        assert signed.status_code != 403, route
