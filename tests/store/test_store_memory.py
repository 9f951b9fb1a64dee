"""The store caps DuckDB's memory (TRACEDOCTOR_MEMORY_LIMIT, default store.DEFAULT_MEMORY_LIMIT) and
spills past it, so a run's analyses do not hold every rank's events in memory at once
(bench/README.md "Bounded memory" has the 1 vs 8 ranks figures)."""
from __future__ import annotations

import os

import duckdb
import pytest

from analyzers.store import database as store


def _setting(con: duckdb.DuckDBPyConnection, name: str) -> str:
    return con.execute("SELECT current_setting(?)", [name]).fetchone()[0]


def _as_bytes(con: duckdb.DuckDBPyConnection, size: str) -> int:
    # DuckDB reports the limit in its own units ("953.6 MiB"); compare through its parser
    con.execute(f"SET memory_limit = '{size}'")
    return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]


def test_default_cap_is_applied(tmp_path, monkeypatch):
    monkeypatch.delenv(store.MEMORY_LIMIT_ENV_VAR, raising=False)
    con = store.connect(tmp_path / "s.duckdb")
    probe = duckdb.connect()
    assert _setting(con, "memory_limit") == _as_bytes(probe, store.DEFAULT_MEMORY_LIMIT)
    # a file store spills next to itself
    assert _setting(con, "temp_directory") == str(tmp_path / "s.duckdb") + ".tmp"


def test_environment_sets_the_cap_and_in_memory_stores_spill_to_the_temp_dir(monkeypatch, tmp_path):
    monkeypatch.setenv(store.MEMORY_LIMIT_ENV_VAR, "96MB")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)   # re-read TMPDIR
    con = store.connect(":memory:")
    assert _setting(con, "memory_limit") == _as_bytes(duckdb.connect(), "96MB")
    spill = _setting(con, "temp_directory")
    assert spill.startswith(str(tmp_path)) and "tracedoctor-spill-" in spill   # not ./.tmp of the cwd
    # more than the cap passes through DuckDB's spilling instead of failing
    con.execute("CREATE TEMP TABLE t AS SELECT range AS a, md5(range::VARCHAR) AS b FROM range(2000000)")
    assert con.execute("SELECT count(DISTINCT b) FROM t").fetchone()[0] == 2_000_000
    con.close()
    assert not os.path.exists(spill)   # DuckDB removes its spill folder when the store closes


@pytest.mark.parametrize("value", ["lots", "12", "-1GB", "1GB; DROP TABLE runs"])
def test_a_value_duckdb_would_not_read_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv(store.MEMORY_LIMIT_ENV_VAR, value)
    with pytest.raises(ValueError, match=store.MEMORY_LIMIT_ENV_VAR):
        store.connect(":memory:")
