"""Demos: a small real workload that shows a problem, profiled before and after its fix.

How a demo plugs in (one module per fix; the registry's `Fix.demo_module` names it):

    # accel/demos/<fix_id>.py   (accel-dist: accel/demos/dist_<fix_id>.py)
    from pathlib import Path
    from accel.demos import DemoResult, skip

    DEFAULT_STEPS = 20

    def run(out_dir: Path, device: str, steps: int) -> DemoResult:
        if device != "cuda":
            return skip("cuda_graph", device, "needs a CUDA GPU; this machine has none")
        ... build the workload ...
        # time steps with accel.profiling.time_steps (wall clock, synchronised, median after
        # warm-up), then profile a few steps with accel.profiling.profile_steps, which writes
        # out_dir/"before.json.gz" / "after.json.gz" (multi-rank: out_dir/"before"/ and
        # out_dir/"after"/ holding one rank file each)
        return DemoResult(fix="cuda_graph", device=device, finding_kind="launch_gap",
                          step_ms_before=..., step_ms_after=...,
                          trace_before=out_dir / "before.json.gz",
                          trace_after=out_dir / "after.json.gz",
                          checks={"max_abs_param_diff": 0.0})

The runner (`python -m accel.demo FIX_ID --out DIR`, accel/demo.py) does the rest: it checks the
fix's `needs` before calling run() (so run() only re-checks what it alone knows), creates
out_dir, passes `steps` (the demo's DEFAULT_STEPS when the user gave none), runs our analyzers
on trace_before and trace_after, prints the before/after table, writes out_dir/result.json and,
with --json, prints the result as the last stdout line.

A demo that cannot run here returns `skip(...)` with a plain reason; it never pretends.
This package imports no torch; the demo modules do.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class DemoResult:
    fix: str
    device: str
    finding_kind: str | None = None       # the kind the fix addresses, whose cost is compared
    step_ms_before: float | None = None   # median wall-clock step time after warm-up
    step_ms_after: float | None = None
    trace_before: Path | None = None      # a .json.gz, or a directory of rank files
    trace_after: Path | None = None
    skipped: str | None = None            # the plain reason it could not run here, else None
    checks: dict[str, Any] = field(default_factory=dict)   # correctness evidence (diffs, ...)
    notes: list[str] = field(default_factory=list)         # one-line remarks shown under the table

    @property
    def speedup(self) -> float | None:
        if not self.step_ms_before or not self.step_ms_after:
            return None
        return self.step_ms_before / self.step_ms_after

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["trace_before"] = None if self.trace_before is None else str(self.trace_before)
        data["trace_after"] = None if self.trace_after is None else str(self.trace_after)
        data["speedup"] = self.speedup
        return data


def skip(fix: str, device: str, reason: str, finding_kind: str | None = None) -> DemoResult:
    """A result saying plainly why the demo did not run here."""
    return DemoResult(fix=fix, device=device, finding_kind=finding_kind, skipped=reason)
