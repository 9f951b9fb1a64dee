"""Every dashboard page through streamlit.testing (AppTest): with hand-built runs, with the bundled
sample runs, and with an empty store. Each test points TRACEDOCTOR_DB at its own tmp file."""
from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analyzers.store.database import connect
from tests.support.app_store import AFTER_RUN, BEFORE_RUN
from tests.support.app_pages import goto, open_app, plain, texts
from tests.support.kineto_traces import _rank_trace
from tests.support.paths import REPO_ROOT

PAGES = ["views/overview.py", "views/findings.py", "views/timeline.py", "views/ranks.py",
         "views/communication.py", "views/compare.py", "views/report.py", "views/load.py", "views/runs.py",
         "views/gpus.py", "views/memory.py"]


def test_every_page_renders_with_runs(hand_built, monkeypatch):
    at = open_app(monkeypatch, hand_built, run_id=BEFORE_RUN)
    for page in PAGES:
        goto(at, page)
        assert at.session_state["run_id"] == BEFORE_RUN, page   # the choice survives page switches


def test_overview_shows_ranks_steps_and_top_findings(hand_built, monkeypatch):
    at = open_app(monkeypatch, hand_built, run_id=BEFORE_RUN)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Ranks"] == "2"
    assert metrics["Steps per rank"] == "2"
    assert metrics["Findings"] == "2"
    page = texts(at)
    assert "GPU idle between kernel launches" in page and "3.50 ms/step" in page


def test_findings_cards_ranked_with_fix_code_and_demo(hand_built, monkeypatch):
    at = goto(open_app(monkeypatch, hand_built, run_id=BEFORE_RUN), "views/findings.py")
    headers = [h.value for h in at.subheader]
    assert headers[0].startswith("1. GPU idle between kernel launches")
    assert headers[1].startswith("2. Communication not hidden behind compute")
    costs = [m.value for m in at.metric if m.label == "Cost per step"]
    assert costs == ["3.50 ms", "2.00 ms"]
    codes = [c.value for c in at.code]
    assert "python -m accel.demo cuda_graph --out DIR" in codes
    assert "python -m accel.demo ddp_bucket_tuning --out DIR" in codes


def test_marking_a_finding_persists_in_the_store(hand_built, monkeypatch):
    at = goto(open_app(monkeypatch, hand_built, run_id=BEFORE_RUN), "views/findings.py")
    review = [s for s in at.selectbox if s.label == "Review"]
    notes = [t for t in at.text_input if t.label == "Note"]
    review[1].set_value("wont_fix")
    notes[1].input("bandwidth bound, nothing to hide behind")
    [b for b in at.button if b.label == "Save mark"][1].click()
    at.run()
    assert not at.exception
    con = connect(hand_built, read_only=False)
    try:
        from analyzers.store.runs import get_marks

        marks = get_marks(con, BEFORE_RUN)
    finally:
        con.close()
    assert marks["comm_exposed:r0"]["status"] == "wont_fix"
    assert marks["comm_exposed:r0"]["note"] == "bandwidth bound, nothing to hide behind"


def test_show_in_timeline_opens_the_findings_window(hand_built, monkeypatch):
    at = goto(open_app(monkeypatch, hand_built, run_id=BEFORE_RUN), "views/findings.py")
    [b for b in at.button if b.label == "Show in timeline"][0].click()
    at.run()
    assert not at.exception
    assert at.session_state["timeline_finding"] == "launch_gap:r0:s7"
    assert any("window" in c.value and "bars drawn" in c.value for c in at.caption)


def test_untrusted_names_are_escaped_in_markdown(hand_built, monkeypatch):
    con = connect(hand_built)
    con.execute("UPDATE findings SET summary = '<script>alert(1)</script> [x](javascript:alert(1))' "
                "WHERE run_id = ? AND finding_id = 'launch_gap:r0:s7'", [BEFORE_RUN])
    con.close()
    at = goto(open_app(monkeypatch, hand_built, run_id=BEFORE_RUN), "views/findings.py")
    summaries = [m.value for m in at.markdown if "script" in m.value]
    assert summaries and all("\\<script\\>" in s and "\\[x\\]\\(javascript" in s for s in summaries)


