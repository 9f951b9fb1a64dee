"""Who uses the dashboard and what they may do.

Local mode (the default: TRACEDOCTOR_AUTH unset) is a single user on their own machine: the
server listens on 127.0.0.1 only (app/.streamlit/config.toml, read whatever the working
directory; the server refuses to start in local mode on any other address), there is no login,
and that user may do everything. Team mode is for a shared server, with one of two logins:

- `TRACEDOCTOR_AUTH=token`: shared tokens for a small team. TRACEDOCTOR_TOKENS_FILE lists each
  token's SHA-256 with the user and role it stands for (`python -m app.auth add-token` writes
  one); tokens themselves are never stored.
- `TRACEDOCTOR_AUTH=oidc`: Streamlit's own OpenID Connect login (st.login, configured under
  [auth] in .streamlit/secrets.toml). Only an address the identity provider says is verified
  (email_verified) gets in. Addresses in TRACEDOCTOR_MAINTAINERS are maintainers, those in
  TRACEDOCTOR_VIEWERS viewers (addresses or @domain); with TRACEDOCTOR_VIEWERS unset only
  maintainers get in (never "everyone the identity provider knows").

A token session keeps the token's hash and looks it up in the tokens file again on every click
(the parsed file is cached by its mtime): removing a line, or changing its role, takes effect
at the holder's next click, and their upload ticket stops working at its next slice.

Roles: a viewer reads every page and marks findings (a review is what viewers are for); a
maintainer also loads traces (upload, or a path under TRACEDOCTOR_DATA_ROOT), renames, tags,
re-analyses, deletes and restores runs, and reads the audit log.
"""
from __future__ import annotations

import argparse
import base64
import functools
import getpass
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import secrets
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from analyzers.common.safe_text import page_markdown

AUTH_ENV = "TRACEDOCTOR_AUTH"
TOKENS_FILE_ENV = "TRACEDOCTOR_TOKENS_FILE"
MAINTAINERS_ENV = "TRACEDOCTOR_MAINTAINERS"
VIEWERS_ENV = "TRACEDOCTOR_VIEWERS"
OIDC_PROVIDER_ENV = "TRACEDOCTOR_OIDC_PROVIDER"

LOCAL, TOKEN, OIDC = "local", "token", "oidc"
VIEWER, MAINTAINER = "viewer", "maintainer"

# What each role may do. Pages ask `can(action)` and show only the controls it allows.
VIEWER_ACTIONS = frozenset({"view", "mark"})
MAINTAINER_ACTIONS = VIEWER_ACTIONS | {"upload", "load_path", "edit", "delete", "restore", "audit"}
ROLE_ACTIONS = {VIEWER: VIEWER_ACTIONS, MAINTAINER: MAINTAINER_ACTIONS}

SESSION_TOKEN_KEY = "_auth_token_sha256"   # a token session: its token's hash, looked up on every click
SESSION_SECRET_ENV = "TRACEDOCTOR_SESSION_SECRET"
SESSION_COOKIE = "tracedoctor_session"
SESSION_HOURS = 12            # a token sign-in survives reloads this long (in this browser)
_COOKIE_TODO_KEY = "_auth_cookie_todo"   # ("POST", one-time code) or ("DELETE", ""): the session route's next call
_ISSUED_COOKIE_KEY = "_auth_issued_cookie"   # the cookie this session's sign-in was given (signed out with it)
_SIGNED_OUT_KEY = "_auth_signed_out"   # this session's cookies are a snapshot: never read them after a sign-out


LOG = logging.getLogger("tracedoctor")


class AuthConfigError(Exception):
    """Team mode is asked for but not set up well enough to let anyone in. The details (a file's
    path, an errno) go to the server's log; a visitor's page only says that it is not set up."""


@dataclass(frozen=True)
class User:
    name: str
    role: str

    def can(self, action: str) -> bool:
        return action in ROLE_ACTIONS.get(self.role, frozenset())


def mode() -> str:
    """local, token or oidc, from TRACEDOCTOR_AUTH."""
    value = os.environ.get(AUTH_ENV, "").strip().lower()
    if value in ("", "none", "local", "off"):
        return LOCAL
    if value in (TOKEN, OIDC):
        return value
    raise AuthConfigError(f"{AUTH_ENV}={value!r} is not a login this dashboard knows: use 'token' or 'oidc', "
                          "or leave it unset for local mode (no login, this machine only)")


def is_team_mode() -> bool:
    return mode() != LOCAL


