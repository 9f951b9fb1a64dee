"""Fix model: FP32 matmul and convolution kernels on tensor cores (TF32, or fp16/bf16 autocast): each
runs the finding's assumed tensor-core speedup faster (from the device's architecture:
analysis/kinds/fp32_matmul, thresholds TENSOR_CORE_SPEEDUP)."""
from __future__ import annotations

import numpy as np

from analyzers.analysis.whatif.models import FixModel, Touched, apply_per_rank


def _transform(run, finding, t):
    speedup = float((finding.get("metrics") or {}).get("assumed_tensor_core_speedup") or t["TENSOR_CORE_SPEEDUP"])

    def change(g):
        if not g.g_fp32.any():
            return None
        g_dur = np.where(g.g_fp32, (g.g_dur / speedup).astype(np.int64), g.g_dur)
        return g.replace(g_dur=g_dur), Touched(host=np.zeros(g.n_host, dtype=bool), gpu=g.g_fp32.copy())

    return apply_per_rank(run, finding, change, [
        f"each FP32 CUDA-core matmul/convolution kernel runs {speedup:g}x faster on tensor cores (the finding's "
        "assumed_tensor_core_speedup, from TENSOR_CORE_SPEEDUP and the device's architecture); a peak ratio, "
        "so an upper bound"])


FIX_MODEL = FixModel(fix="tensor cores for FP32 matmuls (tf32_matmul / amp_autocast)", transform=_transform,
                     fix_ids=("tf32_matmul", "amp_autocast"))
