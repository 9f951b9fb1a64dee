"""Reviewing modern runs: a link per run (?run=<id>), the workload on Overview, the per-op
performance tab, Compare of the H100 and MI300X Falconsai runs by kernel category, and a typed run
name kept when the same content was stored before."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from analyzers.ingest import ingest_paths
from analyzers.execution.pipeline import analyze_run
from analyzers.read.queries import operator_diff
from analyzers.store.database import connect
from tests.support.app_pages import goto, open_app, texts

PAIR = ("h100__Falconsai_nsfw_image_detection__1016002.json.gz", "mi300__Falconsai_nsfw_image_detection__1016002.json.gz")


@pytest.fixture(scope="module")
def pair_store(shared_traces, tmp_path_factory):
    db = tmp_path_factory.mktemp("pair") / "td.duckdb"
    con = connect(db)
    ids = []
    for trace in PAIR:
        run_id = ingest_paths(con, [shared_traces / "modern" / trace]).run_id
        analyze_run(con, run_id)
        ids.append(run_id)
    con.close()
    return db, ids


def test_the_vendor_pair_lines_up_by_kernel_category(pair_store):
    db, (h100, mi300) = pair_store
    con = connect(db, read_only=True)
    by_name = operator_diff(con, h100, mi300, "kernels", limit=None)
    by_family = operator_diff(con, h100, mi300, "families", limit=None).set_index("name")
    con.close()
    # by name nearly nothing lines up: CUTLASS/cuBLAS against hipBLASLt, FlashAttention against Triton
    both = by_name[(by_name.before_ms > 0) & (by_name.after_ms > 0)]
    assert len(both) <= 3
    for family in ("gemm", "attention", "conv", "norm", "elementwise"):
        assert by_family.loc[family, "before_ms"] > 0 and by_family.loc[family, "after_ms"] > 0, family
    # the GEMMs: H100 0.73 ms, MI300X 0.94 ms of the step (TraceLens' kernel summaries: 735 and 942 us)
    assert by_family.loc["gemm", "before_ms"] == pytest.approx(0.735, rel=0.02)
    assert by_family.loc["gemm", "after_ms"] == pytest.approx(0.942, rel=0.02)
    assert by_family.loc["attention", "after_ms"] > 2.5 * by_family.loc["attention", "before_ms"]


def _open(monkeypatch, db, link: str) -> AppTest:
    return open_app(monkeypatch, db, link=link)


def test_a_link_opens_its_run_and_every_page_keeps_it(pair_store, monkeypatch):
    db, (h100, mi300) = pair_store
    for wanted in (h100, mi300):
        at = _open(monkeypatch, db, wanted[:6])             # a prefix, as the run picker shows ids
        assert at.session_state["run_id"] == wanted
        assert at.query_params["run"] == wanted
        goto(at, "views/kernels.py")
        assert at.session_state["run_id"] == wanted and at.query_params["run"] == wanted
    at = _open(monkeypatch, db, "feedfacecafe")
    assert "not stored here" in texts(at)


def test_overview_names_the_workload_and_the_performance_tab_the_peaks(pair_store, monkeypatch):
    db, (h100, _) = pair_store
    at = _open(monkeypatch, db, h100)
    shown = texts(at)
    assert "Workload: **inference**" in shown and "forward only" in shown
    goto(at, "views/kernels.py")
    assert "NVIDIA H100 SXM" in texts(at)
    frames = [df.value for df in at.dataframe]
    perf = next(f for f in frames if "tflops" in f.columns and "category" in f.columns)
    assert perf.tflops.max() > 200        # the 788x3072x768 GEMMs run at ~270 TFLOP/s


def test_a_typed_name_renames_a_run_stored_before(shared_traces, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEDOCTOR_DB", str(tmp_path / "td.duckdb"))
    monkeypatch.setenv("TRACEDOCTOR_SAMPLES", "none")
    import streamlit as st

    from app import state

    st.cache_resource.clear()
    trace = str(shared_traces / "modern" / PAIR[0])
    first = state.ingest([trace], name="falcon h100")
    again = state.ingest([trace], name="falcon h100, bf16 baseline")
    assert again[0]["reused"] and again[0]["run_id"] == first[0]["run_id"]
    assert (again[0]["name"], again[0]["renamed_from"]) == ("falcon h100, bf16 baseline", "falcon h100")
    state.release_run_cursor()
    st.cache_resource.clear()
