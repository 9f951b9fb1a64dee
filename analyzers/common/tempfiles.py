"""Private temp directories (an ingest's working copies, the dashboard's uploads), and the sweep
that removes those a killed process left behind.

Each directory holds a lock file that its owner keeps locked (flock) while it lives: the kernel
drops the lock when the process ends, however it ends (SIGKILL, the OOM killer), so a directory
whose lock can be taken is no longer in use; no pid is trusted (pids are reused). The sweep
removes such a directory as soon as its lock is free (the lock file is locked before it gets its
name, so a named one that is free has lost its holder): a killed ingest's or cluster task's
copies go at the next sweep, not a day later. A directory without a lock file (being made, or
from before locks) is judged by age alone (a day).
"""
from __future__ import annotations

import errno
import fcntl
import os
import shutil
import signal
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import duckdb

TMPDIR_ENV_VAR = "TRACEDOCTOR_TMPDIR"
INGEST_PREFIX = "tracedoctor-ingest-"
UPLOAD_PREFIX = "tracedoctor_upload_"
STALE_AFTER_S = 24 * 3600            # a directory without a lock file: removed once this old
LOCK_NAME = ".tracedoctor-in-use"
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_DISK_FULL_TEXTS = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))

_held: dict[str, int] = {}      # directory -> descriptor of its locked lock file, in this process
_held_lock = threading.Lock()


class TempDirUnusable(Exception):
    """The temp root cannot hold a new directory; the message names it, in plain words."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def temp_root() -> str | None:
    """$TRACEDOCTOR_TMPDIR, else None (the system temp directory)."""
    return os.environ.get(TMPDIR_ENV_VAR) or None


def make_temp_dir(prefix: str, root: str | None = None) -> str:
    """A new directory under root (None: the system temp dir), locked as in use by this process
    until remove_temp_dir(). Raises OSError."""
    path = tempfile.mkdtemp(prefix=prefix, dir=root)
    try:   # locked under another name first: a lock file a sweep can see is always held at first
        fd = os.open(os.path.join(path, LOCK_NAME + ".new"), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(os.path.join(path, LOCK_NAME + ".new"), os.path.join(path, LOCK_NAME))
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        raise
    with _held_lock:
        _held[path] = fd
    return path


def make_upload_dir(root: str | None = None) -> str:
    """The dashboard's directory for one upload (prefix tracedoctor_upload_), locked like an
    ingest's so that sweep_stale_temp_dirs() leaves it alone while the dashboard lives; remove it
    with remove_temp_dir(). root None: $TRACEDOCTOR_TMPDIR, else the system temp directory."""
    chosen = root or temp_root()
    if chosen:
        os.makedirs(chosen, exist_ok=True)
    return make_temp_dir(UPLOAD_PREFIX, chosen)


def remove_temp_dir(path: str) -> None:
    """Delete a directory made by make_temp_dir() and release its lock."""
    shutil.rmtree(path, ignore_errors=True)
    with _held_lock:
        fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)


@contextmanager
def ingest_temp_dir() -> Iterator[str]:
    """An ingest's private directory, removed when the block ends (SIGTERM included, once
    install_sigterm_cleanup() is in place). Raises TempDirUnusable naming the directory."""
    chosen = temp_root()
    try:
        if chosen:
            os.makedirs(chosen, exist_ok=True)
        path = make_temp_dir(INGEST_PREFIX, chosen)
    except OSError as exc:
        where = f"{chosen} (set by {TMPDIR_ENV_VAR})" if chosen else tempfile.gettempdir()
        raise TempDirUnusable(f"cannot use the temp directory {where}: {exc.strerror or exc}") from None
    try:
        yield path
    finally:
        remove_temp_dir(path)


def sweep_stale_temp_dirs(max_age_s: float = STALE_AFTER_S, roots: list[str] | None = None) -> list[str]:
    """Remove the ingest and upload directories that no live process holds, in roots (default:
    $TRACEDOCTOR_TMPDIR and the system temp directory): at once where their lock is free, and
    those without a lock file once unchanged for max_age_s. Returns the directories removed;
    never raises for one it cannot read or remove."""
    removed = []
    now = time.time()
    for root in dict.fromkeys(roots if roots is not None else [r for r in (temp_root(), tempfile.gettempdir()) if r]):
        try:
            entries = list(os.scandir(root))
        except OSError:
            continue
        for entry in entries:
            try:
                if not entry.name.startswith((INGEST_PREFIX, UPLOAD_PREFIX)) or not entry.is_dir(follow_symlinks=False):
                    continue
                if not os.path.lexists(os.path.join(entry.path, LOCK_NAME)) \
                        and now - entry.stat(follow_symlinks=False).st_mtime < max_age_s:
                    continue
            except OSError:
                continue
            if _remove_if_unused(entry.path):
                removed.append(entry.path)
    return removed


def _remove_if_unused(path: str) -> bool:
    """Take the directory's lock (not blocking) and delete it; False when a live process holds it."""
    with _held_lock:
        if path in _held:
            return False
    try:
        fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        fd = None               # made before directories were locked: its age decides
    except OSError:
        return False
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False    # held: in use
        shutil.rmtree(path, ignore_errors=True)
        return not os.path.exists(path)
    finally:
        if fd is not None:
            os.close(fd)


def disk_full(exc: BaseException) -> bool:
    """Whether an error means a full disk (or a used-up quota): an OSError's errno, or DuckDB's
    message, which quotes the system's text."""
    if isinstance(exc, OSError):
        return exc.errno in _DISK_FULL_ERRNOS
    if isinstance(exc, duckdb.Error):
        text = str(exc)
        return any(phrase in text for phrase in _DISK_FULL_TEXTS)
    return False


def temp_dir_failure(tmpdir: str, exc: OSError) -> str:
    """Why a file could not be written into an ingest's temp directory, naming the directory
    where the space is needed (a full disk is said plainly, not blamed on the trace)."""
    root = os.path.dirname(tmpdir)
    what = "the disk is full" if disk_full(exc) else "the write failed"
    return (f"could not write its working copy into the temp directory {root}: {what} ({exc.strerror or exc}); "
            f"free space there or point {TMPDIR_ENV_VAR} at a larger disk")


def install_sigterm_cleanup() -> bool:
    """Make SIGTERM (a CI cancel, `kill`, a service stop) end the process the way Ctrl-C does:
    SystemExit(143) is raised in the main thread, so `finally:` blocks remove temp directories
    and roll back an open transaction. Call it from the main thread of a command-line program;
    it leaves a handler someone else installed alone. Returns whether it was installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return False
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    return True


def _exit_on_sigterm(signum: int, frame) -> None:
    raise SystemExit(128 + signum)
