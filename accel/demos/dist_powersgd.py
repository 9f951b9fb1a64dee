"""Demo: PowerSGD (rank 2) gradient compression on a slow link.

Same workload and link as dist_comm_compression. PowerSGD starts after one plain all-reduce
step (start_powerSGD_iter=2 here; use ~1000 or 10% of training for real jobs). On gloo the hook
is serialised per bucket (see accel.comm.hooks.serialised_powersgd_hook). PowerSGD is lossy by
design: parameters differ from fp32 all-reduce (reported, no verdict); error feedback carries
the residual into later steps so training converges like SGD.
"""
from __future__ import annotations

from pathlib import Path

from accel.demos import DemoResult
from accel.demos.dist_ddp_workload import run_before_after

DEFAULT_STEPS = 5
SLOW_LINK_MBIT = 800
CONFIG = {"width": 1024, "layers": 2, "batch": 32, "warmup": 1, "profile_steps": 2, "interleave_variants": True,
          "variants": {"before": {},
                       "after": {"hook": "powersgd",
                                 "hook_options": {"matrix_approximation_rank": 2, "start_powerSGD_iter": 2}}}}


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    return run_before_after("powersgd", "comm_exposed", out_dir, device, steps, CONFIG,
                            slow_link_mbit=SLOW_LINK_MBIT)
