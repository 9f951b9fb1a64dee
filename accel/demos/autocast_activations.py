"""Demo: the forward under autocast, so the activations kept for backward are 16-bit.

The workload: 4 Linear(256) + GELU layers, batch 1024, SGD. Before, the forward runs in FP32 and
keeps its activations (each layer's output and its GELU's input) in FP32 for the backward; after,
the same forward under torch.autocast (bf16; fp16 on CUDA GPUs without bf16) keeps them in 16 bits,
half the bytes, while the weights and the optimizer stay FP32. Both are profiled with
profile_memory=True from the first step; the checks give each trace's peak as TraceDoctor reads it
and as torch's memory timeline reports it, the FP32 activations' size, and how far the losses of
the two loops drift apart. Runs on CPU (bf16 matmuls there are slow on CPUs without bf16 units:
the point is the peak, not the step time) and CUDA.
"""
from __future__ import annotations

from pathlib import Path

import torch

from accel.demos import DemoResult
from accel.kernels.precision import amp_dtype
from accel.profiling import intra_op_threads, median_ms, profile_memory_pair, time_steps_interleaved

FIX, KIND = "autocast_activations", "memory_spike"
DEFAULT_STEPS = 3
LAYERS, WIDTH, BATCH = 4, 256, 1024
PROFILED_STEPS = 2
LOSS_RTOL = 2e-2          # bf16 keeps an 8-bit mantissa: the losses agree to this, not bitwise
MIB = float(1 << 20)


def build(device: str, seed: int = 0) -> tuple[torch.nn.Sequential, torch.optim.Optimizer, torch.Tensor]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(*[m for _ in range(LAYERS)
                                  for m in (torch.nn.Linear(WIDTH, WIDTH, bias=False), torch.nn.GELU())]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(1)).to(device)
    return model, optimizer, inputs


def make_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor, device: str,
              autocast: bool, losses: list[float] | None = None):
    dtype = amp_dtype(device)

    def step(_: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=dtype, enabled=autocast):
            loss = model(inputs).float().square().mean()
        loss.backward()
        optimizer.step()
        if losses is not None:
            losses.append(loss.detach().item())
    return step


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    with intra_op_threads(2, device):
        return _run(Path(out_dir), device, steps)


def _run(out_dir: Path, device: str, steps: int) -> DemoResult:
    built = [build(device) for _ in range(2)]
    losses: list[list[float]] = [[], []]
    variants = [make_step(*b, device, autocast=flag, losses=loss)
                for b, flag, loss in zip(built, (False, True), losses)]
    times = time_steps_interleaved(variants, steps, device, warmup=1)
    activation_bytes = 2 * LAYERS * BATCH * WIDTH * 4      # each layer keeps its output and its GELU's, FP32

    del built, variants        # a GPU trace's allocated total counts every live tensor
    traces, peaks = profile_memory_pair(
        {side: (lambda flag=side == "after": make_step(*build(device), device, autocast=flag))
         for side in ("before", "after")},
        min(PROFILED_STEPS, steps), out_dir, device)

    drift = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(*losses))
    checks = {
        "amp_dtype": str(amp_dtype(device)).removeprefix("torch."),
        "fp32_activation_mib": round(activation_bytes / MIB, 2),
        **peaks,
        "max_loss_rel_diff": round(drift, 5),
        "losses_agree": drift <= LOSS_RTOL,
    }
    return DemoResult(fix=FIX, device=device, finding_kind=KIND,
                      step_ms_before=median_ms(times[0]), step_ms_after=median_ms(times[1]),
                      trace_before=traces[0], trace_after=traces[1], checks=checks,
                      notes=[f"{LAYERS} x Linear({WIDTH}) + GELU, batch {BATCH}, SGD; before: FP32 forward, "
                             f"after: the forward under torch.autocast({checks['amp_dtype']})",
                             "the peak is read from the re-profiled traces (TraceDoctor) and from torch's memory "
                             "timeline of the same profile; on a CPU without bf16 units the 16-bit matmuls are "
                             "slower: the point is the peak"])