def test_compare_page_shows_deltas(hand_built, monkeypatch):
    at = open_app(monkeypatch, hand_built, run_id=AFTER_RUN)
    at.session_state["compare_before"] = BEFORE_RUN
    at.session_state["compare_after"] = AFTER_RUN
    goto(at, "views/compare.py")
    metrics = {m.label: m for m in at.metric}
    # the mean over ranks of each rank's mean step (run_step_breakdown, as Overview shows it): the
    # before run's ranks step 10 and 6 ms (8.00), the after run's one rank 8 ms
    assert metrics["Mean step time"].value == "8.00 ms"
    assert metrics["Mean step time"].delta == "+0.00 ms vs before"
    assert metrics["After vs before (mean step)"].delta == "8.00 → 8.00 ms per step"


def test_ranks_and_communication_pages_draw_their_charts(hand_built, monkeypatch):
    at = goto(open_app(monkeypatch, hand_built, run_id=BEFORE_RUN), "views/ranks.py")
    assert len(at.get("plotly_chart")) == 4
    at = goto(at, "views/communication.py")
    frames = at.dataframe
    assert any("busbw_gbps" in f.value.columns and len(f.value) == 1 for f in frames)


def test_rename_tag_delete_restore_and_purge_a_run(hand_built, monkeypatch):
    from analyzers.store.runs import audit_log, list_trash

    at = goto(open_app(monkeypatch, hand_built, run_id=AFTER_RUN), "views/runs.py")
    at.text_input[0].set_value("after bucket tuning")
    at.text_input[1].set_value("after-fix, ddp")
    at.button[0].click()   # the form's Save
    at.run()
    assert not at.exception
    con = connect(hand_built)
    row = con.execute("SELECT name, tags FROM runs WHERE run_id = ?", [AFTER_RUN]).fetchone()
    con.close()
    assert row == ("after bucket tuning", ["after-fix", "ddp"])
    at.checkbox(key=f"confirm-{AFTER_RUN}").check()
    at.run()
    [b for b in at.button if b.label == "Delete run"][0].click()
    at.run()
    assert not at.exception
    assert at.session_state["run_id"] == BEFORE_RUN
    con = connect(hand_built)
    assert [r["run_id"] for r in list_trash(con)] == [AFTER_RUN]   # in the trash, rows kept
    assert con.execute("SELECT count(*) FROM events WHERE run_id = ?", [AFTER_RUN]).fetchone()[0] > 0
    con.close()

    at.button(key="restore").click()
    at.run()
    assert not at.exception
    con = connect(hand_built)
    assert list_trash(con) == []
    con.close()
    assert at.session_state["run_id"] == AFTER_RUN   # restored, and shown

    at.checkbox(key=f"confirm-{AFTER_RUN}").check()
    at.run()
    [b for b in at.button if b.label == "Delete run"][0].click()
    at.run()
    at.checkbox(key=f"confirm-purge-{AFTER_RUN}").check()
    at.run()
    at.button(key="purge").click()
    at.run()
    assert not at.exception
    con = connect(hand_built)
    try:
        assert con.execute("SELECT count(*) FROM events WHERE run_id = ?", [AFTER_RUN]).fetchone()[0] == 0
        actions = [(r["action"], r["run_id"]) for r in audit_log(con)]
    finally:
        con.close()
    assert actions[:6] == [("purge", AFTER_RUN), ("delete", AFTER_RUN), ("restore", AFTER_RUN),
                           ("delete", AFTER_RUN), ("tags", AFTER_RUN), ("rename", AFTER_RUN)]
    assert "Audit log" in [h.value for h in at.subheader]


def test_every_page_with_an_empty_store(tmp_path, monkeypatch):
    at = open_app(monkeypatch, tmp_path / "empty.duckdb")
    assert "No run loaded yet" in texts(at)
    for page in PAGES:
        goto(at, page)
    goto(at, "views/compare.py")
    assert "at least two runs" in texts(at)


def test_gpu_page_says_plainly_when_there_is_no_nvidia_gpu(tmp_path, monkeypatch):
    from app.gpu_info import read_gpus

    at = goto(open_app(monkeypatch, tmp_path / "empty.duckdb"), "views/gpus.py")
    info = read_gpus()
    if info["ok"]:
        assert any(f"{len(info['gpus'])} GPU(s)" in m.value for m in at.markdown)
    else:
        assert "No NVIDIA GPU here" in texts(at) or "not installed" in texts(at)


def send_through_upload_route(ticket_id: str, files: list[tuple[str, bytes]], slice_bytes: int = 7) -> None:
    """Upload files as the page's browser component does: each in slices through the HTTP route."""
    import asyncio

    import httpx
    from starlette.applications import Starlette

    from app import uploads

    async def send() -> None:
        transport = httpx.ASGITransport(app=Starlette(routes=uploads.routes()))
        async with httpx.AsyncClient(transport=transport, base_url="http://dashboard") as client:
            for index, (name, content) in enumerate(files):
                url = uploads.route_path().replace("{file_id}", f"file{index:04d}test")
                for start in range(0, max(len(content), 1), slice_bytes):
                    response = await client.put(url, content=content[start:start + slice_bytes], headers={
                        uploads.TICKET_HEADER: ticket_id, "X-Upload-Offset": str(start),
                        "X-Upload-Size": str(len(content)), "X-Upload-Name": name})
                    assert response.status_code == 200, response.text

    asyncio.run(send())


def test_upload_loads_good_files_and_names_the_broken_one(tmp_path, monkeypatch):
    pytest.importorskip("analyzers.ingest")
    from analyzers.store.runs import audit_log
    from app import uploads

    at = goto(open_app(monkeypatch, tmp_path / "up.duckdb"), "views/load.py")
    ticket = uploads.get_ticket(at.session_state["_upload_ticket"])
    assert [b for b in at.button if b.label == "Analyse uploaded files"][0].disabled
    send_through_upload_route(ticket.ticket_id, [
        ("job_rank0.json", _rank_trace(0, 2)),
        ("job_rank1.json.gz", gzip.compress(_rank_trace(1, 2))),
        ("broken_rank2.json", b'{"traceEvents": [ {"ph": "X", '),
    ])
    at.run()
    assert any("3 files on the server" in c.value for c in at.caption)
    [b for b in at.button if b.label == "Analyse uploaded files"][0].click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Loaded run" in s.value and "2 file(s)" in s.value for s in at.success)
    errors = [plain(e.value) for e in at.error]
    assert any(e.startswith("**broken_rank2.json**: ") and "truncated" in e for e in errors), errors
    assert not ticket.directory.exists()   # the uploaded copies go once the run is stored
    run_id = at.session_state["run_id"]
    con = connect(tmp_path / "up.duckdb")
    assert con.execute("SELECT list(rank ORDER BY rank) FROM ranks WHERE run_id = ?", [run_id]).fetchone()[0] == [0, 1]
    entry = audit_log(con)[0]
    con.close()
    assert (entry["action"], entry["run_id"]) == ("upload", run_id)
    assert entry["detail"] == "job_rank0.json, job_rank1.json.gz, broken_rank2.json"


def test_a_typed_path_that_does_not_exist_is_reported(tmp_path, monkeypatch):
    at = goto(open_app(monkeypatch, tmp_path / "p.duckdb"), "views/load.py")
    path_input = [t for t in at.text_input if t.label == "File or directory path"][0]
    path_input.input(str(tmp_path / "missing_dir"))
    at.run()
    [b for b in at.button if b.label == "Analyse this path"][0].click()
    at.run()
    assert any("no such file or directory" in e.value for e in at.error)


SAMPLE_MANIFEST = REPO_ROOT / "sample_traces" / "manifest.json"


def open_with_samples(tmp_path, monkeypatch):
    """The app on a new store with the bundled samples: (app, manifest entries, store, {name: run_id})."""
    pytest.importorskip("analyzers.ingest")
    entries = json.loads(SAMPLE_MANIFEST.read_text())
    db = tmp_path / "samples.duckdb"
    at = open_app(monkeypatch, db, samples=str(SAMPLE_MANIFEST))
    con = connect(db)
    by_name = dict(con.execute("SELECT name, run_id FROM runs").fetchall())
    con.close()
    return at, entries, db, by_name


@pytest.fixture(scope="module")
def samples_loaded(tmp_path_factory):
    """The bundled samples loaded on start into a new store, once for this module (the load ingests
    and analyses every sample run: ~45 s on CI): (the run the loading session opened on, manifest
    entries, the store as the load left it, {name: run_id}). Tests open copies (samples_store)."""
    from app import state

    with pytest.MonkeyPatch.context() as monkeypatch:
        at, entries, db, by_name = open_with_samples(tmp_path_factory.mktemp("samples"), monkeypatch)
        assert _store_let_go(state), "the dashboard still holds the store after loading the samples"
    return at.session_state["run_id"], entries, db, by_name


@pytest.fixture()
def samples_store(samples_loaded, tmp_path) -> Path:
    """This test's own copy of the store the samples were loaded into (no test sees another's changes)."""
    db = tmp_path / "samples.duckdb"
    shutil.copyfile(samples_loaded[2], db)
    return db


def test_bundled_samples_load_on_start_and_once(samples_loaded, samples_store, monkeypatch):
    opened_on, entries, _, by_name = samples_loaded
    assert sorted(by_name) == sorted(e["name"] for e in entries)
    assert opened_on is not None
    at = open_app(monkeypatch, samples_store, samples=str(SAMPLE_MANIFEST))   # a second session: nothing duplicated
    for page in PAGES:
        goto(at, page)
    con = connect(samples_store)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == len(entries)
    con.close()


def test_report_page_lists_findings_and_review_marks(hand_built, monkeypatch):
    pytest.importorskip("analyzers.read.report")
    from analyzers.store.runs import set_mark

    con = connect(hand_built)
    set_mark(con, BEFORE_RUN, "launch_gap:r0:s7", "fixed", "CUDA graph <b>captured</b>")
    con.close()
    at = goto(open_app(monkeypatch, hand_built, run_id=BEFORE_RUN), "views/report.py")
    frames = [f.value for f in at.dataframe]
    assert list(frames[0]["finding"]) == ["GPU idle between kernel launches", "Communication not hidden behind compute"]
    assert frames[1].to_dict("records") == [{"id": "launch_gap:r0:s7", "kind": "GPU idle between kernel launches",
                                             "status": "fixed", "note": "CUDA graph <b>captured</b>"}]
    markdown = at.code[-1].value
    assert "## Review" in markdown and "CUDA graph \\<b\\>captured\\</b\\>" in markdown


def test_review_section_escapes_notes_in_html():
    from app import review

    rows = review.review_rows([{"id": "a", "kind": "launch_gap"}, {"id": "b", "kind": "h2d_stall"}],
                              {"b": {"status": "wont_fix", "note": "<script>x</script>"}})
    assert rows == [{"id": "b", "kind": "Host-to-device copies stall the GPU", "status": "won't fix",
                     "note": "<script>x</script>"}]
    fragment = review.review_html(rows)
    assert "&lt;script&gt;x&lt;/script&gt;" in fragment and "<script>" not in fragment
    page = review.insert_before_body_end("<html><body><p>r</p></body></html>", fragment)
    assert page.endswith(fragment + "</body></html>")
    assert "No finding has been marked yet" in review.review_html([])


@pytest.mark.parametrize("trace", ["cpu_only_rank34.json.gz", "resnet50_num_workers_0.json.gz", "nccl2rank",
                                   "rocm_mi250_minitoy.json.gz", "nccl_allreduce_with_sizes.json.gz"])
def test_every_page_on_real_traces(trace, shared_traces, tmp_path, monkeypatch):
    """Real Kineto traces (old and new schema, CPU-only, ROCm, NCCL with and without sizes)."""
    pytest.importorskip("analyzers.ingest")
    from analyzers.ingest import ingest_paths

    db = tmp_path / "real.duckdb"
    con = connect(db)
    result = ingest_paths(con, [str(shared_traces / trace)])
    assert result.run_id is not None, result.errors
    from analyzers.execution.pipeline import analyze_run

    analyze_run(con, result.run_id)
    con.close()
    at = open_app(monkeypatch, db, run_id=result.run_id)
    for page in PAGES:
        goto(at, page)
        assert not at.exception, page


