"""Demo: a training step that ends with torch.cuda.empty_cache() ("to avoid OOM"), run as is
(before) and inside keep_cache_warm() (after): the same step code, the same arithmetic.

The workload: a 4-layer 4096-wide MLP, batch 512, AdamW. Each step frees a few hundred MB (the
gradients under zero_grad(set_to_none=True), AdamW's multi-tensor temporaries, activations);
empty_cache hands that memory back to the driver (cudaFree synchronises the device) and the next
step cudaMallocs it again: a runtime_stall. The checks count the driver allocations per step
(torch.cuda.memory_stats), the memory left reserved between steps (the price of a warm cache),
the empty_cache calls swallowed, and compare parameters bitwise after CHECK_STEPS steps.
"""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import torch

from accel.demos import DemoResult, skip
from accel.kernels.allocator import keep_cache_warm
from accel.profiling import median_ms, profile_steps, time_steps

FIX, KIND = "allocator_tuning", "runtime_stall"
DEFAULT_STEPS = 30
PROFILED_STEPS = 8
CHECK_STEPS = 5
LAYERS, HIDDEN, BATCH = 4, 4096, 512
MIB = 2 ** 20


def build(device: str, seed: int = 0, hidden: int = HIDDEN, batch: int = BATCH):
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(batch, hidden, device=device, generator=generator)
    y = torch.randn(batch, hidden, device=device, generator=generator)
    return model, optimizer, x, y


def make_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
              y: torch.Tensor, empty_cache: bool = True):
    def step(_: int) -> None:
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if empty_cache:
            torch.cuda.empty_cache()   # the anti-pattern: "free memory every step to avoid OOM"
    return step


def device_allocations() -> int:
    """Driver allocations (cudaMalloc, or cuMemMap with expandable segments) made so far."""
    stats = torch.cuda.memory_stats()
    return int(stats.get("num_device_alloc", stats.get("segment.all.allocated", 0)))


def compare(device: str, n_steps: int = CHECK_STEPS, after: str = "keep_cache_warm") -> dict:
    """Both loops from the same start for n_steps: driver allocations per step after the first
    step, memory reserved between steps, and whether the parameters end bitwise equal. after:
    "keep_cache_warm" (the call swallowed) or "dropped" (the step without the call)."""
    params, allocations, reserved = [], [], []
    for warm in (False, True):
        model, optimizer, x, y = build(device)
        step = make_step(model, optimizer, x, y, empty_cache=not (warm and after == "dropped"))
        with keep_cache_warm() if warm and after == "keep_cache_warm" else nullcontext():
            step(0)   # AdamW builds its state in the first step
            torch.cuda.synchronize()
            start = device_allocations()
            for i in range(1, n_steps):
                step(i)
            torch.cuda.synchronize()
            allocations.append((device_allocations() - start) / max(1, n_steps - 1))
            reserved.append(torch.cuda.memory_reserved() / MIB)
        params.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        del model, optimizer, step
    return {f"parameters_identical_after_{n_steps}_steps": bool(torch.equal(params[0], params[1])),
            "max_abs_param_diff": float((params[0] - params[1]).abs().max()),
            "device_allocations_per_step_before": round(allocations[0], 2),
            "device_allocations_per_step_after": round(allocations[1], 2),
            "reserved_mb_between_steps_before": round(reserved[0], 1),
            "reserved_mb_between_steps_after": round(reserved[1], 1)}


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    if device != "cuda" or not torch.cuda.is_available():
        return skip(FIX, device, f"the CUDA caching allocator needs a CUDA GPU; this run has none "
                                 f"(device {device})", KIND)
    profiled = min(PROFILED_STEPS, steps)
    model, optimizer, x, y = build(device)
    before = make_step(model, optimizer, x, y)
    before_ms = median_ms(time_steps(before, steps, device))
    profile_steps(before, profiled, out_dir / "before.json.gz", device)
    del model, optimizer, before

    model, optimizer, x, y = build(device)
    after = make_step(model, optimizer, x, y)
    with keep_cache_warm() as swallowed:
        after_ms = median_ms(time_steps(after, steps, device))
        profile_steps(after, profiled, out_dir / "after.json.gz", device)
    after_steps = (3 + steps) + (2 + 1 + profiled)   # time_steps' and profile_steps' warm-ups
    del model, optimizer, after

    checks = compare(device)
    checks["empty_cache_calls_swallowed"] = swallowed.calls
    checks["after_steps_run"] = after_steps
    return DemoResult(fix=FIX, device=device, finding_kind=KIND,
                      step_ms_before=before_ms, step_ms_after=after_ms,
                      trace_before=out_dir / "before.json.gz", trace_after=out_dir / "after.json.gz",
                      checks=checks,
                      notes=[f"{torch.cuda.get_device_name()}: {LAYERS} x Linear({HIDDEN}) MLP, "
                             f"batch {BATCH}, AdamW; every step ends with zero_grad(set_to_none="
                             f"True) and torch.cuda.empty_cache(), swallowed after the fix"])