def is_loopback(address: str | None) -> bool:
    """Whether a server address (server.address) takes connections from this machine only:
    127.0.0.0/8, ::1 or localhost. Unset or empty means every interface."""
    value = (address or "").strip().strip("[]")
    if value.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(value).is_loopback
    except ValueError:
        return False


def startup_problem(address: str | None) -> str | None:
    """Why this server must not start as configured, else None: app/Home.py asks when the server
    loads it, before it serves any request, and exits with the reason.

    Local mode has no login and lets its user read any path the server can: it may only listen
    on a loopback address. Team mode must name a login this dashboard knows, token mode its
    tokens file, and OIDC at least one allow-list."""
    try:
        current = mode()
        if current == TOKEN:
            tokens_file()
    except AuthConfigError as exc:
        return f"Team mode is not set up: {exc}."
    if current == LOCAL and not is_loopback(address):
        shown = address or "(unset: every interface)"
        return (f"Refusing to serve: server.address is {shown}, but local mode (no login; its user may load "
                f"any path on this machine) only listens on 127.0.0.1. For a server others reach, set "
                f"{AUTH_ENV}=token or {AUTH_ENV}=oidc (README, Team mode); to use it yourself, drop "
                "STREAMLIT_SERVER_ADDRESS / --server.address.")
    if current == OIDC and not os.environ.get(MAINTAINERS_ENV, "").strip() \
            and not os.environ.get(VIEWERS_ENV, "").strip():
        return (f"Team mode is not set up: {AUTH_ENV}=oidc lets in only the addresses in {MAINTAINERS_ENV} "
                f"(maintainers) and {VIEWERS_ENV} (viewers), and both are unset.")
    if current == OIDC and not os.environ.get(VIEWERS_ENV, "").strip():
        LOG.warning("team mode: %s is unset, so only the addresses in %s may sign in", VIEWERS_ENV, MAINTAINERS_ENV)
    return None


# --------------------------------------------------------------------------- tokens

def hash_token(token: str) -> str:
    """What the tokens file stores for a token: its SHA-256, hex (tokens are 256 random bits,
    so a fast hash is enough; nothing guessable to stretch)."""
    return hashlib.sha256(token.strip().encode()).hexdigest()


def tokens_file() -> Path:
    value = os.environ.get(TOKENS_FILE_ENV, "").strip()
    if not value:
        raise AuthConfigError(f"{AUTH_ENV}=token needs {TOKENS_FILE_ENV}: the file of token hashes "
                              "(python -m app.auth add-token --user NAME --role viewer|maintainer writes it)")
    return Path(value).expanduser()


def read_token_entries(path: Path) -> list[dict[str, str]]:
    """The file's entries, [{"user", "role", "sha256"}]; an absent file has none."""
    if not path.exists():
        return []
    try:
        entries = json.loads(path.read_text()).get("tokens", [])
    except (OSError, ValueError, AttributeError) as exc:
        raise AuthConfigError(f"the tokens file cannot be read: {exc}") from exc
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("role") not in ROLE_ACTIONS or not entry.get("user") \
                or len(str(entry.get("sha256", ""))) != 64:
            raise AuthConfigError("the tokens file has an entry without user, role (viewer or maintainer) "
                                  "and sha256")
    return entries


_entries_cache: dict[str, tuple[tuple[int, int, int], list[dict[str, str]]]] = {}
_entries_lock = threading.Lock()


def token_entries() -> list[dict[str, str]]:
    """The tokens file's entries as they are now: parsed again only when its mtime, size or
    inode changed (add-token replaces the file, so each write is a new inode)."""
    path = tokens_file()
    try:
        info = path.stat()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise AuthConfigError(f"the tokens file cannot be read: {exc}") from exc
    stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
    with _entries_lock:
        cached = _entries_cache.get(str(path))
        if cached is not None and cached[0] == stamp:
            return cached[1]
    entries = read_token_entries(path)
    with _entries_lock:
        _entries_cache[str(path)] = (stamp, entries)
    return entries


def user_for_token_hash(digest: str | None, entries: list[dict[str, str]]) -> User | None:
    """The user a token's hash stands for in entries, or None. Every entry is compared in
    constant time, so the answer's timing tells nothing about which hashes are close."""
    if not isinstance(digest, str) or not digest:
        return None
    found = None
    for entry in entries:
        if hmac.compare_digest(digest.lower(), entry["sha256"].lower()):
            found = User(entry["user"], entry["role"])
    return found


