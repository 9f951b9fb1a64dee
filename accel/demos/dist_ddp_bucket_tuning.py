"""Demo: many tiny DDP buckets vs buckets sized from the finding's metrics.

2 gloo ranks on plain loopback, a 96-layer 64-wide MLP (1.6 MB of gradients). Before:
bucket_cap_mb=0.02, so backward issues dozens of small all-reduces (the profiled trace shows
48 c10d::allreduce_ per step), each paying gloo's fixed per-collective cost. After:
accel.comm.derive_ddp_settings on the metrics a comm_exposed finding reports (message count and
sizes per step) picks a bucket size that merges them into a few. Parameters must match within float reassociation (bucketing changes nothing in
the sums per element).
"""
from __future__ import annotations

from pathlib import Path

from accel.demos import DemoResult
from accel.demos.dist_ddp_workload import run_before_after

DEFAULT_STEPS = 8
WIDTH, LAYERS = 64, 96
GRAD_BYTES = LAYERS * (WIDTH * WIDTH + WIDTH) * 4
# The comm_exposed finding's metrics for the "before" trace. A gloo trace records no message
# sizes, so the finding measures the count (48 all-reduces per step) but not the bytes; these
# are the sizes the model implies (one all-reduce per layer, the finest bucketing possible).
FINDING_METRICS = {"collectives_per_step": LAYERS, "mean_msg_bytes": GRAD_BYTES / LAYERS,
                   "bytes_per_step": GRAD_BYTES}
CONFIG = {"width": WIDTH, "layers": LAYERS, "batch": 32, "warmup": 2, "profile_steps": 3, "interleave_variants": True,
          "variants": {"before": {"ddp": {"bucket_cap_mb": 0.02}},
                       "after": {"tuned_from_metrics": FINDING_METRICS}}}


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    return run_before_after("ddp_bucket_tuning", "comm_exposed", out_dir, device, steps, CONFIG,
                            tolerance=1e-6,
                            notes=[f"bucket size derived from finding metrics {FINDING_METRICS}"])
