"""A gate in front of Streamlit's own routes: an ASGI middleware that app/Home.py puts around the
whole server (streamlit.starlette.App(middleware=...)), so it sees every request before Streamlit.

- Streamlit's in-memory upload route (`/_stcore/upload_file/...`) is closed in every mode: the
  dashboard never uses st.file_uploader (uploads stream to disk through app/uploads.py), and that
  route keeps whatever it is sent in the server's memory until the session expires.
- A websocket handshake from a foreign page (an Origin that is neither the request's own host nor
  one of the server's names) is refused here, before Streamlit's origin check, which would look
  the server's external IP up on the internet (an outbound request that blocks the event loop).
- Team mode: a session that has not signed in may send only what the sign-in page needs (run
  the script, heartbeats); Streamlit's media, component, metrics and agent routes answer only a
  browser with a valid sign-in; and no session may clear the server's caches or switch on
  run-on-save (developer controls the dashboard does not offer).

Which websocket belongs to which session is read from Streamlit's first `new_session` message on
it; whether that session is signed in is what app/auth.py recorded when it let the user in.
"""
from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlparse

from streamlit import config
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from app import auth

LOG = logging.getLogger("tracedoctor")

# Streamlit's routes, below server.baseUrlPath
STREAM_ROUTE = "_stcore/stream"
CLOSED_ROUTES = ("_stcore/upload_file/",)
SIGNED_IN_ROUTES = ("media/", "component/", "_stcore/bidi-components/", "_stcore/metrics", "_stcore/agent/",
                    "_stcore/script-health-check", "app/static/")

# What a websocket may ask of its session: before signing in, only what the sign-in page needs;
# after it, everything but the developer controls (clearing every cache, run-on-save).
SIGN_IN_MESSAGES = frozenset({"rerun_script", "app_heartbeat", "stop_script"})
NEVER_IN_TEAM_MODE = frozenset({"clear_cache", "set_run_on_save", "debug_disconnect_websocket",
                                "debug_shutdown_runtime"})


def _route(path: str) -> str:
    """path below server.baseUrlPath, without its leading slash."""
    base = (config.get_option("server.baseUrlPath") or "").strip("/")
    path = path.lstrip("/")
    if base and (path == base or path.startswith(base + "/")):
        path = path[len(base):].lstrip("/")
    return path


def _server_names() -> set[str]:
    """The host names this server answers to: loopback, browser.serverAddress, server.allowedHosts
    and server.corsAllowedOrigins (never anything looked up on the network)."""
    names = {"localhost", "127.0.0.1", "::1"}
    names.add((config.get_option("browser.serverAddress") or "").strip().lower())
    names.update(str(h).strip().lower().rstrip(".") for h in config.get_option("server.allowedHosts") or [])
    for origin in config.get_option("server.corsAllowedOrigins") or []:
        names.add((urlparse(str(origin)).hostname or "").lower())
    names.discard("")
    return names


def origin_allowed(origin: str | None, host: str | None) -> bool:
    """Whether a websocket handshake's Origin is this server's own page: absent (not a browser),
    the request's own host, or one of the server's names (`*.domain` patterns included)."""
    if origin is None:
        return True
    parsed = urlparse(origin)
    if parsed.netloc and parsed.netloc == host:
        return True
    hostname = (parsed.hostname or "").lower().rstrip(".")
    if not hostname:
        return False
    for name in _server_names():
        if name == "*" or name == hostname or (name.startswith("*.") and hostname.endswith(name[1:])):
            return True
    return False


def _headers(scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _cookies(headers: dict[str, str]) -> dict[str, str]:
    from http.cookies import SimpleCookie

    jar = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except Exception:   # a malformed cookie header signs nobody in
        return {}
    return {key: morsel.value for key, morsel in jar.items()}


async def _refuse_http(send, status: int, text: str) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Gate:
    """The ASGI middleware (see the module's docstring)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            route = _route(scope.get("path", ""))
            if route.startswith(CLOSED_ROUTES):
                await _refuse_http(send, 403, "This server takes uploads through its own Load traces page only.")
                return
            if route.startswith(SIGNED_IN_ROUTES) and auth.is_team_mode() \
                    and not auth.browser_signed_in(_cookies(_headers(scope))):
                await _refuse_http(send, 403, "Sign in first.")
                return
        elif scope["type"] == "websocket" and _route(scope.get("path", "")) == STREAM_ROUTE:
            headers = _headers(scope)
            if not origin_allowed(headers.get("origin"), headers.get("host")):
                LOG.warning("refused a websocket from the foreign origin %r", headers.get("origin"))
                await receive()   # the client's connect
                await send({"type": "websocket.close", "code": 1008})
                return
            if auth.is_team_mode():
                await self.app(scope, *_GatedStream().wrap(receive, send))
                return
        await self.app(scope, receive, send)


class _GatedStream:
    """One websocket of a team-mode server: learns its session from the first `new_session`
    message Streamlit sends on it, and passes on only the BackMsgs that session may send."""

    def __init__(self) -> None:
        self.session_id: str | None = None

    def wrap(self, receive, send):
        async def gated_receive() -> dict[str, Any]:
            while True:
                message = await receive()
                if message.get("type") == "websocket.disconnect":
                    auth.forget_session(self.session_id)
                if message.get("type") != "websocket.receive" or message.get("bytes") is None:
                    return message
                kind = self._kind(message["bytes"])
                if kind is None or self._may(kind):
                    return message   # an unreadable frame: Streamlit closes the connection itself
                LOG.warning("dropped a %s message from %s session", kind,
                            "a signed-in" if auth.session_signed_in(self.session_id) else "a not signed-in")

        async def learning_send(message: dict[str, Any]) -> None:
            if self.session_id is None and message.get("type") == "websocket.send" and message.get("bytes"):
                self.session_id = _new_session_id(message["bytes"]) or None
            await send(message)

        return gated_receive, learning_send

    @staticmethod
    def _kind(data: bytes) -> str | None:
        back = BackMsg()
        try:
            back.ParseFromString(data)
        except Exception:
            return None
        return back.WhichOneof("type")

    def _may(self, kind: str) -> bool:
        if kind in NEVER_IN_TEAM_MODE:
            return False
        return kind in SIGN_IN_MESSAGES or auth.session_signed_in(self.session_id)


def _new_session_id(data: bytes) -> str | None:
    forward = ForwardMsg()
    try:
        forward.ParseFromString(data)
    except Exception:
        return None
    if forward.WhichOneof("type") != "new_session":
        return None
    return forward.new_session.initialize.session_id or None