def test_findings_beyond_the_third_are_folded(hand_built, monkeypatch):
    from tests.support.app_store import add_finding

    con = connect(hand_built)
    for i, cost in enumerate((1.5, 1.0, 0.5)):
        add_finding(con, BEFORE_RUN, f"h2d_stall:r0:{i}", "h2d_stall", cost, cost * 10)
    con.close()
    at = goto(open_app(monkeypatch, hand_built, run_id=BEFORE_RUN), "views/findings.py")
    labels = [plain(e.label) for e in at.expander]
    assert labels == ["4. Host-to-device copies stall the GPU — 1.00 ms/step (10.0 % of step) · rank 0 · step 1 · "
                      "stream 7 · window of 10.000 ms",
                      "5. Host-to-device copies stall the GPU — 0.50 ms/step (5.0 % of step) · rank 0 · step 1 · "
                      "stream 7 · window of 10.000 ms"]


def test_samples_open_on_the_first_manifest_entry_and_cpu_runs_compare_plainly(samples_loaded, samples_store,
                                                                              monkeypatch):
    opened_on, entries, _, by_name = samples_loaded
    assert opened_on == by_name[entries[0]["name"]]          # the session that loaded them
    at = open_app(monkeypatch, samples_store)
    assert at.session_state["run_id"] == opened_on            # and a later one (the newest run)

    cpu_runs = [by_name[e["name"]] for e in entries if "CPU" in e["name"]][:2]
    assert len(cpu_runs) == 2
    at.session_state["compare_before"], at.session_state["compare_after"] = cpu_runs
    goto(at, "views/compare.py")
    assert "CPU-only traces" in texts(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["GPU idle / step"] == "–" and metrics["Compute / step"] == "–"
    assert metrics["Mean step time"].endswith(" ms")


def _write_from_another_process(db: Path, hold_s: float = 0.0) -> subprocess.Popen:
    """Another process (as the CLI would) opens the store for writing, writes, holds it hold_s."""
    code = ("import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); "
            "con.execute('CREATE TABLE IF NOT EXISTS cli_probe (a INTEGER)'); "
            "con.execute('INSERT INTO cli_probe VALUES (1)'); print('held', flush=True); "
            "time.sleep(float(sys.argv[2])); con.close()")
    return subprocess.Popen([sys.executable, "-c", code, str(db), str(hold_s)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _store_let_go(state, timeout_s: float = 10.0) -> bool:
    """Whether the dashboard's store lease (it lives in this process) closes within timeout_s."""
    deadline = time.monotonic() + timeout_s
    while state.lease().is_open and time.monotonic() < deadline:
        time.sleep(0.05)
    return not state.lease().is_open


def test_the_store_is_let_go_between_clicks_so_the_cli_can_write(hand_built, monkeypatch):
    from app import state

    monkeypatch.setattr(state, "LINGER_S", 0.05)
    at = open_app(monkeypatch, hand_built, run_id=BEFORE_RUN)
    assert _store_let_go(state), "the dashboard still holds the store after the click was done"
    writer = _write_from_another_process(hand_built)
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    goto(at, "views/runs.py")   # the next click opens it again, and sees what the other process wrote
    assert at.session_state["run_id"] == BEFORE_RUN
    con = connect(hand_built)
    try:
        assert con.execute("SELECT count(*) FROM cli_probe").fetchone()[0] == 1
    finally:
        con.close()


def test_a_click_waits_while_another_process_holds_the_store(hand_built, monkeypatch):
    from app import state

    monkeypatch.setattr(state, "LINGER_S", 0.05)
    at = open_app(monkeypatch, hand_built, run_id=BEFORE_RUN)
    _store_let_go(state)
    writer = _write_from_another_process(hand_built, hold_s=2.0)
    assert writer.stdout.readline().strip() == "held"
    started = time.monotonic()
    goto(at, "views/overview.py")   # blocks until the other process lets go, then renders
    assert time.monotonic() - started >= 1.0
    writer.communicate(timeout=60)
    assert at.session_state["run_id"] == BEFORE_RUN
    assert not any("in use by" in str(e.value) for e in list(at.info) + list(at.error))   # notice cleared
    assert at.subheader or at.markdown   # the page drew itself after the wait


def test_a_run_loaded_by_the_cli_ingest_is_analysed_when_opened(tmp_path, monkeypatch):
    """`python -m analyzers ingest` only loads; the Findings page must not call such a run clean."""
    from tests.support.kineto_traces import _trace

    from analyzers.analysis.version import ANALYSIS_VERSION
    from analyzers.read.stored import analysis_is_current
    from analyzers.ingest import ingest_paths

    trace = tmp_path / "launch_bound.json"
    trace.write_text(json.dumps(_trace(0, 1, kernel_us=50.0, gap_us=300.0)))
    db = tmp_path / "store.duckdb"
    con = connect(db)
    try:
        run_id = ingest_paths(con, [str(trace)]).run_id
        assert not analysis_is_current(con, run_id)
    finally:
        con.close()
    at = open_app(monkeypatch, db, run_id=run_id)
    goto(at, "views/findings.py")
    assert "No findings" not in texts(at)
    assert "launch" in texts(at).lower()
    con = connect(db)
    try:
        assert con.execute("SELECT analysis_version FROM runs WHERE run_id = ?", [run_id]).fetchone()[0] == ANALYSIS_VERSION
        assert con.execute("SELECT count(*) FROM findings WHERE run_id = ? AND kind = 'launch_gap'",
                           [run_id]).fetchone()[0] == 1
    finally:
        con.close()


def test_findings_of_an_older_version_are_replaced_when_the_run_is_opened(hand_built, monkeypatch):
    con = connect(hand_built)
    try:
        kept = con.execute("SELECT count(*) FROM findings WHERE run_id = ?", [AFTER_RUN]).fetchone()[0]
        con.execute("UPDATE runs SET analysis_version = 'older' WHERE run_id = ?", [BEFORE_RUN])
        con.execute("INSERT INTO findings (run_id, finding_id, kind, severity, cost_ns, cost_pct, summary) "
                    "VALUES (?, 'gone:r0', 'launch_gap', 'high', 1, 99.0, 'an old analysis wrote this')", [BEFORE_RUN])
    finally:
        con.close()
    at = open_app(monkeypatch, hand_built, run_id=BEFORE_RUN)
    goto(at, "views/findings.py")
    assert "an old analysis wrote this" not in texts(at)
    con = connect(hand_built)
    try:
        assert con.execute("SELECT count(*) FROM findings WHERE finding_id = 'gone:r0'").fetchone()[0] == 0
        # the run not opened keeps its findings until it is
        assert con.execute("SELECT count(*) FROM findings WHERE run_id = ?", [AFTER_RUN]).fetchone()[0] == kept
    finally:
        con.close()


def test_overlapping_script_runs_each_get_their_own_cursor_and_all_are_handed_back(hand_built, monkeypatch):
    # A click arriving while the same session's previous run is finishing starts a second run on
    # another thread; one cursor shared by both failed with "connection is busy with another call".
    import threading

    from app import state

    monkeypatch.setenv("TRACEDOCTOR_DB", str(hand_built))
    monkeypatch.setattr(state, "LINGER_S", 0.05)
    errors, cursors, start = [], [], threading.Barrier(4)

    def script_run():
        try:
            start.wait()
            cursors.append(state.cur())
            for _ in range(30):
                state.cur().execute("SELECT count(*) FROM events e1, events e2 WHERE e1.rank = e2.rank").fetchall()
        except Exception as exc:   # noqa: BLE001 - any failure is the test's finding
            errors.append(repr(exc))
        finally:
            state.release_run_cursor()

    threads = [threading.Thread(target=script_run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert len({id(c) for c in cursors}) == 4
    assert _store_let_go(state)   # every cursor was handed back: the store is free for the CLI
