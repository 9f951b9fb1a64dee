"""Safe to run for a team (#12): trace text and arguments cannot drive the terminal or break out of
a report, odd arguments are usage errors or load, and Ctrl-C / SIGTERM stop the CLI cleanly."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analyzers.common.safe_text import clip, csv_cell, html_text, markdown_cell, markdown_text, terminal_safe
from tests.support.kineto_traces import _trace
from tests.support.paths import REPO_ROOT as REPO

ESC_CLEAR = "\x1b[2J"
OSC52_CLIPBOARD = "\x1b]52;c;ZWNobyBoaQ==\x07"    # writes "echo hi" to the clipboard of the terminal
RLO = "\u202e"                                   # shows what follows right to left
HOSTILE = f"run{OSC52_CLIPBOARD}{ESC_CLEAR}\x00\x9b{RLO}exe.json"
RAW_INVISIBLE = ("\x1b", "\x00", "\x07", "\x9b", RLO)


def cli(*args: str | bytes, db: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI in a subprocess; arguments may be bytes (names that are not UTF-8); output as bytes."""
    return subprocess.run([sys.executable, "-m", "analyzers", *args, "--db", str(db)], capture_output=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, timeout=300)


def assert_terminal_safe(output: bytes) -> str:
    """Output is UTF-8 (no surrogate escaped through) with no control or bidi character but newlines."""
    text = output.decode("utf-8")
    for ch in RAW_INVISIBLE:
        assert ch not in text, repr(text)
    return text


def write_trace(path: Path | bytes, rank: int, world_size: int = 1, gap_us: float = 20.0) -> None:
    with open(path, "w") as f:
        json.dump(_trace(rank, world_size, kernel_us=100.0, gap_us=gap_us), f)


# --------------------------------------------------------------------------- the helpers

def test_terminal_safe_shows_controls_bidi_and_undecodable_bytes_escaped():
    shown = terminal_safe(HOSTILE)
    assert shown == "run\\x1b]52;c;ZWNobyBoaQ==\\x07\\x1b[2J\\x00\\x9b\\u202eexe.json"
    assert terminal_safe("r\udcff0.json") == "r\\xff0.json"          # a file name byte that was not UTF-8
    assert terminal_safe("line\nbreak\ttab\u2028") == "line\\x0abreak\\x09tab\\u2028"
    plain = "ProfilerStep#3 · ÿ café 核 µs"
    assert terminal_safe(plain) == plain


def test_markdown_breaks_links_in_trace_text_but_not_in_the_teams_notes():
    trace = markdown_text("see http://evil.example/x_y and www.evil.org " + ESC_CLEAR + RLO)
    assert "http://" not in trace and "www." not in trace and "\x1b" not in trace and RLO not in trace
    note = markdown_text("ticket https://tickets.example/T-1_2#c3 <b>", trace=False)
    assert "https://tickets.example/T-1_2#c3" in note and "<b>" not in note
    cell = markdown_cell("a|b\nc")
    assert "\n" not in cell and "\\|" in cell


