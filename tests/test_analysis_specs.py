"""The analyzers' single definitions: one spec per finding kind, an SQL library loaded in the
order its `-- requires:` lines give, thresholds in one file, and an analysis version that prose
does not change."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from analyzers.read import queries
from analyzers.sql import engine as sqlrun
from analyzers.common import thresholds as th
from analyzers.analysis.version import _without_prose
from analyzers.analysis.kinds import analysis_modules, analysis_specs
from analyzers.execution.pipeline import run_analyses
from analyzers.ingest import ingest_paths
from analyzers.common.model import ACROSS_RANKS_METRIC_KEYS, AnalysisSpec
from analyzers.store.database import connect
from sample_traces.synthesize import synthesize

ANALYZERS = Path(sqlrun.__file__).resolve().parents[1]


def test_every_analysis_folder_declares_one_spec():
    folders = sorted(p.name for p in (ANALYZERS / "analysis" / "kinds").iterdir()
                     if p.is_dir() and not p.name.startswith("_"))
    specs = analysis_specs()
    assert sorted(specs) == folders
    for kind, spec in specs.items():
        assert isinstance(spec, AnalysisSpec) and spec.kind == kind and spec.title and spec.metric_keys
    assert [m.SPEC.kind for m in analysis_modules()] == list(specs)


def test_evidence_columns_are_step_breakdown_columns():
    con = connect(":memory:")
    columns = set(queries.step_breakdown(con, "no-such-run").columns)
    for spec in analysis_specs().values():
        assert spec.evidence.column in columns, spec.kind


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    truth = synthesize(tmp_path_factory.mktemp("all"), "all", steps=3, seed=11)
    con = connect(":memory:")
    result = ingest_paths(con, truth["files"])
    assert result.run_id and not result.errors
    return con, result.run_id


def test_findings_carry_only_the_metric_keys_their_spec_declares(planted):
    con, run_id = planted
    findings, _ = run_analyses(con, run_id, {"MIN_FINDING_PCT": 0.0})
    specs = analysis_specs()
    assert len({f.kind for f in findings}) >= 4     # the planted problems give several kinds
    for finding in findings:
        undeclared = set(finding.metrics) - specs[finding.kind].metric_keys - ACROSS_RANKS_METRIC_KEYS
        assert not undeclared, (finding.kind, undeclared)


def test_evidence_difference_templates_name_declared_metrics():
    for spec in analysis_specs().values():
        named = set(re.findall(r"{(\w+)", spec.evidence.differs))
        assert named <= spec.metric_keys, (spec.kind, named - spec.metric_keys)


def test_sql_files_require_every_file_whose_macros_they_call():
    files = sqlrun.sql_files()
    names = {sqlrun.library_name(p): p for p in files}
    defined = {}
    for name, path in names.items():
        for macro in re.findall(r"CREATE OR REPLACE MACRO (\w+)", path.read_text()):
            defined[macro] = name
    position = {name: i for i, name in enumerate(names)}
    for name, path in names.items():
        code = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("--"))
        closure, stack = set(), list(sqlrun.requires(path))
        while stack:
            needed = stack.pop()
            if needed not in closure:
                closure.add(needed)
                stack.extend(sqlrun.requires(names[needed]))
        for macro, home in defined.items():
            if home != name and re.search(rf"\b{macro}\s*\(", code):
                assert home in closure, f"{name} calls {macro}() of {home} without requiring it"
                assert position[home] < position[name]


def test_a_missing_requirement_is_named(tmp_path, monkeypatch):
    broken = tmp_path / "sql" / "lib"
    broken.mkdir(parents=True)
    (broken / "x.sql").write_text("-- requires: lib/nowhere.sql\nSELECT 1;\n")
    monkeypatch.setattr(sqlrun, "PACKAGE_DIR", tmp_path)
    with pytest.raises(RuntimeError, match="lib/x.sql requires lib/nowhere.sql"):
        sqlrun.sql_files()


def test_analysis_sql_holds_no_threshold_literals():
    """Cut-offs reach the SQL as macro arguments from analyzers/common/thresholds.py: no macro parameter
    has a numeric default, and no threshold's value is written into the SQL."""
    values = {str(int(v)) for v in th.DEFAULTS.values() if float(v).is_integer() and v >= 1000}
    for path in sqlrun.sql_files():
        code = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("--"))
        assert not re.search(r":=\s*\d", code), path
        for value in values:
            assert not re.search(rf"(?<![\d_]){value}(?![\d_])", code), (path.name, value)


def test_prose_does_not_change_the_analysis_version(tmp_path):
    code = 'def f(x):\n    """Doc."""\n    return x + 1  # add one\n'
    reworded = 'def f(x):\n    """Another doc."""\n    # a comment\n    return x + 1\n'
    changed = 'def f(x):\n    """Doc."""\n    return x + 2\n'
    a, b, c = (tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py")
    for path, text in ((a, code), (b, reworded), (c, changed)):
        path.write_text(text)
    assert _without_prose(a) == _without_prose(b) != _without_prose(c)
    sql_a, sql_b = tmp_path / "a.sql", tmp_path / "b.sql"
    sql_a.write_text("-- what it is\nSELECT 1;\n")
    sql_b.write_text("-- what it is, reworded\n\nSELECT 1;\n")
    assert _without_prose(sql_a) == _without_prose(sql_b)


def test_the_cached_analysis_version_follows_the_sources(tmp_path, monkeypatch):
    from analyzers.analysis import version

    source = tmp_path / "pkg" / "analysis" / "rule.py"
    source.parent.mkdir(parents=True)
    source.write_text("LIMIT = 1\n")
    monkeypatch.setattr(version, "_sources", lambda: (tmp_path / "pkg", [source]))
    monkeypatch.setattr(version, "__file__", str(tmp_path / "pkg" / "analysis" / "version.py"))
    first = version._cached_analysis_version()
    assert first == version._analysis_version() and (source.parent / "__pycache__" / "analysis_version.json").exists()
    assert version._cached_analysis_version() == first
    source.write_text("LIMIT = 2\n")          # another size: the stat key changes, the hash is computed again
    assert version._cached_analysis_version() == version._analysis_version() != first


def test_a_store_that_holds_this_library_is_not_loaded_again(tmp_path, monkeypatch):
    db = tmp_path / "store.duckdb"
    first = connect(db)
    sqlrun.ensure_loaded(first)
    first.close()
    loads = []
    monkeypatch.setattr(sqlrun, "load_sql", lambda con: loads.append(con))
    again = connect(db)
    sqlrun.ensure_loaded(again)
    sqlrun.ensure_loaded(again.cursor())
    assert loads == []                       # macros live in the store: a new connection only looks
    again.execute("UPDATE tracedoctor_sql_library SET library_hash = 'another version'")
    third = connect(db)
    sqlrun.ensure_loaded(third)
    assert loads == [third]                  # a store last loaded by other code is loaded afresh
