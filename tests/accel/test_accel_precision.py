"""accel.kernels.precision and the tf32_matmul / amp_autocast fixes: the TF32 switch and its
restore, AmpStep (CPU bf16 autocast here), the registry entries, and the demos (skip on CPU;
their code paths run on CPU at toy size, where TF32 changes nothing)."""
from __future__ import annotations

import json

import pytest
import torch

from accel import registry
from accel.demos import amp_autocast, tf32_matmul
from accel.kernels import precision
from accel.kernels.precision import AmpStep, amp_dtype, enable_tf32, tf32, tf32_settings
from tests.support.demos import JSON_KEYS, _cli, _profiler_steps

CUDA = torch.cuda.is_available()
ON, OFF = True, False


@pytest.fixture(autouse=True)
def restore_tf32():
    saved = [getattr(obj, attr) for obj, attr in precision._targets()]
    yield
    precision._apply(saved)


def test_the_flags_are_the_ones_this_torch_reads():
    assert len(tf32_settings()) == 2
    assert all(key.startswith("torch.backends.cud") for key in tf32_settings())


def test_tf32_context_sets_and_restores():
    enable_tf32(False)
    before = tf32_settings()
    assert set(before.values()) == {OFF}
    with tf32() as inside:
        assert set(inside.values()) == {ON} and tf32_settings() == inside
        with tf32(False):
            assert set(tf32_settings().values()) == {OFF}
        assert set(tf32_settings().values()) == {ON}
    assert tf32_settings() == before


def test_tf32_context_restores_after_an_exception():
    before = tf32_settings()
    with pytest.raises(RuntimeError, match="boom"):
        with tf32():
            raise RuntimeError("boom")
    assert tf32_settings() == before


def test_every_tf32_getter_stays_readable_inside_and_after():
    # torch 2.9+ raises on the legacy getters once fp32_precision was set directly to a different
    # value; torch's Inductor, Lightning and transformers call them, so neither enable_tf32 nor
    # the context may leave such a state behind
    def read_all():
        out = [torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
               torch.get_float32_matmul_precision()]
        if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
            out += [torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision]
        return out
    for enabled in (True, False):
        enable_tf32(enabled)
        read_all()
        with tf32(not enabled):
            read_all()
        read_all()
    enable_tf32(True)
    assert torch.get_float32_matmul_precision() == "high"


def test_enable_tf32_says_what_it_set():
    said = enable_tf32()
    assert said.startswith("set ") and repr(ON) in said and "torch.backends.cuda.matmul" in said
    assert set(tf32_settings().values()) == {ON}
    assert repr(OFF) in enable_tf32(False)


