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

# --- launch gaps / host syncs (analyses/launch_gap.py, host_sync.py) --------------------------
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

# --- host-to-device copies (analyses/h2d_stall.py) --------------------------------------------
# Practical host-to-device bandwidth of PCIe Gen4 x16: 32 GB/s raw per direction, ~25 GB/s
# measured with pinned memory (NVIDIA bandwidthTest / nvbandwidth on A100 PCIe hosts).
PCIE_PRACTICAL_GBPS = 25.0
# A pageable or synchronous copy achieving below this share of the link is flagged as slow.
SLOW_COPY_FRACTION = 0.5

# --- data loading (analyses/dataloader_stall.py) ----------------------------------------------
# The data loader must hold the training loop for at least this share of the step (the task's
# "a data loader under 5% of the step is noise").
DATALOADER_MIN_PCT = 5.0

# --- distributed (analyses/rank_imbalance.py, comm_exposed.py) ---------------------------------
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

DEFAULTS: dict[str, float] = {
    name: value for name, value in globals().items()
    if name.isupper() and isinstance(value, (int, float)) and not isinstance(value, bool)
}


def resolve(overrides: Mapping[str, Any] | None = None,
            extra_defaults: Mapping[str, float] | None = None) -> dict[str, float]:
    """The defaults with `overrides` applied; raises ValueError naming an unknown or non-numeric key.

    extra_defaults: thresholds an analysis module declares itself (its DEFAULT_THRESHOLDS); ours
    win where both name the same threshold.
    """
    values = {**dict(extra_defaults or {}), **DEFAULTS}
    for name, value in (overrides or {}).items():
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
