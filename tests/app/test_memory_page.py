"""The Memory page on a run with GPU [memory] events and an OOM allocator snapshot: it renders,
shows the peaks, the snapshot's figures and the failed allocation, and the memory findings."""
from __future__ import annotations

import pickle

from streamlit.testing.v1 import AppTest

from analyzers.api import ingest_and_analyze
from analyzers.store.database import connect
from tests.support.app_pages import HOME, goto, texts
from tests.support.memory_inputs import _gpu_trace, _snapshot


def test_memory_page_shows_curves_peak_ops_and_the_oom(tmp_path, monkeypatch):
    snapshot = tmp_path / "rank0_oom.pickle"
    snapshot.write_bytes(pickle.dumps(_snapshot(oom=True)))
    db = tmp_path / "store.duckdb"
    con = connect(str(db))
    run_id = ingest_and_analyze(con, [str(_gpu_trace(tmp_path / "gpu.json", churn=True)), str(snapshot)]).report["run"]["run_id"]
    con.close()
    monkeypatch.setenv("TRACEDOCTOR_DB", str(db))
    monkeypatch.setenv("TRACEDOCTOR_SAMPLES", "none")
    at = AppTest.from_file(HOME, default_timeout=120)
    at.session_state["run_id"] = run_id
    at.run()
    at = goto(at, "views/memory.py")
    shown = texts(at)
    assert "Allocated and reserved over time" in shown
    assert [m.value for m in at.metric][:3] == ["14.0 GiB", "17.0 GiB", "80.0 GiB"]   # peaks (churn adds 1 GiB), the device
    assert "an allocation of 96.0 MiB failed" in shown
    assert "Allocator churn" in shown or "allocator reserves or releases" in shown
    assert len(at.get("plotly_chart")) >= 3      # the curve, the ops at the peak, the segment map
