"""analyzers/ is layered (pyproject.toml [tool.importlinter]): each layer imports only those below it,
no module imports itself back through others, the analysis never imports accel, app, dask or torch.
A change that breaks a contract fails here, with lint-imports' report. tests/ shares only through
tests/support and conftest.py files: no test module imports another."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT as REPO


def test_import_contracts_hold():
    pytest.importorskip("importlinter")
    result = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                             "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))"],
                            cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_no_module_imports_itself_back():
    """No import cycle between modules of analyzers/, lazy (function-level) imports included."""
    grimp = pytest.importorskip("grimp")
    with contextlib.redirect_stdout(io.StringIO()):
        sys.path.insert(0, str(REPO))
        try:
            graph = grimp.build_graph("analyzers", cache_dir=None)
        finally:
            sys.path.remove(str(REPO))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:     # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in graph.modules:
                continue
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for module in sorted(graph.modules):
            if module not in index:
                visit(module)
    finally:     # other tests rely on the default limit (deeply nested JSON must raise RecursionError)
        sys.setrecursionlimit(limit)
    assert cycles == [], f"import cycles: {cycles}"


def test_no_private_name_crosses_a_module():
    """A module's _names are its own: no other module of analyzers/, app/ or accel/ imports them
    (what two modules share gets a public name)."""
    import ast

    offenders = []
    for folder in ("analyzers", "app", "accel"):
        for path in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                    if node.level == 0 and not (node.module or "").startswith(("analyzers", "accel", "app")):
                        continue
                    for alias in node.names:
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            offenders.append(f"{path.relative_to(REPO)}:{node.lineno} imports {alias.name}")
    assert offenders == []


def test_what_reads_figures_does_not_average_them():
    """A mean over ranks or steps is SQL (analyzers/sql: run_mean_step, rank_summary, run_summary...):
    the pages, the fix library and the read layer (CLI, reports, queries) read it and never average
    figures themselves: no sum()/len(), .mean()/.median() or statistics.mean there. A module that
    imports torch runs a workload (a demo, a fixture: its tensors' means are no figure of a trace),
    and accel/profiling.py times the demos' own runs, so they may."""
    import ast

    roots = [REPO / "app", REPO / "accel", REPO / "analyzers" / "read", REPO / "analyzers" / "cli.py",
             REPO / "analyzers" / "api.py"]
    exempt = {REPO / "accel" / "profiling.py"}
    offenders = []
    for root in roots:
        for path in sorted([root] if root.suffix == ".py" else root.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if path in exempt or any(isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" for a in node.names)
                                     or isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch"
                                     for node in ast.walk(tree)):
                continue
            for node in ast.walk(tree):
                where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"
                if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                        and isinstance(node.left, ast.Call) and getattr(node.left.func, "id", None) in ("sum", "fsum")
                        and isinstance(node.right, ast.Call) and getattr(node.right.func, "id", None) == "len"):
                    offenders.append(f"{where} sum()/len()")
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("mean", "median", "fmean")):
                    offenders.append(f"{where} .{node.func.attr}()")
    assert offenders == []


def test_no_test_module_imports_another():
    """What tests share lives in tests/support (helpers) and conftest.py files (fixtures): no module
    under tests/ imports a test module (test_*), so moving or deleting one never breaks another."""
    import ast

    offenders = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""] + [alias.name for alias in node.names if node.level]
            else:
                continue
            if any(part.startswith("test_") for module in modules for part in module.split(".")):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []
