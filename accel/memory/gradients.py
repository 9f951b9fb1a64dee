"""Free gradients between steps instead of zeroing them in place.

`optimizer.zero_grad(set_to_none=False)` (or `p.grad.zero_()` by hand) keeps every gradient
tensor allocated through the next forward, where the activations pile up on top of them: the
step's peak carries a full copy of the parameters' size that nothing reads until the backward
writes it again. With `set_to_none=True` (torch's default since 2.0) the gradients are freed and
the backward allocates each one as it is produced, while the activations it consumed are freed.

    optimizer.zero_grad(set_to_none=True)
    release_gradients(model)          # where gradients were zeroed by hand: free them instead
"""
from __future__ import annotations

from typing import Iterable, Iterator

import torch


def _parameters(holders: Iterable[object]) -> Iterator[torch.Tensor]:
    """The parameters of modules, optimizers (their param_groups) and plain tensors, each once."""
    seen: set[int] = set()
    for holder in holders:
        if isinstance(holder, torch.nn.Module):
            params: Iterable[torch.Tensor] = holder.parameters()
        elif isinstance(holder, torch.optim.Optimizer):
            params = (p for group in holder.param_groups for p in group["params"])
        elif isinstance(holder, torch.Tensor):
            params = (holder,)
        else:
            raise TypeError(f"expected a module, an optimizer or a tensor, got {type(holder).__name__}")
        for p in params:
            if id(p) not in seen:
                seen.add(id(p))
                yield p


def gradient_bytes(*holders: object) -> int:
    """Bytes the gradients of these modules/optimizers/tensors hold now."""
    return sum(p.grad.numel() * p.grad.element_size() for p in _parameters(holders) if p.grad is not None)


def release_gradients(*holders: object) -> int:
    """Set every gradient of these modules/optimizers/tensors to None (what
    zero_grad(set_to_none=True) does); returns the bytes the released gradients held."""
    released = 0
    for p in _parameters(holders):
        if p.grad is not None:
            released += p.grad.numel() * p.grad.element_size()
            p.grad = None
    return released
