"""accel.kernels: fused/foreach optimizers, CUDA graph step, torch.compile, fused Triton kernel.

Each fix must change speed, not results: parameters after N steps are compared with and without
the fix. GPU-only parts run where CUDA (and Triton) exist and skip with the reason elsewhere.
"""
from __future__ import annotations

import re

import pytest
import torch

from accel.kernels import triton_fused
from accel.kernels.cuda_graph import CudaGraphStep, make_capturable
from accel.kernels.fused_optimizer import fuse_optimizer, implementation

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU; this machine has none")
KERNEL_DEVICE = triton_fused.kernel_device()   # "cpu" under TRITON_INTERPRET=1 (tests/accel/test_triton_interpreted.py)
needs_triton = pytest.mark.skipif(triton_fused.available() is not None,
                                  reason=f"fused Triton kernel cannot run here: {triton_fused.available()}")


def _model(seed: int = 0, layers: int = 10, device: str = "cpu") -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(layers)]).to(device)


def _train(model, optimizer, steps: int, device: str = "cpu") -> torch.Tensor:
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1)).to(device)
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


OPTIMIZERS = [
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4}),
    (torch.optim.Adam, {"lr": 1e-3}),
    (torch.optim.AdamW, {"lr": 1e-3, "weight_decay": 0.01}),
]


@pytest.mark.parametrize("cls,kwargs", OPTIMIZERS, ids=lambda v: getattr(v, "__name__", ""))
def test_foreach_matches_the_for_loop_bitwise_on_cpu(cls, kwargs):
    # foreach runs the same float32 operations per element as the loop, only batched, so the
    # results are identical bit for bit.
    loop_model, fast_model = _model(), _model()
    loop_params = _train(loop_model, cls(loop_model.parameters(), foreach=False, **kwargs), 5)
    fast_opt = fuse_optimizer(cls(fast_model.parameters(), foreach=False, **kwargs), fused=False)
    assert implementation(fast_opt) == "foreach"
    assert torch.equal(loop_params, _train(fast_model, fast_opt, 5))


def test_fused_cpu_adamw_matches_within_float32_rounding():
    # The fused kernel computes the update in one expression (different rounding order):
    # parameters of magnitude ~0.25 agree to a few float32 ulps after 5 steps.
    loop_model, fused_model = _model(), _model()
    loop_params = _train(loop_model, torch.optim.AdamW(loop_model.parameters(), lr=1e-3, foreach=False), 5)
    fused_opt = fuse_optimizer(torch.optim.AdamW(fused_model.parameters(), lr=1e-3, foreach=False))
    assert implementation(fused_opt) == "fused"   # torch has a fused CPU AdamW: chosen by default
    torch.testing.assert_close(_train(fused_model, fused_opt, 5), loop_params, rtol=1e-6, atol=1e-6)


def test_fusing_in_place_keeps_a_scheduler_built_before_it_working():
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)
    assert fuse_optimizer(optimizer) is optimizer and implementation(optimizer) == "fused"
    for _ in range(3):
        model(torch.randn(4, 16)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-6)   # a new object stayed at 1e-3
    assert optimizer._step_supports_amp_scaling   # what GradScaler checks for a fused optimizer


def test_fusing_mid_training_keeps_state_and_param_groups():
    model_a, model_b = _model(), _model()
    groups = lambda m: [{"params": list(m[:5].parameters()), "lr": 1e-3},  # noqa: E731
                        {"params": list(m[5:].parameters()), "lr": 5e-3, "weight_decay": 0.1}]
    opt_a = torch.optim.AdamW(groups(model_a), foreach=False)
    reference = _train(model_a, opt_a, 6)

    opt_b = torch.optim.AdamW(groups(model_b), foreach=False)
    _train(model_b, opt_b, 3)
    opt_b = fuse_optimizer(opt_b, fused=False)   # foreach: bitwise equal to the loop
    assert [g["lr"] for g in opt_b.param_groups] == [1e-3, 5e-3]
    assert opt_b.param_groups[1]["weight_decay"] == 0.1
    assert all(float(s["step"]) == 3.0 for s in opt_b.state.values())
    assert torch.equal(_train(model_b, opt_b, 3), reference)


