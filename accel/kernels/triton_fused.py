"""bias + GELU (exact, erf) + dropout fused into one Triton kernel, forward and backward.

Eager PyTorch runs this chain as three kernels forward (add, gelu, dropout) and about four
backward, each reading and writing the whole activation. The fused kernel reads x once and
writes y and a one-byte keep-mask once; the backward reads x, dy and the mask once, writes dx
once and sums the bias gradient in registers. The mask comes from Triton's counter-based Philox
generator keyed by (seed, row, column), one Philox call for every 4 elements (rand4x), so
keep_mask() can regenerate it for checks.

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
# A program handles BM x BN tiles of the (rows, n_cols) view: the bias is loaded once
# per tile as a contiguous row (no per-element modulo) and rows are contiguous in memory, so loads
# and stores vectorise. The tile shape is tuned per GPU on first use (triton.autotune); results
# do not depend on it (the dropout mask is a function of (seed, row, column) alone).
TILE_CONFIGS = [(4, 1024, 4), (8, 1024, 8), (2, 1024, 4), (8, 512, 4), (4, 512, 4), (32, 256, 8),
                (16, 256, 4), (32, 128, 4)]
# The backward's programs along the rows, each summing the bias gradient of its rows in
# registers: about this many tile columns' worth of programs per SM keeps every SM busy while the
# partial sums stay small (a [row programs, n_cols] float32 buffer, summed once).
PROGRAMS_PER_SM = 4
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
    def _tile(n_rows, n_cols, BM: tl.constexpr, BN: tl.constexpr):
        # This program's rows and columns, the flat offsets of its elements and their bounds.
        rows = tl.program_id(0) * BM + tl.arange(0, BM)
        cols = tl.program_id(1) * BN + tl.arange(0, BN)
        offsets = rows[:, None] * n_cols + cols[None, :]
        in_bounds = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        return rows, cols, offsets, in_bounds

    @triton.jit
    def _keep(seed, p, n_cols, BM: tl.constexpr, BN: tl.constexpr):
        # The dropout keep-mask of this tile: one Philox-4x32 call per 4 consecutive columns of a
        # row (counter = row * ceil(n_cols / 4) + col // 4), its four outputs spread over them.
        # The mask depends only on (seed, row, column), not on the tile sizes.
        rows = tl.program_id(0) * BM + tl.arange(0, BM)
        groups = tl.program_id(1) * (BN // 4) + tl.arange(0, BN // 4)
        counters = rows[:, None] * ((n_cols + 3) // 4) + groups[None, :]
        r0, r1, r2, r3 = tl.rand4x(seed, counters)
        quad = tl.join(tl.join(r0, r1), tl.join(r2, r3))      # [BM, BN/4, 2, 2]
        return tl.reshape(quad, (BM, BN)) >= p                 # column 4g + 2a + b <- r(a + 2b)

    def _configs():
        # Under the interpreter one tile shape: each config would run the kernel again in numpy.
        shapes = TILE_CONFIGS[:1] if os.environ.get("TRITON_INTERPRET", "").lower() in (
            "1", "true", "on", "yes") else TILE_CONFIGS
        return [triton.Config({"BM": bm, "BN": bn}, num_warps=w) for bm, bn, w in shapes]

    @triton.autotune(configs=_configs(), key=["n_cols", "TRAINING", "FP64"])
    @triton.jit
    def _fwd_kernel(X, B, Y, M, n_rows, n_cols, p, scale, seed,
                    TRAINING: tl.constexpr, FP64: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
        rows, cols, offsets, in_bounds = _tile(n_rows, n_cols, BM, BN)
        x = tl.load(X + offsets, mask=in_bounds, other=0.0)
        b = tl.load(B + cols, mask=cols < n_cols, other=0.0)
        if FP64:
            z = x.to(tl.float64) + b.to(tl.float64)[None, :]
        else:
            z = x.to(tl.float32) + b.to(tl.float32)[None, :]
        cdf, pdf = _gelu_parts(z)
        y = z * cdf
        if TRAINING:
            keep = _keep(seed, p, n_cols, BM, BN)
            y = tl.where(keep, y * scale, 0.0)
            # One byte per element for the backward (as eager dropout keeps): reading it back
            # costs less than a second Philox pass in the compute-bound backward.
            tl.store(M + offsets, keep.to(tl.int8), mask=in_bounds)
        tl.store(Y + offsets, y.to(Y.dtype.element_ty), mask=in_bounds)

    @triton.autotune(configs=_configs(), key=["n_cols", "TRAINING", "FP64"])
    @triton.jit
    def _bwd_kernel(X, B, M, DY, DX, DB_PARTIAL, n_rows, n_cols, scale,
                    TRAINING: tl.constexpr, FP64: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
        # Program (g, c) walks row blocks g, g + G, g + 2G, ... of column block c and sums their
        # bias gradient in registers; it writes one row of partial sums (no atomics: deterministic).
        cols = tl.program_id(1) * BN + tl.arange(0, BN)
        b = tl.load(B + cols, mask=cols < n_cols, other=0.0)
        if FP64:
            bz = b.to(tl.float64)[None, :]
            acc = tl.zeros([BN], dtype=tl.float64)
        else:
            bz = b.to(tl.float32)[None, :]
            acc = tl.zeros([BN], dtype=tl.float32)
        for row_block in range(tl.program_id(0), tl.cdiv(n_rows, BM), tl.num_programs(0)):
            rows = row_block * BM + tl.arange(0, BM)
            offsets = rows[:, None] * n_cols + cols[None, :]
            in_bounds = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
            x = tl.load(X + offsets, mask=in_bounds, other=0.0)
            dy = tl.load(DY + offsets, mask=in_bounds, other=0.0)
            z = x.to(bz.dtype) + bz
            cdf, pdf = _gelu_parts(z)
            dz = dy.to(bz.dtype) * (cdf + z * pdf)
            if TRAINING:
                keep = tl.load(M + offsets, mask=in_bounds, other=0)
                dz = tl.where(keep != 0, dz * scale, 0.0)
            dz = tl.where(in_bounds, dz, 0.0)
            tl.store(DX + offsets, dz.to(DX.dtype.element_ty), mask=in_bounds)
            acc += tl.sum(dz, axis=0)
        tl.store(DB_PARTIAL + tl.program_id(0) * n_cols + cols, acc, mask=cols < n_cols)

    @triton.jit
    def _keep_mask_kernel(M, n_rows, n_cols, p, seed, BM: tl.constexpr, BN: tl.constexpr):
        rows, cols, offsets, in_bounds = _tile(n_rows, n_cols, BM, BN)
        tl.store(M + offsets, _keep(seed, p, n_cols, BM, BN).to(tl.int8), mask=in_bounds)


if triton is not None:
    try:
        from triton.runtime.interpreter import InterpretedFunction
        INTERPRETED = isinstance(_keep_mask_kernel, InterpretedFunction)
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


def _tiles(n_rows: int, n_cols: int):
    """The launch grid of a tile-per-program kernel, for the autotuner's chosen tile shape."""
    return lambda meta: (triton.cdiv(n_rows, meta["BM"]), triton.cdiv(n_cols, meta["BN"]))