def test_html_csv_and_clip():
    assert html_text('<i x="1">' + RLO + "\x00") == "&lt;i x=&quot;1&quot;&gt;\\u202e\\x00"
    assert [csv_cell(v) for v in ("=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "ok", 3, None)] == \
        ["'=1+1", "'+1", "'-1", "'@SUM(A1)", "'\tx", "'\rx", "ok", 3, None]
    assert clip("x" * 500) == "x" * 199 + "…" and len(clip("x" * 500)) == 200 and clip("short") == "short"


# --------------------------------------------------------------------------- the CLI's output

def test_runs_and_error_lines_print_no_escape_sequences(tmp_path):
    db = tmp_path / "s.duckdb"
    good, hostile = tmp_path / "good.json", tmp_path / HOSTILE.replace("\x00", "")   # NUL cannot be in a path
    write_trace(good, 0)
    hostile.write_text("{not json")
    loaded = cli("ingest", str(good), str(hostile), "--name", HOSTILE.replace("\x00", ""), db=db)
    assert loaded.returncode == 0
    errors = assert_terminal_safe(loaded.stderr)
    assert "\\x1b]52;c;" in errors and "\\u202e" in errors and "Traceback" not in errors
    table = cli("runs", db=db)
    assert table.returncode == 0 and "run\\x1b]52" in assert_terminal_safe(table.stdout)
    listed = cli("runs", "--format", "json", db=db)
    assert json.loads(assert_terminal_safe(listed.stdout))[0]["name"] == HOSTILE.replace("\x00", "")


def test_file_names_that_are_not_utf8_load_beside_the_good_files(tmp_path):
    db = tmp_path / "s.duckdb"
    odd = os.fsencode(tmp_path) + b"/rank\xff-0.json"
    write_trace(odd, 0, world_size=2)
    write_trace(tmp_path / "rank-1.json", 1, world_size=2)
    proc = cli("analyze", odd, str(tmp_path / "rank-1.json"), db=db)
    assert proc.returncode == 0, proc.stderr
    assert_terminal_safe(proc.stderr)
    assert json.loads(proc.stdout)["run"]["ranks"] == [0, 1]
    md = cli("analyze", json.loads(proc.stdout)["run"]["run_id"], "--format", "md", db=db)
    assert md.returncode == 0 and "rank" in assert_terminal_safe(md.stdout)


@pytest.mark.parametrize("argv", [["ingest", "{trace}", "--name", b"bad\xffname"],
                                  ["analyze", "{trace}", "--name", b"bad\xffname"],
                                  ["ingest", "{trace}", "--name", "   "],
                                  ["analyze", "{trace}", "--name", ""],
                                  ["delete", b"ab\xff"], ["restore", b"ab\xff"], ["delete", "  "]])
def test_odd_names_and_ids_are_one_line_usage_errors(tmp_path, argv):
    trace = tmp_path / "t.json"
    write_trace(trace, 0)
    db = tmp_path / "s.duckdb"
    proc = cli(*[str(trace) if a == "{trace}" else a for a in argv], db=db)
    assert proc.returncode == 2
    lines = assert_terminal_safe(proc.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert json.loads(cli("runs", "--format", "json", db=db).stdout) == []   # a blank name is never stored


def test_arguments_argparse_refuses_are_quoted_escaped(tmp_path):
    proc = cli("runs", ESC_CLEAR + RLO, db=tmp_path / "s.duckdb")
    assert proc.returncode == 2 and "unrecognized arguments: \\x1b[2J\\u202e" in assert_terminal_safe(proc.stderr)


# --------------------------------------------------------------------------- signals

def write_big_trace(path: Path, target_bytes: int) -> None:
    """A valid single-rank trace of about target_bytes: one block of kernel events written over and over."""
    block = ",".join(json.dumps({"ph": "X", "cat": "kernel", "name": f"void gemm_kernel_{i % 97}<float>()", "pid": 0,
                                 "tid": 7, "ts": 1_700_000_000_000 + i * 10, "dur": 5,
                                 "args": {"device": 0, "stream": 7, "correlation": i}}) for i in range(10_000))
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [' + block)
        written = len(block)
        while written < target_bytes:
            f.write("," + block)
            written += len(block) + 1
        f.write("]}")


def stop_mid_parse(tmp_path: Path, signum: int) -> subprocess.CompletedProcess:
    """Start `ingest` of a big trace and send signum once its parse ranges are all written to its
    temp directory, i.e. while DuckDB parses them."""
    big, temp = tmp_path / "big.json", tmp_path / "ingest-tmp"
    write_big_trace(big, 150_000_000)
    temp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "analyzers", "ingest", str(big), "--db", str(tmp_path / "s.duckdb")],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TRACEDOCTOR_TMPDIR": str(temp)})
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        copied = sum(p.stat().st_size for p in temp.rglob("*") if p.is_file())
        if copied >= 0.99 * big.stat().st_size:
            time.sleep(0.1)
            proc.send_signal(signum)
            break
        time.sleep(0.005)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("signum, code, word", [(signal.SIGINT, 130, "interrupted"),
                                                (signal.SIGTERM, 143, "terminated")])
def test_a_signal_mid_parse_exits_with_its_code_one_line_and_no_run(tmp_path, signum, code, word):
    # DuckDB 2.0 reports the interrupted parse as RuntimeError('Query interrupted'): once a
    # traceback and exit 1, which a CI job reads as "a --fail-on rule tripped"
    done = stop_mid_parse(tmp_path, signum)
    assert done.returncode == code, done.stderr.decode()
    lines = done.stderr.decode().strip().splitlines()
    # the progress lines ingest printed before the signal, then one line saying what happened
    assert lines[-1] == f"{word} (a run is stored whole or not at all)"
    assert not [line for line in lines if "Traceback" in line or "Error" in line], lines
    from analyzers.store.database import connect
    con = connect(tmp_path / "s.duckdb")
    try:
        assert con.execute("SELECT (SELECT count(*) FROM runs) + (SELECT count(*) FROM events)").fetchone()[0] == 0
    finally:
        con.close()
    assert list((tmp_path / "ingest-tmp").iterdir()) == []   # its working copies are gone
