"""Running the fix library's demos (`python -m accel.demo`) and checking what they wrote."""
from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT


JSON_KEYS = {"fix", "device", "step_ms_before", "step_ms_after", "speedup", "finding_kind",
             "cost_pct_before", "cost_pct_after", "skipped"}


def _cli(*args: str, timeout: int = 60) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-m", "accel.demo", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout.strip().splitlines()


def _profiler_steps(trace: Path) -> list[str]:
    with gzip.open(trace, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    return sorted({e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})


ANALYZERS_READY = importlib.util.find_spec("analyzers.api") is not None


def check_demo(line: dict, out: Path, fix_id: str, world_size: int = 2) -> dict:
    """Shared checks on a demo's result line; returns the demo's own checks (result.json)."""
    assert line["skipped"] is None, line["skipped"]
    assert line["fix"] == fix_id and line["device"] == "cpu"
    assert line["step_ms_before"] > 0 and line["step_ms_after"] > 0
    assert line["speedup"] == pytest.approx(line["step_ms_before"] / line["step_ms_after"])
    for variant in ("before", "after"):
        files = sorted(p.name for p in (out / variant).iterdir())
        assert files == [f"rank-{r}.json.gz" for r in range(world_size)]
        for rank in range(world_size):
            trace = json.loads(gzip.decompress((out / variant / f"rank-{rank}.json.gz").read_bytes()))
            assert trace["distributedInfo"]["rank"] == rank
            assert trace["distributedInfo"]["world_size"] == world_size
            assert any(e.get("name", "").startswith("ProfilerStep#") for e in trace["traceEvents"])
    result = json.loads((out / "result.json").read_text())
    if ANALYZERS_READY and line["finding_kind"] == "comm_exposed":
        # measured on gloo ranks too (the training thread blocked in collectives): every comm
        # demo's "before" is communication-bound, so it has a cost there
        assert result["analysis_notes"] == []
        assert isinstance(result["cost_pct_before"], float) and result["cost_pct_before"] > 0
        assert isinstance(result["cost_pct_after"], float)
    elif ANALYZERS_READY:
        for side in ("before", "after"):
            # a kind costed from GPU time only: on CPU traces the runner reports None and says why
            assert (isinstance(result[f"cost_pct_{side}"], float)
                    or any("no GPU activity" in note for note in result["analysis_notes"]))
    return result["checks"]


def run_demo(fix_id: str, out: Path, steps: int, world_size: int = 2) -> tuple[dict, dict]:
    """Run the demo in this process (the runner's run_demo; spares a Python + torch start)."""
    from accel.demo import run_demo as runner
    line = runner(fix_id, out, "cpu", steps)
    return line, check_demo(line, out, fix_id, world_size)


def run_demo_cli(fix_id: str, out: Path, steps: int, world_size: int = 2) -> tuple[dict, dict]:
    """Run `python -m accel.demo FIX --out DIR --json --steps N`; the last stdout line is the result."""
    done = subprocess.run([sys.executable, "-m", "accel.demo", fix_id, "--out", str(out), "--json",
                           "--steps", str(steps)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stderr[-3000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    return line, check_demo(line, out, fix_id, world_size)
