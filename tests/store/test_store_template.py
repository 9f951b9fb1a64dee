"""New stores start as a copy of the store template (the schema and the SQL library, built once per
version in the user's cache), so a new store does not parse the library's macros again."""
from __future__ import annotations

import pytest

from analyzers.sql import engine
from analyzers.store.database import connect


def _refuse_loading(*_args, **_kwargs):
    raise AssertionError("the SQL library was parsed again instead of copied from the template")


@pytest.mark.parametrize("where", ["file", "memory"])
def test_a_new_store_has_the_library_without_loading_it(tmp_path, monkeypatch, where):
    monkeypatch.setenv(engine.TEMPLATE_DIR_ENV_VAR, str(tmp_path / "cache"))
    template = engine.store_template()
    assert template.parent == tmp_path / "cache" and template.exists()
    monkeypatch.setattr(engine, "load_sql", _refuse_loading)
    con = connect(tmp_path / "new.duckdb" if where == "file" else ":memory:")
    engine.ensure_loaded(con)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM steps('no such run')").fetchone() == (0,)


def test_without_a_usable_cache_a_new_store_loads_the_library_itself(tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv(engine.TEMPLATE_DIR_ENV_VAR, str(blocked))
    con = engine.ensure_loaded(connect(tmp_path / "new.duckdb"))
    assert con.execute("SELECT count(*) FROM steps('no such run')").fetchone() == (0,)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())    # no partial copy left


def test_an_existing_store_is_never_replaced_by_the_template(tmp_path, monkeypatch):
    monkeypatch.setenv(engine.TEMPLATE_DIR_ENV_VAR, str(tmp_path / "cache"))
    path = tmp_path / "kept.duckdb"
    con = connect(path)
    con.execute("INSERT INTO runs (run_id, name, created_at, content_hash, world_size) "
                "VALUES ('kept', 'kept', now(), 'x', 1)")
    con.close()
    again = connect(path)
    assert again.execute("SELECT run_id FROM runs").fetchall() == [("kept",)]
