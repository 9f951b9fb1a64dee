"""Demo: activation checkpointing lowers the memory peak of a training step.

The workload: 6 blocks of 3 Linear(256)+ReLU layers on a batch of 2048 (each layer's output is
2 MiB, far more than the 1.5 MiB of parameters): before, every block keeps its 3 activations for
the backward; after (checkpoint_blocks), a block keeps only its input and recomputes the rest.
Both are profiled with profile_memory=True; the check reads each trace's peak with TraceDoctor's
own analysis (ranks[].memory.peak_allocated_bytes), which is the peak a re-profile shows. Runs
on CPU (torch records CPU memory) and on CUDA.
"""
from __future__ import annotations

from pathlib import Path

import torch

from accel.demos import DemoResult
from accel.memory.checkpointing import checkpoint_blocks
from accel.profiling import (intra_op_threads, median_ms, profile_steps, time_steps_interleaved,
                             trace_rank_memory)

DEFAULT_STEPS = 6
BLOCKS, LAYERS_PER_BLOCK, WIDTH, BATCH = 6, 3, 256, 2048
PROFILED_STEPS = 3


def build(device: str, seed: int = 0) -> tuple[torch.nn.Sequential, torch.optim.Optimizer, torch.Tensor]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(*[torch.nn.Sequential(*[m for _ in range(LAYERS_PER_BLOCK)
                                                        for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())])
                                  for _ in range(BLOCKS)]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    return model, optimizer, torch.randn(BATCH, WIDTH, device=device)


def make_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor):
    def step(_: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        model(inputs).square().mean().backward()
        optimizer.step()
    return step


def peak_bytes(trace: Path) -> int | None:
    """The trace's peak of allocated memory, as TraceDoctor reports it."""
    ranks = trace_rank_memory(trace)
    return ranks[0]["peak_allocated_bytes"] if ranks else None


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    with intra_op_threads(2, device):
        return _run(out_dir, device, steps)


def _run(out_dir: Path, device: str, steps: int) -> DemoResult:
    plain, plain_opt, inputs = build(device)
    recomputed, recomputed_opt, _ = build(device)
    recomputed = checkpoint_blocks(recomputed)
    variants = [make_step(plain, plain_opt, inputs), make_step(recomputed, recomputed_opt, inputs)]
    times = time_steps_interleaved(variants, steps, device)
    before, after = out_dir / "before.json.gz", out_dir / "after.json.gz"
    profile_steps(variants[0], min(PROFILED_STEPS, steps), before, device, profile_memory=True)
    profile_steps(variants[1], min(PROFILED_STEPS, steps), after, device, profile_memory=True)
    peak_before, peak_after = peak_bytes(before), peak_bytes(after)
    result = DemoResult(fix="activation_checkpointing", device=device, finding_kind="memory_spike",
                        step_ms_before=median_ms(times[0]), step_ms_after=median_ms(times[1]),
                        trace_before=before, trace_after=after,
                        checks={"peak_allocated_mib_before": None if peak_before is None else round(peak_before / 2**20, 2),
                                "peak_allocated_mib_after": None if peak_after is None else round(peak_after / 2**20, 2),
                                "peak_ratio": None if not peak_before or peak_after is None
                                else round(peak_after / peak_before, 3),
                                "same_gradients": _same_gradients(device)})
    result.notes.append("step time rises by the recomputed forward; the point is the lower peak "
                        "(room for a larger batch or model)")
    return result


def _same_gradients(device: str) -> bool:
    grads = []
    for recompute in (False, True):
        model, _, inputs = build(device)
        if recompute:
            model = checkpoint_blocks(model)
        model(inputs).square().mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    return bool(torch.allclose(grads[0], grads[1], rtol=1e-5, atol=1e-7))
