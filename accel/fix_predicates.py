"""What the fixes in accel/registry.py check: reading a finding's metrics, and the predicates and
bonuses that decide whether a fix suits a finding and how well.

A predicate takes a finding's `metrics` and the thresholds (analyzers/common/thresholds.py) and
returns the plain reason the fix cannot help, or None; a bonus returns extra fit. Each reads only
the keys its Fix lists in `reads` (described in registry.READ_METRICS), through `number`,
`boolean`, `choice` and `records`, which tell a missing metric (None) from an unusable one
(MetricUnusable). Imports no torch.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

Metrics = Mapping[str, Any]
Thresholds = Mapping[str, float]
Predicate = Callable[[Metrics, Thresholds], str | None]
Bonus = Callable[[Metrics, Thresholds], float]


def num(metrics: Metrics | None, *keys: str) -> float | None:
    """The first of `keys` present in metrics as a real number (bools count as 0/1), else None.

    Lenient, for a fix module's optional inputs; predicates read through `number` and friends,
    which tell a missing metric from an unusable one."""
    if not isinstance(metrics, Mapping):
        return None
    for key in keys:
        value = metrics.get(key)
        if isinstance(value, bool):
            return float(value)
        if isinstance(value, (int, float)) and value == value:  # value == value drops NaN
            return float(value)
    return None


# --- reading metrics in predicates ----------------------------------------------------------------

class MetricUnusable(ValueError):
    """A metric a predicate reads is present but holds what it cannot use (text for a number)."""

    def __init__(self, key: str, value: Any, expected: str):
        super().__init__(f"{key} is {value!r}, not {expected}")
        self.key = key


def measured(value: Any) -> bool:
    """Whether a metric's value says something: not None, NaN, or an empty list or mapping."""
    if value is None or (isinstance(value, float) and value != value):
        return False
    return not (isinstance(value, (list, tuple, dict)) and not value)


def number(m: Metrics, key: str) -> float | None:
    """m[key] as a float; None when not measured; MetricUnusable when it is not a number."""
    value = m.get(key)
    if not measured(value):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MetricUnusable(key, value, "a number")
    return float(value)


def boolean(m: Metrics, key: str) -> bool | None:
    """m[key] as a bool; None when not measured; MetricUnusable when it is not a bool."""
    value = m.get(key)
    if not measured(value):
        return None
    if not isinstance(value, bool):
        raise MetricUnusable(key, value, "true or false")
    return value


def choice(m: Metrics, key: str, allowed: tuple[str, ...]) -> str | None:
    """m[key] when it is one of `allowed`; None when not measured; MetricUnusable otherwise."""
    value = m.get(key)
    if not measured(value):
        return None
    if value not in allowed:
        raise MetricUnusable(key, value, " or ".join(repr(a) for a in allowed))
    return value


def records(m: Metrics, key: str) -> list[Mapping[str, Any]]:
    """The mappings in the list m[key] ([] when not measured); MetricUnusable when not a list."""
    value = m.get(key)
    if not measured(value):
        return []
    if not isinstance(value, (list, tuple)):
        raise MetricUnusable(key, value, "a list")
    return [item for item in value if isinstance(item, Mapping)]


# --- predicates: (metrics, thresholds) -> the reason the fix cannot help, or None -----------------
# Each reads only keys its Fix lists in `reads` (described in READ_METRICS), all of them before it
# decides (so an unusable one is reported, not skipped), and thresholds by name.

def graph_capturable(m: Metrics, t: Thresholds) -> str | None:
    # A captured step cannot sync; one or two syncs per step (the loss read after the step) can
    # stay outside the graph.
    syncs = number(m, "syncs_per_step")
    if syncs is not None and syncs > t["CUDA_GRAPH_MAX_SYNCS_PER_STEP"]:
        return f"{syncs:g} host syncs per step; a captured step cannot sync"
    return None


def kernel_share_at_least(key: str, cutoff: str, which: str) -> Predicate:
    """A predicate ruling a fix out when under `cutoff` of the step's kernels are `which`."""
    def predicate(m: Metrics, t: Thresholds) -> str | None:
        share = number(m, key)
        if share is not None and share < t[cutoff]:
            return f"only {share:.0%} of the step's kernels {which}"
        return None
    return predicate


