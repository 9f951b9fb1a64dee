"""bias + GELU (exact, erf) + dropout fused into one Triton kernel, forward and backward.

Eager PyTorch runs this chain as three kernels forward (add, gelu, dropout) and about four
backward, each reading and writing the whole activation. The fused kernel reads x once and
writes y once. The dropout mask is never stored: it is regenerated in the backward kernel from
(seed, element offset) with Triton's counter-based Philox generator, as in Triton's
low-memory-dropout tutorial.

    y = fused_bias_gelu_dropout(x, bias, p=0.1, training=model.training)
    # == F.dropout(F.gelu(x + bias), p, training), with a different (but equally random) mask

The arithmetic runs in float32 for half/bfloat16/float32 inputs and in float64 for float64
inputs (which is how the tests compare it with eager PyTorch to ~1e-12). Scalar arguments (p and
the dropout scale 1/(1-p)) reach the kernel as float32, so in float64 mode the scale is exact
only for p such as 0.5 or 0.75; for other p it differs from eager's by float32 rounding (~6e-8
relative), far below what dropout's randomness matters for.
This module imports without Triton; calling the kernels without Triton (or without CUDA)
raises RuntimeError saying so. With TRITON_INTERPRET=1 set before it is imported, the same
kernels run on CPU tensors through Triton's interpreter (numpy, ~1e4x slower): how the tests
check them, in float64 against eager PyTorch, on machines without a GPU. Never for timing.
"""
from __future__ import annotations

import math
import os

import torch

try:  # Triton ships with CUDA builds of torch; the CPU build has none
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on machines without Triton
    triton = None
    tl = None

TRITON_MISSING = "Triton is not installed (it comes with CUDA builds of PyTorch)"
# triton.jit decides at decoration time whether a kernel is compiled or interpreted (from
# TRITON_INTERPRET: "1", "true", "on", ...); INTERPRETED is set from the kernels themselves below.
INTERPRETED = False
BLOCK_SIZE = 1024
MAX_ELEMENTS = 2**31 - 1  # int32 offsets (they also index the Philox stream)


def available() -> str | None:
    """None when the fused kernel can run here, else the plain reason it cannot."""
    if triton is None:
        return TRITON_MISSING
    if INTERPRETED:
        return None
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine"
    return None


def kernel_device() -> str:
    """Where the kernels' tensors must live: CUDA, or the CPU under Triton's interpreter."""
    return "cpu" if INTERPRETED else "cuda"


