"""Named thresholds of the analyses, each with where its value comes from.

Every analysis reads them through `ctx.thresholds[NAME]`, so a caller can override any of them:
`analyze_run(con, run_id, thresholds={"MIN_FINDING_PCT": 1.0})`. Unknown names are rejected.
"""
from __future__ import annotations

from typing import Any, Mapping

# --- reporting -----------------------------------------------------------------------------
# A finding must cost at least this share of the mean step time to be reported. 5% is below what
# a profiler user would chase by hand yet above run-to-run noise of step times (typically 1-3%).
MIN_FINDING_PCT = 5.0
# Severity from cost_pct (share of the mean step time a fix could win back):
# >= 20% high (the job is mostly waiting on it), >= 10% medium, else low.
SEVERITY_HIGH_PCT = 20.0
SEVERITY_MEDIUM_PCT = 10.0

# --- launch gaps / host syncs (analyses/launch_gap, host_sync) --------------------------
# HTA get_cuda_kernel_launch_stats defaults: a launch delay above 100 us is an outlier, and a
# runtime call above 50 us is a slow launch.
LAUNCH_DELAY_OUTLIER_NS = 100_000
LAUNCH_RUNTIME_OUTLIER_NS = 50_000
# A kernel this short is "tiny": on current GPUs a cudaLaunchKernel costs ~5-10 us of CPU
# time, so a kernel under 10 us cannot hide its own launch (the CUDA-graph use case).
TINY_KERNEL_NS = 10_000
# Runs of consecutive tiny kernels (no gap longer than TINY_RUN_MAX_GAP_NS between them) at least
# this long are listed as CUDA-graph / fusion candidates.
TINY_RUN_MIN_KERNELS = 8
TINY_RUN_MAX_GAP_NS = 50_000
# A gap counts as data loading / host sync when that CPU activity covers at least this share of it.
CAUSE_MIN_COVER_FRACTION = 0.5
# A runtime/driver call that neither launches, syncs, copies nor manages memory stalls the CPU
# when it lasts this long: calls such as cudaLaunchKernel or cudaEventRecord take 2-20 us
# (HTA flags launches over 50 us); 1 ms is CUDA start-up, lazy module loading or contention.
# Memory-management calls (cudaMalloc, cudaFree, ...) count at any duration.
RUNTIME_STALL_MIN_NS = 1_000_000
# A runtime call this long is one-off start-up (context creation, lazy module loading), whatever
# its name: steady-state cudaMalloc/cudaFree of even GB-sized segments take single-digit ms.
RUNTIME_STARTUP_CALL_NS = 100_000_000

# An idle gap this long is the CPU busy with other work (Python, logging, evaluation), not
# per-kernel launch overhead (a launch costs ~5-10 us); ns.
LONG_GAP_NS = 1_000_000
# launch_gap says the CPU was busy elsewhere when gaps of LONG_GAP_NS or more hold at least this
# share of its idle time (a majority).
LONG_GAPS_DOMINATE_FRACTION = 0.5

# --- host-to-device copies (analyses/h2d_stall) --------------------------------------------
# Practical host-to-device bandwidth of PCIe Gen4 x16: 32 GB/s raw per direction, ~25 GB/s
# measured with pinned memory (NVIDIA bandwidthTest / nvbandwidth on A100 PCIe hosts).
PCIE_PRACTICAL_GBPS = 25.0
# A pageable or synchronous copy achieving below this share of the link is flagged as slow.
SLOW_COPY_FRACTION = 0.5

# --- memory (analyses/memory_*, allocator_*): costed in bytes and % of the device's memory --
# Severity of a memory finding from its bytes as a share of the device's memory (of the peak
# allocated where the trace does not say the device's size, e.g. CPU memory).
MEMORY_SEVERITY_HIGH_PCT = 20.0
MEMORY_SEVERITY_MEDIUM_PCT = 10.0
# memory_growth: allocated at the end of each step rising over at least this many steps, in at
# least this share of the step-to-step changes, by at least this much per step. A steady loop
# ends every step at the same level (allocator rounding aside); optimizer state created in the
# first step is one rise, not a trend.
MEMORY_GROWTH_MIN_STEPS = 4
MEMORY_GROWTH_RISING_FRACTION = 0.75
MEMORY_GROWTH_MIN_BYTES_PER_STEP = 256 * 1024
# memory_spike: one allocation held at a step's peak that lives through at most this share of the
# step's memory events
# and makes at least MEMORY_SPIKE_FRACTION of how far the step rose above where it began (and
# MEMORY_SPIKE_MIN_BYTES): a transient intermediate that sets the peak. Activations live from the
# forward to the backward (most of the step) and each is a small part of the rise.
MEMORY_SPIKE_FRACTION = 0.5
MEMORY_SPIKE_MAX_LIFETIME_FRACTION = 0.25
MEMORY_SPIKE_MIN_BYTES = 1 << 20
# memory_headroom: the peak reserved leaves at least this share of the device's memory unused.
MEMORY_HEADROOM_MIN_PCT = 25.0
# allocator_fragmentation: reserved above allocated by at least this share of reserved and this
# many bytes (in a snapshot, or at the trace's peak of reserved).
FRAGMENTATION_MIN_PCT = 20.0
FRAGMENTATION_MIN_BYTES = 32 << 20
# allocator_churn: the caching allocator reserves or releases segments this often per step on
# average; a warm cache does neither in the steady state.
ALLOCATOR_CHURN_MIN_PER_STEP = 1.0

# --- data loading (analyses/dataloader_stall) ----------------------------------------------
# The data loader must hold the training loop for at least this share of the step (the task's
# "a data loader under 5% of the step is noise").
DATALOADER_MIN_PCT = 5.0

# --- untraced host time (analyses/untraced_host_time) ---------------------------------------
# A hole in the process's traced host activity counts from this length on: shorter ones are the
# dispatcher's, the profiler's and the autograd engine's own time between ops (up to 0.73 ms in
# the H100 demos' traces: the engine preparing backward after the loss's ones_like).
UNTRACED_MIN_HOLE_NS = 1_000_000
# The holes must cost at least this share of the step (as DATALOADER_MIN_PCT).
UNTRACED_MIN_PCT = 5.0

# --- distributed (analyses/rank_imbalance, comm_exposed) ---------------------------------
# Work spread (max - mean) / mean across ranks, %, above which the straggler's own extra work
# explains the waiting; kernel-time noise between identical ranks stays under ~1%. Below it the
# straggler is late for another reason (a stall of its own), so a balanced sampler cannot help.
RANK_IMBALANCE_WORK_PCT = 5.0
# Share of communication time overlapped with compute, %, under which communication runs after
# backward instead of during it (DDP overlaps every bucket but the last: typically 80-95%).
COMM_SERIALIZED_OVERLAP_PCT = 20.0
# Messages under this size are latency-bound in NCCL (nccl-tests size sweeps flatten out in
# time below ~1 MiB): many of them mean buckets are too small.
COMM_SMALL_MESSAGE_BYTES = 1_048_576
# Achieved all-reduce bus bandwidth (nccl-tests busbw, GB/s) below which the link is "slow" (PCIe
# Gen4 x16 ~25 GB/s practical; 100-200 Gb/s InfiniBand/RoCE 12-25 GB/s) and from which it is
# "fast" (NVLink: A100 ~230, H100 ~350-450 GB/s).
LINK_SLOW_GBPS = 30.0
LINK_FAST_GBPS = 100.0
# A runtime/driver call at least this long holds the host (a sync, a blocking copy, a launch on a
# full queue) rather than being launch overhead (cudaLaunchKernel ~5-10 us); ns.
HOST_BLOCKED_MIN_NS = 20_000
# rank_imbalance says the wait is mostly hidden behind the waiting ranks' own host work when less
# than this share of it also holds their hosts.
HELD_WAIT_MIN_FRACTION = 0.5
# A side figure (e.g. comm_exposed's straggler wait) is mentioned in a summary from this share
# of the step on.
MENTION_MIN_STEP_FRACTION = 0.01
# rank_imbalance persistence (analyses/rank_imbalance). A straggler is the rank the others wait
# for (last to reach the step's collectives) in more than this share of the ordinary steps: most
# of them ...
STRAGGLER_MIN_STEP_SHARE = 0.5
# ... each time late beyond the noise floor: by more than this many robust standard deviations
# (1.4826 x median absolute deviation) of the ranks' own step-to-step work jitter (ranks doing the
# same work arrive apart by about that much). 3: the usual 3-sigma rule (NIST/SEMATECH e-Handbook
# of Statistical Methods, 1.3.5.17, on the MAD-based robust z-score); the MAD because one spike
# barely moves it, where it would inflate a standard deviation. Also the bar for periodic and
# moving lateness.
STRAGGLER_MIN_LATENESS_SIGMAS = 3.0
# ... and by more than this share of the step: below it, lateness is not worth a finding however
# steady the run (MIN_FINDING_PCT's 5%, the reporting floor of every cost, applied to one step).
RANK_LATENESS_MIN_STEP_FRACTION = 0.05
# Periodic lateness (an eval or a checkpoint every k-th step on one rank): late beyond the noise in
# at least this share of the steps of one phase, and in at most the rest of it (1 - share) of the
# other steps. 0.75: one phase step in four may be missed (a loaded host), as may the off-phase.
PERIODIC_MIN_PHASE_SHARE = 0.75
# Moving lateness counts a step only where the late rank's own work (its step time minus its
# waiting) exceeds the others' median work in that step by at least this share of its lateness:
# a rank late by work it did. Lateness its work does not explain (a loaded host delaying a rank
# after a collective, scheduling between ranks doing the same work) moves from rank to rank too,
# and is host noise. 0.5: half of the lateness, so work measured coarsely still counts.
MOVING_LATENESS_MIN_WORK_SHARE = 0.5
# A step outlier (a one-off spike, not a straggler): a step in which the waiting ranks lose more
# than the median step by this many robust standard deviations of the per-step loss (3 sigma),
# and by at least MIN_FINDING_PCT of the mean step (smaller excursions are too small to name).
STEP_OUTLIER_SIGMAS = 3.0
# A straggler is the consequence of its own finding (a slow loader, copies, syncs on its rank) when
# that finding costs it at least this share of the imbalance's cost more than it costs the other
# ranks on average: most of its lateness is explained, so the wait is not counted again.
STRAGGLER_EXPLAINED_FRACTION = 0.5

# --- steps inferred where a trace has no ProfilerStep#N (lib/steps.sql) --------------------------
# These are read by the SQL library itself (library_threshold(name), analyzers/sql/engine.py), so they
# apply to every reader of steps(run) and are not overridden per analysis run.
# A marker (DataLoader.__next__, Optimizer.step, a top-level op) must repeat this often on one
# thread to count as the loop; fewer is no loop.
INFERRED_STEP_MIN_REPEATS = 3
# A recurring top-level op marks iterations only if its occurrences span at least this share of
# the longest-spanning one's (it recurs through the whole loop, not only in a phase of it).
INFERRED_STEP_MIN_SPREAD_FRACTION = 0.9
# Iterations right after the first that last over this many times the median are start-up
# (first collectives connecting, allocator and autotuning warming up), not steady steps.
START_UP_ITERATION_MEDIANS = 2.0
# An inference run's recurring range is its engine's iteration only if its occurrences cover at
# least this share of the rank's profiled window (lib/steps.sql engine_iterations): the loop, not a
# layer's op (a forward's repeated layers each cover a fraction of it; xDiT's denoising steps
# cover 83% of its ProfilerStep, the text encoders and VAE the rest).
ENGINE_ITERATION_MIN_COVERAGE = 0.6
# A blocking copy this small (bytes) is a host sync wherever it appears (lib/gaps.sql), never a
# bandwidth problem (h2d_stall's achieved bandwidth leaves it out): its time is the fixed latency
# of a launch plus a PCIe round trip (~5-10 us), not its bytes. NVIDIA's bandwidthTest
# (--mode=shmoo) and nvbandwidth curves reach half the link's rate only around 64 KiB per copy.
TINY_COPY_MAX_BYTES = 65_536
# The thresholds the SQL library reads through library_threshold(name).
SQL_LIBRARY_THRESHOLDS = ("INFERRED_STEP_MIN_REPEATS", "INFERRED_STEP_MIN_SPREAD_FRACTION", "START_UP_ITERATION_MEDIANS",
                          "ENGINE_ITERATION_MIN_COVERAGE",
                          "TINY_COPY_MAX_BYTES", "UNTRACED_MIN_HOLE_NS")

