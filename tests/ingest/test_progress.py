"""Progress of loads and analyses: told per file, per rank (with its rows) and per analysis stage
through a callback; the CLI writes it to stderr only (one rewritten line on a terminal, plain
lines otherwise, nothing with --quiet), never into the JSON on stdout."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from analyzers.cli import _StderrProgress, main
from analyzers.execution.pipeline import analyze_run
from analyzers.ingest import ingest_paths
from analyzers.common.progress import progress_text, teller
from analyzers.store.database import connect


def rank_trace(rank: int, world: int, start_us: int = 1_700_000_000_000_000, kernels: int = 3) -> str:
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1,
               "ts": start_us, "dur": 10_000}]
    for k in range(kernels):
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": start_us + 100 * k + 10, "dur": 5, "args": {"correlation": k}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": start_us + 100 * k + 20,
             "dur": 50, "args": {"device": 0, "stream": 7, "correlation": k}},
        ]
    return json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": world},
                       "traceEvents": events})


@pytest.fixture()
def job(tmp_path) -> Path:
    folder = tmp_path / "job"
    folder.mkdir()
    for rank, kernels in ((0, 3), (1, 5)):
        (folder / f"rank{rank}.json").write_text(rank_trace(rank, 2, kernels=kernels))
    return folder


def test_ingest_tells_each_rank_with_its_rows(job):
    con = connect(":memory:")
    seen = []
    result = ingest_paths(con, [job], progress=lambda stage, item, fraction, **d: seen.append((stage, item, fraction, d)))
    stored = [(d["rank"], d["rows"], d["done"], d["total"]) for stage, _, _, d in seen
              if stage == "writing" and "rank" in d]
    n_events = dict(con.execute("SELECT rank, n_events FROM ranks WHERE run_id = ?", [result.run_id]).fetchall())
    assert stored == [(0, n_events[0], 1, 2), (1, n_events[1], 2, 2)]
    assert n_events[1] > n_events[0]          # the rows are each rank's own
    stages = [stage for stage, *_ in seen]
    assert stages.index("reading") < stages.index("parsing") < stages.index("parsed") < stages.index("writing")
    assert all(0.0 <= fraction <= 1.0 for _, _, fraction, _ in seen)
    assert seen[-1][2] == 1.0


def test_a_callback_without_details_still_gets_stage_item_fraction(job):
    con = connect(":memory:")
    seen = []
    ingest_paths(con, [job], progress=lambda stage, item, fraction: seen.append(stage))
    assert "writing" in seen and "parsed" in seen


def test_analysis_tells_each_stage_in_order(job):
    con = connect(":memory:")
    run_id = ingest_paths(con, [job]).run_id
    seen = []
    findings = analyze_run(con, run_id, progress=lambda stage, item, fraction, **d: seen.append((stage, item, d)))
    steps = [d["done"] for stage, _, d in seen if stage == "analysing"]
    total = seen[0][2]["total"]
    assert steps == list(range(1, total + 1)) and total >= 4
    assert seen[-1][0] == "analysed" and seen[-1][2]["findings"] == len(findings)
    assert any("launch" in item.lower() for stage, item, _ in seen if stage == "analysing")


def test_progress_text_words():
    assert progress_text("writing", "rank1.json", 0.5, done=1, total=2, rank=1, rows=1234) == \
        "Stored 1/2: rank 1 (rank1.json), 1,234 events"
    assert progress_text("analysing", "Host synchronisation", 0.3, done=3, total=10, job=(2, 3)) == \
        "job 2/3 · Analysing 3/10: Host synchronisation"
    assert progress_text("analysed", "", 1.0, findings=1) == "Analysed: 1 finding"


def test_a_failing_callback_signature_is_not_guessed_wrong():
    calls = []
    teller(lambda stage, item, fraction: calls.append(stage))("parsed", "x", 2.0, done=1)
    teller(lambda *args, **details: calls.append(details))("parsed", "x", 2.0, done=1)
    assert calls == ["parsed", {"done": 1}]


def test_cli_analyze_progress_goes_to_stderr_not_into_the_json(job, tmp_path, capsys):
    code = main(["analyze", str(job), "--db", str(tmp_path / "s.duckdb")])
    out, err = capsys.readouterr()
    assert code == 0
    report = json.loads(out)                  # stdout is the JSON report alone
    assert report["run"]["run_id"]
    lines = err.splitlines()                  # not a terminal: one plain line per event
    assert any(line.startswith("Stored 2/2: rank 1 (") and line.endswith("events") for line in lines), lines
    assert any(line.startswith("Analysing ") for line in lines)
    assert "\r" not in err


def test_cli_quiet_prints_no_progress(job, tmp_path, capsys):
    assert main(["ingest", str(job), "--db", str(tmp_path / "s.duckdb"), "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert len(out.split()) == 1 and err == ""


def test_on_a_terminal_one_line_is_rewritten_and_cleared():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    progress = _StderrProgress(stream)
    progress("writing", "rank0.json", 0.5, done=1, total=2, rank=0, rows=10)
    progress("writing", "r1.json", 1.0, done=2, total=2, rank=1, rows=20)
    progress.done()
    text = stream.getvalue()
    assert "\n" not in text and text.count("\r") == 4   # each line, then the clearing of the last
    assert text.endswith("\r") and "Stored 2/2: rank 1 (r1.json), 20 events" in text


def test_cli_progress_escapes_trace_text():
    stream = io.StringIO()
    _StderrProgress(stream)("reading", "evil\x1b[2Jname.json", 0.5)
    assert "\x1b" not in stream.getvalue()


def test_a_callback_that_fails_does_not_fail_the_load(job):
    def broken(stage, item, fraction, **details):
        raise RuntimeError("the progress widget is gone")

    con = connect(":memory:")
    result = ingest_paths(con, [job], progress=broken)
    assert result.run_id and not result.errors
    analyze_run(con, result.run_id, progress=broken)