def user_for_token(token: str, entries: list[dict[str, str]]) -> User | None:
    """The user a token stands for, or None."""
    return user_for_token_hash(hash_token(token), entries)


def token_hash_may(digest: str | None, action: str) -> bool:
    """Whether the token with this hash is still listed with a role that may do action (the
    upload route asks this on every slice; an unreadable tokens file says no)."""
    try:
        user = user_for_token_hash(digest, token_entries())
    except AuthConfigError as exc:
        LOG.error("team mode: %s", exc)
        return False
    return user is not None and user.can(action)


def add_token(path: Path, user: str, role: str) -> str:
    """A new random token for user with role: its hash is added to the file (written atomically,
    readable by its owner only), the token itself is returned once and kept nowhere."""
    if role not in ROLE_ACTIONS:
        raise ValueError(f"role must be one of {', '.join(ROLE_ACTIONS)}")
    if not user.strip():
        raise ValueError("a token needs a user name (it appears in the audit log)")
    entries = read_token_entries(path)
    token = secrets.token_urlsafe(32)
    entries.append({"user": user.strip(), "role": role, "sha256": hash_token(token)})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as out:   # mkstemp makes it 0600
        json.dump({"tokens": entries}, out, indent=2)
    os.replace(tmp, path)
    return token


# --------------------------------------------------------------------------- token sessions
# A token sign-in is kept in a cookie so a reload or a typed URL does not sign the user out. The
# cookie holds the token's hash (not the token), an expiry and an HMAC over both; each new session
# checks the HMAC, the expiry, and that the tokens file still lists the hash (removing a line
# from the file signs its holder out everywhere).

@functools.cache
def _session_key() -> bytes:
    """TRACEDOCTOR_SESSION_SECRET, else a random key for this server process (a restart then
    signs everyone out)."""
    value = os.environ.get(SESSION_SECRET_ENV, "").encode()
    return hashlib.sha256(value).digest() if value else secrets.token_bytes(32)


def session_cookie(token_hash: str, now: float | None = None) -> str:
    body = base64.urlsafe_b64encode(json.dumps(
        {"h": token_hash, "exp": int((now or time.time()) + SESSION_HOURS * 3600),
         "id": secrets.token_urlsafe(12)}).encode()).decode().rstrip("=")   # no '=': a cookie value unquoted
    return f"{body}.{hmac.new(_session_key(), body.encode(), hashlib.sha256).hexdigest()}"


def _cookie_claims(cookie: str | None) -> dict | None:
    """A session cookie's claims when its signature holds (expiry and sign-out not checked)."""
    if not isinstance(cookie, str):
        return None
    body, _, signature = cookie.partition(".")
    expected = hmac.new(_session_key(), body.encode(), hashlib.sha256).hexdigest()
    if not body or not hmac.compare_digest(signature, expected):
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except ValueError:
        return None
    return claims if isinstance(claims, dict) else None


# Cookies signed out before they expire, by id: kept in memory and, in token mode, in a file beside
# the tokens file (<tokens file>.signed-out), so that a restart with the same
# TRACEDOCTOR_SESSION_SECRET does not make them valid again.
_signed_out: dict[str, float] = {}
_signed_out_stamp: list[tuple[int, int] | None] = [None]


def _signed_out_file() -> Path | None:
    try:
        path = tokens_file()
    except AuthConfigError:
        return None
    return path.with_name(path.name + ".signed-out")


def _load_signed_out() -> None:
    path = _signed_out_file()
    try:
        info = path.stat() if path else None
    except OSError:
        return
    stamp = (info.st_mtime_ns, info.st_size) if info else None
    if info is None or stamp == _signed_out_stamp[0]:
        return
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    with _entries_lock:
        if isinstance(entries, dict):
            _signed_out.update({str(k): float(v) for k, v in entries.items() if isinstance(v, (int, float))})
        _signed_out_stamp[0] = stamp


def sign_out_cookie(cookie: str | None) -> None:
    """Make a session cookie worthless before it expires (a sign-out): a replay of it signs
    nobody in."""
    claims = _cookie_claims(cookie)
    if not claims or not isinstance(claims.get("id"), str):
        return
    now = time.time()
    with _entries_lock:
        _signed_out[claims["id"]] = float(claims.get("exp") or now)
        for key in [k for k, exp in _signed_out.items() if exp < now]:   # expired: no longer worth keeping
            del _signed_out[key]
        kept = dict(_signed_out)
    path = _signed_out_file()
    if path is None:
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as out:
            json.dump(kept, out)
        os.replace(tmp, path)
    except OSError as exc:
        LOG.error("team mode: the sign-out could not be kept in %s: %s", path, exc)