@needs_cuda
def test_fused_cuda_adamw_matches_the_loop():
    # fused=True is picked automatically for CUDA parameters; its single-kernel update rounds
    # differently from the loop's op-by-op float32 arithmetic: 1e-5 relative after 5 steps.
    loop_model, fused_model = _model(device="cuda"), _model(device="cuda")
    loop_params = _train(loop_model, torch.optim.AdamW(loop_model.parameters(), lr=1e-3, foreach=False),
                         5, "cuda")
    fused_opt = fuse_optimizer(torch.optim.AdamW(fused_model.parameters(), lr=1e-3, foreach=False))
    assert implementation(fused_opt) == "fused"
    torch.testing.assert_close(_train(fused_model, fused_opt, 5, "cuda"), loop_params, rtol=1e-5, atol=1e-6)


def test_optimizer_without_fast_paths_is_refused():
    with pytest.raises(ValueError, match="LBFGS"):
        fuse_optimizer(torch.optim.LBFGS(_model().parameters()))


def test_make_capturable_sets_the_flag_where_it_exists():
    model = _model()
    adam = torch.optim.Adam(model.parameters())
    make_capturable(adam)
    assert all(g["capturable"] for g in adam.param_groups)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    make_capturable(sgd)                       # SGD has no such option: left alone
    assert "capturable" not in sgd.param_groups[0]


@pytest.mark.skipif(CUDA, reason="checks the CPU-only refusal")
def test_cuda_graph_step_refuses_plainly_without_cuda():
    model = _model()
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        CudaGraphStep(model, torch.nn.functional.mse_loss, torch.optim.SGD(model.parameters(), lr=0.1),
                      (torch.randn(2, 16), torch.randn(2, 16)))


@needs_cuda
def test_cuda_graph_step_matches_eager_training():
    # Eager steps with the same capturable AdamW as the graph: the graph replays the kernels
    # eager mode ran at capture, so 1e-5 relative after 10 steps (cuBLAS may choose another
    # algorithm inside a graph). Non-capturable AdamW rounds in another order, which Adam's
    # normalised update amplifies past 1e-5 (seen on an H100).
    from accel.demos import launch_bound as wl
    model_a, opt_a, x, y = wl.build("cuda", capturable=True, fused=True)
    step_a = wl.eager_step(model_a, opt_a, x, y)
    model_b, opt_b, _, _ = wl.build("cuda", capturable=True, fused=True)
    before_capture = wl.flat_params(model_b).clone()
    graphed = CudaGraphStep(model_b, wl.loss_fn, opt_b, (x, y))
    assert torch.equal(wl.flat_params(model_b), before_capture)   # warm-up left no trace
    for i in range(10):
        loss_a = step_a(i)
        loss_b = graphed.step((x, y))
    torch.cuda.synchronize()
    torch.testing.assert_close(wl.flat_params(model_b), wl.flat_params(model_a), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="fixed shapes"):
        graphed.step((x[:2], y[:2]))


@needs_cuda
def test_compile_reduce_overhead_matches_eager():
    from accel.demos import compile_reduce_overhead as demo
    checks = demo._same_result("cuda")
    assert checks["first_step_matches"], checks


@needs_cuda
def test_cuda_graph_demo_check_compares_like_with_like():
    from accel.demos import cuda_graph as demo
    checks = demo._same_result("cuda")
    assert checks["parameters_match"] and checks["max_rel_loss_diff"] <= 1e-5, checks


def test_triton_module_imports_without_triton_and_says_why_it_cannot_run():
    # Importing succeeded above; calling explains itself. Where the kernel can run, tensors on
    # the wrong device are refused instead (CPU tensors on a GPU; others under the interpreter).
    reason = triton_fused.available()
    if reason is not None:
        expected, device = f"cannot run: {reason}", "cpu"
    elif triton_fused.INTERPRETED:
        expected, device = "needs CPU tensors", "meta"
    else:
        expected, device = "needs CUDA tensors", "cpu"
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        triton_fused.fused_bias_gelu_dropout(torch.randn(4, 8, device=device), torch.randn(8, device=device), p=0.1)


