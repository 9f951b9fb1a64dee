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
_COOKIE_TODO_KEY = "_auth_cookie_todo"
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
        {"h": token_hash, "exp": int((now or time.time()) + SESSION_HOURS * 3600)}).encode()).decode()
    return f"{body}.{hmac.new(_session_key(), body.encode(), hashlib.sha256).hexdigest()}"


def cookie_token_hash(cookie: str | None, now: float | None = None) -> str | None:
    """The token hash a session cookie carries while its signature and expiry hold."""
    if not isinstance(cookie, str):
        return None
    body, _, signature = cookie.partition(".")
    expected = hmac.new(_session_key(), body.encode(), hashlib.sha256).hexdigest()
    if not body or not hmac.compare_digest(signature, expected):
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(body))
    except ValueError:
        return None
    if not isinstance(claims, dict) or not isinstance(claims.get("exp"), (int, float)) \
            or claims["exp"] < (now or time.time()) or not isinstance(claims.get("h"), str):
        return None
    return claims["h"]


def user_for_cookie(cookie: str | None, entries: list[dict[str, str]], now: float | None = None) -> User | None:
    """The user a session cookie stands for while it is valid and its token still listed."""
    return user_for_token_hash(cookie_token_hash(cookie, now), entries)


_COOKIE_JS = """
export default function ({ data }) {
  const secure = location.protocol === "https:" ? "; Secure" : "";
  document.cookie = `${data.name}=${data.value}; Path=/; Max-Age=${data.maxAge}; SameSite=Strict${secure}`;
}
"""


@functools.cache
def _cookie_writer():
    return st.components.v2.component("tracedoctor_session_cookie", js=_COOKIE_JS)


def _write_pending_cookie() -> None:
    """Set or clear the session cookie in the browser, as the last sign-in or sign-out asked."""
    todo = st.session_state.pop(_COOKIE_TODO_KEY, None)
    if todo is not None:
        value, max_age = todo
        _cookie_writer()(data={"name": SESSION_COOKIE, "value": value, "maxAge": max_age}, key=f"cookie-{max_age}")


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
            st.session_state[_COOKIE_TODO_KEY] = ("", 0)
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
    """Who is using this session, None until they sign in (team mode)."""
    current = mode()
    if current == LOCAL:
        return User(_local_user_name(), MAINTAINER)
    if current == TOKEN:
        return _token_session_user()
    return oidc_user()


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
                    st.session_state[_COOKIE_TODO_KEY] = (session_cookie(hash_token(token)), SESSION_HOURS * 3600)
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
            st.session_state.pop(SESSION_TOKEN_KEY, None)
            st.session_state[_SIGNED_OUT_KEY] = True
            st.session_state[_COOKIE_TODO_KEY] = ("", 0)
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
