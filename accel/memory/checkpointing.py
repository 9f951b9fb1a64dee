"""Activation checkpointing: keep only each block's input through the forward and recompute the
block's activations in the backward, trading ~one more forward of compute for the activations'
memory (the peak falls from every block's activations to one block's plus the inputs).
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch.utils.checkpoint import checkpoint


class CheckpointedSequential(torch.nn.Module):
    """Run `blocks` in order, each under torch.utils.checkpoint (non-reentrant: works with
    keyword arguments, nested autograd and torch.compile); `every`: checkpoint every n-th block
    only (1: all), a middle ground between memory and recompute time."""

    def __init__(self, blocks: Iterable[torch.nn.Module], every: int = 1):
        super().__init__()
        self.blocks = torch.nn.ModuleList(blocks)
        self.every = max(1, int(every))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, block in enumerate(self.blocks):
            if self.training and torch.is_grad_enabled() and index % self.every == 0:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return x


def checkpoint_blocks(model: torch.nn.Sequential, every: int = 1) -> CheckpointedSequential:
    """The same model (its modules shared, not copied) with its top-level blocks checkpointed."""
    return CheckpointedSequential(list(model), every=every)
