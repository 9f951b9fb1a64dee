"""Gradient accumulation that all-reduces once per optimizer step, not once per micro-batch.

    from accel.comm import accumulate_gradients
    loss = accumulate_gradients(ddp_model, micro_batches, lambda m, batch: loss_fn(m(batch.x), batch.y))
    optimizer.step(); optimizer.zero_grad()

Without no_sync, every backward of a DDP model all-reduces all gradients, so accumulating k
micro-batches costs k all-reduces for one optimizer step. Under model.no_sync() DDP only adds
gradients locally; the last micro-batch's backward (outside no_sync) all-reduces the sum once.
Each micro-batch loss is divided by k, so the gradient equals the full-batch mean gradient
(for equal-sized micro-batches and a mean-reduced loss), up to float reassociation.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Sequence

import torch


def sync_only_on_last(model: torch.nn.Module, index: int, count: int) -> contextlib.AbstractContextManager:
    """Context for micro-batch `index` of `count`: model.no_sync() except for the last one.

    Works for models without no_sync (plain modules, single process): then it does nothing.
    """
    if index < count - 1 and hasattr(model, "no_sync"):
        return model.no_sync()
    return contextlib.nullcontext()


def accumulate_gradients(model: torch.nn.Module, micro_batches: Iterable[Any],
                         compute_loss: Callable[[torch.nn.Module, Any], torch.Tensor]) -> torch.Tensor:
    """Forward+backward every micro-batch, syncing gradients once; returns the mean loss (detached).

    compute_loss(model, micro_batch) returns the micro-batch's mean loss. All micro-batches
    should have the same size for the result to equal the full batch's gradient.
    """
    batches: Sequence[Any] = micro_batches if isinstance(micro_batches, Sequence) else list(micro_batches)
    count = len(batches)
    if count == 0:
        raise ValueError("no micro-batches to accumulate")
    total = None
    for index, batch in enumerate(batches):
        with sync_only_on_last(model, index, count):
            loss = compute_loss(model, batch) / count
            loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    return total