def _row_programs(n_rows: int, n_cols: int, device: torch.device) -> int:
    """How many programs share the rows in the backward (see PROGRAMS_PER_SM)."""
    sms = 1 if device.type != "cuda" else torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(n_rows, -(-PROGRAMS_PER_SM * sms * 1024 // max(n_cols, 1))))


class _FusedBiasGeluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, p, training, seed):
        x_c, bias_c = x.contiguous(), bias.contiguous()
        y = torch.empty_like(x_c)
        n_cols = bias_c.numel()
        n_rows = x_c.numel() // n_cols
        apply_dropout = bool(training) and p > 0.0
        scale = 1.0 / (1.0 - p)
        keep = torch.empty(x_c.shape if apply_dropout else (0,), dtype=torch.int8, device=x_c.device)
        if x_c.numel():
            _fwd_kernel[_tiles(n_rows, n_cols)](x_c, bias_c, y, keep, n_rows, n_cols, p, scale, seed,
                                                TRAINING=apply_dropout, FP64=x_c.dtype == torch.float64)
        ctx.save_for_backward(x_c, bias_c, keep)
        ctx.scale, ctx.apply_dropout = scale, apply_dropout
        return y

    @staticmethod
    def backward(ctx, dy):
        x_c, bias_c, keep = ctx.saved_tensors
        dy = dy.contiguous()
        dx = torch.empty_like(x_c)
        n_cols = bias_c.numel()
        n_rows = x_c.numel() // n_cols
        # d(x + bias)/d bias sums over every leading dimension: the kernel sums its rows in float32
        # (float64 for float64 inputs) so half-precision gradients keep their small terms.
        acc = torch.float64 if dx.dtype == torch.float64 else torch.float32
        row_programs = _row_programs(n_rows, n_cols, dx.device)
        partial = torch.empty((row_programs, n_cols), dtype=acc, device=dx.device)
        if x_c.numel():
            grid = lambda meta: (row_programs, triton.cdiv(n_cols, meta["BN"]))  # noqa: E731
            _bwd_kernel[grid](x_c, bias_c, keep, dy, dx, partial, n_rows, n_cols, ctx.scale,
                              TRAINING=ctx.apply_dropout, FP64=x_c.dtype == torch.float64)
        else:
            partial.zero_()
        dbias = partial.sum(0).to(bias_c.dtype) if ctx.needs_input_grad[1] else None
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
    """The boolean keep-mask the fused kernel uses for (shape, p, seed): for tests and checks.
    The last dimension is the bias's (the columns); the mask depends on (seed, row, column)."""
    reason = available()
    if reason:
        raise RuntimeError(f"keep_mask cannot run: {reason}")
    n_cols = shape[-1] if len(shape) else 1
    n_rows = math.prod(shape) // n_cols if n_cols else 0
    mask = torch.empty(math.prod(shape), dtype=torch.int8, device=device or kernel_device())
    if mask.numel():
        bm, bn, warps = TILE_CONFIGS[0]
        _keep_mask_kernel[(triton.cdiv(n_rows, bm), triton.cdiv(n_cols, bn))](
            mask, n_rows, n_cols, float(p), int(seed), BM=bm, BN=bn, num_warps=warps)
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


def tuned_tiles(rows: int = 8192, cols: int = 4096, p: float = 0.1) -> dict:
    """Forward+backward time of the fused kernel against the eager chain on this GPU (bf16,
    triton.testing.do_bench medians) and the tile shapes the autotuner chose: the record of why
    the kernel is as fast as it is."""
    from triton.testing import do_bench
    torch.manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    bias = torch.randn(cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)

    def step(fn):
        x.grad = bias.grad = None
        fn(x, bias, p, training=True).backward(grad)

    eager_ms = do_bench(lambda: step(eager_bias_gelu_dropout), return_mode="median")
    fused_ms = do_bench(lambda: step(fused_bias_gelu_dropout), return_mode="median")
    return {"shape": [rows, cols], "eager_ms": eager_ms, "fused_ms": fused_ms, "speedup": eager_ms / fused_ms,
            "forward_tile": str(_fwd_kernel.best_config), "backward_tile": str(_bwd_kernel.best_config),
            "forward_timings_ms": _timings(_fwd_kernel), "backward_timings_ms": _timings(_bwd_kernel)}


def _timings(kernel) -> dict[str, object]:
    """The autotuner's measured time of each tile shape (ms), as Triton keeps them."""
    return {str(config): timing for config, timing in (getattr(kernel, "configs_timings", None) or {}).items()}


if __name__ == "__main__":
    import json
    print(json.dumps(tuned_tiles(), default=str))
