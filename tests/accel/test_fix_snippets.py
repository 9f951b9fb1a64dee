"""Every fix snippet runs as pasted given the documented install: each name it reads is imported,
a builtin, or a placeholder for the user's own program that the Fix tab's caption explains; it
fits the code box; and `accel` is installable (pyproject.toml) without forcing torch on anyone."""
from __future__ import annotations

import ast
import importlib
import tomllib

import pytest

from accel import registry
from app import fixinfo
from tests.support.paths import REPO_ROOT

FIX_IDS = list(registry.FIXES)


def _imports(code: str) -> list[tuple[str, list[str]]]:
    """(module, [names]) for each `from module import names` in the code."""
    return [(node.module, [a.name for a in node.names]) for node in ast.walk(ast.parse(code))
            if isinstance(node, ast.ImportFrom) and node.module]


@pytest.mark.parametrize("fix_id", FIX_IDS)
def test_every_name_a_snippet_reads_is_imported_builtin_or_an_explained_placeholder(fix_id):
    snippet = registry.get(fix_id).snippet
    compile(snippet, f"<snippet {fix_id}>", "exec")
    free = registry.snippet_free_names(snippet)
    assert free <= set(registry.SNIPPET_PLACEHOLDERS), (
        f"{fix_id} reads {sorted(free - set(registry.SNIPPET_PLACEHOLDERS))}: import them or declare the placeholder")
    # the caption under the code names each placeholder the code reads, and only those
    assert set(registry.get(fix_id).placeholders()) == free


def test_every_placeholder_is_read_by_some_snippet():
    used = set().union(*(registry.snippet_free_names(f.snippet) for f in registry.FIXES.values()))
    assert used == set(registry.SNIPPET_PLACEHOLDERS)


@pytest.mark.parametrize("fix_id", FIX_IDS)
def test_accel_imports_name_what_exists(fix_id):
    for module_name, names in _imports(registry.get(fix_id).snippet):
        if module_name.split(".")[0] != "accel":
            continue
        module = importlib.import_module(module_name)   # torch-dependent modules: torch is a dev dependency
        for name in names:
            assert hasattr(module, name), f"{module_name} has no {name}"


def test_free_names_follow_the_order_of_binding():
    assert registry.snippet_free_names("optimizer = fuse(optimizer)\n") == {"fuse", "optimizer"}
    assert registry.snippet_free_names("from m import f\nfor x in f():\n    print(x, y)\n") == {"y"}
    assert registry.snippet_free_names("g = lambda a, b: a(b) + c\n[i for i in range(n)]\n") == {"c", "n"}
    assert registry.snippet_free_names("import torch.nn\ntorch.backends.x = True\nz += 1\n") == {"z"}
    assert registry.snippet_free_names("finding['metrics']\n") == {"finding"}   # the name the old snippets read


@pytest.mark.parametrize("fix_id", FIX_IDS)
def test_snippets_fit_the_code_box(fix_id):
    metrics = {key: 123456.789 for key in registry.get(fix_id).reads}
    for code in (registry.get(fix_id).snippet, registry.get(fix_id).snippet_for(metrics)):
        assert max(len(line) for line in code.splitlines()) <= registry.SNIPPET_LINE_WIDTH


def test_a_finding_fills_in_the_metrics_a_snippet_reads_and_only_what_its_fix_reads():
    metrics = {"num_workers": 0, "wait_ms_per_step": 41.5, "step_time_ms": None, "idle_ms_per_step": 3.0}
    code = registry.get("dataloader_tuning").snippet_for(metrics)
    assert "metrics" not in registry.snippet_free_names(code)
    namespace: dict = {}
    exec(code.split("\nfrom ")[0], namespace)      # the lines before the import: the filled-in literal
    assert namespace["metrics"] == {"num_workers": 0, "wait_ms_per_step": 41.5}
    assert registry.get("dataloader_tuning").placeholders(metrics) == {
        "dataset": registry.SNIPPET_PLACEHOLDERS["dataset"]}
    # a snippet that reads no metrics is shown as written
    assert registry.get("cuda_graph").snippet_for({"syncs_per_step": 1}) == registry.get("cuda_graph").snippet


def test_the_fix_tab_shows_the_filled_in_code_its_names_and_how_to_install():
    shown = fixinfo.pasteable("ddp_bucket_tuning", {"mean_msg_bytes": 1024, "collectives_per_step": 48})
    assert shown["snippet"].startswith("# this finding's measured metrics\nmetrics = {")
    assert set(shown["placeholders"]) == {"model", "local_rank"}
    assert "pip install" in shown["install"] and "torch" in shown["install"]
    assert fixinfo.pasteable("no_such_fix") == {"snippet": "", "placeholders": {}, "install": ""}


def test_pyproject_provides_accel_without_forcing_torch():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    found = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert "accel*" in found and "analyzers*" in found       # accel.registry imports analyzers
    requirements = project["project"]["dependencies"] + [
        dep for deps in project["project"].get("optional-dependencies", {}).values() for dep in deps]
    for heavy in ("torch", "triton", "holistictraceanalysis"):
        assert not any(dep.lower().startswith(heavy) for dep in requirements), heavy
    # what the analyzers need, as accel.gpu_session ships it to a GPU machine, is declared
    from accel.gpu_session import WHEELS
    declared = {dep.split(">")[0].split("=")[0].split("<")[0].strip().lower() for dep in project["project"]["dependencies"]}
    assert {wheel.split("=")[0].lower() for wheel in WHEELS} <= declared
    # the SQL library travels with the package
    assert "*.sql" in project["tool"]["setuptools"]["package-data"]["*"]
    readme = (REPO_ROOT / "README.md").read_text()
    assert "pip install -e ." in readme and "tracedoctor @ git+" in readme


def test_measured_gains_show_every_column_the_speed_up_first_under_readable_headers():
    bench = ("| fix | workload | device | date | before ms/step | after ms/step | speedup (median, range) | notes |\n"
             "| --- | --- | --- | --- | --- | --- | --- | --- |\n"
             "| `cuda_graph` | MLP | H100 | 2026-11-25 | 10.0 | 3.0 | 3.3x (3.1-3.4) | `__len__` kept |\n\n"
             "| fix | workload | goal | measured |\n| --- | --- | --- | --- |\n"
             "| cuda_graph | same | >= 3x | not yet measured on GPU |\n")
    measured, goals = fixinfo.gain_tables("cuda_graph", bench)
    assert list(measured[0]) == ["Speed-up (median, range)", "Before (ms/step)", "After (ms/step)", "Workload",
                                 "Device", "Measured on", "notes"]   # every column but the fix's own id
    assert measured[0]["Speed-up (median, range)"] == "3.3x (3.1-3.4)"
    assert measured[0]["notes"] == "`__len__` kept"      # Markdown kept: the table renders it as code
    assert goals == [{"Goal": ">= 3x", "Measured": "not yet measured on GPU", "Workload": "same"}]
    assert fixinfo.gain_tables("powersgd", bench) == []
