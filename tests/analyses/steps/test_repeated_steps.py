"""A file whose ProfilerStep numbers repeat (several profiling sessions joined, or a numbering that
restarts) gets a note: steps() spans each number from its first range to its last, so its step
times cover every session in between (the bench generator's 1 GB trace: 3 "steps" of 2,180 s)."""
from __future__ import annotations

from analyzers.api import analyze_paths
from tests.support.kineto_traces import Trace


def _two_sessions(tmp_path, restart: bool):
    t = Trace()
    for session, start in enumerate((0, 500_000)):
        for i in range(3):
            number = i + 1 if restart else session * 3 + i + 1
            t.step(number, start + i * 1000, 1000)
            t.gpu("void gemm", start + i * 1000 + 100, 800, launch_ts=start + i * 1000 + 10)
    return analyze_paths([t.write(tmp_path / "rank0.json")])


def test_repeating_step_numbers_are_named_in_a_note(tmp_path):
    notes = _two_sessions(tmp_path, restart=True)["notes"]
    repeated = [n for n in notes if "ProfilerStep numbers repeat" in n]
    assert len(repeated) == 1 and "#1 2 times" in repeated[0] and "rank 0" in repeated[0]


def test_steps_numbered_on_across_sessions_get_no_such_note(tmp_path):
    assert not [n for n in _two_sessions(tmp_path, restart=False)["notes"] if "repeat" in n]