# --- FP32 matmuls (analyses/fp32_matmul) -------------------------------------------------------
# How much faster tensor cores run the same matmul, x: NVIDIA's peak ratios of tensor-core to
# FP32 CUDA-core math (V100 FP16 125 vs 15.7 TFLOP/s, A100 TF32 156 vs 19.5, H100 SXM TF32 495
# vs 67) are ~8x.
TENSOR_CORE_SPEEDUP = 8.0

# --- operator and kernel views (sql/metrics/operators.sql; name lists, not overridable per run) ---
# A kernel runs on tensor cores when its name contains one of these: the PyTorch Profiler
# TensorBoard plugin's list (kineto tb_plugin/torch_tb_profiler/profiler/tensor_core.py, from
# NVIDIA PyProf's tc.py), plus what newer libraries name their tensor-core kernels: CUTLASS
# 'tensorop', WMMA 'wmma', Hopper warpgroup MMA 'gmma', and the FlashAttention / xFormers
# attention kernels built on MMA ('flash_fwd', 'flash_bwd', 'fmha'). TF32 kernels are the SQL
# library's is_tf32_kernel (is_tensor_core_kernel adds them); FP32 CUDA-core matmuls (lib
# is_fp32_simt_matmul, the fp32_matmul finding's rule) are never counted.
TENSOR_CORE_KERNEL_PATTERNS = (
    "h884", "s884", "h1688", "s1688", "hmma", "i8816", "16816", "dgrad_1x1_stride_2x2", "first_layer_wgrad_kernel",
    "conv1x1", "conv2d_c1_k1", "direct_group", "xmma_implicit_gemm", "xmma_sparse_conv",
    "xmma_warp_specialized_implicit_gemm", "xmma_gemm", "xmma_sparse_gemm", "c1688",
    "tensorop", "wmma", "gmma", "flash_fwd", "flash_bwd", "fmha",
)
# CPU ops that can run on tensor cores (matmuls, convolutions, RNN cells, attention): the
# TensorBoard plugin's TC_OP_Allowlist (from ATen's autocast lower-precision list), plus the ops
# newer PyTorch names for the same work (convolution_backward, scaled_dot_product_attention and its
# kernels, _scaled_mm). An autograd node's version suffix is ignored (MmBackward0 is MmBackward).
TENSOR_CORE_ELIGIBLE_OPS = (
    "aten::_convolution", "aten::_convolution_nogroup", "aten::conv1d", "aten::conv2d", "aten::conv3d",
    "aten::conv_tbc", "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d",
    "aten::convolution", "aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::prelu",
    "aten::addmm", "aten::addmv", "aten::addr", "aten::matmul", "aten::mm", "aten::mv", "aten::linear",
    "aten::addbmm", "aten::baddbmm", "aten::bmm", "aten::chain_matmul", "aten::linalg_multi_dot",
    "aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_gru_cell", "aten::lstm_cell", "aten::gru_cell",
    "aten::rnn_tanh_cell", "aten::rnn_relu_cell", "CudnnConvolutionBackward", "BmmBackward",
    "aten::cudnn_convolution_transpose_backward", "CudnnConvolutionTransposeBackward", "MmBackward",
    "aten::cudnn_convolution_backward_weight", "aten::addmm_", "AddmvBackward", "MvBackward",
    "aten::cudnn_convolution_transpose_backward_weight", "aten::cudnn_convolution_transpose_backward_input",
    "AddmmBackward", "aten::cudnn_convolution_backward_input", "AddbmmBackward", "aten::cudnn_convolution_backward",
    "aten::convolution_backward", "ConvolutionBackward", "BaddbmmBackward", "aten::_scaled_mm",
    "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
    "aten::_flash_attention_forward", "aten::_flash_attention_backward", "aten::_efficient_attention_forward",
    "aten::_efficient_attention_backward",
)

# === Fix applicability (read by accel/fix_predicates.py and the accel/ fix modules) =================
# Cut-offs that decide whether a fix applies to a finding, or which setting a fix picks. A concept
# defined above is reused, not redefined: "small message" is COMM_SMALL_MESSAGE_BYTES, "fast link"
# LINK_FAST_GBPS, "communication serialised after backward" COMM_SERIALIZED_OVERLAP_PCT.

