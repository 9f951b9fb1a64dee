"""Capture a whole training step (forward, backward, optimizer step) in one CUDA graph.

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
    step = CudaGraphStep(model, loss_fn, optimizer, sample_batch=(x0, y0))
    for x, y in loader:
        loss = step.step((x, y))     # copies the batch into static buffers, replays the graph

A launch-bound step (hundreds of short kernels, the GPU idle between launches) becomes a
single cudaGraphLaunch. What the graph requires, and this wrapper assumes:
- every batch has the sample batch's shapes and dtypes (static shapes);
- no host syncs and no Python control flow on tensor values inside the step;
- the optimizer keeps its state on the GPU: Adam/AdamW/... with capturable=True (set here for
  optimizers that have the option), or optimizers with no host-side state (SGD); where the
  optimizer has a fused form it is switched to it first (fuse=False keeps it as it is);
- the loss is `loss_fn(model(*batch[:-1]), batch[-1])`; the returned loss tensor is a static
  buffer overwritten by the next replay (clone it to keep it).
Not covered: AMP GradScaler (its inf checks sync), dynamic shapes, gradient accumulation.

The graph is recorded after warm-up iterations on a side stream (lazy initialisations and
cuDNN autotuning must not be captured). Warm-up steps really run, so parameters and optimizer
state are saved before and restored after capture: the wrapper leaves the model as it found it.
Restoring fresh optimizer state means zeroing it, which matches a fresh state for Adam, AdamW
and SGD with dampening=0 (their first step from a zero buffer equals their first step from
no buffer).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from accel.kernels.fused_optimizer import fuse_optimizer


def make_capturable(optimizer: torch.optim.Optimizer) -> None:
    """Turn on `capturable` where the optimizer has it, moving step counters to the GPU."""
    for group in optimizer.param_groups:
        if "capturable" in group:
            group["capturable"] = True
    for param, state in optimizer.state.items():
        step = state.get("step") if isinstance(state, dict) else None
        if isinstance(step, torch.Tensor) and step.device != param.device:
            state["step"] = step.to(param.device, torch.float32)


class CudaGraphStep:
    """One training step captured as a CUDA graph; call .step(batch) to run it."""

    def __init__(self, model: torch.nn.Module, loss_fn: Callable[..., torch.Tensor],
                 optimizer: torch.optim.Optimizer, sample_batch: Sequence[torch.Tensor],
                 warmup_iters: int = 3, fuse: bool = True):
        if not torch.cuda.is_available():
            raise RuntimeError("CudaGraphStep needs a CUDA GPU; this machine has none")
        if len(sample_batch) < 2:
            raise ValueError("sample_batch must be (inputs..., target)")
        if not all(isinstance(t, torch.Tensor) and t.is_cuda for t in sample_batch):
            raise ValueError("sample_batch must hold CUDA tensors (the static input buffers)")
        self.model, self.loss_fn, self.optimizer = model, loss_fn, optimizer
        if fuse and "fused" in optimizer.defaults and not optimizer.param_groups[0].get("fused"):
            # a capturable foreach Adam(W) adds ~2 one-element kernels per parameter (its bias
            # corrections from the device step counts: 213 of the graph's 470 kernels on the
            # launch-bound H100 demo); the fused kernel does them in place
            fuse_optimizer(optimizer, fused=True)
        make_capturable(optimizer)
        self.static_batch = tuple(t.detach().clone() for t in sample_batch)

        saved_params = [p.detach().clone() for p in model.parameters()]
        saved_buffers = [b.detach().clone() for b in model.buffers()]
        had_state = {id(p) for p in optimizer.state}
        saved_state = {id(p): {k: v.detach().clone() for k, v in s.items()
                               if isinstance(v, torch.Tensor)}
                       for p, s in optimizer.state.items()}

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup_iters):
                self._eager_step()
        torch.cuda.current_stream().wait_stream(side)

        self.graph = torch.cuda.CUDAGraph()
        # Grads set to None so backward allocates them inside the graph's memory pool: replays
        # then overwrite them instead of accumulating.
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.static_loss = self._loss(self.static_batch)
            self.static_loss.backward()
            optimizer.step()

        # Undo the warm-up's updates in place (the graph holds these very tensors).
        with torch.no_grad():
            for param, saved in zip(model.parameters(), saved_params):
                param.copy_(saved)
            for buffer, saved in zip(model.buffers(), saved_buffers):
                buffer.copy_(saved)
            for param, state in optimizer.state.items():
                for key, value in state.items():
                    if not isinstance(value, torch.Tensor):
                        continue
                    if id(param) in had_state and key in saved_state[id(param)]:
                        value.copy_(saved_state[id(param)][key])
                    else:
                        value.zero_()
        torch.cuda.synchronize()

    def _loss(self, batch: Sequence[torch.Tensor]) -> torch.Tensor:
        return self.loss_fn(self.model(*batch[:-1]), batch[-1])

    def _eager_step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self._loss(self.static_batch).backward()
        self.optimizer.step()

    def step(self, batch: Sequence[torch.Tensor]) -> torch.Tensor:
        """Copy `batch` into the static buffers and replay; returns the (static) loss tensor."""
        if len(batch) != len(self.static_batch):
            raise ValueError(f"batch has {len(batch)} tensors, the graph was captured with "
                             f"{len(self.static_batch)}")
        for static, new in zip(self.static_batch, batch):
            if static.shape != new.shape:
                raise ValueError(f"batch shape {tuple(new.shape)} differs from the captured "
                                 f"{tuple(static.shape)}: a CUDA graph replays fixed shapes")
            static.copy_(new, non_blocking=True)
        self.graph.replay()
        return self.static_loss
