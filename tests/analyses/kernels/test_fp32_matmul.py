"""fp32_matmul: GEMMs and convolutions in plain FP32 on CUDA cores (analyzers/sql/fp32_matmul.sql),
on a hand-written trace with known kernels, then on the real traces."""
from __future__ import annotations

import pytest

from tests.support.analysis import hand_written_store
from analyzers.read.fixes import computed_finding_contract
from analyzers.analysis.kinds.fp32_matmul import short_name, tensor_cores, tf32_capable
from analyzers.execution.pipeline import run_analyses
from tests.support.events import US, ev, launch

SIMT = ["volta_sgemm_128x64_nn",
        "void cudnn::detail::implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int)",
        "maxwell_scudnn_128x64_relu_interior_nn",
        "void cutlass::Kernel<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(Params)",
        "sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_warpgroupsize1x1x1"]
TENSOR_CORE = ["void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(Params)",
               "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw",
               "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_nn", "volta_h884gemm_64x64_ldg8_nn",
               "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32"]


def matmul_events():
    """Two 10 ms steps; per step the SIMT kernels take 100+200+300+400+500 µs, the tensor-core ones 50 µs each."""
    rows = [ev("user_annotation", "ProfilerStep#1", 0, 10000), ev("user_annotation", "ProfilerStep#2", 10000, 20000)]
    corr = 1
    for step_start in (0, 10000):
        t = step_start + 100
        for i, name in enumerate(SIMT):
            rows += launch(corr, t - 50, t - 45, t, t + 100 * (i + 1), name=name)
            corr, t = corr + 1, t + 100 * (i + 1)
        for name in TENSOR_CORE:
            rows += launch(corr, t - 50, t - 45, t, t + 50, name=name)
            corr, t = corr + 1, t + 50
    return rows


@pytest.fixture()
def syn():
    con = hand_written_store(matmul_events())
    yield con
    con.close()


def test_only_fp32_simt_kernels_are_picked(syn):
    names = {r[0] for r in syn.execute("SELECT DISTINCT name FROM fp32_matmul_kernels('syn')").fetchall()}
    assert names == set(SIMT)


def test_finding_costs_the_fp32_time_at_tensor_core_speed(syn):
    findings, _ = run_analyses(syn, "syn", {"MIN_FINDING_PCT": 0.0})
    [f] = [f for f in findings if f.kind == "fp32_matmul"]
    fp32_ns = 1500 * US                                   # per step
    assert f.cost_ns == pytest.approx(fp32_ns * (1 - 1 / 8))
    assert f.cost_pct == pytest.approx(13.125)            # of the 10 ms step
    m = f.metrics
    assert m["fp32_matmul_ms_per_step"] == 1.5 and m["kernels_per_step"] == 5
    assert m["share_of_compute"] == round(1500 / 1750, 3)
    assert m["tf32_capable"] is True                      # the newest prefix, sm90, no device name
    assert m["top_kernels"][0]["name"].startswith("sm90_xmma_gemm_f32f32_f32f32_f32")
    # the trace also runs TF32 tensor-core kernels (cutlass s1688gemm, xmma tf32): TF32 is on already
    assert m["tf32_in_use"] is True and "TF32 is already on here" in f.summary
    # the window: the longest such kernel (the 500 µs one, step 1)
    assert (f.t_start_ns, f.t_end_ns) == (1100 * US, 1600 * US) and f.step == 1
    findings, _ = run_analyses(syn, "syn", {"MIN_FINDING_PCT": 0.0, "TENSOR_CORE_SPEEDUP": 4.0})
    assert next(f for f in findings if f.kind == "fp32_matmul").cost_ns == pytest.approx(fp32_ns * 0.75)


@pytest.mark.parametrize("device, prefixes, expected", [
    ("NVIDIA A100-SXM4-80GB", [], True), ("NVIDIA H100 80GB HBM3", ["volta"], True), ("NVIDIA L4", [], True),
    ("NVIDIA GeForce RTX 4090", [], True), ("Tesla V100-SXM2-16GB", [], False), ("Tesla T4", ["ampere"], False),
    ("NVIDIA GeForce RTX 2080 Ti", [], False), (None, ["ampere"], True), (None, ["sm90"], True),
    (None, ["turing"], False), (None, ["sm75"], False), (None, [], None), (None, ["volta", "ampere"], True),
])
def test_tf32_capability_from_the_gpu_name_else_the_kernel_prefix(device, prefixes, expected):
    assert tf32_capable(tensor_cores(device, None, prefixes)) is expected


def test_short_names():
    assert short_name(SIMT[1]) == "implicit_convolve_sgemm"
    assert short_name(SIMT[3]) == "cutlass_80_simt_sgemm_128x128_8x4_nn_align1"
    assert short_name("volta_sgemm_128x64_nn") == "volta_sgemm_128x64_nn"