# cuda_graph: host syncs per step a captured step tolerates, syncs/step. One or two are usually
# loss.item() or logging after the step, which can stay outside the graph; more mean the step body
# syncs, which capture forbids (PyTorch docs, "CUDA Graphs": no synchronisation while capturing).
CUDA_GRAPH_MAX_SYNCS_PER_STEP = 2
# fused_optimizer: share of the step's kernels launched from optimizer.step, 0..1, under which
# fusing the optimizer cannot close a launch gap: it removes at most that share of the launches.
# TraceDoctor's choice (a fifth of the launches).
FUSED_OPTIMIZER_MIN_KERNEL_SHARE = 0.2
# triton_fused_elementwise: share of the step's kernels that are small elementwise ones, 0..1, under
# which fusing them cannot close a launch gap (same reasoning and choice as the optimizer's).
ELEMENTWISE_FUSION_MIN_KERNEL_SHARE = 0.2
# cuda_prefetcher on h2d_stall: share of H2D copy time overlapped with compute, %, from which
# already-pinned copies are hidden and a prefetcher has nothing left to hide. TraceDoctor's
# choice: the rest is about the first batch's copy, which no prefetcher can hide.
H2D_HIDDEN_OVERLAP_PCT = 90.0
# cuda_prefetcher on host_sync: share of the blocked time spent under host-to-device copy ops
# (aten::to, copy_, pin_memory), 0..1, under which (with a non-copy op on top) the syncs are
# mostly GPU values read on the host, which prefetching inputs does not remove. A majority.
PREFETCH_MIN_COPY_SYNC_SHARE = 0.5
# allocator_tuning: share of a runtime stall's time in memory-management calls (cudaMalloc,
# cudaFree, cudaHostAlloc, ...), 0..1, under which the stall is CUDA start-up or lazy module
# loading rather than allocator churn. TraceDoctor's choice (a fifth of the stalled time).
ALLOCATOR_MIN_STALL_SHARE = 0.2
# ddp_bucket_tuning: one huge all-reduce late in backward gets split into smaller buckets when a
# step has at most this many collectives, collectives/step ...
DDP_SPLIT_MAX_COLLECTIVES_PER_STEP = 2
# ... carrying at least this many bytes per step: twice DDP's default bucket_cap_mb (25 MiB,
# torch.nn.parallel.DistributedDataParallel), so default buckets would have made several; bytes.
DDP_SPLIT_MIN_BYTES_PER_STEP = 52_428_800
# dataloader_tuning: coefficient of variation of the loader's wait per batch (std / mean) above
# which loading is spiky and gets prefetch_factor 4 instead of torch's default 2. TraceDoctor's
# choice: a spread over half the mean outlasts a two-batch queue.
LOADER_SPIKY_WAIT_CV = 0.5



