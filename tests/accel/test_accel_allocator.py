"""accel.kernels.allocator and the allocator_tuning fix: keep_cache_warm, expandable_segments,
the registry entry and the demo (skips on CPU; its correctness check runs where CUDA exists)."""
from __future__ import annotations

import json

import pytest
import torch

from accel import registry
from accel.kernels import allocator
from accel.kernels.allocator import expandable_segments, keep_cache_warm, merge_alloc_conf
from tests.support.demos import JSON_KEYS, _cli

CUDA = torch.cuda.is_available()
CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


def _homes():
    homes = [torch.cuda, torch.cuda.memory]
    if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "empty_cache"):
        homes.append(torch.accelerator)
    return homes


def test_keep_cache_warm_swallows_counts_and_restores():
    originals = [home.empty_cache for home in _homes()]
    with keep_cache_warm() as swallowed:
        assert all(home.empty_cache is not original for home, original in zip(_homes(), originals))
        torch.cuda.empty_cache()
        torch.cuda.memory.empty_cache()
        torch.cuda.empty_cache()
        if len(originals) == 3:
            torch.accelerator.empty_cache()
    assert swallowed.calls == len(originals) + 1
    assert [home.empty_cache for home in _homes()] == originals


def test_keep_cache_warm_restores_after_an_exception():
    original = torch.cuda.empty_cache
    with pytest.raises(RuntimeError, match="boom"):
        with keep_cache_warm() as swallowed:
            torch.cuda.empty_cache()
            raise RuntimeError("boom")
    assert swallowed.calls == 1
    assert torch.cuda.empty_cache is original and torch.cuda.memory.empty_cache is original


def test_keep_cache_warm_nests():
    original = torch.cuda.empty_cache
    with keep_cache_warm() as outer:
        torch.cuda.empty_cache()
        outer_no_op = torch.cuda.empty_cache
        with keep_cache_warm() as inner:
            torch.cuda.empty_cache()
            torch.cuda.empty_cache()
        assert torch.cuda.empty_cache is outer_no_op   # still swallowed while the outer is open
        torch.cuda.empty_cache()
    assert (inner.calls, outer.calls) == (2, 4)        # the inner block's calls count for both
    assert torch.cuda.empty_cache is original


def test_keep_cache_warm_blocks_closing_out_of_order_restore_the_original():
    # threads or generators can close an outer block before an inner one
    original = torch.cuda.empty_cache
    first, second = keep_cache_warm(), keep_cache_warm()
    a = first.__enter__()
    b = second.__enter__()
    first.__exit__(None, None, None)
    torch.cuda.empty_cache()                            # the second block is still open
    assert torch.cuda.empty_cache is not original
    second.__exit__(None, None, None)
    assert torch.cuda.empty_cache is original and torch.cuda.memory.empty_cache is original
    assert (a.calls, b.calls) == (0, 1)


def test_merge_keeps_the_other_options():
    conf = "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:4],expandable_segments:False"
    assert merge_alloc_conf(conf, "expandable_segments", "True") == \
        "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:4],expandable_segments:True"
    assert merge_alloc_conf(" garbage_collection_threshold:0.6 ", "expandable_segments", "True") == \
        "garbage_collection_threshold:0.6,expandable_segments:True"
    assert merge_alloc_conf(None, "expandable_segments", "True") == "expandable_segments:True"


@pytest.fixture
def clean_conf(monkeypatch):
    for name in CONF_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    return monkeypatch


def test_expandable_segments_merges_into_the_env(clean_conf):
    import os
    clean_conf.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:256,garbage_collection_threshold:0.8")
    said = expandable_segments()
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == \
        "max_split_size_mb:256,garbage_collection_threshold:0.8,expandable_segments:True"
    assert "PYTORCH_ALLOC_CONF" not in os.environ
    assert isinstance(said, str) and "PYTORCH_CUDA_ALLOC_CONF=" in said
    expandable_segments(enable=False)
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"].endswith(",expandable_segments:False")


def test_expandable_segments_sets_the_variable_torch_reads(clean_conf):
    import os
    expandable_segments()
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    clean_conf.delenv("PYTORCH_CUDA_ALLOC_CONF")
    clean_conf.setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:64")   # read first where torch knows it
    expandable_segments()
    assert os.environ["PYTORCH_ALLOC_CONF"] == "max_split_size_mb:64,expandable_segments:True"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ


def test_expandable_segments_once_cuda_runs(clean_conf):
    import os
    calls: list[str] = []
    clean_conf.setattr(torch.cuda, "is_initialized", lambda: True)
    clean_conf.setattr(allocator, "_runtime_setter", lambda: calls.append)
    assert "running allocator" in expandable_segments()
    assert calls == ["expandable_segments:True"] and "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
    clean_conf.setattr(allocator, "_runtime_setter", lambda: None)
    assert "before the process starts" in expandable_segments()


def test_runtime_setter_exists_in_this_torch():
    assert callable(allocator._runtime_setter())


def test_registry_entry():
    fix = registry.get("allocator_tuning")
    assert fix.addresses[0] == "runtime_stall" and set(fix.addresses) <= set(registry.FINDING_KINDS)
    assert {"allocator_churn", "allocator_fragmentation"} <= set(fix.addresses)   # the memory kinds it also fixes
    assert registry.fixes_for("runtime_stall", {})[0] == "allocator_tuning"
    reason = fix.why_not({"allocator_share": 0.05})
    assert reason is not None and "not memory management" in reason
    assert "profile after warm-up instead" in reason
    assert fix.applies({"allocator_share": 0.8}) and fix.applies({})
    assert fix.applies({"allocator_share": "n/a", "top_calls": []})
    compile(fix.snippet, "<snippet allocator_tuning>", "exec")


@pytest.mark.skipif(CUDA, reason="checks the skip path on a machine without CUDA")
def test_demo_skips_on_cpu_with_the_reason(tmp_path):
    from accel.demos import allocator_tuning
    result = allocator_tuning.run(tmp_path / "direct", "cpu", 3)
    assert result.skipped and "CUDA" in result.skipped and result.finding_kind == "runtime_stall"
    assert not (tmp_path / "direct").exists()
    rc, lines = _cli("allocator_tuning", "--out", str(tmp_path / "out"), "--json")
    assert rc == 0, lines
    data = json.loads(lines[-1])
    assert set(data) == JSON_KEYS and data["fix"] == "allocator_tuning"
    assert isinstance(data["skipped"], str) and data["skipped"]
    assert data["step_ms_before"] is None


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU; this machine has none")
def test_demo_check_on_gpu():
    from accel.demos import allocator_tuning
    checks = allocator_tuning.compare("cuda", n_steps=3)
    assert checks["parameters_identical_after_3_steps"] is True
    assert checks["max_abs_param_diff"] == 0.0
    assert checks["device_allocations_per_step_after"] < checks["device_allocations_per_step_before"]
    model, optimizer, x, y = allocator_tuning.build("cuda")
    step = allocator_tuning.make_step(model, optimizer, x, y)
    with keep_cache_warm() as swallowed:
        step(0)
        step(1)
    assert swallowed.calls == 2
