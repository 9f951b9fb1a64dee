"""torch.compile(mode="reduce-overhead"): the one-line alternative to a hand-made CUDA graph.

    model = compile_reduce_overhead(model)
    for x, y in loader:
        mark_step()                       # tells cudagraph trees a new iteration begins
        loss = loss_fn(model(x), y); loss.backward(); optimizer.step()

Inductor fuses elementwise chains into Triton kernels and, in reduce-overhead mode, records the
compiled forward and backward as CUDA graphs (one per input shape set), replaying them in later
steps. Costs: compile time on the first steps (and again for each new shape), graph breaks at
.item() or data-dependent Python, and static output buffers (clone outputs you keep across
steps). The optimizer step stays eager here: pair it with fused_optimizer, or capture it too
with CudaGraphStep.
"""
from __future__ import annotations

import torch


def compile_reduce_overhead(model: torch.nn.Module, **compile_kwargs) -> torch.nn.Module:
    """torch.compile(model, mode="reduce-overhead", **compile_kwargs)."""
    return torch.compile(model, mode="reduce-overhead", **compile_kwargs)


def mark_step() -> None:
    """Start a new iteration for cudagraph trees (harmless without CUDA graphs)."""
    torch.compiler.cudagraph_mark_step_begin()
