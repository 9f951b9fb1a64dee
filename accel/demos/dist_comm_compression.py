"""Demo: bf16 gradient compression (DDP comm hook) on a slow link.

2 gloo ranks, an 8 MB-gradient MLP, both variants behind a loopback rate-limited with tc in a
private network namespace (needs root and iproute2; without them the demo runs on plain
loopback and says so, and there compression is expected to lose). Before: fp32 all-reduce;
after: accel.comm.apply_comm_hook(ddp, kind="bf16"): half the bytes.
Parameters after the same steps differ only by bf16 rounding of gradients: the tolerance is
lr × steps × |grad| × 2^-8, about 1e-3 here.
"""
from __future__ import annotations

from pathlib import Path

from accel.demos import DemoResult
from accel.demos.dist_ddp_workload import run_before_after

DEFAULT_STEPS = 5
SLOW_LINK_MBIT = 800
CONFIG = {"width": 1024, "layers": 2, "batch": 32, "warmup": 1, "profile_steps": 2, "interleave_variants": True,
          "variants": {"before": {}, "after": {"hook": "bf16"}}}


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    return run_before_after("comm_compression", "comm_exposed", out_dir, device, steps, CONFIG,
                            slow_link_mbit=SLOW_LINK_MBIT, tolerance=1e-3)
