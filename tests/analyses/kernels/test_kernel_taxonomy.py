"""The kernel taxonomy (analyzers/sql/lib/kernel_taxonomy.sql): names of current NVIDIA and AMD
libraries get their family, data type, matrix-unit use and communication class, and the modern
real traces (H100, MI300X) count their GEMMs and attention as tensor/matrix-core work."""
from __future__ import annotations

import pytest

from analyzers.sql.engine import ensure_loaded
from analyzers.store.database import connect
from analyzers.common import thresholds
from tests.support.analysis import hand_written_store, ingest_clean

# name -> (family, dtype, tensor/matrix core, communication)
NAMES = {
    # Hopper / Blackwell
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas":
        ("gemm", "bf16", True, False),
    "sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_cublas": ("gemm", "fp32", False, False),
    "sm100_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize256x128x128_cublas": ("gemm", "fp8", True, False),
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT": ("gemm", None, True, False),
    "bmm_E4m3_E4m3E4m3_Fp32_t128x64x128u2_s6_et64x64_m128x64x32_cga1x1x1_16dp256b_rM_TN_transOut_schedP_bN_sm100f":
        ("gemm", "fp8", True, False),
    "bmm_E2m1_E2m1E2m1_Fp32_t128x128x256_s4_et128x64_cga1x1x1_sm100f": ("gemm", "fp4", True, False),
    "cutlass3x_sm100_bstensorop_s256x128x64gemm_block_scaled_ue8m0xe2m1_ue8m0xe2m1_f32_nvfp4": ("gemm", "fp4", True, False),
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x64_64x6_tn_align8>(x)":
        ("gemm", "bf16", True, False),
    "volta_sgemm_128x64_nn": ("gemm", "fp32", False, False),
    # AMD: hipBLASLt / Tensile, Composable Kernel, MIOpen, Triton flash attention
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT320x224x64_MI16x16x1_SN_LDSB0": ("gemm", "bf16", True, False),
    "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x128_MI16x16x1_SN_LDSB1": ("gemm", "bf16", True, False),
    "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN": ("gemm", "fp16", True, False),
    "Cijk_Ailk_Bljk_SB_MT64x64x8_SN_1LDSB0_APM1": ("gemm", "fp32", False, False),
    "Cijk_Ailk_Bljk_F8B8HS_BH_MT256x256x64_MI32x32x16x1_SN": ("gemm", "fp8", True, False),
    "_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_v3INS_34GridwiseGemm":
        ("conv", None, True, False),
    "igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x256x32_wt32x32x8": ("conv", "bf16", True, False),
    "attn_fwd": ("attention", None, True, False),
    "ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync>": ("attention", None, True, False),
    # Triton: what Inductor's name says, nothing more
    "triton_poi_fused_addmm_gelu_view_15": ("elementwise", None, False, False),
    "triton_red_fused_mean_pow_3": ("reduce", None, False, False),
    "triton_tem_fused_addmm_0": ("gemm", None, True, False),
    "_my_user_kernel": ("other", None, False, False),
    # communication beyond NCCL's names
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": ("comm", "bf16", False, True),
    "void c10d::symmetric_memory::multimem_all_reduce_kernel<__nv_bfloat16, 8, 4>(x)": ("comm", "bf16", False, True),
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals)":
        ("comm", "bf16", False, True),
    "void mscclpp::allreduce_kernel<float>(float*)": ("comm", "fp32", False, True),
    "mscclKernel_Sum_half_Simple_false": ("comm", "fp16", False, True),
    "void tensorrt_llm::kernels::twoShotAllReduceKernel<half, 8>(x)": ("comm", "fp16", False, True),
    # the rest
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int)":
        ("norm", "bf16", False, False),
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>(int)":
        ("elementwise", "bf16", False, False),
    "Memcpy HtoD (Pageable -> Device)": ("memory", None, False, False),
    "batched_transpose_32x32_half": ("memory", "fp16", False, False),
}


@pytest.fixture(scope="module")
def con():
    return ensure_loaded(connect(":memory:"))