def _tiny(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randn(32, 64)
    return model, optimizer, x, y


def _train(dtype: torch.dtype | None, steps: int = 5) -> tuple[list[float], AmpStep | None]:
    model, optimizer, x, y = _tiny()
    amp = AmpStep(optimizer, dtype=dtype) if dtype is not None else None
    losses = []
    for _ in range(steps):
        compute = lambda: torch.nn.functional.mse_loss(model(x), y)   # noqa: E731
        if amp is None:
            loss = compute()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            loss = amp(compute)
            assert loss.requires_grad is False
            assert all(p.grad is None for p in model.parameters())   # zero_grad(set_to_none)
            assert all(p.dtype == torch.float32 for p in model.parameters())
        losses.append(loss.item())
    return losses, amp


def test_amp_step_bf16_on_cpu_matches_fp32_within_bf16_tolerance():
    fp32, _ = _train(None)
    bf16, amp = _train(torch.bfloat16)
    assert amp.device_type == "cpu" and amp.dtype == torch.bfloat16 and amp.scaler is None
    assert bf16 == pytest.approx(fp32, rel=2e-2)
    assert bf16 != fp32            # it did run in bf16
    assert fp32[-1] < fp32[0] and bf16[-1] < bf16[0]


def test_amp_step_fp16_gets_a_grad_scaler():
    model, optimizer, _, _ = _tiny()
    assert AmpStep(optimizer, dtype=torch.float16).scaler is not None
    assert AmpStep(optimizer).dtype == amp_dtype("cpu") == torch.bfloat16


def test_amp_step_fp16_on_cpu_trains():
    fp32, _ = _train(None)
    fp16, amp = _train(torch.float16)
    assert amp.scaler is not None
    assert fp16 == pytest.approx(fp32, rel=2e-2)


def test_registry_entries():
    assert "fp32_matmul" in registry.FINDING_KINDS
    tf32_fix, amp_fix = registry.get("tf32_matmul"), registry.get("amp_autocast")
    assert tf32_fix.addresses == ["fp32_matmul"] == amp_fix.addresses
    assert tf32_fix.needs == ["cuda"] == amp_fix.needs
    assert tf32_fix.module == amp_fix.module == "accel.kernels.precision"
    assert registry.fixes_for("fp32_matmul", {"tf32_capable": True, "tf32_in_use": False}) == ["tf32_matmul", "amp_autocast"]
    assert registry.fixes_for("fp32_matmul", {}) == ["amp_autocast", "tf32_matmul"]   # TF32 unknown
    reason = tf32_fix.why_not({"tf32_capable": False})
    assert reason == ("TF32 needs an Ampere or newer GPU (this trace's GPU predates it): use mixed "
                      "precision (amp_autocast) instead")
    assert registry.fixes_for("fp32_matmul", {"tf32_capable": False}) == \
        ["amp_autocast", "tf32_matmul"]
    for metrics in ({}, {"tf32_capable": True}, {"tf32_capable": None}, {"tf32_capable": "n/a"},
                    {"fp32_matmul_ms_per_step": 12.0, "share_of_compute": 0.7, "top_kernels": []}):
        assert tf32_fix.applies(metrics), metrics
    assert amp_fix.applies({"tf32_capable": False})


@pytest.mark.parametrize("fix_id", ["tf32_matmul", "amp_autocast"])
def test_snippets_compile_and_name_what_exists(fix_id):
    snippet = registry.get(fix_id).snippet
    compile(snippet, f"<snippet {fix_id}>", "exec")
    first = snippet.splitlines()[0]
    assert first.startswith("from accel.kernels.precision import ")
    assert hasattr(precision, first.rsplit(" ", 1)[-1])


@pytest.mark.skipif(CUDA, reason="checks the skip path on a machine without CUDA")
@pytest.mark.parametrize("module", [tf32_matmul, amp_autocast])
def test_demos_skip_on_cpu_with_the_reason(module, tmp_path):
    result = module.run(tmp_path / "direct", "cpu", 3)
    assert result.skipped and "CUDA" in result.skipped and result.finding_kind == "fp32_matmul"
    assert not (tmp_path / "direct").exists()
    fix_id = module.__name__.rsplit(".", 1)[-1]
    rc, lines = _cli(fix_id, "--out", str(tmp_path / "out"), "--json")
    assert rc == 0, lines
    data = json.loads(lines[-1])
    assert set(data) == JSON_KEYS and data["fix"] == fix_id
    assert data["finding_kind"] == "fp32_matmul"
    assert isinstance(data["skipped"], str) and "needs a CUDA GPU" in data["skipped"]
    assert data["step_ms_before"] is None and not (tmp_path / "out").exists()


@pytest.fixture
def toy_workload(monkeypatch):
    monkeypatch.setattr(tf32_matmul, "LAYERS", 2)
    monkeypatch.setattr(tf32_matmul, "HIDDEN", 64)
    monkeypatch.setattr(tf32_matmul, "BATCH", 16)
    monkeypatch.setattr(tf32_matmul, "CHECK_STEPS", 3)


@pytest.mark.parametrize("after, rtol", [
    (tf32_matmul.Variant("FP32, TF32 on", tf32=True), tf32_matmul.LOSS_RTOL),
    (tf32_matmul.Variant("bf16 autocast", tf32=False, amp=torch.bfloat16), amp_autocast.LOSS_RTOL),
])
def test_demo_code_path_on_cpu_at_toy_size(toy_workload, tmp_path, after, rtol):
    enable_tf32()   # the before run must switch TF32 off itself; the settings come back after
    settings = tf32_settings()
    result = tf32_matmul.run_pair("tf32_matmul", tmp_path, "cpu", 2, after, rtol, ["toy"])
    assert tf32_settings() == settings
    assert result.skipped is None and result.finding_kind == "fp32_matmul"
    assert result.step_ms_before > 0 and result.step_ms_after > 0
    for trace in (result.trace_before, result.trace_after):
        assert _profiler_steps(trace) == ["ProfilerStep#1", "ProfilerStep#2"]
    checks = result.checks
    assert checks[f"loss_within_{rtol:g}_over_3_steps"] is True
    assert checks["max_rel_loss_diff"] <= rtol
    if after.amp is None:   # TF32 does nothing on CPU: bitwise the same
        assert checks["max_abs_param_diff"] == 0.0
    assert checks["gemm_tflops_before"] >= 0 and "toy" in result.notes


def test_measure_runs_before_with_tf32_off(toy_workload, tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(tf32_matmul, "time_steps",
                        lambda step, n, device: seen.append(tf32_settings()) or [1.0])
    monkeypatch.setattr(tf32_matmul, "profile_steps", lambda *args: seen.append(tf32_settings()))
    enable_tf32()
    tf32_matmul.measure(tf32_matmul.FP32, tmp_path, "before", "cpu", 1)
    assert [set(s.values()) for s in seen] == [{OFF}, {OFF}]
    assert set(tf32_settings().values()) == {ON}


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU; this machine has none")
def test_demo_checks_on_gpu(toy_workload):
    checks = tf32_matmul.compare(tf32_matmul.FP32, tf32_matmul.Variant("tf32", tf32=True), "cuda",
                                 tf32_matmul.LOSS_RTOL)
    assert checks["loss_within_0.01_over_3_steps"] is True
    dtype = amp_dtype("cuda")
    checks = tf32_matmul.compare(tf32_matmul.FP32, tf32_matmul.Variant("amp", False, dtype), "cuda",
                                 amp_autocast.LOSS_RTOL)
    assert checks["loss_within_0.02_over_3_steps"] is True


@pytest.mark.parametrize("capability, expected", [((7, 0), torch.float16), ((7, 5), torch.float16),
                                                   ((8, 0), torch.bfloat16), ((9, 0), torch.bfloat16)])
def test_amp_dtype_uses_fp16_before_ampere_even_where_bf16_is_emulated(monkeypatch, capability, expected):
    # torch.cuda.is_bf16_supported() says yes on a V100 (emulated, no tensor cores)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert amp_dtype("cuda") is expected
