"""Optimizer state sharding: each data-parallel rank keeps (and updates) the optimizer state of
its share of the parameters only (ZeRO stage 1, torch.distributed.optim.ZeroRedundancyOptimizer),
then broadcasts its updated parameters. Adam's two state tensors per parameter shrink from 2x to
2x/world_size of the parameters per rank; works on gloo (CPU) and NCCL.
"""
from __future__ import annotations

from typing import Any, Iterable

import torch


def shard_optimizer(params: Iterable[torch.nn.Parameter], optimizer_class: type = torch.optim.AdamW,
                    **optimizer_kwargs: Any) -> torch.optim.Optimizer:
    """A ZeroRedundancyOptimizer over `params` (needs an initialised process group)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return ZeroRedundancyOptimizer(list(params), optimizer_class=optimizer_class, **optimizer_kwargs)


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of optimizer state this rank holds (the local shard of a ZeroRedundancyOptimizer)."""
    inner = getattr(optimizer, "optim", optimizer)
    return sum(t.numel() * t.element_size() for state in inner.state.values() for t in state.values()
               if isinstance(t, torch.Tensor))
