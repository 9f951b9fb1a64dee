"""Which paths "A path on this machine" may read: with TRACEDOCTOR_DATA_ROOT set, only files
under that directory (symlinks followed before the check, so a link cannot lead out of it).

Local mode without a data root reads any path, as a local tool should; team mode without one
offers no path loading at all (a shared server must not walk its own disk for anyone).
Refusals never say whether something outside the root exists.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from app import auth

DATA_ROOT_ENV = "TRACEDOCTOR_DATA_ROOT"


class PathRefused(ValueError):
    """A typed path this server will not read, with the reason in plain words."""


def data_root() -> Path | None:
    value = os.environ.get(DATA_ROOT_ENV, "").strip()
    return Path(value).expanduser().resolve() if value else None


def path_loading_enabled() -> bool:
    """Local mode always; team mode only with a data root configured."""
    return not auth.is_team_mode() or data_root() is not None


def resolve(typed: str) -> Path:
    """The path to read for what the user typed: under the data root when one is set (relative
    paths are taken from it), anything in local mode without one. PathRefused otherwise, also
    for what no file system takes (a NUL byte, a name too long, a link loop)."""
    shown_typed = typed.strip().replace("\x00", "")
    if "\x00" in typed:
        raise PathRefused(f"{shown_typed}: a path cannot contain a NUL character")
    try:
        return _resolve(typed.strip(), shown_typed)
    except PathRefused:
        raise
    except (OSError, ValueError, RuntimeError) as exc:   # RuntimeError: a symlink loop (Python < 3.13)
        reason = getattr(exc, "strerror", None) or "not a path this machine can read"
        raise PathRefused(f"{shown_typed}: {reason}") from None


def _resolve(typed: str, shown_typed: str) -> Path:
    root = data_root()
    given = Path(typed).expanduser()
    if root is None:
        if auth.is_team_mode():
            raise PathRefused(f"loading by path is off on this server (set {DATA_ROOT_ENV} to allow it)")
        if not given.exists():
            raise PathRefused(f"{shown_typed}: no such file or directory on this machine")
        return given
    target = (given if given.is_absolute() else root / given).resolve()
    if not target.is_relative_to(root):
        where = "relative to it" if auth.is_team_mode() else f"under {root}"
        raise PathRefused(f"{shown_typed}: outside the data root; give a path {where}")
    if not target.exists():
        raise PathRefused(f"{shown_typed}: no such file or directory under the data root")
    if target.is_dir():
        _refuse_links_out(target, root)
    return target


def _refuse_links_out(directory: Path, root: Path) -> None:
    """Ingest follows links inside a directory, so none may lead outside the root."""
    for current, dirs, files in os.walk(directory):
        for name in dirs + files:
            entry = Path(current) / name
            if entry.is_symlink() and not entry.resolve().is_relative_to(root):
                raise PathRefused(f"{shown(entry)}: a link that leads outside the data root")


def shown(path: Path | str) -> str:
    """A server path as a page may show it: relative to the data root in team mode (a viewer
    of a shared server has no business knowing its layout), as is otherwise. Names ingest
    already gives relative (`job42/rank0.json`, `a.zip:x.json`) stay as they are."""
    root = data_root()
    if auth.is_team_mode() and root is not None and Path(path).is_absolute():
        try:
            return str(Path(path).resolve().relative_to(root)) or "."
        except ValueError:
            return Path(path).name
    return str(path)


def shown_source(source: str) -> str:
    """A run's source (the paths it was loaded from) as a page may show it: in team mode, paths
    under the data root relative to it, and any other server path (a run loaded with the CLI, the
    sample runs) by its last part only, as `…/name`."""
    if not auth.is_team_mode():
        return source or ""
    root = data_root()
    text = source or ""
    if root is not None:
        text = text.replace(f"{root}{os.sep}", "").replace(str(root), ".")
    return re.sub(r"(?<!\S)/(?:[^\s/]*/)*([^\s/]+)/?", r"…/\1", text)


def code_span(text: str) -> str:
    """text as a Markdown code span, shown exactly as it is (a Windows path's backslashes too,
    which Markdown escaping inside a code span would show doubled): a code span takes no
    escapes, so its fence is one backtick longer than any run of backticks inside."""
    text = " ".join(str(text).splitlines())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
