"""The whole-run tables the pages open on are stored by the analysis (queries.store_page_defaults)
and read back exactly as the queries compute them; a window, a rank, a step or one row per rank
is computed on demand; another analysis version's tables are not read; a purged run takes its
tables with it."""
from __future__ import annotations


import pandas as pd
import pytest

from analyzers.api import analyze_paths
from analyzers.read import page_defaults, queries
from analyzers.store.database import connect
from tests.support.paths import REPO_ROOT

SAMPLES = REPO_ROOT / "sample_traces"
# an empty page_defaults in the temp catalog, which unqualified names resolve first: nothing stored
SHADOW = "CREATE OR REPLACE TEMP TABLE page_defaults (run_id VARCHAR, name VARCHAR, version VARCHAR, data BLOB)"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = tmp_path_factory.mktemp("page_defaults") / "store.duckdb"
    runs = [analyze_paths([str(SAMPLES / name)], db_path=str(db))["run"]["run_id"]
            for name in ("gpu_tf32_matmul_before", "cpu_balanced_sampler_before")]
    return db, runs


def _live(con, run_id, name):
    """The table computed from the events, the stored one set aside."""
    con.execute(SHADOW)
    try:
        return queries.PAGE_DEFAULTS[name](con, run_id)
    finally:
        con.execute("DROP TABLE temp.page_defaults")


@pytest.mark.parametrize("name", list(queries.PAGE_DEFAULTS))
def test_every_stored_table_reads_back_as_the_query_computes_it(store, name):
    db, runs = store
    con = connect(db)
    try:
        for run_id in runs:
            stored = page_defaults.read(con, run_id, name)
            assert stored is not None, (name, run_id)
            pd.testing.assert_frame_equal(stored, _live(con, run_id, name), check_dtype=False)
    finally:
        con.close()


def test_the_pages_first_rows_and_rates_match(store):
    db, runs = store
    con = connect(db)
    try:
        run_id = runs[0]
        live = _live(con, run_id, "top_kernels").head(5)
        pd.testing.assert_frame_equal(queries.top_kernels(con, run_id, limit=5), live, check_dtype=False)
        stored_rates = queries.perf_by_name(con, run_id, "kernels")
        con.execute(SHADOW)
        assert queries.perf_by_name(con, run_id, "kernels") == stored_rates
        con.execute("DROP TABLE temp.page_defaults")
        # a window or one rank is computed, not read from the whole-run table
        t0, t1 = queries.time_bounds(con, run_id)
        windowed = queries.top_kernels(con, run_id, window=(t0, t0 + (t1 - t0) // 4))
        assert windowed["total_ms"].sum() < queries.top_kernels(con, run_id, limit=None)["total_ms"].sum()
    finally:
        con.close()


def test_another_versions_tables_are_not_read_and_a_purge_drops_them(store, monkeypatch):
    from analyzers.store import runs as run_store

    db, runs = store
    con = connect(db)
    try:
        monkeypatch.setattr(page_defaults, "analysis_version", lambda: "another version")
        assert page_defaults.read(con, runs[1], "top_ops") is None
        monkeypatch.undo()
        assert page_defaults.read(con, runs[1], "top_ops") is not None
        run_store.delete_run(con, runs[1])
        run_store.purge_run(con, runs[1])
        assert con.execute("SELECT count(*) FROM page_defaults WHERE run_id = ?", [runs[1]]).fetchone()[0] == 0
    finally:
        con.close()


def test_a_throwaway_in_memory_store_stores_no_page_tables():
    # nobody opens a page on it later: the analysis does not pay for them
    from analyzers.api import ingest_and_analyze
    from analyzers.store.database import is_file_store

    con = connect(":memory:")
    try:
        assert not is_file_store(con)
        outcome = ingest_and_analyze(con, [str(SAMPLES / "gpu_tf32_matmul_before")])
        assert outcome.report["run"]["run_id"]
        assert con.execute("SELECT count(*) FROM page_defaults").fetchall() == [(0,)]
    finally:
        con.close()
