"""Put FP32 matmuls and convolutions on tensor cores: TF32, or bf16/fp16 autocast.

A plain FP32 GEMM or convolution runs on the GPU's CUDA cores (SIMT kernels: volta_sgemm_*,
ampere_sgemm_*, implicit_convolve_sgemm, CUTLASS *_simt_*). Tensor cores do the same work at
~8x the peak rate (TF32 on A100/H100, FP16 on V100), but only when asked to:

    print(enable_tf32())          # once, before training (Ampere or newer)

    with tf32():                  # or for a block only; the previous settings come back after
        train()

    amp = AmpStep(optimizer)      # bf16 autocast (fp16 + GradScaler where the GPU lacks bf16)
    for x, y in loader:
        loss = amp(lambda: loss_fn(model(x), y))   # forward + backward + optimizer step

Trade-offs. TF32 rounds each multiply's inputs to a 10-bit mantissa (FP16's precision, FP32's
range) and accumulates in FP32: results differ from FP32 at about 1e-3 relative, which training
tolerates; code that needs FP32-exact products (some solvers, ill-conditioned linear algebra,
checks against a reference) should keep it off there (`with tf32(False):`). Autocast runs
matmuls and convolutions in bf16 (8-bit mantissa) or fp16 (10-bit mantissa, narrow range, hence
the loss scaling) and keeps reductions, softmax, norms and losses in FP32; the weights and the
optimizer stay FP32. Neither helps a step that is not GEMM/convolution-bound: memory-bound
elementwise kernels, launch gaps, data loading and communication take as long as before
(autocast halves activation bytes, but adds casts). TF32 needs an Ampere (sm_80) or newer GPU;
on Volta/Turing use fp16 autocast. Imports torch but needs no GPU: the flags are settable on a
CPU build, and AmpStep runs CPU autocast too.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch

# The allow_tf32 flags, on every torch: torch 2.9+ maps them onto its per-backend fp32_precision,
# and with them both APIs stay readable. Setting fp32_precision directly instead makes the old
# getters (allow_tf32, get_float32_matmul_precision) raise "mix of the legacy and new APIs", and
# torch's own Inductor, Lightning and transformers still call those.
def _targets() -> list[tuple[object, str]]:
    """(object, attribute) pairs that decide whether FP32 matmuls and convolutions use TF32."""
    return [(torch.backends.cuda.matmul, "allow_tf32"), (torch.backends.cudnn, "allow_tf32")]


def _names() -> list[str]:
    return ["torch.backends.cuda.matmul", "torch.backends.cudnn"]


def tf32_settings() -> dict[str, object]:
    """The current TF32 settings, {"torch.backends.cuda.matmul.allow_tf32": True, ...}."""
    return {f"{name}.{attr}": getattr(obj, attr) for name, (obj, attr) in zip(_names(), _targets())}


def _apply(values: list[object]) -> None:
    for (obj, attr), value in zip(_targets(), values):
        setattr(obj, attr, value)


def enable_tf32(enabled: bool = True) -> str:
    """Let FP32 matmuls (cuBLAS) and convolutions (cuDNN) use TF32 tensor cores, or forbid it
    with enabled=False; returns what was set. Process-wide, until changed again.

    Ampere or newer only (elsewhere the flags are accepted and change nothing). Numerics: inputs
    of each multiply rounded to a 10-bit mantissa, FP32 accumulate (about 1e-3 relative error);
    keep it off where FP32-exact products matter. No gain on steps that are not GEMM-bound.
    """
    _apply([bool(enabled), bool(enabled)])
    return "set " + ", ".join(f"{key} = {value!r}" for key, value in tf32_settings().items())


@contextmanager
def tf32(enabled: bool = True) -> Iterator[dict[str, object]]:
    """TF32 on (or off with enabled=False) inside the block; the previous settings come back
    after, also when the block raises. Yields the settings in force inside."""
    previous = [getattr(obj, attr) for obj, attr in _targets()]
    enable_tf32(enabled)
    try:
        yield tf32_settings()
    finally:
        _apply(previous)


def amp_dtype(device_type: str = "cuda") -> torch.dtype:
    """bf16 where the device has it (CPU, Ampere or newer GPUs), else fp16 (Volta/Turing)."""
    # bf16 on tensor cores needs sm_80; is_bf16_supported() alone also says yes on Volta/Turing
    # (emulated, no tensor cores), so the capability decides
    if device_type == "cuda" and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] < 8:
        return torch.float16
    return torch.bfloat16


class AmpStep:
    """One training step under torch.autocast: forward and loss in mixed precision, backward,
    optimizer step, zero_grad.

        amp = AmpStep(optimizer)                        # dtype: amp_dtype(); device: the params'
        loss = amp(lambda: loss_fn(model(x), y))        # returns the loss, detached

    fp16 gets a GradScaler (its narrow range would flush small gradients to zero); bf16 has
    FP32's range and needs none. Weights, gradients and optimizer state stay FP32. Ops autocast
    keeps in FP32 (softmax, norms, losses, reductions) stay FP32; code that must stay FP32
    besides those goes in `with torch.autocast(device_type, enabled=False):` with .float()
    inputs. Helps GEMM/convolution-bound steps; a memory- or launch-bound step gains little.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, dtype: torch.dtype | None = None,
                 device_type: str | None = None) -> None:
        if device_type is None:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            device_type = params[0].device.type if params else "cuda"
        self.optimizer = optimizer
        self.device_type = device_type
        self.dtype = dtype if dtype is not None else amp_dtype(device_type)
        self.scaler = torch.amp.GradScaler(device_type) if self.dtype == torch.float16 else None

    def __call__(self, compute_loss: Callable[[], torch.Tensor]) -> torch.Tensor:
        with torch.autocast(device_type=self.device_type, dtype=self.dtype):
            loss = compute_loss()
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)   # skips the step when gradients overflowed
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()
