"""Demo: a GEMM-bound FP32 training step with TF32 off (before) and on (after).

The workload (shared with the amp_autocast demo): a 6 x Linear(4096) MLP with ReLU, batch 1024,
MSE loss against a fixed linear map of the inputs, AdamW; ~0.6 TFLOP of FP32 GEMMs per step, so
with TF32 off cuBLAS runs SIMT sgemm kernels on the CUDA cores: the fp32_matmul finding. The
before run sets TF32 off explicitly (torch's defaults differ by version), the after run on; the
previous settings are restored when the demo ends.
The check trains both variants CHECK_STEPS steps from the same start and compares the loss
trajectories: TF32 rounds each multiply's inputs to a 10-bit mantissa, so they agree to
LOSS_RTOL (1e-2 relative), not bitwise; the largest parameter difference is reported as well.
On a GPU older than Ampere the flags change nothing (the note says so).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from accel.demos import DemoResult, skip
from accel.kernels.precision import AmpStep, tf32
from accel.profiling import median_ms, profile_steps, time_steps

FIX, KIND = "tf32_matmul", "fp32_matmul"
DEFAULT_STEPS = 20
PROFILED_STEPS = 5
CHECK_STEPS = 10
LAYERS, HIDDEN, BATCH = 6, 4096, 1024
LOSS_RTOL = 1e-2


@dataclass(frozen=True)
class Variant:
    """How a run does its matmuls: TF32 allowed or not, and an autocast dtype (None: FP32)."""
    label: str
    tf32: bool
    amp: torch.dtype | None = None


FP32 = Variant("FP32, TF32 off", tf32=False)


def build(device: str, seed: int = 0):
    """(model, optimizer, inputs, targets), deterministic for a seed. The targets come from a
    fixed random linear map of the inputs (a learnable regression), so the loss falls with
    training and the trajectories compared by the check follow what the matmuls compute."""
    torch.manual_seed(seed)
    blocks = [torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU())
              for _ in range(LAYERS - 1)]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(HIDDEN, HIDDEN)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(BATCH, HIDDEN, device=device, generator=generator)
    teacher = torch.randn(HIDDEN, HIDDEN, device=device, generator=generator) / HIDDEN ** 0.5
    return model, optimizer, x, x @ teacher


def make_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
              y: torch.Tensor, variant: Variant) -> Callable[[int], torch.Tensor]:
    """step(i) -> the loss (detached); under autocast through AmpStep when variant.amp is set."""
    compute = lambda: torch.nn.functional.mse_loss(model(x), y)   # noqa: E731
    if variant.amp is not None:
        amp = AmpStep(optimizer, dtype=variant.amp, device_type=x.device.type)
        return lambda _: amp(compute)

    def step(_: int) -> torch.Tensor:
        loss = compute()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def gemm_flops_per_step() -> int:
    """FLOPs of the step's GEMMs: forward, grad-input (not for the first layer), grad-weight."""
    return (3 * LAYERS - 1) * 2 * BATCH * HIDDEN * HIDDEN


def measure(variant: Variant, out_dir: Path, side: str, device: str, steps: int) -> float:
    """Median step ms of `variant` (timed unprofiled), then a short profile into side.json.gz."""
    model, optimizer, x, y = build(device)
    step = make_step(model, optimizer, x, y, variant)
    with tf32(variant.tf32):
        ms = median_ms(time_steps(step, steps, device))
        profile_steps(step, min(PROFILED_STEPS, steps), out_dir / f"{side}.json.gz", device)
    return ms


def trajectory(variant: Variant, device: str, n_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(losses of n_steps from the shared start, the flat parameters after them)."""
    model, optimizer, x, y = build(device)
    step = make_step(model, optimizer, x, y, variant)
    with tf32(variant.tf32):
        losses = torch.stack([step(i) for i in range(n_steps)]).double().cpu()
    return losses, torch.cat([p.detach().flatten() for p in model.parameters()])


def compare(before: Variant, after: Variant, device: str, rtol: float,
            n_steps: int | None = None) -> dict:
    """Loss trajectories (and parameters) of both variants over n_steps (default CHECK_STEPS),
    within rtol or not."""
    n_steps = CHECK_STEPS if n_steps is None else n_steps
    loss_a, params_a = trajectory(before, device, n_steps)
    loss_b, params_b = trajectory(after, device, n_steps)
    rel = ((loss_a - loss_b).abs() / loss_a.abs().clamp_min(1e-12)).max().item()
    return {f"loss_within_{rtol:g}_over_{n_steps}_steps": bool(rel <= rtol),
            "max_rel_loss_diff": float(f"{rel:.3g}"),
            "max_abs_param_diff": float(f"{(params_a - params_b).abs().max().item():.3g}"),
            "final_loss_before": round(loss_a[-1].item(), 6),
            "final_loss_after": round(loss_b[-1].item(), 6)}


def run_pair(fix: str, out_dir: Path, device: str, steps: int, after: Variant, rtol: float,
             notes: list[str]) -> DemoResult:
    """Time and profile FP32 (TF32 off) against `after`, check the losses agree within rtol."""
    before_ms = measure(FP32, out_dir, "before", device, steps)
    after_ms = measure(after, out_dir, "after", device, steps)
    checks = compare(FP32, after, device, rtol)
    flops = gemm_flops_per_step()
    checks["gemm_tflops_before"] = round(flops / before_ms / 1e9, 1)
    checks["gemm_tflops_after"] = round(flops / after_ms / 1e9, 1)
    return DemoResult(fix=fix, device=device, finding_kind=KIND,
                      step_ms_before=before_ms, step_ms_after=after_ms,
                      trace_before=out_dir / "before.json.gz",
                      trace_after=out_dir / "after.json.gz", checks=checks,
                      notes=[f"{LAYERS} x Linear({HIDDEN}) MLP, batch {BATCH}, AdamW; before: "
                             f"{FP32.label}; after: {after.label}"] + notes)


def gpu_facts() -> tuple[str, bool]:
    """(a one-line description of the GPU, whether it has TF32 tensor cores)."""
    major, minor = torch.cuda.get_device_capability()
    return f"{torch.cuda.get_device_name()} (sm_{major}{minor})", major >= 8


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    if device != "cuda" or not torch.cuda.is_available():
        return skip(FIX, device, f"TF32 tensor cores need a CUDA GPU; this run has none "
                                 f"(device {device})", KIND)
    name, capable = gpu_facts()
    note = f"{name}: " + ("has TF32 tensor cores" if capable else
                          "predates Ampere: no TF32 tensor cores, the flags change nothing here")
    result = run_pair(FIX, out_dir, device, steps, Variant("FP32, TF32 on", tf32=True), LOSS_RTOL,
                      [note])
    result.checks["tf32_capable_gpu"] = capable
    return result
