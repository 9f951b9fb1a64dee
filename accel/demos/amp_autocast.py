"""Demo: the tf32_matmul demo's GEMM-bound FP32 step, plain FP32 (TF32 off, before) against
bf16 autocast through AmpStep (after; fp16 with a GradScaler on GPUs without bf16).

Same workload, timing, profiles and state handling as accel.demos.tf32_matmul: the before run
sets TF32 off explicitly, and the settings are restored when the demo ends. Weights and AdamW
stay FP32; only the matmuls (and what autocast casts with them) run in 16 bits. The check trains
both CHECK_STEPS steps from the same start: bf16 keeps an 8-bit mantissa, so the loss
trajectories agree to LOSS_RTOL (2e-2 relative), not bitwise; the largest parameter difference
is reported too.
"""
from __future__ import annotations

from pathlib import Path

import torch

from accel.demos import DemoResult, skip
from accel.demos.tf32_matmul import KIND, Variant, gpu_facts, run_pair
from accel.kernels.precision import amp_dtype

FIX = "amp_autocast"
DEFAULT_STEPS = 20
LOSS_RTOL = 2e-2


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    if device != "cuda" or not torch.cuda.is_available():
        return skip(FIX, device, f"CUDA autocast needs a CUDA GPU; this run has none "
                                 f"(device {device})", KIND)
    dtype = amp_dtype("cuda")
    name, _ = gpu_facts()
    label = f"{str(dtype).removeprefix('torch.')} autocast" + (
        " + GradScaler" if dtype == torch.float16 else "")
    result = run_pair(FIX, out_dir, device, steps, Variant(label, tf32=False, amp=dtype),
                      LOSS_RTOL, [f"{name}: {label}"])
    result.checks["amp_dtype"] = str(dtype).removeprefix("torch.")
    return result
