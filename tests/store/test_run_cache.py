"""analyze_run computes the shared per-run views once (analyzers.sql.engine.run_cache): the findings
must be exactly those of the uncached macros, and nothing of the cache may outlive the call."""
from __future__ import annotations

import contextlib

import pytest

import analyzers.execution.pipeline as findings_module
from analyzers.read.fixes import computed_finding_contract
from analyzers.common import thresholds as th
from analyzers.ingest import ingest_paths
from analyzers.sql.engine import CACHED_VIEWS, ensure_loaded, run_cache
from analyzers.store.database import connect
from sample_traces.synthesize import synthesize


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A 4-rank job with several planted problems (every analysis has something to find)."""
    truth = synthesize(tmp_path_factory.mktemp("all"), "all", steps=3, seed=5)
    con = ensure_loaded(connect(":memory:"))   # each test may run alone (xdist): macros loaded here
    result = ingest_paths(con, truth["files"])
    assert result.run_id and not result.errors
    return con, result.run_id


def _contracts(findings):
    return [computed_finding_contract(f) for f in findings]


def test_cached_and_uncached_analyses_agree(job, monkeypatch):
    con, run_id = job
    cached, cached_notes = findings_module.run_analyses(con, run_id)
    monkeypatch.setattr(findings_module, "run_cache", lambda c, r, t, **kw: contextlib.nullcontext(c))
    plain, plain_notes, _ = findings_module.analyze_root_causes(con, run_id, per_rank=False)
    assert len(cached) >= 3          # the planted problems are found at all
    assert _contracts(cached) == _contracts(plain)
    assert cached_notes == plain_notes


def test_cache_is_dropped_and_views_read_the_run(job):
    con, run_id = job
    direct = con.execute("SELECT count(*), sum(dur_ns) FROM gpu_activity(?)", [run_id]).fetchone()
    with run_cache(con, run_id, th.DEFAULTS):
        temp_tables = {r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'temp'").fetchall()}
        assert {f"td_cache_{v}" for v in CACHED_VIEWS} <= temp_tables
        assert con.execute("SELECT count(*), sum(dur_ns) FROM gpu_activity(?)", [run_id]).fetchone() == direct
    left = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'temp' "
                       "AND starts_with(table_name, 'td_cache_')").fetchone()[0]
    temp_macros = con.execute("SELECT count(*) FROM duckdb_functions() WHERE database_name = 'temp' "
                              "AND function_name IN (SELECT unnest(?))", [list(CACHED_VIEWS)]).fetchone()[0]
    assert left == 0 and temp_macros == 0
    # the stored macros answer again
    assert con.execute("SELECT count(*), sum(dur_ns) FROM gpu_activity(?)", [run_id]).fetchone() == direct