elementwise_share_enough = kernel_share_at_least(
    "elementwise_kernel_share", "ELEMENTWISE_FUSION_MIN_KERNEL_SHARE", "are small elementwise ones")


def gelu_chain_to_fuse(m: Metrics, t: Thresholds) -> str | None:
    # the Triton kernel replaces exactly a bias add + GELU + dropout chain: without one in the
    # trace it has nothing to take over, however many other elementwise kernels run
    chains, share_reason = number(m, "gelu_chains_per_step"), elementwise_share_enough(m, t)
    if chains == 0:
        return ("the trace runs no GELU kernel beside a bias-add or dropout kernel: this kernel fuses "
                "exactly that chain; torch.compile fuses whatever elementwise chains the step has")
    return share_reason


# aten ops whose synchronisation is a host<->device copy (the prefetcher's business); syncs under
# any other op read a GPU value on the host (.item(), nonzero, printing) or synchronise explicitly
_COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::pin_memory", "aten::_pin_memory"})


def copies_exposed(m: Metrics, t: Thresholds) -> str | None:
    pageable, overlap = number(m, "pageable_share"), number(m, "h2d_overlap_pct")
    callers = [c for c in records(m, "top_callers") if isinstance(c.get("op"), str)]
    if pageable == 0 and overlap is not None and overlap >= t["H2D_HIDDEN_OVERLAP_PCT"]:
        return f"copies are already pinned and {overlap:.0f}% overlapped with compute"
    if callers:   # a host_sync finding: which aten ops the blocking calls came from
        blocked = [(c["op"], num(c, "blocked_ms_per_step") or 0.0) for c in callers]
        total = sum(ms for _, ms in blocked)
        from_copies = sum(ms for op, ms in blocked if op in _COPY_OPS)
        copy_share = from_copies / total if total > 0 else 0.0
        if copy_share < t["PREFETCH_MIN_COPY_SYNC_SHARE"] and blocked[0][0] not in _COPY_OPS:
            top_op, top_call = callers[0]["op"], callers[0].get("call", "a sync")
            return (f"the syncs are not input copies: most blocked time is {top_call} under {top_op} (a GPU "
                    "value read on the host: .item(), .tolist(), nonzero, a printed loss, or an explicit "
                    "synchronize); prefetching inputs does not remove it. Keep such values on the GPU and "
                    "read them every N steps")
    return None


IMBALANCE_SOURCES = ("input", "compute", "stall", "periodic")   # rank_imbalance's imbalance_source values


def imbalance_from_data(m: Metrics, t: Thresholds) -> str | None:
    source = choice(m, "imbalance_source", IMBALANCE_SOURCES)
    compared, differs = boolean(m, "shapes_compared"), boolean(m, "shape_differs")
    if source == "periodic":
        return ("the lateness repeats every few steps on one rank (periodic extra work there: an evaluation, "
                "a checkpoint, logging), not in the data: spread that work over the ranks or make it "
                "asynchronous (torch.distributed.checkpoint.async_save)")
    if differs is True:
        return None
    if source == "stall":
        return ("the straggler is late without doing more work: a stall of its own (a slow fetch, a host "
                "sync, a throttled or shared device), which balancing the samples cannot even out")
    if source == "compute" and compared is True and differs is False:
        return ("every rank's ops see the same input shapes: the straggler does more with the same data "
                "(data-dependent compute) or is a slower device; balancing lengths evens out input sizes only")
    return None


def bandwidth_bound(m: Metrics, t: Thresholds) -> str | None:
    size = number(m, "mean_msg_bytes")
    if size is not None and size < t["COMM_SMALL_MESSAGE_BYTES"]:
        return (f"the collectives average {size / 1024:,.0f} KiB (under "
                f"{t['COMM_SMALL_MESSAGE_BYTES'] / 2**20:g} MiB): small messages are bound by latency, not "
                "bytes, so sending fewer bytes does not make them faster; merge them into fewer, larger "
                "buckets (ddp_bucket_tuning) first")
    return None