def cookie_token_hash(cookie: str | None, now: float | None = None) -> str | None:
    """The token hash a session cookie carries while its signature and expiry hold and it was
    not signed out."""
    claims = _cookie_claims(cookie)
    if claims is None:
        return None
    _load_signed_out()
    if claims.get("id") in _signed_out:
        return None
    if not isinstance(claims.get("exp"), (int, float)) \
            or claims["exp"] < (now or time.time()) or not isinstance(claims.get("h"), str):
        return None
    return claims["h"]


def user_for_cookie(cookie: str | None, entries: list[dict[str, str]], now: float | None = None) -> User | None:
    """The user a session cookie stands for while it is valid and its token still listed."""
    return user_for_token_hash(cookie_token_hash(cookie, now), entries)


# The browser asks the session route to set (POST, with a one-time code) or clear (DELETE) the
# cookie: the server sets it HttpOnly, so no script on the page can read it.
_COOKIE_JS = """
export default function ({ data }) {
  fetch(data.url, { method: data.method, body: data.code || null, credentials: "same-origin",
                    headers: { "Content-Type": "text/plain" } });
}
"""
SESSION_ROUTE = "/api/session"
_CODE_TTL_S = 120
_pending_cookies: dict[str, tuple[str, float]] = {}   # one-time code -> (the cookie it sets, until when)


def issue_cookie_code(cookie: str) -> str:
    """A one-time code the browser trades at the session route for `cookie` (within 2 minutes)."""
    code = secrets.token_urlsafe(32)
    now = time.time()
    with _entries_lock:
        for key in [k for k, (_, until) in _pending_cookies.items() if until < now]:
            del _pending_cookies[key]
        _pending_cookies[code] = (cookie, now + _CODE_TTL_S)
    return code


def session_route_path() -> str:
    from streamlit import config

    base = (config.get_option("server.baseUrlPath") or "").strip("/")
    return (f"/{base}" if base else "") + SESSION_ROUTE


async def _session_route(request):
    """POST a one-time code: the session cookie it stands for is set, HttpOnly. DELETE: the cookie
    the browser holds is signed out and cleared."""
    from starlette.responses import Response

    secure = request.url.scheme == "https" or request.headers.get("x-forwarded-proto", "").lower() == "https"
    response = Response(status_code=204)
    if request.method == "DELETE":
        sign_out_cookie(request.cookies.get(SESSION_COOKIE))
        response.delete_cookie(SESSION_COOKIE, path="/", secure=secure, httponly=True, samesite="strict")
        return response
    code = (await request.body())[:200].decode("ascii", "replace").strip()
    with _entries_lock:
        pending = _pending_cookies.pop(code, None)
    if pending is None or pending[1] < time.time():
        return Response("This sign-in has expired; sign in again.", status_code=403)
    response.set_cookie(SESSION_COOKIE, pending[0], max_age=SESSION_HOURS * 3600, path="/", secure=secure,
                        httponly=True, samesite="strict")
    return response


def routes() -> list:
    """The session route for streamlit.starlette.App."""
    from starlette.routing import Route

    return [Route(session_route_path(), _session_route, methods=["POST", "DELETE"])]


def component_key(prefix: str, secret: str) -> str:
    """A widget key for a custom component drawn per secret (a sign-in code, an upload ticket): hex
    of the secret's hash, since Streamlit refuses a component key holding "__", which a url-safe
    secret contains now and then, and the secret itself stays out of the page's element ids."""
    return f"{prefix}-{hashlib.sha256(secret.encode()).hexdigest()[:16]}"


@functools.cache
def _cookie_writer():
    return st.components.v2.component("tracedoctor_session_cookie", js=_COOKIE_JS)


def _write_pending_cookie() -> None:
    """Set or clear the session cookie in the browser, as the last sign-in or sign-out asked."""
    todo = st.session_state.pop(_COOKIE_TODO_KEY, None)
    if todo is not None:
        method, code = todo
        _cookie_writer()(data={"url": session_route_path(), "method": method, "code": code},
                         key=component_key(f"cookie-{method}", code))


