"""Swap a per-parameter optimizer loop for its fused (CUDA) or foreach (multi-tensor) form.

A for-loop optimizer launches ~5-12 tiny kernels per parameter tensor per step; with hundreds
of tensors the step is launch-bound. foreach=True batches each op over all tensors (a handful of
multi-tensor kernels); fused=True does the whole update in one kernel per chunk of tensors.

    optimizer = fuse_optimizer(optimizer)   # same class, param groups and state; new object

The old optimizer object must not be stepped afterwards (the two share state tensors), and an
LR scheduler built on it must be rebuilt on the returned optimizer.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch


def _params_on_cuda(optimizer: torch.optim.Optimizer) -> bool:
    return all(p.is_cuda for group in optimizer.param_groups for p in group["params"])


def fuse_optimizer(optimizer: torch.optim.Optimizer, fused: bool | None = None) -> torch.optim.Optimizer:
    """A new optimizer of the same class with fused=True (CUDA) or foreach=True, state preserved.

    fused=None chooses: fused when every parameter is on CUDA and the class supports it, else
    foreach. fused=True asks for fused anywhere (torch also has fused CPU kernels for Adam,
    AdamW, SGD and Adagrad); it falls back to foreach when the class or device refuses it.
    Raises ValueError for an optimizer with neither option (e.g. LBFGS).
    """
    cls = type(optimizer)
    supports_foreach = "foreach" in optimizer.defaults
    supports_fused = "fused" in optimizer.defaults
    if not (supports_foreach or supports_fused):
        raise ValueError(f"{cls.__name__} has neither a fused nor a foreach implementation")
    want_fused = supports_fused and (_params_on_cuda(optimizer) if fused is None else fused)

    state = optimizer.state_dict()
    if want_fused:
        try:
            return _rebuild(cls, optimizer, state, {"fused": True, "foreach": None})
        except (RuntimeError, ValueError, TypeError):
            if not supports_foreach:
                raise
    if not supports_foreach:
        raise ValueError(f"{cls.__name__} has no foreach implementation and fused was refused")
    options: dict[str, Any] = {"foreach": True}
    if supports_fused:
        options["fused"] = None
    return _rebuild(cls, optimizer, state, options)


def _rebuild(cls: type, optimizer: torch.optim.Optimizer, state: dict[str, Any],
             options: dict[str, Any]) -> torch.optim.Optimizer:
    # Hyperparameters travel in the param groups (each group keeps its own lr, betas, ...);
    # the implementation switch goes into every group, and into the saved groups too, because
    # load_state_dict copies the saved groups' options over the new ones.
    # Only keyword arguments the constructor takes (AdamW's defaults hold internal keys).
    accepted = inspect.signature(cls.__init__).parameters
    groups = [{**group, **options} for group in optimizer.param_groups]
    defaults = {k: v for k, v in optimizer.defaults.items() if k in accepted and k not in options}
    rebuilt = cls(groups, **defaults, **{k: v for k, v in options.items() if k in accepted})
    state = {**state, "param_groups": [{**g, **options} for g in state["param_groups"]]}
    rebuilt.load_state_dict(state)
    return rebuilt


def implementation(optimizer: torch.optim.Optimizer) -> str:
    """'fused', 'foreach' or 'for-loop' (foreach=None means torch picks: foreach on CUDA)."""
    group = optimizer.param_groups[0]
    if group.get("fused"):
        return "fused"
    if group.get("foreach") or (group.get("foreach") is None and _params_on_cuda(optimizer)
                                and "foreach" in optimizer.defaults):
        return "foreach"
    return "for-loop"
