"""The dashboard in a real browser: Debian's chromium driven by Python playwright.

Starts `streamlit run app/Home.py` on 127.0.0.1 (free port, headless, its own TRACEDOCTOR_DB),
uploads a synthesized multi-rank trace, waits for the findings, opens a fix and the timeline,
downloads the report; then uploads a broken file beside a good one and sees both outcomes.
Skips (with the reason) where /usr/bin/chromium or playwright is missing. Never runs
`playwright install`.
"""
from __future__ import annotations

import gzip
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_MS = 60_000

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium)", allow_module_level=True)
playwright_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed")


def _download(page, button_name: str, attempts: int = 3) -> Path:
    """Click a download button and return the file. A click that lands while Streamlit is
    re-rendering the page is lost (the button is replaced), so a missing download is retried."""
    for attempt in range(attempts):
        try:
            with page.expect_download(timeout=TIMEOUT_MS // attempts) as download:
                page.get_by_role("button", name=button_name).click()
            return Path(download.value.path())
        except playwright_api.TimeoutError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The app, started once for the module; yields its base URL."""
    workdir = tmp_path_factory.mktemp("e2e")
    port = _free_port()
    env = {**os.environ, "TRACEDOCTOR_DB": str(workdir / "store.duckdb"), "TRACEDOCTOR_SAMPLES": "none"}
    log = open(workdir / "streamlit.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app/Home.py", "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"streamlit did not start: {(workdir / 'streamlit.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield chromium
        chromium.close()


@pytest.fixture()
def page(browser, request, tmp_path):
    context = browser.new_context(viewport={"width": 1440, "height": 1600}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    yield page
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:   # what the browser showed when the test failed
        shot = tmp_path / "failure.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot of the failure: {shot}")
    context.close()


@pytest.fixture(scope="module")
def straggler_trace(tmp_path_factory) -> list[Path]:
    from sample_traces.synthesize import synthesize

    out = tmp_path_factory.mktemp("straggler")
    synthesize(out, "straggler", world_size=2, steps=3, seed=1, compress=True)
    return sorted(out.glob("*.json.gz"))


def _wait_idle(page) -> None:
    """Until Streamlit has finished the current script run."""
    page.wait_for_selector('[data-testid="stAppViewContainer"]')
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=TIMEOUT_MS)


def _upload(page, base: str, files: list[Path]) -> None:
    page.goto(f"{base}/load")
    _wait_idle(page)
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files([str(f) for f in files])
    # Streamlit shortens long names in the list, so count the entries; then the button is enabled
    playwright_api.expect(page.locator('[data-testid="stFileChip"]')).to_have_count(len(files),
                                                                                           timeout=TIMEOUT_MS)
    button = page.get_by_role("button", name="Analyse uploaded files")
    playwright_api.expect(button).to_be_enabled(timeout=TIMEOUT_MS)
    button.click()


def test_upload_findings_fix_timeline_and_report(page, browser, server, straggler_trace, tmp_path):
    assert len(straggler_trace) == 2
    try:
        _user_journey(page, server, straggler_trace)
    except playwright_api.TimeoutError:
        # This caught a real bug (a download whose deferred data shared the session's DuckDB cursor
        # across threads hung, about 1 run in 5; fixed in views/timeline.py and views/report.py).
        # Against slow-machine hiccups: keep the evidence, walk the journey once more in a fresh
        # tab; a second timeout is a real failure.
        page.screenshot(path=str(tmp_path / "first_attempt.png"), full_page=True)
        print(f"first attempt timed out; screenshot: {tmp_path / 'first_attempt.png'}")
        context = browser.new_context(viewport={"width": 1440, "height": 1600}, accept_downloads=True)
        retry_page = context.new_page()
        retry_page.set_default_timeout(TIMEOUT_MS)
        try:
            _user_journey(retry_page, server, straggler_trace)
        finally:
            context.close()


def _user_journey(page, server: str, straggler_trace: list[Path]) -> None:
    """Upload a 2-rank trace, read the straggler finding and its fix, open the timeline, export the
    window for Perfetto, download the HTML report."""
    _upload(page, server, straggler_trace)
    page.get_by_text(re.compile(r"(Loaded|reusing) run")).wait_for()   # a retry finds the run stored
    page.get_by_role("link", name="See the findings").click()
    page.get_by_text("Unbalanced ranks (a straggler)").first.wait_for()
    page.get_by_text("Cost per step").first.wait_for()
    # the fix: its code to paste and the demo command
    page.get_by_text("python -m accel.demo balanced_sampler --out DIR").first.wait_for()
    page.get_by_role("button", name="Show in timeline").first.click()
    page.get_by_role("heading", name="Timeline").wait_for()
    page.get_by_text("bars drawn").wait_for()
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for()
    chrome_trace = _download(page, "Download this window as a Chrome trace")
    assert b'"traceEvents"' in chrome_trace.read_bytes()
    # the report
    page.get_by_role("link", name="Report").click()
    page.get_by_role("button", name="Download HTML report").wait_for()
    html = _download(page, "Download HTML report").read_text()
    assert "<html" in html.lower() and "Plotly" in html and "straggler" in html.lower()


def test_a_broken_file_is_named_while_the_good_one_loads(page, server, straggler_trace, tmp_path):
    broken = tmp_path / "broken_rank1.json"
    broken.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "oops"')
    good = tmp_path / "good_rank0.json.gz"
    good.write_bytes(straggler_trace[0].read_bytes())
    _upload(page, server, [good, broken])
    page.get_by_text("Loaded run").wait_for()
    error = page.locator('[data-testid="stAlertContentError"]').filter(has_text="broken_rank1.json")
    error.wait_for()
    assert "truncated" in error.inner_text() or "JSON" in error.inner_text()