def _token_session_user() -> User | None:
    """This session's user, looked up again in the tokens file (as it is now) on every click: a
    token removed from the file, or given another role, is followed at once."""
    entries = token_entries()   # first: a tokens file that cannot be read is said before any sign-in
    digest = st.session_state.get(SESSION_TOKEN_KEY)
    from_cookie = digest is None and not st.session_state.get(_SIGNED_OUT_KEY)
    if from_cookie:
        digest = cookie_token_hash(st.context.cookies.get(SESSION_COOKIE))
    if digest is None:
        return None
    user = user_for_token_hash(digest, entries)
    if user is None:   # revoked (or a stale cookie): sign this session out, cookie included
        if not from_cookie:
            st.session_state.pop(SESSION_TOKEN_KEY, None)
            st.session_state[_SIGNED_OUT_KEY] = True
            st.session_state[_COOKIE_TODO_KEY] = ("DELETE", "")
        return None
    st.session_state[SESSION_TOKEN_KEY] = digest
    return user


def session_token_hash() -> str | None:
    """The token hash this session signed in with (token mode), else None: what an upload
    ticket is tied to, so the route can ask the tokens file whether it still may upload."""
    if mode() != TOKEN:
        return None
    return st.session_state.get(SESSION_TOKEN_KEY)


# --------------------------------------------------------------------------- OIDC

def _listed(email: str, env_var: str) -> bool:
    """Whether email is in the comma-separated list of env_var (exact address or @domain)."""
    email = email.strip().lower()
    for item in os.environ.get(env_var, "").split(","):
        item = item.strip().lower()
        if item and (email == item or (item.startswith("@") and email.endswith(item))):
            return True
    return False


def oidc_user() -> User | None:
    """The signed-in OIDC user with their role; None when nobody is signed in, the identity
    provider does not say the address is verified (anyone can put any address on an account
    of some providers), or the address is on neither list. TRACEDOCTOR_VIEWERS unset admits
    maintainers only: never everyone the identity provider knows."""
    if not st.user.get("is_logged_in"):
        return None
    email = str(st.user.get("email") or "")
    if not email or st.user.get("email_verified") is not True:
        return None
    if _listed(email, MAINTAINERS_ENV):
        return User(email, MAINTAINER)
    if _listed(email, VIEWERS_ENV):
        return User(email, VIEWER)
    return None


# --------------------------------------------------------------------------- the current user

def current_user() -> User | None:
    """Who is using this session, None until they sign in (team mode). Team mode records the
    answer for the session, so that app/gate.py lets its websocket ask for no more than it may."""
    current = mode()
    if current == LOCAL:
        return User(_local_user_name(), MAINTAINER)
    user = _token_session_user() if current == TOKEN else oidc_user()
    _record_session(user, st.session_state.get(SESSION_TOKEN_KEY) if current == TOKEN else None)
    return user


# Streamlit session id -> the token hash it signed in with (token mode; None under OIDC), for the
# sessions signed in now. Read by the gate on every message; an entry leaves at sign-out, revocation
# or when its websocket closes (a reconnecting session is recorded again at its next run).
_signed_in_sessions: dict[str, str | None] = {}


def _record_session(user: User | None, token_hash: str | None) -> None:
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is None:
        return
    if user is None:
        _signed_in_sessions.pop(ctx.session_id, None)
    else:
        _signed_in_sessions[ctx.session_id] = token_hash


def session_signed_in(session_id: str | None) -> bool:
    """Whether the Streamlit session session_id is signed in now (team mode): recorded at its last
    run and, for a token, still listed in the tokens file."""
    if session_id is None or session_id not in _signed_in_sessions:
        return False
    if mode() != TOKEN:
        return True
    return token_hash_may(_signed_in_sessions.get(session_id), "view")


def forget_session(session_id: str | None) -> None:
    if session_id is not None:
        _signed_in_sessions.pop(session_id, None)


def browser_signed_in(cookies: dict[str, str]) -> bool:
    """Whether an HTTP request's cookies carry a sign-in that holds now: token mode's session
    cookie (signed, unexpired, its token still listed), or Streamlit's OIDC user cookie for an
    address that may sign in."""
    current = mode()
    if current == LOCAL:
        return True
    if current == TOKEN:
        try:
            return user_for_cookie(cookies.get(SESSION_COOKIE), token_entries()) is not None
        except AuthConfigError:
            return False
    from streamlit.web.server.starlette.starlette_websocket import _get_signed_cookie_with_chunks

    try:
        raw = _get_signed_cookie_with_chunks(cookies, "_streamlit_user")
        claims = json.loads(raw) if raw else {}
    except Exception:   # a cookie that does not decode signs nobody in
        return False
    email = str(claims.get("email") or "") if isinstance(claims, dict) else ""
    return bool(email) and claims.get("is_logged_in") is True and claims.get("email_verified") is True \
        and (_listed(email, MAINTAINERS_ENV) or _listed(email, VIEWERS_ENV))