@pytest.mark.parametrize("name", list(NAMES))
def test_each_name_is_classified(con, name):
    family, dtype, tensor_core, comm = NAMES[name]
    row = con.execute("SELECT kernel_family($n), kernel_dtype($n), is_tensor_core_kernel($n, $p), is_comm_kernel($n)",
                      {"n": name, "p": list(thresholds.TENSOR_CORE_KERNEL_PATTERNS)}).fetchone()
    assert row == (family, dtype, tensor_core, comm), name


def test_collective_named_from_kernel_names(con):
    said = {name: con.execute("SELECT comm_collective_from_name(?)", [name]).fetchone()[0]
            for name in ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ncclDevKernel_Generic_4",
                         "multimem_all_reduce_kernel", "two_shot_all_gather_kernel", "cross_device_reduce_2stage")}
    assert said == {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL": "allreduce", "ncclDevKernel_Generic_4": None,
                    "multimem_all_reduce_kernel": "allreduce", "two_shot_all_gather_kernel": "allgather",
                    "cross_device_reduce_2stage": None}


def test_symmetric_memory_all_reduce_is_communication_time():
    """A B200-style step: a GEMM then a multimem all-reduce (torch symmetric memory), which no
    NCCL-named rule sees: it counts as communication, not compute, and as an all-reduce."""
    rows = [
        {"run_id": "syn", "rank": 0, "kind": "kernel", "ph": "X", "name": "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT",
         "ts_ns": 0, "dur_ns": 600_000, "device": 0, "stream": 7, "correlation": 1},
        {"run_id": "syn", "rank": 0, "kind": "kernel", "ph": "X",
         "name": "void c10d::symmetric_memory::multimem_all_reduce_kernel<__nv_bfloat16, 8, 4>(x)",
         "ts_ns": 600_000, "dur_ns": 400_000, "device": 0, "stream": 7, "correlation": 2},
    ]
    con = hand_written_store(rows)
    by_category = dict(con.execute("SELECT category, sum(dur_ns) FROM gpu_activity('syn') GROUP BY ALL").fetchall())
    assert by_category == {"compute": 600_000, "comm": 400_000}
    assert con.execute("SELECT collective FROM collectives('syn')").fetchall() == [("allreduce",)]


def test_modern_gemms_count_as_tensor_and_matrix_core_work(shared_traces):
    """H100 (cutlass sm80 + cuBLAS sm90_xmma) and MI300X (hipBLASLt Cijk_ with MFMA, Triton attn_fwd,
    MIOpen igemm gtcx): every GEMM, convolution and attention kernel counts as tensor/matrix-core."""
    from analyzers.read.queries import top_kernels

    for trace in ("h100__Falconsai_nsfw_image_detection__1016002.json.gz",
                  "mi300__Falconsai_nsfw_image_detection__1016002.json.gz"):
        con, run = ingest_clean([shared_traces / "modern" / trace])
        kernels = top_kernels(con, run, limit=None)
        matrix = kernels[kernels.family.isin(["gemm", "conv", "attention"])]
        assert len(matrix) >= 4 and matrix.tensor_core.all(), matrix[["name", "tensor_core"]]
        share = matrix.total_ms.sum() / kernels.total_ms.sum()
        assert share > 0.6, (trace, share)    # the GEMMs and attention are most of a ViT's GPU time
        assert not kernels[kernels.family.isin(["norm", "elementwise"])].tensor_core.any()


def test_mtia_activity_is_device_activity(tmp_path):
    """MTIA traces write their device work as cat 'mtia_ccp_events' (Kineto's CONCURRENT_KERNEL) and
    their host calls as 'mtia_runtime': the run has device activity, not "no GPU activity"."""
    import json

    from analyzers.api import analyze_paths

    events = [{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]
    for i in range(4):
        events += [{"ph": "X", "cat": "mtia_runtime", "name": "launchKernel", "pid": 1, "tid": 1, "ts": 10 + 200 * i,
                    "dur": 20, "args": {"correlation": i + 1}},
                   {"ph": "X", "cat": "mtia_ccp_events", "name": f"mtia_kernel_{i}", "pid": 2, "tid": 3,
                    "ts": 40 + 200 * i, "dur": 150, "args": {"correlation": i + 1, "device": 0, "stream": 3}}]
    trace = tmp_path / "mtia_rank0.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    report = analyze_paths([trace])
    assert report["ranks"][0]["idle_pct"] is not None
    assert not any("no GPU activity" in note for note in report["notes"])