def test_eager_reference_with_a_given_mask():
    x = torch.tensor([[-1.0, 0.0, 2.0]], dtype=torch.float64)
    bias = torch.tensor([0.5, 0.0, -1.0], dtype=torch.float64)
    keep = torch.tensor([[True, False, True]])
    z = x + bias
    gelu = z * 0.5 * (1 + torch.erf(z / 2 ** 0.5))
    expected = gelu * keep / 0.75
    out = triton_fused.eager_bias_gelu_dropout(x, bias, p=0.25, keep=keep)
    torch.testing.assert_close(out, expected, rtol=1e-15, atol=1e-15)
    torch.testing.assert_close(triton_fused.eager_bias_gelu_dropout(x, bias, 0.25, training=False),
                               gelu, rtol=1e-15, atol=1e-15)


@needs_triton
@pytest.mark.parametrize("p,training", [(0.5, True), (0.0, True), (0.3, False)])
def test_fused_kernel_matches_eager_in_float64(p, training):
    # float64 in, float64 arithmetic in the kernel (erf/exp from libdevice), and the same mask:
    # output and gradients agree to ~1e-15; 1e-12 leaves room for libdevice vs ATen erf.
    # p = 0.5 keeps the dropout scale 1/(1-p) = 2 exact (scalar kernel arguments are float32).
    torch.manual_seed(0)
    x = torch.randn(37, 129, device=KERNEL_DEVICE, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(129, device=KERNEL_DEVICE, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(37, 129, device=KERNEL_DEVICE, dtype=torch.float64)
    y = triton_fused.fused_bias_gelu_dropout(x, bias, p, training=training, seed=42)
    dx, db = torch.autograd.grad(y, (x, bias), grad)
    keep = triton_fused.keep_mask(x.shape, p, 42)
    y_ref = triton_fused.eager_bias_gelu_dropout(x, bias, p, training=training, keep=keep)
    dx_ref, db_ref = torch.autograd.grad(y_ref, (x, bias), grad)
    for got, want in ((y, y_ref), (dx, dx_ref), (db, db_ref)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    if training and p > 0:
        assert 0.4 < keep.float().mean().item() < 0.6   # about half the elements kept
        # neighbouring columns draw independently (one Philox call serves 4 of them; the hash one each)
        groups = keep[:, :128].reshape(37, 16, 8).float().mean(-1)
        assert ((groups == 0) | (groups == 1)).float().mean().item() < 0.1   # 1/128 if independent
        # p honoured to 1/65536: over 37 x 4096 draws the kept share is within 4 sigma of 0.9
        kept = triton_fused.keep_mask((37, 4096), 0.1, 42).float().mean().item()
        assert abs(kept - 0.9) < 4 * (0.09 / (37 * 4096)) ** 0.5
        # another seed, another mask: at p = 0.5 two independent masks agree on half the elements
        agree = (keep == triton_fused.keep_mask(x.shape, p, 43)).float().mean().item()
        assert abs(agree - 0.5) < 4 * (0.25 / keep.numel()) ** 0.5
        # a seed past 31 bits still drops (it is folded to the kernels' 31 bits)
        big = triton_fused.keep_mask(x.shape, p, 2**33 + 7).float().mean().item()
        assert 0.4 < big < 0.6


@needs_triton
def test_fused_kernel_gradcheck_and_bf16():
    x = torch.randn(6, 10, device=KERNEL_DEVICE, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(10, device=KERNEL_DEVICE, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda a, b: triton_fused.fused_bias_gelu_dropout(a, b, 0.5, training=True, seed=7), (x, bias))
    # bfloat16: the kernel computes in float32 and rounds once; eager rounds after each op.
    xb = torch.randn(64, 256, device=KERNEL_DEVICE, dtype=torch.bfloat16)
    bb = torch.randn(256, device=KERNEL_DEVICE, dtype=torch.bfloat16)
    want = triton_fused.eager_bias_gelu_dropout(xb.float(), bb.float(), 0.1, training=False)
    got = triton_fused.fused_bias_gelu_dropout(xb, bb, 0.1, training=False)
    torch.testing.assert_close(got.float(), want, rtol=1.6e-2, atol=1e-2)
