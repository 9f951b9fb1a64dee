"""Synthesize multi-rank PyTorch profiler (Kineto) traces with problems planted at known sizes.

Why: an analyzer is only trustworthy if it finds a problem whose size we know. Each scenario runs
a small discrete-event model of a data-parallel training job (one host thread issuing aten ops
and CUDA calls, a compute stream, an NCCL stream, a bounded launch queue, collectives that end
together on every rank) and writes what the PyTorch profiler would have recorded (new Kineto
schema: cpu_op / user_annotation / cuda_runtime / kernel / gpu_memcpy / cuda_sync / ac2g flows,
distributedInfo, deviceProperties, record_param_comms with collective sizes).

The ground truth is measured on the model's own timeline, not re-derived from the trace: every
GPU op remembers why the host issued it late (its `cause`), so each GPU idle gap is charged to the
problem that caused it; every collective knows when the last rank arrived, so waiting is
separated from transfer exactly. The spike_step scenario plants no problem: one rank slow in one
step is a step outlier, which no analysis may report as a straggler or anything else. Nor do the
trace-integrity scenarios: cuda_graph (kernels replayed by one cudaGraphLaunch), graph_capture (the
GPU idle while the host captures a graph), exposed_comm_classic_nccl (NCCL's older ncclKernel_*
names) and clock_skew (one rank's timestamps running ahead); each must get its note, if any, and
the figures of the job it varies.

    from sample_traces.synthesize import synthesize
    truth = synthesize("/tmp/t", "straggler", world_size=4, steps=5, seed=0)
    truth["problems"]  # [{"kind": "rank_imbalance", "rank": 2, "cost_ns_per_step": ..., ...}]

CLI: python -m sample_traces.synthesize --scenario straggler --out DIR [--world-size 4]
     [--steps 5] [--seed 0] [--gzip] [--truth FILE]   (prints the ground truth as JSON)
"""
from __future__ import annotations

import argparse
import gzip
import heapq
import json
import random
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

US = 1_000
MS = 1_000_000
# 2024-11-19 07:06:40 UTC in ns: epoch-scale timestamps, as recent Kineto writes them. At this
# scale a float64 cannot hold microseconds with 3 decimals, so the writer formats integers.
EPOCH_START_NS = 1_732_000_000_000_000_000

WARMUP_STEPS = 2
COMPUTE_STREAM = 7
NCCL_STREAM = 20
HOST_PID_BASE = 41_000
FLOAT_BYTES = 4

GEMM_KERNEL = ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1"
               "_execute_segment_k_off_kernel__5x_cublas")
# Plain FP32 on CUDA cores (torch.backends.cuda.matmul.allow_tf32 = False, the default since
# PyTorch 1.12): cuBLAS picks a SIMT sgemm, on Hopper too (no tensor cores, ~1/8 of their peak)
SGEMM_KERNEL = "ampere_sgemm_128x64_nn"
TENSOR_CORE_SPEEDUP = 8       # TF32/FP16 tensor cores vs FP32 CUDA cores: V100 125/15.7, A100 156/19.5, H100 495/67
RELU_KERNEL = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)"
               "::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
               "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}"
               "::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >"
               "(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, "
               "c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() "
               "const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)")
LOSS_KERNEL = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
               "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >"
               "(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
               "unsigned int, float, 4>)")
ADAM_FUSED_KERNEL = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<"
                     "at::native::(anonymous namespace)::TensorListMetadata<4>, "
                     "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
                     "(at::native::ADAM_MODE)1, false>, float*, float, float, float, float, float, "
                     "bool, float*, float*>(int, at::native::(anonymous namespace)::TensorListMetadata<4>, "
                     "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
                     "(at::native::ADAM_MODE)1, false>, float*, float, float, float, float, float, "
                     "bool, float*, float*)")
ELEMENTWISE_KERNEL = ("void at::native::vectorized_elementwise_kernel<4, "
                      "at::native::BinaryFunctor<float, float, float, "
                      "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >"
                      "(int, at::native::BinaryFunctor<float, float, float, "
                      "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3>)")
NCCL_ALLREDUCE_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
# The same all-reduce as NCCL before 2.19 names its kernel (HTA's ^nccl.*Kernel matches both)
NCCL_CLASSIC_ALLREDUCE_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
# clock_skew scenario: how far the skewed rank's clock runs ahead of the others' (NTP-grade hosts)
CLOCK_SKEW_NS = 30 * MS
# spike_step scenario: the one slow step (the 4th recorded, or the last of fewer) and its extra GPU time
SPIKE_STEP_INDEX = 3
SPIKE_NS = 42 * MS
SINGLE_LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI_LOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"

