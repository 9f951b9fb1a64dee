"""A dashboard started as a real `streamlit run` process (team server and browser tests)."""
from __future__ import annotations

from pathlib import Path

import pytest


def wait_for_dashboard(proc, base: str, log_path: Path, timeout_s: float = 60) -> None:
    """Until a `streamlit run app/Home.py` started as proc answers its health route at base; the
    test fails with the end of its log when it exits or does not answer in time (it is killed)."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"streamlit did not start: {log_path.read_text()[-2000:]}")
        time.sleep(0.3)
