"""Demo: AdamW over a 200-parameter-tensor model, per-parameter loop vs fused/foreach.

The workload: 100 small Linear layers (200 parameter tensors), batch 32: the loop optimizer's
~1400 tiny per-parameter ops are over half the step (on a GPU: ~1400 kernel launches, a
launch-bound step). The checks also time optimizer.step() alone, the part the fix changes.
Before: AdamW(foreach=False). After: fuse_optimizer(...) (fused on CUDA and on CPU, where torch has it).
On CPU a note also gives the fused CPU kernel's time (torch has one for AdamW).
"""
from __future__ import annotations

from pathlib import Path

import torch

from accel.demos import DemoResult
from accel.kernels.fused_optimizer import fuse_optimizer, implementation
from accel.profiling import intra_op_threads, median_ms, profile_steps, time_steps_interleaved

DEFAULT_STEPS = 20
N_LAYERS, WIDTH, BATCH = 100, 64, 32
PROFILED_STEPS = 5


def build(device: str, seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(N_LAYERS)]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=False)
    inputs = torch.randn(BATCH, WIDTH, device=device)
    return model, optimizer, inputs


def make_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor):
    def step(_: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        model(inputs).square().mean().backward()
        optimizer.step()
    return step


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    with intra_op_threads(1, device):
        return _run(out_dir, device, steps)


def _run(out_dir: Path, device: str, steps: int) -> DemoResult:
    loop_model, loop_opt, inputs = build(device)
    loop_step = make_step(loop_model, loop_opt, inputs)
    fast_model, fast_opt, _ = build(device)
    fast_opt = fuse_optimizer(fast_opt)
    fast_step = make_step(fast_model, fast_opt, inputs)
    variants, optimizers = [loop_step, fast_step], [loop_opt, fast_opt]
    # foreach beside it: what fuse_optimizer falls back to for a class without a fused kernel
    foreach_model, foreach_opt, _ = build(device)
    foreach_opt = fuse_optimizer(foreach_opt, fused=False)
    variants.append(make_step(foreach_model, foreach_opt, inputs))
    optimizers.append(foreach_opt)
    # Interleaved (loop, fast, loop, fast, ...): both see the same machine load.
    times = time_steps_interleaved(variants, steps, device)
    before_ms, after_ms = median_ms(times[0]), median_ms(times[1])
    # optimizer.step() alone (gradients left from the last step): the part the fix changes.
    opt_ms = [median_ms(t) for t in time_steps_interleaved(
        [lambda _, o=opt: o.step() for opt in optimizers], steps, device)]
    profile_steps(loop_step, min(PROFILED_STEPS, steps), out_dir / "before.json.gz", device)
    profile_steps(fast_step, min(PROFILED_STEPS, steps), out_dir / "after.json.gz", device)

    result = DemoResult(fix="fused_optimizer", device=device, finding_kind="launch_gap",
                        step_ms_before=before_ms, step_ms_after=after_ms,
                        trace_before=out_dir / "before.json.gz", trace_after=out_dir / "after.json.gz",
                        checks={"parameters_match_after_5_steps": _same_result(device),
                                "optimizer_step_ms_before": round(opt_ms[0], 3),
                                "optimizer_step_ms_after": round(opt_ms[1], 3),
                                "optimizer_step_speedup": round(opt_ms[0] / opt_ms[1], 2)})
    result.notes.append(f"before: AdamW for-loop over {2 * N_LAYERS} tensors; "
                        f"after: AdamW {implementation(fast_opt)}; steps timed interleaved")
    foreach_ms = median_ms(times[2])
    result.checks["foreach_step_ms"] = round(foreach_ms, 3)
    result.checks["foreach_optimizer_step_ms"] = round(opt_ms[2], 3)
    result.notes.append(f"AdamW foreach=True: {foreach_ms:.2f} ms/step ({before_ms / foreach_ms:.2f}x the loop), "
                        f"optimizer.step {opt_ms[0] / opt_ms[2]:.2f}x the loop's")
    return result


def _same_result(device: str, n_steps: int = 5) -> bool:
    """Loop and fast optimizer give the same parameters: bitwise for foreach on CPU (see
    tests/accel/test_accel_kernels.py); fused CUDA kernels round differently, hence 1e-5 relative."""
    params = []
    for fast in (False, True):
        model, opt, inputs = build(device)
        if fast:
            opt = fuse_optimizer(opt)
        step = make_step(model, opt, inputs)
        for i in range(n_steps):
            step(i)
        params.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    return bool(torch.allclose(params[0], params[1], rtol=1e-5, atol=1e-6))
