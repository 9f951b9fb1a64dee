"""New in-memory stores start as a copy of the store template (the schema and the SQL library, built
once per version in the user's cache), so a one-shot analysis does not parse the library's macros."""
from __future__ import annotations

import pytest

from analyzers.sql import engine
from analyzers.store.database import connect


def _refuse_loading(*_args, **_kwargs):
    raise AssertionError("the SQL library was parsed again instead of copied from the template")


def test_a_new_in_memory_store_has_the_library_without_loading_it(tmp_path, monkeypatch):
    monkeypatch.setenv(engine.TEMPLATE_DIR_ENV_VAR, str(tmp_path / "cache"))
    template = engine.store_template()
    assert template.parent == tmp_path / "cache" and template.exists()
    monkeypatch.setattr(engine, "load_sql", _refuse_loading)
    con = connect(":memory:")
    engine.ensure_loaded(con)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM steps('no such run')").fetchone() == (0,)


def test_without_a_usable_cache_a_new_store_loads_the_library_itself(tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv(engine.TEMPLATE_DIR_ENV_VAR, str(blocked))
    con = engine.ensure_loaded(connect(":memory:"))
    assert con.execute("SELECT count(*) FROM steps('no such run')").fetchone() == (0,)


def test_a_new_file_store_starts_empty_and_keeps_the_library_once_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv(engine.TEMPLATE_DIR_ENV_VAR, str(tmp_path / "cache"))
    path = tmp_path / "kept.duckdb"
    engine.ensure_loaded(connect(path)).close()
    monkeypatch.setattr(engine, "load_sql", _refuse_loading)
    again = engine.ensure_loaded(connect(path))
    assert again.execute("SELECT count(*) FROM steps('no such run')").fetchone() == (0,)
