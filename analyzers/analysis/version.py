"""ANALYSIS_VERSION: a hash of the code that turns a run's events into findings, prose left out.

A run whose stored findings carry another version was analysed by other code and is analysed again
when opened (analyzers.read.stored.analysis_is_current).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any


def _without_prose(path: Path) -> bytes:
    """What of a source file decides findings: Python without docstrings and comments (its AST),
    SQL without comment lines and blank lines."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".sql":
        return "\n".join(line.strip() for line in text.splitlines()
                         if line.strip() and not line.strip().startswith("--")).encode()
    tree = ast.parse(text)
    _drop_docstrings(tree)
    return ast.dump(tree).encode()


def _drop_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]


def _sources() -> tuple[Path, list[Path]]:
    """The package folder and the files whose code decides findings (the SQL library, the analyses,
    costing, thresholds)."""
    package = Path(__file__).resolve().parents[1]
    return package, sorted([*package.glob("analysis/**/*.py"), *package.glob("analysis/kinds/*/*.sql"),
                            *package.glob("analysis/whatif/*.sql"), *package.glob("sql/**/*.sql"),
                            *(package / name for name in ("execution/pipeline.py", "common/thresholds.py",
                                                          "common/contract.py", "sql/engine.py"))])


def _analysis_version() -> str:
    """A hash of what turns a run's events into findings, prose left out: a run whose stored findings
    carry another version was analysed by other code (an older TraceDoctor, or never) and is analysed
    again when opened; a reworded comment or docstring does not force that. Fixes are not in it:
    they are chosen when a finding is read (analyzers.read.fixes)."""
    package, sources = _sources()
    digest = hashlib.blake2b(digest_size=8)
    for source in sources:
        if source.is_file():
            digest.update(source.relative_to(package).as_posix().encode() + b"\0" + _without_prose(source))
    return digest.hexdigest()


def _stat_key(package: Path, sources: list[Path]) -> str:
    """The sources' names, sizes and modification times, hashed: what Python's own bytecode cache
    trusts to tell an unchanged file."""
    digest = hashlib.blake2b(digest_size=8)
    for source in sources:
        if source.is_file():
            stat = source.stat()
            digest.update(f"{source.relative_to(package).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def _cached_analysis_version() -> str:
    """_analysis_version, kept in __pycache__ beside this file under the sources' stat key (parsing
    the ~60 files takes 0.4-0.8 s, which every CLI call paid); computed when the key changed or the
    folder is read-only."""
    package, sources = _sources()
    key = _stat_key(package, sources)
    cache = Path(__file__).resolve().parent / "__pycache__" / "analysis_version.json"
    try:
        stored = json.loads(cache.read_text())
        if stored.get("key") == key and isinstance(stored.get("version"), str):
            return stored["version"]
    except (OSError, ValueError, AttributeError):
        pass
    version = _analysis_version()
    try:
        cache.parent.mkdir(exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps({"key": key, "version": version}))
        partial.replace(cache)
    except OSError:
        pass
    return version


@functools.cache
def analysis_version() -> str:
    """This code's analysis version (computed once, on first use)."""
    return _cached_analysis_version()


def __getattr__(name: str) -> Any:
    if name == "ANALYSIS_VERSION":    # module constant, computed lazily (see analysis_version)
        return analysis_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