if triton is not None:

    @triton.jit
    def _gelu_parts(z):
        # Phi(z) (normal CDF) and phi(z) (normal PDF): gelu(z) = z*Phi(z), gelu'(z) = Phi + z*phi.
        # The irrational constants are built in z's dtype: a bare Python float literal may be
        # materialised as float32 (older Triton) and would cap float64 accuracy at ~1e-8.
        sqrt1_2 = tl.full([], 0.7071067811865476, z.dtype)
        inv_sqrt_2pi = tl.full([], 0.3989422804014327, z.dtype)
        cdf = 0.5 * (1.0 + tl.erf(z * sqrt1_2))
        pdf = tl.exp(-0.5 * z * z) * inv_sqrt_2pi
        return cdf, pdf

    @triton.jit
    def _fwd_kernel(X, B, Y, n_elements, n_cols, p, scale, seed,
                    TRAINING: tl.constexpr, FP64: tl.constexpr, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        in_bounds = offsets < n_elements
        x = tl.load(X + offsets, mask=in_bounds, other=0.0)
        b = tl.load(B + offsets % n_cols, mask=in_bounds, other=0.0)
        if FP64:
            z = x.to(tl.float64) + b.to(tl.float64)
        else:
            z = x.to(tl.float32) + b.to(tl.float32)
        cdf, pdf = _gelu_parts(z)
        y = z * cdf
        if TRAINING:
            keep = tl.rand(seed, offsets) >= p
            y = tl.where(keep, y * scale, 0.0)
        tl.store(Y + offsets, y.to(Y.dtype.element_ty), mask=in_bounds)

    @triton.jit
    def _bwd_kernel(X, B, DY, DX, n_elements, n_cols, p, scale, seed,
                    TRAINING: tl.constexpr, FP64: tl.constexpr, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        in_bounds = offsets < n_elements
        x = tl.load(X + offsets, mask=in_bounds, other=0.0)
        b = tl.load(B + offsets % n_cols, mask=in_bounds, other=0.0)
        dy = tl.load(DY + offsets, mask=in_bounds, other=0.0)
        if FP64:
            z = x.to(tl.float64) + b.to(tl.float64)
            dy = dy.to(tl.float64)
        else:
            z = x.to(tl.float32) + b.to(tl.float32)
            dy = dy.to(tl.float32)
        cdf, pdf = _gelu_parts(z)
        dz = dy * (cdf + z * pdf)
        if TRAINING:
            keep = tl.rand(seed, offsets) >= p   # the forward's mask, regenerated
            dz = tl.where(keep, dz * scale, 0.0)
        tl.store(DX + offsets, dz.to(DX.dtype.element_ty), mask=in_bounds)

    @triton.jit
    def _keep_mask_kernel(M, n_elements, p, seed, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        in_bounds = offsets < n_elements
        keep = tl.rand(seed, offsets) >= p
        tl.store(M + offsets, keep.to(tl.int8), mask=in_bounds)


if triton is not None:
    try:
        from triton.runtime.interpreter import InterpretedFunction
        INTERPRETED = isinstance(_fwd_kernel, InterpretedFunction)
    except ImportError:   # a Triton without the interpreter module: read the switch as it does
        INTERPRETED = os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "on", "yes")

def _check(x: torch.Tensor, bias: torch.Tensor, p: float) -> None:
    reason = available()
    if reason:
        raise RuntimeError(f"fused_bias_gelu_dropout cannot run: {reason}")
    if INTERPRETED and (x.device.type != "cpu" or bias.device.type != "cpu"):
        raise RuntimeError("fused_bias_gelu_dropout under TRITON_INTERPRET=1 needs CPU tensors")
    if not INTERPRETED and not (x.is_cuda and bias.is_cuda):
        raise RuntimeError("fused_bias_gelu_dropout needs CUDA tensors")
    if bias.dim() != 1 or x.shape[-1] != bias.shape[0]:
        raise ValueError(f"bias must be 1-D with x.shape[-1]={x.shape[-1]} elements, "
                         f"got shape {tuple(bias.shape)}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    if x.numel() > MAX_ELEMENTS:
        raise ValueError(f"x has {x.numel()} elements; the kernel handles at most {MAX_ELEMENTS}")


def _grid(n_elements: int) -> tuple[int]:
    return (triton.cdiv(n_elements, BLOCK_SIZE),)


class _FusedBiasGeluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, p, training, seed):
        x_c, bias_c = x.contiguous(), bias.contiguous()
        y = torch.empty_like(x_c)
        n = x_c.numel()
        apply_dropout = bool(training) and p > 0.0
        scale = 1.0 / (1.0 - p)
        if n:
            _fwd_kernel[_grid(n)](x_c, bias_c, y, n, bias_c.numel(), p, scale, seed,
                                  TRAINING=apply_dropout, FP64=x_c.dtype == torch.float64,
                                  BLOCK=BLOCK_SIZE)
        ctx.save_for_backward(x_c, bias_c)
        ctx.p, ctx.scale, ctx.seed, ctx.apply_dropout = p, scale, seed, apply_dropout
        return y

    @staticmethod
    def backward(ctx, dy):
        x_c, bias_c = ctx.saved_tensors
        dy = dy.contiguous()
        dx = torch.empty_like(x_c)
        n = x_c.numel()
        if n:
            _bwd_kernel[_grid(n)](x_c, bias_c, dy, dx, n, bias_c.numel(), ctx.p, ctx.scale,
                                  ctx.seed, TRAINING=ctx.apply_dropout,
                                  FP64=x_c.dtype == torch.float64, BLOCK=BLOCK_SIZE)
        dbias = None
        if ctx.needs_input_grad[1]:
            # d(x + bias)/d bias sums over every leading dimension; accumulate in float32 (or
            # float64) so half-precision gradients do not lose the small terms.
            acc = torch.float64 if dx.dtype == torch.float64 else torch.float32
            dbias = dx.reshape(-1, bias_c.numel()).sum(0, dtype=acc).to(bias_c.dtype)
        return dx, dbias, None, None, None


def fused_bias_gelu_dropout(x: torch.Tensor, bias: torch.Tensor, p: float = 0.1,
                            training: bool = True, seed: int | None = None) -> torch.Tensor:
    """dropout(gelu(x + bias), p) in one kernel (forward and backward). seed: the Philox seed
    (drawn from torch's CPU generator when None, so torch.manual_seed makes it repeatable)."""
    _check(x, bias, p)
    if seed is None:
        seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
    return _FusedBiasGeluDropout.apply(x, bias, float(p), bool(training), int(seed))


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, seed: int,
              device: torch.device | str | None = None) -> torch.Tensor:
    """The boolean keep-mask the fused kernel uses for (shape, p, seed): for tests and checks."""
    reason = available()
    if reason:
        raise RuntimeError(f"keep_mask cannot run: {reason}")
    n = math.prod(shape)
    mask = torch.empty(n, dtype=torch.int8, device=device or kernel_device())
    if n:
        _keep_mask_kernel[_grid(n)](mask, n, float(p), int(seed), BLOCK=BLOCK_SIZE)
    return mask.view(*shape).bool()


def eager_bias_gelu_dropout(x: torch.Tensor, bias: torch.Tensor, p: float = 0.1,
                            training: bool = True, keep: torch.Tensor | None = None) -> torch.Tensor:
    """The eager chain. With `keep` given, that mask replaces dropout's own random one, so the
    result is comparable element by element with the fused kernel."""
    z = torch.nn.functional.gelu(x + bias)
    if not training or p == 0.0:
        return z
    if keep is None:
        return torch.nn.functional.dropout(z, p=p, training=True)
    return z * keep.to(z.dtype) / (1.0 - p)
