"""Demo: a launch-bound step (accel.demos.launch_bound), eager vs one CUDA graph replay."""
from __future__ import annotations

from pathlib import Path

import torch

from accel.demos import DemoResult, skip
from accel.demos import launch_bound as wl
from accel.kernels.cuda_graph import CudaGraphStep
from accel.profiling import median_ms, profile_steps, time_steps

DEFAULT_STEPS = 50
PROFILED_STEPS = 10
CHECK_STEPS = 10
# The check replays the graph against eager steps of the same model with the same capturable
# AdamW: the graph launches the very kernels eager mode ran when it was captured, so the two
# agree to float32 rounding (cuBLAS may pick another algorithm inside a graph). A comparison with
# the non-capturable AdamW would measure the optimizer's arithmetic order, which Adam's
# normalised update amplifies for near-zero gradients, not the graph.
RTOL, ATOL = 1e-5, 1e-6

def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    if device != "cuda" or not torch.cuda.is_available():
        return skip("cuda_graph", device, "CUDA graphs need a CUDA GPU", "launch_gap")
    model, opt, x, y = wl.build(device)
    eager = wl.eager_step(model, opt, x, y)
    before_ms = median_ms(time_steps(eager, steps, device))
    profile_steps(eager, PROFILED_STEPS, out_dir / "before.json.gz", device)

    model, opt, x, y = wl.build(device, capturable=True)
    graphed = CudaGraphStep(model, wl.loss_fn, opt, (x, y))
    replay = lambda _: graphed.step((x, y))  # noqa: E731
    after_ms = median_ms(time_steps(replay, steps, device))
    profile_steps(replay, PROFILED_STEPS, out_dir / "after.json.gz", device)

    return DemoResult(fix="cuda_graph", device=device, finding_kind="launch_gap",
                      step_ms_before=before_ms, step_ms_after=after_ms,
                      trace_before=out_dir / "before.json.gz", trace_after=out_dir / "after.json.gz",
                      checks=_same_result(device),
                      notes=[f"{torch.cuda.get_device_name()}: {wl.N_BLOCKS} blocks, batch {wl.BATCH}"])


def _same_result(device: str) -> dict[str, float | bool]:
    """Eager and graphed steps from the same start: do parameters and losses agree?"""
    model_a, opt_a, x, y = wl.build(device, capturable=True, fused=True)
    step_a = wl.eager_step(model_a, opt_a, x, y)
    model_b, opt_b, _, _ = wl.build(device, capturable=True, fused=True)
    graphed = CudaGraphStep(model_b, wl.loss_fn, opt_b, (x, y))
    losses_a, losses_b = [], []
    for i in range(CHECK_STEPS):
        losses_a.append(float(step_a(i)))
        losses_b.append(float(graphed.step((x, y))))
    torch.cuda.synchronize()
    a, b = wl.flat_params(model_a), wl.flat_params(model_b)
    return {"parameters_match": bool(torch.allclose(a, b, rtol=RTOL, atol=ATOL)),
            "max_abs_param_diff": float((a - b).abs().max()),
            "max_rel_loss_diff": max(abs(la - lb) / max(abs(la), 1e-12) for la, lb in zip(losses_a, losses_b))}