# --- what-if replay and fix models (analyzers/analysis/whatif, analysis/kinds/<kind>/whatif.py) ----------------
# Launch latency (launch call's end -> kernel start on a free stream) and queue gap (one kernel's
# end -> the next queued kernel's start) are measured per rank from its own kernels; these are
# the fallbacks for a rank with fewer than 5 such kernels, ns. ~5 us and ~1-2 us are what Kineto
# shows on V100-H100 traces (HTA's launch stats on ../shared/traces: median delay 4-8 us).
WHATIF_DEFAULT_LAUNCH_LATENCY_NS = 5_000
WHATIF_DEFAULT_QUEUE_GAP_NS = 1_500
# A replayed step further than this from its measured time is reported in the error table and
# a note (the target: median <= 5%, worst <= 10%).
WHATIF_REPLAY_MAX_ERROR_PCT = 10.0
# CUDA graphs: a captured kernel costs the host this much at replay (cudaGraphLaunch of N nodes
# costs ~N x 0.5 us on the CPU: NVIDIA, "Getting Started with CUDA Graphs", and PyTorch's
# torch.cuda.graphs docs: "replay ... launches the whole graph with a single CPU call").
CUDA_GRAPH_HOST_NS_PER_KERNEL = 500
# ... and the GPU starts each graph node this long after the one before, ns: measured on H100
# graph replays, 0.38-0.42 us median between nodes (sample gpu_cuda_graph_after and
# tests/fixtures/gpu_h100/cuda_graph_replay.json.gz; NVIDIA quotes ~1 us for older GPUs).
CUDA_GRAPH_NODE_GAP_NS = 400
# A sync removed (the value read later, or a prefetcher's non-blocking copy): the call's host cost
# left, ns (a cudaEventRecord / cudaMemcpyAsync call takes 2-10 us; Kineto traces).
ASYNC_CALL_NS = 5_000
# Pinned host memory moves host-to-device copies this many times faster than pageable memory
# (NVIDIA, "How to Optimize Data Transfers in CUDA C/C++": 5.4 vs 12.7 GB/s, ~2.3x; bandwidthTest).
PINNED_OVER_PAGEABLE_SPEEDUP = 2.0
# DataLoader workers the fix sets when the trace's loader runs in the main process (0 workers):
# accel.data's tuned_dataloader sizes them as ceil(wait / other step time) + 1, so the loop stops
# waiting; the model does the same, at least this many (PyTorch's performance tuning guide
# suggests num_workers >= 2-4) and assumes the workers do not slow the training loop ...
DATALOADER_FIX_WORKERS = 4
# ... and at most this many: the CPUs a GPU gets on common cloud machines (AWS p4d 96 vCPUs for
# 8 GPUs, GCP a2 12 per GPU); tuned_dataloader caps at the CPUs of the machine it runs on.
DATALOADER_FIX_MAX_WORKERS = 12
# A loader that already has workers gets this many times more.
DATALOADER_WORKER_SCALE = 2.0
# The main process's own cost per batch with workers (receiving the batch from the worker
# queue: unpickling, pin-memory thread handoff), ns. TraceDoctor's choice, below what loaders with
# workers show: ../shared/traces' resnet50_num_workers_4 waits 0.1-1.4 ms per __next__ (median 1.4,
# min 0.1), the CPU dataloader_tuning demo's 2 workers 1.1 ms; half a millisecond keeps a prediction
# from counting a worker pool's own queueing as handoff.
DATALOADER_HANDOFF_NS = 500_000
# Gradient accumulation with DDP no_sync: one all-reduce every this many steps (accel's
# no_sync_accumulation demo uses 4).
NO_SYNC_ACCUMULATION_STEPS = 4
# Gradient compression (fp16/bf16 hooks) halves the bytes each collective moves.
COMM_COMPRESSION_BYTES_FACTOR = 0.5


# --- trace integrity (analyzers/analysis/integrity.py, sql/lib/integrity.sql) --------------------------------
# A matched collective that starts on one rank this long after it ended on another shows the
# ranks' clocks disagree, ns: one clock can never show that, and Kineto's GPU-to-host time
# conversion errs by a few us, so 100 us is an offset between hosts, not noise.
CLOCK_SKEW_MIN_NS = 100_000
# A rank's last ProfilerStep shorter than this share of its other steps' median, with nothing after
# it on the host, is a step the trace cut off. TraceDoctor's choice: half, well below the
# step-to-step jitter of a training loop (a few %).
PARTIAL_STEP_MAX_FRACTION = 0.5
# (defined after DEFAULTS: registered here so that resolve() and overrides know them)


DEFAULTS: dict[str, float] = {
    name: value for name, value in globals().items()
    if name.isupper() and isinstance(value, (int, float)) and not isinstance(value, bool)
}


def resolve(overrides: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The defaults with `overrides` applied; raises ValueError naming an unknown or non-numeric key,
    or one the SQL library reads itself (SQL_LIBRARY_THRESHOLDS: not overridable per run)."""
    values = dict(DEFAULTS)
    for name, value in (overrides or {}).items():
        if name in SQL_LIBRARY_THRESHOLDS and value != DEFAULTS[name]:
            raise ValueError(f"threshold {name!r} applies to the SQL library as a whole; change it in "
                             "analyzers/common/thresholds.py")
        if name not in values:
            raise ValueError(f"unknown threshold {name!r}; known: {', '.join(sorted(values))}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"threshold {name!r} must be a number, got {value!r}")
        values[name] = value
    return values


def severity(cost_pct: float, thresholds: Mapping[str, float] | None = None) -> str:
    """high / medium / low from the share of step time lost (cutoffs above)."""
    t = thresholds or DEFAULTS
    if cost_pct >= t["SEVERITY_HIGH_PCT"]:
        return "high"
    if cost_pct >= t["SEVERITY_MEDIUM_PCT"]:
        return "medium"
    return "low"
