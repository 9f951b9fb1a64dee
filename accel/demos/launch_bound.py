"""A launch-bound training step shared by the cuda_graph and compile_reduce_overhead demos.

24 narrow Linear+GELU+LayerNorm blocks on a batch of 16: each kernel runs a few microseconds,
so the step is ~600 short kernels whose launches (CPU) take longer than their execution (GPU),
the shape of a launch_gap finding.
"""
from __future__ import annotations

import torch

N_BLOCKS, WIDTH, BATCH = 24, 256, 16


def build(device: str, seed: int = 0, capturable: bool = False, fused: bool | None = None):
    """(model, optimizer, inputs, targets), deterministic for a seed."""
    torch.manual_seed(seed)
    blocks = []
    for _ in range(N_BLOCKS):
        blocks += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU(), torch.nn.LayerNorm(WIDTH)]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(WIDTH, 1)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=capturable, fused=fused)
    inputs = torch.randn(BATCH, WIDTH, device=device)
    targets = torch.randn(BATCH, 1, device=device)
    return model, optimizer, inputs, targets


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(output, target)


def eager_step(model, optimizer, inputs, targets):
    def step(_: int) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss
    return step


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])