def _local_user_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):   # no name for this uid (a bare container)
        return "local"


def can(action: str) -> bool:
    user = current_user()
    return user is not None and user.can(action)


def actor() -> str | None:
    """The name written to the audit log for this session's changes."""
    user = current_user()
    return user.name if user else None


def require(what: str, *actions: str) -> None:
    """Stop the page with a plain notice unless this session may do one of `actions` (what: the
    page's purpose in words, "load traces")."""
    if not any(can(action) for action in actions):
        st.info(f"Your role cannot {what}. Ask a maintainer of this server.", icon=":material/lock:")
        st.stop()


def login_page() -> None:
    """The sign-in page of team mode (the only page before signing in)."""
    st.title(":material/stethoscope: TraceDoctor")
    if mode() == TOKEN:
        _write_pending_cookie()   # a sign-out clears the cookie here
        st.markdown("This dashboard is shared by a team. Sign in with the access token you were given.")
        with st.form("sign-in"):
            token = st.text_input("Access token", type="password")
            if st.form_submit_button("Sign in", type="primary", icon=":material/login:"):
                user = user_for_token(token, token_entries()) if token.strip() else None
                if user is None:
                    st.error("That token is not valid.", icon=":material/block:")
                else:
                    st.session_state[SESSION_TOKEN_KEY] = hash_token(token)
                    st.session_state.pop(_SIGNED_OUT_KEY, None)
                    cookie = session_cookie(hash_token(token))
                    st.session_state[_ISSUED_COOKIE_KEY] = cookie
                    st.session_state[_COOKIE_TODO_KEY] = ("POST", issue_cookie_code(cookie))
                    st.rerun()
        return
    if st.user.get("is_logged_in"):   # signed in with the identity provider, but not allowed in
        who = page_markdown(st.user.get("email")) if st.user.get("email") else "This account"
        why = "" if st.user.get("email_verified") is True else \
            " (the identity provider does not say its email address is verified)"
        st.error(f"{who} may not use this dashboard{why}. Ask a maintainer.", icon=":material/block:")
        st.button("Sign out", on_click=st.logout)
        return
    st.markdown("This dashboard is shared by a team. Sign in with your organisation's account.")
    provider = os.environ.get(OIDC_PROVIDER_ENV, "").strip() or None
    st.button("Sign in", type="primary", icon=":material/login:", on_click=st.login, args=(provider,) if provider else ())


def sidebar_account() -> None:
    """Who is signed in and a sign-out button (team mode only)."""
    user = current_user()
    if user is None or mode() == LOCAL:
        return
    if mode() == TOKEN:
        _write_pending_cookie()   # a sign-in sets the cookie here
    st.caption(f"Signed in as **{page_markdown(user.name)}** ({user.role})")
    if st.button("Sign out", icon=":material/logout:", key="sign-out"):
        if mode() == TOKEN:
            # the cookie this session was given, and the one it came with, are worthless from now on
            sign_out_cookie(st.session_state.pop(_ISSUED_COOKIE_KEY, None))
            sign_out_cookie(st.context.cookies.get(SESSION_COOKIE))
            st.session_state.pop(SESSION_TOKEN_KEY, None)
            st.session_state[_SIGNED_OUT_KEY] = True
            st.session_state[_COOKIE_TODO_KEY] = ("DELETE", "")
            st.rerun()
        st.logout()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.auth",
                                     description="Manage the access tokens of TraceDoctor's team mode.")
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add-token", help="make a token for a user; prints it once (only its hash is kept)")
    add.add_argument("--user", required=True)
    add.add_argument("--role", required=True, choices=sorted(ROLE_ACTIONS))
    add.add_argument("--file", help=f"the tokens file (default: ${TOKENS_FILE_ENV})")
    args = parser.parse_args(argv)
    try:
        path = Path(args.file).expanduser() if args.file else tokens_file()
        token = add_token(path, args.user, args.role)
    except (AuthConfigError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(token)
    print(f"added {args.user} ({args.role}) to {path}; give them the token above, it is not kept", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