def test_resnet50_on_v100_runs_its_convolutions_in_fp32(shared_traces):
    from tests.support.analysis import ingest_clean
    con, run_id = ingest_clean([shared_traces / "resnet50_num_workers_4.json.gz"])
    findings, _ = run_analyses(con, run_id)
    [f] = [f for f in findings if f.kind == "fp32_matmul"]
    assert f.metrics["tf32_capable"] is False             # volta_sgemm kernels: a V100
    assert f.metrics["top_kernels"][0]["name"].startswith("void implicit_convolve_sgemm")
    assert f.metrics["fp32_matmul_ms_per_step"] == pytest.approx(34.11, abs=0.05)
    assert 20 < f.cost_pct < 30
    con.close()


def test_tensor_core_trace_reports_only_its_few_small_fp32_gemms(shared_traces):
    # nccl_allreduce_with_sizes: an A100 running its big GEMMs as TF32 tensor-op kernels (cutlass
    # s1688gemm, xmma tf32); a few small FP32 ones remain (a cuDNN scudnn convolution, ampere_sgemm,
    # a CUTLASS simt GEMM), 1.3% of compute time, far under the reporting bar
    from tests.support.analysis import ingest_clean
    con, run_id = ingest_clean([shared_traces / "nccl_allreduce_with_sizes.json.gz"])
    assert not [f for f in run_analyses(con, run_id)[0] if f.kind == "fp32_matmul"]
    [f] = [f for f in run_analyses(con, run_id, {"MIN_FINDING_PCT": 0.0})[0] if f.kind == "fp32_matmul"]
    assert f.metrics["tf32_capable"] is True and f.cost_pct < 1
    assert f.metrics["share_of_compute"] == pytest.approx(0.013, abs=0.001)
    assert f.metrics["top_kernels"][0]["name"] == "cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1"
    con.close()


@pytest.mark.parametrize("device, major, prefixes, expected", [
    ("NVIDIA A100-SXM4-80GB", None, [], "tf32"), ("NVIDIA A10G", None, [], "tf32"),
    ("Tesla V100-PCIE-16GB", None, ["ampere"], "fp16"), ("NVIDIA TITAN RTX", None, [], "fp16"),
    ("Tesla P100-PCIE-16GB", None, [], "none"), ("NVIDIA GeForce GTX 1080 Ti", None, [], "none"),
    ("Some future GPU", 10, [], "tf32"), ("NVIDIA H100 80GB HBM3", 9, [], "tf32"), (None, 7, ["ampere"], "fp16"),
    ("AMD Instinct MI250X / MI250", 9, [], None), (None, None, ["pascal"], "none"), (None, None, [], None),
])
def test_tensor_core_generation(device, major, prefixes, expected):
    assert tensor_cores(device, major, prefixes) == expected


def _one_kernel_store(name, device_name=None, extra=()):
    rows = [ev("user_annotation", "ProfilerStep#1", 0, 10000)] + launch(1, 10, 15, 20, 5020, name=name)
    for i, other in enumerate(extra):
        rows += launch(10 + i, 5020, 5025, 5030 + 100 * i, 5120 + 100 * i, name=other)
    con = hand_written_store(rows)
    if device_name:
        con.execute("UPDATE ranks SET device_name = ?", [device_name])
    return con


def test_a_gpu_without_tensor_cores_gets_a_note_not_a_finding():
    con = _one_kernel_store("maxwell_sgemm_128x64_nn", "Tesla P100-PCIE-16GB")
    findings, notes = run_analyses(con, "syn", {"MIN_FINDING_PCT": 0.0})
    con.close()
    assert not [f for f in findings if f.kind == "fp32_matmul"]
    assert any("without tensor cores" in n for n in notes)


def test_fp32_left_over_where_tf32_already_runs_is_not_sent_to_tf32():
    con = _one_kernel_store("ampere_sgemm_32x32_sliced1x4_tn", "NVIDIA A100-SXM4-80GB",
                            extra=["void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(P)"])
    [f] = [f for f in run_analyses(con, "syn", {"MIN_FINDING_PCT": 0.0})[0] if f.kind == "fp32_matmul"]
    con.close()
    assert f.metrics["tf32_in_use"] is True and f.metrics["tf32_capable"] is True
    assert "TF32 is already on here" in f.summary
    assert computed_finding_contract(f)["fixes"] == ["amp_autocast", "tf32_matmul"]
    assert "already on" in computed_finding_contract(f)["fixes_ruled_out"]["tf32_matmul"]


def test_fp16_simt_kernels_are_not_fp32():
    con = _one_kernel_store("maxwell_fp16_sgemm_fp16_128x64_nn")
    assert con.execute("SELECT count(*) FROM fp32_matmul_kernels('syn')").fetchone()[0] == 0
    con.close()
