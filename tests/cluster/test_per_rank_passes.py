"""analyze_run runs the per-rank analyses rank by rank (analyzers.sql.engine.RunCache.only): on every
sample run, real trace and the bench's 8 x 128 MB run, its findings, notes and run costs must be
exactly those of one pass over the whole run (analyze_root_causes(per_rank=False))."""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzers.common import thresholds as th
from analyzers.execution.pipeline import analyze_root_causes
from analyzers.read.fixes import computed_finding_contract
from analyzers.ingest import ingest_paths
from analyzers.sql.engine import VIEW_THRESHOLDS, ACROSS_RANK_VIEWS, RANK_VIEWS, ensure_loaded, run_cache
from analyzers.store.database import connect
from tests.support.analysis import sample_run_paths, shared_trace_names
from tests.support.paths import REPO_ROOT

SAMPLES = REPO_ROOT / "sample_traces"
BENCH_RUN = REPO_ROOT / "bench" / "data" / "8x128mb"     # bench/ingest.py makes it; absent in a fresh checkout


def _outcome(con, run_id: str, per_rank: bool):
    findings, notes, costs = analyze_root_causes(con, run_id, per_rank=per_rank)
    trace = costs.to_dict()
    return [computed_finding_contract(f, trace) for f in findings], notes, trace


def _assert_passes_agree(con, path: Path) -> None:
    result = ingest_paths(con, [str(path)])
    assert result.run_id and not result.errors, result.errors
    per_rank = _outcome(con, result.run_id, per_rank=True)
    whole = _outcome(con, result.run_id, per_rank=False)
    assert per_rank[0] == whole[0]     # findings
    assert per_rank[1] == whole[1]     # notes
    assert per_rank[2] == whole[2]     # run costs


@pytest.mark.parametrize("path", sample_run_paths(), ids=lambda p: p.name)
def test_sample_runs_agree(path, run_store):
    _assert_passes_agree(run_store, path)


@pytest.mark.parametrize("name", shared_trace_names() or ["(none)"])
def test_real_traces_agree(shared_traces, name, run_store):
    _assert_passes_agree(run_store, shared_traces / name)


@pytest.mark.skipif(not BENCH_RUN.is_dir(), reason="bench/data/8x128mb not generated (python bench/ingest.py)")
def test_bench_8x128mb_agrees(run_store):
    _assert_passes_agree(run_store, BENCH_RUN)


def _rows_by_rank(con, view: str, run_id: str) -> list[tuple]:
    """(rank, rows) of a cached view, its thresholds at their defaults."""
    names = VIEW_THRESHOLDS.get(view, ())
    return con.execute(f"SELECT rank, count(*) FROM {view}(?{', ?' * len(names)}) GROUP BY rank ORDER BY rank",
                       [run_id, *(th.DEFAULTS[name] for name in names)]).fetchall()


def test_rank_pass_sees_one_rank_and_whole_run_comes_back():
    con = connect(":memory:")
    result = ingest_paths(con, [str(SAMPLES / "synthetic_all")])
    run_id = result.run_id
    ensure_loaded(con)
    whole = {view: _rows_by_rank(con, view, run_id) for view in RANK_VIEWS + ACROSS_RANK_VIEWS}
    with run_cache(con, run_id, th.DEFAULTS) as cache:
        assert cache.ranks == [0, 1, 2, 3]
        with cache.only(2):
            assert con.execute("SELECT DISTINCT rank FROM events").fetchall() == [(2,)]
            assert con.execute("SELECT DISTINCT rank FROM ranks").fetchall() == [(2,)]
            for view in RANK_VIEWS + ACROSS_RANK_VIEWS:    # the rank's rows (of the whole run's, across ranks)
                assert _rows_by_rank(con, view, run_id) == [row for row in whole[view] if row[0] == 2], view
        # after the pass (and filled rank by rank): every rank's rows, as the stored macros give them
        for view in RANK_VIEWS + ACROSS_RANK_VIEWS:
            assert _rows_by_rank(con, view, run_id) == whole[view], view
        assert con.execute("SELECT count(DISTINCT rank) FROM events").fetchone()[0] == 4
    left = con.execute("SELECT count(*) FROM duckdb_views() WHERE temporary AND view_name IN ('events', 'ranks')"
                       ).fetchone()[0]
    assert left == 0