def slow_link(m: Metrics, t: Thresholds) -> str | None:
    busbw = number(m, "busbw_gbps")
    small = bandwidth_bound(m, t)   # compression of any kind cannot speed up latency-bound messages
    if small:
        return small
    if busbw is not None and busbw >= t["LINK_FAST_GBPS"]:
        return (f"the link already reaches {busbw:,.0f} GB/s bus bandwidth (NVLink class, from "
                f"{t['LINK_FAST_GBPS']:g} GB/s): PowerSGD's extra compute and collectives cost more than "
                "the bytes it saves")
    return None


_ONE_NODE = ("all ranks are on one node: NCCL's ring/tree is already topology-aware inside a node, "
             "and a hierarchical all-reduce only adds steps")


def multi_node(m: Metrics, t: Thresholds) -> str | None:
    hosts = number(m, "hosts")
    if hosts == 1:
        return ("every rank's trace was recorded on one host (hosts = 1): there is no slow link between "
                "nodes for a hierarchical all-reduce to spare")
    nodes, world, local = number(m, "nodes"), number(m, "world_size"), number(m, "local_world_size")
    if hosts is not None and hosts > 1:
        return None
    if nodes is not None:
        return None if nodes > 1 else _ONE_NODE
    if world is not None and local is not None and world <= local:
        return _ONE_NODE
    return None


def accumulates_without_no_sync(m: Metrics, t: Thresholds) -> str | None:
    rounds, steps = number(m, "allreduce_rounds_per_step"), number(m, "optimizer_steps_per_step")
    if rounds is None or steps is None:
        return None
    if steps == 0:
        return ("no optimizer step was recorded in the steps (optimizer_steps_per_step = 0): gradient "
                "accumulation cannot be told from the trace")
    if rounds <= steps:
        return (f"gradients are all-reduced once per optimizer step (allreduce_rounds_per_step = {rounds:g}, "
                f"optimizer_steps_per_step = {steps:g}): there is no accumulation for no_sync to merge")
    return None


def accumulation_bonus(m: Metrics, t: Thresholds) -> float:
    # more all-reduce rounds than optimizer steps: no_sync removes all but one of them, ahead of any tuning
    rounds, steps = num(m, "allreduce_rounds_per_step"), num(m, "optimizer_steps_per_step")
    return 0.5 if rounds is not None and steps and rounds > steps else 0.0


def allocator_bound(m: Metrics, t: Thresholds) -> str | None:
    share = number(m, "allocator_share")
    if share is not None and share < t["ALLOCATOR_MIN_STALL_SHARE"]:
        return (f"the stalled calls are not memory management (only {share:.0%} of the stalled "
                "time; the rest is most likely CUDA start-up or lazy module loading): profile after warm-up "
                "instead")
    return None


def tf32_fits(m: Metrics, t: Thresholds) -> str | None:
    capable, in_use = boolean(m, "tf32_capable"), boolean(m, "tf32_in_use")
    if capable is False:
        return ("TF32 needs an Ampere or newer GPU (this trace's GPU predates it): use mixed "
                "precision (amp_autocast) instead")
    if in_use is True:
        return ("TF32 is already on in this trace (TF32 tensor-core kernels run beside these FP32 ones): "
                "what is left needs bf16 autocast or shapes cuBLAS can tile (multiples of 8)")
    return None


def share_bonus(key: str, weight: float) -> Bonus:
    """A bonus of `weight` times the share (0..1) in metrics[key]."""
    def bonus(m: Metrics, t: Thresholds) -> float:
        share = num(m, key)
        return 0.0 if share is None else weight * max(0.0, min(1.0, share))
    return bonus


def slow_link_bonus(m: Metrics, t: Thresholds) -> float:
    # up to 0.3 on a slow link (the less bandwidth, the more), none from LINK_SLOW_GBPS on
    busbw = num(m, "busbw_gbps")
    return 0.0 if busbw is None else 0.3 * max(0.0, 1.0 - busbw / t["LINK_SLOW_GBPS"])