DEVICE_PROPERTIES = {
    "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85028896768, "computeMajor": 9,
    "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132,
    "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}


@dataclass(frozen=True)
class Workload:
    """What one rank's training step does; scenarios are variations of the default (the control).

    The default is compute-bound: the host runs ahead of the GPU (bounded by the launch queue),
    DDP all-reduces one bucket per layer while backward computes, batches come from worker
    processes and are copied from pinned memory without blocking.
    """
    layers: int = 8
    hidden: int = 1024
    tokens: int = 8192                  # rows of the activations (batch x sequence)
    params_per_layer: tuple[int, ...] = (524_288,) + (4_194_304,) * 7  # layer 0 small: the last bucket is cheap
    gemm_ns: int = 600 * US             # one forward GEMM; backward runs two of them
    gemm_kernel: str = GEMM_KERNEL      # the kernel every GEMM launches (default: TF32 tensor cores)
    act_ns: int = 40 * US               # the elementwise op after each GEMM
    loss_ns: int = 30 * US
    op_cpu_ns: int = 14 * US            # host time to dispatch one aten op (python + dispatcher), launch excluded
    launch_cpu_ns: int = 4 * US         # host time inside cudaLaunchKernel
    launch_latency_ns: int = 5 * US     # launch call to the earliest kernel start
    launch_queue_depth: int = 48        # ops the host may run ahead of the GPU before a launch blocks
    loader: str = MULTI_LOADER
    loader_ns: int = 150 * US           # host time inside DataLoader.__next__
    h2d_bytes: int = 1024 * 1024         # the batch (token ids + masks): small next to the step
    h2d_pageable: bool = False          # pageable: the copy blocks the host and runs on the compute stream alone
    pinned_gbps: float = 24.0
    pageable_gbps: float = 6.0
    syncs_per_step: int = 0             # `.item()` calls inside forward
    after_sync_cpu_ns: int = 0          # host work between a sync returning and the next launch
    optimizer: str = "fused"            # fused | per_param (a python loop over parameters)
    optimizer_fused_ns: int = 180 * US  # one of the 3 fused kernels
    per_param_kernels: int = 4          # kernels per parameter in the per_param loop
    per_param_kernel_ns: int = 3 * US
    per_param_cpu_ns: int = 16 * US     # host time per op in the loop (dispatch + launch)
    params_split: int = 1               # tensors per layer the per_param loop walks over
    comm: str = "overlap"               # overlap (DDP buckets during backward) | after_backward | none
    busbw_gbps: float = 40.0            # link bus bandwidth the collectives achieve
    nccl_latency_ns: int = 12 * US
    comm_cpu_ns: int = 6 * US           # host time in record_param_comms around the launch
    jitter: float = 0.01                # relative sd of GPU durations (seeded)
    empty_cache_frees: int = 0          # torch.cuda.empty_cache() ending every step: cudaFree calls
    free_ns: int = 300 * US             # host time in one cudaFree (after the device has drained)
    malloc_layers: int = 0              # forward layers re-allocating their output (cudaMalloc) after it
    malloc_ns: int = 1 * MS             # host time in one cudaMalloc of a fresh segment
    spike_step: int | None = None       # ProfilerStep#N in which this rank's GPU runs slow (throttled)
    spike_ns: int = 0                   # extra GPU time of that step, spread over its GEMMs
    nccl_kernel: str = NCCL_ALLREDUCE_KERNEL   # the kernel every all-reduce launches
    # CUDA graph of the per_param optimizer loop: in ProfilerStep#N (this) the loop's launches are
    # captured (they record work, nothing runs), the graph is instantiated and replayed; every
    # later step replays it with one cudaGraphLaunch. None: the loop launches op by op.
    optimizer_graph_step: int | None = None
    graph_instantiate_ns: int = 4 * MS  # host time in cudaGraphInstantiate
    graph_launch_cpu_ns: int = 12 * US  # host time in one cudaGraphLaunch
    graph_node_gap_ns: int = 2 * US     # GPU time between two kernels a graph replays back to back


@dataclass
class Scenario:
    name: str
    description: str
    world_size: int
    workload: Workload
    per_rank: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> Workload overrides
    planted: list[dict[str, Any]] = field(default_factory=list)          # kind, rank(s), design size
    clock_offset_ns: dict[int, int] = field(default_factory=dict)        # rank -> how far its clock runs ahead


def _scenarios(world_size: int | None, first_step: int = 10, steps: int = 5) -> dict[str, Scenario]:
    base = Workload()
    ws = world_size
    spike_ws = ws or 3
    spike_rank = spike_ws - 1
    spike_step = first_step + min(SPIKE_STEP_INDEX, steps - 1)
    straggler_ws = ws or 4
    straggler_rank = straggler_ws - 2 if straggler_ws > 2 else straggler_ws - 1
    all_ws = ws or 4
    all_straggler = all_ws - 1
    skew_ws = ws or 4
    skew_rank = skew_ws - 2 if skew_ws > 2 else skew_ws - 1
    # cuda_graph / graph_capture: the control's job with a per-parameter optimizer loop (512 tiny
    # kernels, launch-bound when launched one by one) captured into a CUDA graph
    graphed = replace(base, optimizer="per_param", params_split=16)
    exposed = replace(base, comm="after_backward", params_split=8)
    churn = replace(base, empty_cache_frees=3, free_ns=300 * US, malloc_layers=3, malloc_ns=1 * MS)
    # allocator_churn: the GPU idles through the frees and the loader after them (one gap), all
    # through the first cudaMalloc, and through what of each later one outlasts the layer (GEMM +
    # relu) queued before it
    free_gap = churn.empty_cache_frees * churn.free_ns + churn.loader_ns
    malloc_gaps = churn.malloc_layers * churn.malloc_ns - (churn.malloc_layers - 1) * (churn.gemm_ns + churn.act_ns)
    return {
        "control": Scenario(
            "control", "compute-bound, comm overlapped with backward, balanced ranks", ws or 2, base),
        "spike_step": Scenario(
            "spike_step", f"the control with one spike: rank {spike_rank}'s GPU runs its GEMMs "
                          f"{SPIKE_NS // MS} ms slower in step {spike_step} only (a throttled clock)",
            spike_ws, base, per_rank={spike_rank: {"spike_step": spike_step, "spike_ns": SPIKE_NS}},
            # a step outlier, not a finding kind: no analysis should report it as a problem
            planted=[{"kind": "step_outlier", "rank": spike_rank, "step": spike_step, "design_ns": SPIKE_NS}]),
        "launch_bound": Scenario(
            "launch_bound", "tiny kernels; per-parameter optimizer loop launched one op at a time",
            ws or 2,
            replace(base, gemm_ns=20 * US, act_ns=3 * US, tokens=256, hidden=128, loss_ns=3 * US,
                    params_per_layer=(16_384,), loader_ns=40 * US, h2d_bytes=128 * 1024,
                    optimizer="per_param", params_split=4),
            planted=[{"kind": "launch_gap", "design": "16 us host time per 3 us kernel in the optimizer loop"}]),
        "host_sync": Scenario(
            "host_sync", "`.item()` after every forward layer, then 200 us of host work", ws or 2,
            replace(base, syncs_per_step=8, after_sync_cpu_ns=200 * US),
            planted=[{"kind": "host_sync",
                      "design": "8 x (200 us host work + dispatch and launch latency) per step"}]),
        "h2d_stall": Scenario(
            "h2d_stall", "24 MiB batch copied from pageable memory on the compute stream", ws or 2,
            replace(base, h2d_bytes=24 * 1024 * 1024, h2d_pageable=True),
            planted=[{"kind": "h2d_stall",
                      "design_ns_per_step": int(24 * 1024 * 1024 / Workload.pageable_gbps)}]),
        "dataloader": Scenario(
            "dataloader", "single-process DataLoader: 24 ms of host time per batch, GPU work ~16 ms",
            ws or 2, replace(base, loader=SINGLE_LOADER, loader_ns=24 * MS),
            planted=[{"kind": "dataloader_stall",
                      "design": "24 ms loader + launch time - 16 ms of GPU work the host queued before"}]),
        "straggler": Scenario(
            "straggler", f"rank {straggler_rank} gets 30% longer sequences: every GEMM 30% slower",
            straggler_ws, base,
            per_rank={straggler_rank: {"tokens": int(base.tokens * 1.3), "gemm_ns": int(base.gemm_ns * 1.3)}},
            planted=[{"kind": "rank_imbalance", "rank": straggler_rank,
                      "design_ns_per_step": int(base.gemm_ns * 0.3) * 3 * base.layers}]),
        "exposed_comm": Scenario(
            "exposed_comm", "gradients all-reduced per tensor after backward, nothing overlaps",
            ws or 2, exposed,
            planted=[{"kind": "comm_exposed",
                      "design": "64 all-reduces of 2 MiB (256 KiB for layer 0) serialised after backward"}]),
        "exposed_comm_classic_nccl": Scenario(
            "exposed_comm_classic_nccl", "exposed_comm with NCCL < 2.19's kernel names (ncclKernel_* "
                                         "instead of ncclDevKernel_*): the same job, the same figures",
            ws or 2, replace(exposed, nccl_kernel=NCCL_CLASSIC_ALLREDUCE_KERNEL),
            planted=[{"kind": "comm_exposed",
                      "design": "64 all-reduces of 2 MiB (256 KiB for layer 0) serialised after backward"}]),
        "cuda_graph": Scenario(
            "cuda_graph", "the control with a per-parameter optimizer loop (512 kernels of 3 us) captured "
                          "into a CUDA graph before profiling: one cudaGraphLaunch per step replays it",
            ws or 2, replace(graphed, optimizer_graph_step=first_step - 1),
            # GPU work queued by one call, not a problem: no analysis may report its gaps
            planted=[{"kind": "graph_replay", "kernels_per_step": 4 * graphed.layers * graphed.params_split}]),
        "graph_capture": Scenario(
            "graph_capture", f"cuda_graph with the capture in the first recorded step (ProfilerStep#{first_step}): "
                             "512 launches recorded into the graph, instantiated, then replayed",
            ws or 2, replace(graphed, optimizer_graph_step=first_step),
            # the GPU idles while the host captures: a one-off set-up cost, no finding's
            planted=[{"kind": "graph_capture", "step": first_step,
                      "launches_captured": 4 * graphed.layers * graphed.params_split}]),
        "clock_skew": Scenario(
            "clock_skew", f"the control on {skew_ws} ranks with rank {skew_rank}'s clock "
                          f"{CLOCK_SKEW_NS // MS} ms ahead of the others'",
            skew_ws, base, clock_offset_ns={skew_rank: CLOCK_SKEW_NS},
            # the job is balanced; only its timestamps disagree
            planted=[{"kind": "clock_skew", "rank": skew_rank, "offset_ns": CLOCK_SKEW_NS}]),
        "allocator_churn": Scenario(
            "allocator_churn", "torch.cuda.empty_cache() ends every step: 3 cudaFree (the first waits "
                               "for the device), then cudaMalloc before each of the first 3 forward layers",
            ws or 2, churn,
            planted=[{"kind": "runtime_stall", "design_ns_per_step": free_gap + malloc_gaps,
                      # the gap after the frees spans the step boundary: the last recorded step's
                      # runs past the last GPU op, so N recorded steps hold N - 1 of them
                      "design_boundary_ns": free_gap}]),
        "fp32_matmul": Scenario(
            "fp32_matmul", "the control's job with TF32 off: every GEMM a plain-FP32 SIMT sgemm on CUDA "
                           "cores (as slow as the control's); gradients all-reduced over NVLink", ws or 2,
            # NVLink-class bus bandwidth (200 GB/s, not the control's 40): with GEMMs 8x faster,
            # backward is ~6x shorter, and at 40 GB/s the DDP buckets would no longer hide behind it
            # (the fix would save ~13% less than the sgemm time x 7/8 at 2 ranks, ~25% at 4)
            replace(base, gemm_kernel=SGEMM_KERNEL, busbw_gbps=200.0),
            planted=[{"kind": "fp32_matmul",
                      # 24 GEMMs a step; tensor cores would run them ~8x faster
                      "design_ns_per_step": 3 * base.layers * base.gemm_ns * (TENSOR_CORE_SPEEDUP - 1)
                      // TENSOR_CORE_SPEEDUP}]),
        "all": Scenario(
            "all", f"{all_ws}-rank job: rank {all_straggler} straggles, single-process loader, pageable "
                   "copies, `.item()` after 4 forward layers, gradients all-reduced after backward", all_ws,
            replace(base, loader=SINGLE_LOADER, loader_ns=22 * MS, h2d_pageable=True,
                    h2d_bytes=12 * 1024 * 1024, syncs_per_step=4, after_sync_cpu_ns=500 * US,
                    comm="after_backward", params_split=2),
            per_rank={all_straggler: {"tokens": int(base.tokens * 1.25), "gemm_ns": int(base.gemm_ns * 1.25)}},
            planted=[{"kind": k} for k in ("rank_imbalance", "comm_exposed", "dataloader_stall",
                                           "h2d_stall", "host_sync")]),
    }


SCENARIOS = tuple(_scenarios(None))


# ----------------------------------------------------------------------------------------------
# The model of one rank
# ----------------------------------------------------------------------------------------------

@dataclass
class GpuOp:
    name: str
    cat: str                 # kernel | gpu_memcpy | gpu_memset
    stream: int
    start: int
    end: int
    correlation: int
    external_id: int
    args: dict[str, Any]
    cause: str               # why the host issued it when it did: launch | dataloader | h2d_stall | host_sync
                             # | runtime_stall
    step: int
    arrival: int | None = None   # collectives: when the last rank's instance started (transfer begins)


@dataclass
class CollectiveRequest:
    """A rank has issued a collective; the driver resolves when it ends on every rank."""
    op: GpuOp
    nelems: int
    collective: str


class RankModel:
    """One rank: a host thread, GPU streams, a bounded launch queue; records Kineto events."""

    def __init__(self, rank: int, world_size: int, wl: Workload, seed: int, t0: int):
        self.rank, self.world_size, self.wl = rank, world_size, wl
        self.rng = random.Random(seed * 1_000_003 + rank)
        self.cpu = t0
        self.pid = HOST_PID_BASE + rank
        self.tid = self.pid
        self.device = rank % 8
        self.stream_free: dict[int, int] = {COMPUTE_STREAM: t0, NCCL_STREAM: t0}
        self.queue: list[int] = []        # start times of issued GPU ops (min-heap)
        self.events: list[tuple[dict[str, Any], int, int | None]] = []  # (event, ts_ns, dur_ns)
        self.gpu_ops: list[GpuOp] = []
        self.ext_stack: list[int] = []
        self.next_ext = 1
        self.next_corr = 1000 + rank      # distinct per rank like real traces, not required
        self.record_fn_id = 1
        self.pending_cause: str | None = None
        self.step = -1
        self.step_windows: list[tuple[int, int, int]] = []
        self.clock_offset_ns = 0          # added to every timestamp written (a host clock running ahead)

    def keep_only_steps_from(self, first_step: int) -> None:
        """Drop the warm-up: what a profiler schedule(wait, warmup, active) does not record."""
        start = next(s for step, s, _ in self.step_windows if step == first_step)
        self.events = [e for e in self.events if e[1] >= start]
        self.gpu_ops = [o for o in self.gpu_ops if o.step >= first_step]
        self.step_windows = [w for w in self.step_windows if w[0] >= first_step]

    # -- host side -----------------------------------------------------------------------------
    def work(self, ns: int) -> None:
        self.cpu += ns

    @contextmanager
    def cpu_op(self, name: str, cat: str = "cpu_op", args: dict[str, Any] | None = None,
               overhead_ns: int | None = None) -> Iterator[int]:
        start = self.cpu
        ext = self.next_ext
        self.next_ext += 1
        self.ext_stack.append(ext)
        self.cpu += self.wl.op_cpu_ns // 2 if overhead_ns is None else overhead_ns
        try:
            yield ext
        finally:
            self.ext_stack.pop()
            self.cpu += 1 * US if overhead_ns is None else 0
            full_args = {"External id": ext, "Record function id": self.record_fn_id}
            self.record_fn_id += 1
            full_args.update(args or {})
            self.events.append(({"ph": "X", "cat": cat, "name": name, "pid": self.pid,
                                 "tid": self.tid, "args": full_args}, start, self.cpu - start))

    def annotation(self, name: str, args: dict[str, Any] | None = None):
        return self.cpu_op(name, cat="user_annotation", args=args, overhead_ns=0)

    def _external(self) -> int:
        return self.ext_stack[-1] if self.ext_stack else 0

    def _runtime(self, name: str, start: int, end: int, correlation: int | None, cbid: int | None) -> None:
        args: dict[str, Any] = {"External id": self._external()}
        if cbid is not None:
            args["cbid"] = cbid
        if correlation is not None:
            args["correlation"] = correlation
        self.events.append(({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": self.pid,
                             "tid": self.tid, "args": args}, start, end - start))

    def _wait_for_queue_slot(self) -> None:
        """A launch blocks while `launch_queue_depth` issued ops have not started on the GPU."""
        while self.queue and self.queue[0] <= self.cpu:
            heapq.heappop(self.queue)
        while len(self.queue) >= self.wl.launch_queue_depth:
            self.cpu = max(self.cpu, heapq.heappop(self.queue))

    def _jitter(self, ns: int) -> int:
        return max(1, int(round(ns * (1.0 + self.rng.gauss(0.0, self.wl.jitter)))))

    def _issue(self, name: str, cat: str, dur: int, stream: int, runtime: str, cbid: int,
               after: int = 0, extra_args: dict[str, Any] | None = None, jitter: bool = True,
               defer: bool = False) -> GpuOp:
        call_start = self.cpu
        self._wait_for_queue_slot()
        ready = self.cpu + self.wl.launch_latency_ns
        self.cpu += self.wl.launch_cpu_ns
        corr = self.next_corr
        self.next_corr += 1
        start = max(self.stream_free[stream], ready, after)
        dur = self._jitter(dur) if jitter else dur
        cause = self.pending_cause or "launch"
        self.pending_cause = None
        args: dict[str, Any] = {"External id": self._external(), "queued": 0, "device": self.device,
                                "context": 1, "stream": stream, "correlation": corr}
        args.update(extra_args or {})
        op = GpuOp(name, cat, stream, start, start + dur, corr, self._external(), args, cause, self.step)
        if not defer:
            self.stream_free[stream] = op.end
        heapq.heappush(self.queue, start)
        self.gpu_ops.append(op)
        self._runtime(runtime, call_start, self.cpu, corr, cbid)
        return op

    def launch(self, name: str, dur: int, stream: int = COMPUTE_STREAM, after: int = 0,
               extra_args: dict[str, Any] | None = None, defer: bool = False) -> GpuOp:
        kernel_args = {"registers per thread": 128, "shared memory": 0, "blocks per SM": 1.0,
                       "warps per SM": 8.0, "grid": [264, 1, 1], "block": [256, 1, 1],
                       "est. achieved occupancy %": 50}
        kernel_args.update(extra_args or {})
        return self._issue(name, "kernel", dur, stream, "cudaLaunchKernel", 211, after,
                           kernel_args, defer=defer)

    def copy(self, direction: str, src: str, dst: str, nbytes: int, gbps: float,
             blocking: bool) -> GpuOp:
        """cudaMemcpyAsync on the compute stream; `blocking` = what non_blocking=False does:
        the host waits in cudaStreamSynchronize until the copy is done."""
        dur = max(1 * US, int(nbytes / gbps))
        op = self._issue(f"Memcpy {direction} ({src} -> {dst})", "gpu_memcpy", dur, COMPUTE_STREAM,
                         "cudaMemcpyAsync", 41,
                         extra_args={"bytes": nbytes, "memory bandwidth (GB/s)": round(nbytes / dur, 3)})
        if blocking:
            self.synchronize(COMPUTE_STREAM)
        return op

    def synchronize(self, stream: int) -> None:
        """cudaStreamSynchronize: the host waits until the stream has drained."""
        call_start = self.cpu
        done = max(self.cpu, self.stream_free[stream])
        self.cpu = done + 3 * US
        corr = self.next_corr
        self.next_corr += 1
        self._runtime("cudaStreamSynchronize", call_start, self.cpu, corr, 131)
        self.events.append(({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": self.device,
                             "tid": stream, "args": {"cuda_sync_kind": "stream_sync", "stream": stream,
                                                     "correlation": corr, "device": self.device,
                                                     "context": 1}},
                            call_start, done - call_start))

    def runtime_call(self, name: str, dur_ns: int, cbid: int, synchronizes_device: bool = False) -> None:
        """A runtime call that neither launches nor copies (cudaMalloc, cudaFree, ...): `dur_ns`
        of host time; `synchronizes_device` = what cudaFree does: first wait for every stream to
        drain. The next GPU op is then issued late because the host sat in the runtime."""
        call_start = self.cpu
        if synchronizes_device:
            self.cpu = max(self.cpu, *self.stream_free.values())
        self.cpu += self._jitter(dur_ns)
        corr = self.next_corr
        self.next_corr += 1
        self._runtime(name, call_start, self.cpu, corr, cbid)
        self.pending_cause = "runtime_stall"

    def stream_wait(self, waiter: int, waited: int) -> None:
        """cudaEventRecord on `waited` + cudaStreamWaitEvent on `waiter`."""
        t = self.cpu
        self.cpu += 2 * US
        self._runtime("cudaEventRecord", t, self.cpu, None, 157)
        t = self.cpu
        self.cpu += 2 * US
        self._runtime("cudaStreamWaitEvent", t, self.cpu, None, 144)
        self.stream_free[waiter] = max(self.stream_free[waiter], self.stream_free[waited])

    def allreduce(self, nelems: int) -> Iterator[CollectiveRequest]:
        """One all-reduce as DDP issues it: record_param_comms around an NCCL kernel launched on
        the NCCL stream once the gradients (everything queued on the compute stream) are ready."""
        ranks = list(range(self.world_size))
        comm_args = {"Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems,
                     "Group size": self.world_size, "dtype": "Float", "In split size": "[]",
                     "Out split size": "[]", "Process Group Name": "0",
                     "Process Group Description": "default_pg", "Process Group Ranks": str(ranks)}
        ready = self.stream_free[COMPUTE_STREAM]
        with self.cpu_op("record_param_comms", args=dict(comm_args, **{"Global rank start": 0,
                                                                        "Global rank stride": 1}),
                         overhead_ns=self.wl.comm_cpu_ns):
            with self.annotation("nccl:all_reduce"):
                t = self.cpu
                self.cpu += 2 * US
                self._runtime("cudaEventRecord", t, self.cpu, None, 157)
                op = self.launch(self.wl.nccl_kernel, 0, stream=NCCL_STREAM, after=ready,
                                 extra_args=dict(comm_args, **{"grid": [32, 1, 1], "block": [640, 1, 1],
                                                               "registers per thread": 96,
                                                               "est. achieved occupancy %": 0}),
                                 defer=True)
                yield CollectiveRequest(op, nelems, "allreduce")

    def captured_launch(self) -> None:
        """cudaLaunchKernel inside a stream capture: the call records a graph node, no GPU work runs."""
        call_start = self.cpu
        self.cpu += self.wl.launch_cpu_ns
        corr = self.next_corr
        self.next_corr += 1
        self._runtime("cudaLaunchKernel", call_start, self.cpu, corr, 211)

    def graph_launch(self, kernels: list[tuple[str, int]], stream: int = COMPUTE_STREAM) -> None:
        """cudaGraphLaunch: one call queues every kernel of the graph; they run back to back,
        `graph_node_gap_ns` apart, and all carry the call's correlation id (as CUPTI records them)."""
        call_start = self.cpu
        self._wait_for_queue_slot()
        # the graph is submitted as the call returns
        self.cpu += self.wl.graph_launch_cpu_ns
        ready = self.cpu + self.wl.launch_latency_ns
        corr = self.next_corr
        self.next_corr += 1
        cause = self.pending_cause or "launch"
        self.pending_cause = None
        t = max(self.stream_free[stream], ready)
        first_start = t
        for i, (name, dur) in enumerate(kernels):
            start = t if i == 0 else t + self.wl.graph_node_gap_ns
            args: dict[str, Any] = {"External id": self._external(), "queued": 0, "device": self.device,
                                    "context": 1, "stream": stream, "correlation": corr,
                                    "registers per thread": 32, "shared memory": 0, "grid": [512, 1, 1],
                                    "block": [128, 1, 1], "est. achieved occupancy %": 50}
            op = GpuOp(name, "kernel", stream, start, start + self._jitter(dur), corr, self._external(), args,
                       cause if i == 0 else "graph_replay", self.step)
            self.gpu_ops.append(op)
            t = op.end
        self.stream_free[stream] = t
        heapq.heappush(self.queue, first_start)
        self._runtime("cudaGraphLaunch", call_start, self.cpu, corr, 311)

    def resolve(self, op: GpuOp, arrival: int, end: int) -> None:
        op.arrival, op.end = arrival, end
        self.stream_free[op.stream] = max(self.stream_free[op.stream], end)


# ----------------------------------------------------------------------------------------------
# The training step every rank runs (SPMD; per-rank differences come from its Workload)
# ----------------------------------------------------------------------------------------------

def _layer_params(wl: Workload) -> list[int]:
    return [wl.params_per_layer[i % len(wl.params_per_layer)] for i in range(wl.layers)]


def _per_param_ops(wl: Workload) -> int:
    return wl.layers * wl.params_split * min(4, wl.per_param_kernels)


def _per_param_loop(m: RankModel, capture: bool = False) -> None:
    """for p in params: exp_avg.mul_(); exp_avg_sq.addcmul_(); denom = sqrt(); p.addcdiv_()
    (`capture`: inside a CUDA graph capture, the launches only record the kernels)."""
    wl = m.wl
    for _layer in range(wl.layers):
        for _part in range(wl.params_split):
            for op_name in ("aten::mul_", "aten::addcmul_", "aten::sqrt", "aten::addcdiv_")[:wl.per_param_kernels]:
                with m.cpu_op(op_name, overhead_ns=wl.per_param_cpu_ns - wl.launch_cpu_ns):
                    if capture:
                        m.captured_launch()
                    else:
                        m.launch(ELEMENTWISE_KERNEL, wl.per_param_kernel_ns)


def _train_step(m: RankModel, step: int) -> Iterator[CollectiveRequest]:
    wl = m.wl
    m.step = step
    step_start = m.cpu
    # a throttled step: every GEMM of it (forward and the two of backward per layer) runs longer
    gemm_ns = wl.gemm_ns + (wl.spike_ns // (3 * wl.layers) if step == wl.spike_step else 0)
    with m.annotation(f"ProfilerStep#{step}"):
        with m.annotation(wl.loader):
            with m.cpu_op("aten::stack", args={"Input Dims": [[]], "Input type": ["TensorList"]}):
                m.work(max(0, wl.loader_ns - wl.op_cpu_ns))
        # (a runtime stall ending the previous step keeps the blame: the loader ran inside its gap)
        m.pending_cause = m.pending_cause or "dataloader"
        with m.cpu_op("aten::to", args={"Input Dims": [[wl.tokens, wl.hidden]], "Input type": ["float"]}):
            with m.cpu_op("aten::_to_copy"):
                with m.cpu_op("aten::copy_"):
                    if wl.h2d_pageable:
                        m.copy("HtoD", "Pageable", "Device", wl.h2d_bytes, wl.pageable_gbps, blocking=True)
                        m.pending_cause = "h2d_stall"
                    else:
                        m.copy("HtoD", "Pinned", "Device", wl.h2d_bytes, wl.pinned_gbps, blocking=False)

        with m.annotation("## forward ##"):
            for layer in range(wl.layers):
                dims = [[wl.tokens, wl.hidden], [wl.hidden, wl.hidden], [wl.hidden]]
                with m.cpu_op("aten::linear", args={"Input Dims": dims, "Input type": ["float"] * 3}):
                    with m.cpu_op("aten::addmm", args={"Input Dims": [[wl.hidden], [wl.tokens, wl.hidden],
                                                                      [wl.hidden, wl.hidden]]}):
                        if layer < wl.malloc_layers:
                            # the emptied caching allocator maps a fresh segment for the output
                            m.runtime_call("cudaMalloc", wl.malloc_ns, 20)
                        m.launch(wl.gemm_kernel, gemm_ns)
                with m.cpu_op("aten::relu", args={"Input Dims": [[wl.tokens, wl.hidden]]}):
                    m.launch(RELU_KERNEL, wl.act_ns)
                if layer < wl.syncs_per_step:
                    # a metric logged per layer: `.item()` copies one scalar and waits for the GPU
                    with m.cpu_op("aten::item"):
                        with m.cpu_op("aten::_local_scalar_dense"):
                            m.copy("DtoH", "Device", "Pageable", 4, 1.0, blocking=True)
                    m.work(wl.after_sync_cpu_ns)
                    m.pending_cause = "host_sync"
            with m.cpu_op("aten::mse_loss", args={"Input Dims": [[wl.tokens, wl.hidden]] * 2}):
                m.launch(LOSS_KERNEL, wl.loss_ns)

        params = _layer_params(wl)
        with m.annotation("## backward ##"):
            with m.cpu_op("autograd::engine::evaluate_function: MseLossBackward0"):
                m.launch(ELEMENTWISE_KERNEL, wl.loss_ns)
            for layer in reversed(range(wl.layers)):
                with m.cpu_op("autograd::engine::evaluate_function: ReluBackward0"):
                    with m.cpu_op("ReluBackward0"):
                        m.launch(ELEMENTWISE_KERNEL, wl.act_ns)
                with m.cpu_op("autograd::engine::evaluate_function: AddmmBackward0"):
                    with m.cpu_op("AddmmBackward0"):
                        for _ in range(2):
                            with m.cpu_op("aten::mm", args={"Input Dims": [[wl.tokens, wl.hidden],
                                                                          [wl.hidden, wl.hidden]]}):
                                m.launch(wl.gemm_kernel, gemm_ns)
                if wl.comm == "overlap":
                    # DDP: this layer's bucket is ready, all-reduce it while backward goes on
                    yield from m.allreduce(params[layer])
        if wl.comm == "after_backward":
            # gradients all-reduced tensor by tensor once backward is over: nothing left to overlap
            for layer in reversed(range(wl.layers)):
                for part in range(wl.params_split):
                    yield from m.allreduce(params[layer] // wl.params_split)
        if wl.comm != "none":
            m.stream_wait(COMPUTE_STREAM, NCCL_STREAM)   # the optimizer needs the reduced gradients

        with m.annotation("Optimizer.step#AdamW.step"):
            if wl.optimizer == "fused":
                with m.cpu_op("aten::_fused_adamw_"):
                    for _ in range(3):
                        m.launch(ADAM_FUSED_KERNEL, wl.optimizer_fused_ns)
            elif wl.optimizer_graph_step is not None and step > wl.optimizer_graph_step:
                # the captured loop: one replay of the graph
                with m.cpu_op("CUDAGraph::replay"):
                    m.graph_launch([(ELEMENTWISE_KERNEL, wl.per_param_kernel_ns)] * _per_param_ops(wl))
            elif step == wl.optimizer_graph_step:
                # torch.cuda.graph(g) synchronises the device first, then the loop runs on the
                # host with its launches only recording nodes: the GPU idles through the capture
                t = m.cpu
                m.cpu = max(m.cpu, *m.stream_free.values()) + 3 * US
                m._runtime("cudaDeviceSynchronize", t, m.cpu, None, 165)
                t = m.cpu
                m.cpu += 3 * US
                m._runtime("cudaStreamBeginCapture", t, m.cpu, None, None)
                _per_param_loop(m, capture=True)
                t = m.cpu
                m.cpu += 20 * US
                m._runtime("cudaStreamEndCapture", t, m.cpu, None, None)
                t = m.cpu
                m.cpu += wl.graph_instantiate_ns
                m._runtime("cudaGraphInstantiate", t, m.cpu, None, 310)
                m.pending_cause = "graph_capture"
                with m.cpu_op("CUDAGraph::replay"):
                    m.graph_launch([(ELEMENTWISE_KERNEL, wl.per_param_kernel_ns)] * _per_param_ops(wl))
            else:
                _per_param_loop(m)
        for i in range(wl.empty_cache_frees):
            # torch.cuda.empty_cache(): cudaFree of every cached segment; the first waits for the
            # device to finish (cudaFree synchronises implicitly), the GPU idles through the rest
            m.runtime_call("cudaFree", wl.free_ns, 22, synchronizes_device=i == 0)
    m.step_windows.append((step, step_start, m.cpu))


# ----------------------------------------------------------------------------------------------
# Running all ranks together, measuring the truth, writing the files
# ----------------------------------------------------------------------------------------------

def _advance(gen: Iterator[CollectiveRequest]) -> CollectiveRequest | None:
    try:
        return next(gen)
    except StopIteration:
        return None


def _run(models: list[RankModel], steps: int, first_step: int, seed: int) -> None:
    def program(m: RankModel) -> Iterator[CollectiveRequest]:
        for step in range(first_step, first_step + steps):
            yield from _train_step(m, step)

    comm_rng = random.Random(seed * 7_919 + 17)
    gens = [program(m) for m in models]
    requests = [_advance(g) for g in gens]
    while any(r is not None for r in requests):
        if any(r is None for r in requests):
            raise RuntimeError("ranks issued different collective sequences")
        wl = models[0].wl
        n = len(models)
        nbytes = requests[0].nelems * FLOAT_BYTES
        bus_factor = 2.0 * (n - 1) / n if n > 1 else 1.0
        transfer = wl.nccl_latency_ns + nbytes * bus_factor / wl.busbw_gbps
        transfer = int(transfer * (1.0 + comm_rng.gauss(0.0, wl.jitter)))
        # NCCL moves data once every rank has arrived; each instance ends at the same time
        arrival = max(r.op.start for r in requests)
        for m, r in zip(models, requests):
            m.resolve(r.op, arrival, arrival + transfer)
        requests = [_advance(g) for g in gens]


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


def _subtract_len(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Total length of union(a) minus union(b)."""
    ua, ub = _union(a), _union(b)
    total, j = 0, 0
    for s, e in ua:
        covered = 0
        while j < len(ub) and ub[j][1] <= s:
            j += 1
        k = j
        while k < len(ub) and ub[k][0] < e:
            covered += max(0, min(e, ub[k][1]) - max(s, ub[k][0]))
            k += 1
        total += (e - s) - covered
    return total


def _truth_for_rank(m: RankModel) -> dict[str, Any]:
    """Per-rank figures measured on the model's timeline (the planted problems' true sizes)."""
    steps = len(m.step_windows)
    ops = sorted(m.gpu_ops, key=lambda o: (o.start, o.end))
    idle_by_cause: dict[str, int] = {}
    busy_until = None
    for op in ops:
        if busy_until is not None and op.start > busy_until:
            idle_by_cause[op.cause] = idle_by_cause.get(op.cause, 0) + op.start - busy_until
        busy_until = op.end if busy_until is None else max(busy_until, op.end)
    comm_ops = [o for o in ops if o.name.startswith("nccl")]
    compute = [(o.start, o.end) for o in ops if o.cat == "kernel" and not o.name.startswith("nccl")]
    pageable_copy = sum(o.end - o.start for o in ops if "Pageable -> Device" in o.name)
    sgemm = sum(o.end - o.start for o in ops if o.cat == "kernel" and "sgemm" in o.name)
    waits = [(o.start, o.arrival) for o in comm_ops if o.arrival is not None and o.arrival > o.start]
    transfers = [(max(o.start, o.arrival or o.start), o.end) for o in comm_ops]
    step_durs = [end - start for _, start, end in m.step_windows]
    return {
        "rank": m.rank,
        "steps": steps,
        "step_time_ns": sum(step_durs) / len(step_durs),
        "compute_ns_per_step": sum(e - s for s, e in _union(compute)) / steps,
        "idle_ns_per_step_by_cause": {k: v / steps for k, v in sorted(idle_by_cause.items())},
        "pageable_h2d_ns_per_step": pageable_copy / steps,
        "sgemm_ns_per_step": sgemm / steps,
        "collective_wait_ns_per_step": sum(e - s for s, e in waits) / steps,
        "collective_wait_exposed_ns_per_step": _subtract_len(waits, compute) / steps,
        "comm_transfer_ns_per_step": sum(e - s for s, e in _union(transfers)) / steps,
        "comm_exposed_ns_per_step": _subtract_len(transfers, compute) / steps,
        "collectives_per_step": len(comm_ops) / steps,
    }


def _problems(scenario: Scenario, per_rank: list[dict[str, Any]], straggler: int | None,
              balanced_step_ns: float | None, min_pct: float,
              tensor_core_step_ns: list[float] | None = None) -> list[dict[str, Any]]:
    """The planted problems with their true cost per step, per affected rank."""
    planted_kinds = {p["kind"] for p in scenario.planted}
    problems: list[dict[str, Any]] = []

    def add(kind: str, rank: int, cost: float, figures: dict[str, Any], **extra: Any) -> None:
        pct = 100.0 * cost / figures["step_time_ns"]
        if cost > 0 and pct >= min_pct:
            problems.append({"kind": kind, "rank": rank, "cost_ns_per_step": int(round(cost)),
                             "cost_pct": round(pct, 3), **extra})

    for f in per_rank:
        idle = f["idle_ns_per_step_by_cause"]
        if "launch_gap" in planted_kinds:
            add("launch_gap", f["rank"], idle.get("launch", 0), f)
        if "host_sync" in planted_kinds:
            add("host_sync", f["rank"], idle.get("host_sync", 0), f)
        if "dataloader_stall" in planted_kinds:
            add("dataloader_stall", f["rank"], idle.get("dataloader", 0), f)
        if "h2d_stall" in planted_kinds:
            add("h2d_stall", f["rank"], f["pageable_h2d_ns_per_step"] + idle.get("h2d_stall", 0), f)
        if "runtime_stall" in planted_kinds:
            add("runtime_stall", f["rank"], idle.get("runtime_stall", 0), f)
        if "comm_exposed" in planted_kinds:
            # A rank that waits for a straggler also transfers late, after its own compute is
            # over; that lateness is the straggler's doing. The exposure fixing the comm itself
            # would remove is what the rank everyone waits for sees (it never waits).
            exposed = f["comm_exposed_ns_per_step"]
            if straggler is not None:
                exposed = min(exposed, per_rank[straggler]["comm_exposed_ns_per_step"])
            add("comm_exposed", f["rank"], exposed, f)
        if "fp32_matmul" in planted_kinds and tensor_core_step_ns is not None:
            # Counterfactual: the same job with every SIMT GEMM on tensor cores (8x faster). The
            # design figure is the sgemm time x 7/8; the run says what of it the step really loses.
            sgemm = f["sgemm_ns_per_step"]
            add("fp32_matmul", f["rank"], f["step_time_ns"] - tensor_core_step_ns[f["rank"]], f,
                sgemm_ns_per_step=int(round(sgemm)),
                design_ns_per_step=int(round(sgemm * (TENSOR_CORE_SPEEDUP - 1) / TENSOR_CORE_SPEEDUP)))
    if "rank_imbalance" in planted_kinds and straggler is not None and balanced_step_ns is not None:
        # Counterfactual: the same job with the straggler's extra work removed. Ranks run in
        # lockstep, so what every other rank loses per step is how much longer its steps are.
        others = [f for f in per_rank if f["rank"] != straggler]
        lost = sum(f["step_time_ns"] - balanced_step_ns for f in others) / max(1, len(others))
        computes = [f["compute_ns_per_step"] for f in per_rank]
        mean = sum(computes) / len(computes)
        add("rank_imbalance", straggler, lost, per_rank[straggler],
            imbalance_pct=round(100.0 * (max(computes) - mean) / mean, 3),
            waiting_ranks=[f["rank"] for f in others])
    return problems


def _fmt_us(ns: int) -> str:
    """Integer ns as Kineto's microseconds with 3 decimals, exactly (no float on the way)."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _event_json(event: dict[str, Any], ts: int, dur: int | None) -> str:
    body = json.dumps(event, separators=(",", ":"))
    timing = f',"ts":{_fmt_us(ts)}' + ("" if dur is None else f',"dur":{_fmt_us(dur)}')
    return body[:-1] + timing + "}"


def _trace_events(m: RankModel) -> list[str]:
    out: list[str] = []
    off = m.clock_offset_ns
    for event, ts, dur in m.events:
        out.append(_event_json(event, ts + off, dur))
    runtime_ts = {e["args"]["correlation"]: ts for e, ts, _ in m.events
                  if e.get("cat") == "cuda_runtime" and "correlation" in e["args"]}
    linked: set[int] = set()
    for op in m.gpu_ops:
        out.append(_event_json({"ph": "X", "cat": op.cat, "name": op.name, "pid": m.device,
                                "tid": op.stream, "args": op.args}, op.start + off, op.end - op.start))
        launch_ts = runtime_ts.get(op.correlation)
        # one flow per launch call (a graph launch's kernels share its id: the flow goes to the first)
        if launch_ts is not None and op.correlation not in linked:
            linked.add(op.correlation)
            out.append(_event_json({"ph": "s", "id": op.correlation, "pid": m.pid, "tid": m.tid,
                                    "cat": "ac2g", "name": "ac2g"}, launch_ts + off, None))
            out.append(_event_json({"ph": "f", "id": op.correlation, "pid": m.device, "tid": op.stream,
                                    "cat": "ac2g", "name": "ac2g", "bp": "e"}, op.start + off, None))
    first = min(ts for _, ts, _ in m.events) + off
    last = max(max(ts + (d or 0) for _, ts, d in m.events), max(o.end for o in m.gpu_ops)) + off
    meta = [
        ({"name": "process_name", "ph": "M", "pid": m.pid, "tid": 0, "args": {"name": "python3"}}, first),
        ({"name": "process_labels", "ph": "M", "pid": m.pid, "tid": 0, "args": {"labels": "CPU"}}, first),
        ({"name": "thread_name", "ph": "M", "pid": m.pid, "tid": m.tid,
          "args": {"name": "thread 1 (python3)"}}, first),
        ({"name": "process_name", "ph": "M", "pid": m.device, "tid": 0, "args": {"name": "python3"}}, first),
        ({"name": "process_labels", "ph": "M", "pid": m.device, "tid": 0,
          "args": {"labels": f"GPU {m.device}"}}, first),
    ] + [({"name": "thread_name", "ph": "M", "pid": m.device, "tid": s, "args": {"name": f"stream {s} "}}, first)
         for s in (COMPUTE_STREAM, NCCL_STREAM)]
    out.extend(_event_json(e, ts, None) for e, ts in meta)
    out.append(_event_json({"ph": "X", "cat": "Trace", "pid": "Spans", "tid": "PyTorch Profiler",
                            "name": "PyTorch Profiler (0)", "args": {"Op count": 0}}, first, last - first))
    out.append(_event_json({"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",
                            "pid": "Traces", "tid": "Trace PyTorch Profiler"}, first, None))
    return out


def _write_trace(path: Path, m: RankModel, compress: bool) -> None:
    ranks = list(range(m.world_size))
    header = {
        "schemaVersion": 1,
        "deviceProperties": [dict(DEVICE_PROPERTIES, id=i) for i in range(min(8, m.world_size))],
        "distributedInfo": {"backend": "nccl", "rank": m.rank, "world_size": m.world_size, "pg_count": 1,
                            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                           "backend_config": "cuda:nccl", "pg_size": m.world_size,
                                           "ranks": ranks}],
                            "nccl_version": "2.21.5"},
        "record_shapes": 1,
        "traceName": path.name,
        "displayTimeUnit": "ms",
    }
    head = json.dumps(header, separators=(",", ":"))[:-1]
    text = head + ',"traceEvents":[\n' + ",\n".join(_trace_events(m)) + "\n]}\n"
    data = text.encode()
    if compress:
        # mtime=0: the same seed gives byte-identical files (stable run ids on re-ingest)
        with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
            gz.write(data)
    else:
        path.write_bytes(data)


def _simulate(sc: Scenario, steps: int, first_step: int, seed: int,
              adjust: Callable[[Workload], Workload] | None = None) -> list[RankModel]:
    """Run the scenario's job; `adjust` rewrites each rank's workload (a counterfactual run)."""
    n = sc.world_size
    models = []
    for rank in range(n):
        wl = replace(sc.workload, **sc.per_rank.get(rank, {}))
        if adjust is not None:
            wl = adjust(wl)
        # ranks start within a few microseconds of each other, as after a barrier
        models.append(RankModel(rank, n, wl, seed, EPOCH_START_NS + rank * 3_217 + seed * 1_000_000))
    # two unrecorded warm-up steps first, so the host is already as far ahead of the GPU as it
    # gets in steady state when recording starts (a profiler schedule's wait/warmup phases)
    _run(models, steps + WARMUP_STEPS, first_step - WARMUP_STEPS, seed)
    for m in models:
        m.keep_only_steps_from(first_step)
    return models


def _on_tensor_cores(wl: Workload) -> Workload:
    """The fix for fp32_matmul (TF32 / bf16 autocast): SIMT GEMMs become tensor-core ones."""
    if "sgemm" not in wl.gemm_kernel:
        return wl
    return replace(wl, gemm_kernel=GEMM_KERNEL, gemm_ns=wl.gemm_ns // TENSOR_CORE_SPEEDUP)


def synthesize(out_dir: str | Path, scenario: str = "control", world_size: int | None = None,
               steps: int = 5, seed: int = 0, compress: bool = False, first_step: int = 10,
               min_pct: float = 0.5) -> dict[str, Any]:
    """Write one trace file per rank of `scenario` into out_dir; return the ground truth.

    Ground truth: {"scenario", "description", "world_size", "steps", "seed", "files",
    "ranks": [per-rank figures], "problems": [{"kind", "rank", "cost_ns_per_step", "cost_pct",
    ...}]} where problems lists each planted problem per affected rank whose true cost is at least
    `min_pct` of that rank's mean step time. A control has no problems.
    """
    table = _scenarios(world_size, first_step, steps)
    if scenario not in table:
        raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(table)}")
    if steps < 1:
        raise ValueError("steps must be at least 1")
    if first_step < WARMUP_STEPS:
        raise ValueError(f"first_step must be at least {WARMUP_STEPS} (steps before it are the warm-up)")
    sc = table[scenario]
    if sc.world_size < 1:
        raise ValueError("world_size must be at least 1")
    models = _simulate(sc, steps, first_step, seed)
    for m in models:
        m.clock_offset_ns = sc.clock_offset_ns.get(m.rank, 0)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for m in models:
        name = f"{scenario}_rank-{m.rank}.pt.trace.json" + (".gz" if compress else "")
        _write_trace(out / name, m, compress)
        files.append(str(out / name))

    per_rank = [_truth_for_rank(m) for m in models]
    straggler = next(iter(sc.per_rank), None) if "rank_imbalance" in {p["kind"] for p in sc.planted} else None
    balanced_step_ns = None
    if straggler is not None:
        balanced = _simulate(replace(sc, per_rank={}), steps, first_step, seed)
        steps_ns = [_truth_for_rank(m)["step_time_ns"] for m in balanced]
        balanced_step_ns = sum(steps_ns) / len(steps_ns)
    tensor_core_step_ns = None
    if "fp32_matmul" in {p["kind"] for p in sc.planted}:
        tensor_core = _simulate(sc, steps, first_step, seed, adjust=_on_tensor_cores)
        tensor_core_step_ns = [_truth_for_rank(m)["step_time_ns"] for m in tensor_core]
    return {
        "scenario": scenario,
        "description": sc.description,
        "world_size": sc.world_size,
        "steps": steps,
        "first_step": first_step,
        "seed": seed,
        "files": files,
        "planted": sc.planted,
        "ranks": per_rank,
        "balanced_step_time_ns": balanced_step_ns,
        "tensor_core_step_time_ns": tensor_core_step_ns,   # per rank, fp32_matmul's counterfactual
        "problems": _problems(sc, per_rank, straggler, balanced_step_ns, min_pct, tensor_core_step_ns),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sample_traces.synthesize", description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", default="control", choices=SCENARIOS)
    parser.add_argument("--out", required=True, help="directory for the rank files")
    parser.add_argument("--world-size", type=int, default=None)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gzip", action="store_true", help="write .json.gz")
    parser.add_argument("--truth", help="also write the ground truth JSON to this file (not inside --out)")
    args = parser.parse_args(argv)
    try:
        truth = synthesize(args.out, args.scenario, world_size=args.world_size, steps=args.steps,
                           seed=args.seed, compress=args.gzip)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(truth, indent=2)
    if args.truth:
        Path(args.truth).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
