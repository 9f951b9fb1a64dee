"""Derive DDP bucket settings from a comm finding's metrics, and wrap a model with them.

    from accel.comm import wrap_ddp
    ddp = wrap_ddp(model, finding_metrics, device_ids=[local_rank])

DDP groups gradients into buckets and all-reduces one bucket as soon as all its gradients are
ready, overlapping communication with the rest of backward. The bucket size decides the trade:
- many small messages: each all-reduce pays a fixed latency (tens of µs on NCCL, more on gloo
  or across nodes); merging them into a few larger buckets removes most of that latency;
- one huge message at the end of backward: nothing overlaps; smaller buckets let the first
  all-reduce start while backward still runs.
gradient_as_bucket_view=True makes .grad a view into the bucket: one copy less per step and
one gradient-sized buffer less in memory. static_graph=True lets DDP skip per-step bookkeeping
when the same parameters get gradients every step; it is only safe when that is known.

Metric keys read (all optional; the analyzers' names are accepted under these aliases):
  bytes per step: bytes_per_step (the analyzers' key) | total_bytes_per_step | total_bytes
  message count per step: messages_per_step | collectives_per_step | count_per_step | count
  typical message: mean_msg_bytes | mean_message_bytes | mean_bytes | avg_bytes | message_bytes
  overlap: comm_overlap_pct | overlap_pct
  static graph (no analysis measures it: pass it when you know): static_graph | same_collectives_every_step
The cut-offs between "merge", "split" and "keep" are thresholds (analyzers/common/thresholds.py):
COMM_SMALL_MESSAGE_BYTES, COMM_SERIALIZED_OVERLAP_PCT, DDP_SPLIT_MAX_COLLECTIVES_PER_STEP and
DDP_SPLIT_MIN_BYTES_PER_STEP; pass `thresholds` to override them by name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from analyzers.common import thresholds as th

MIB = 1024 * 1024
DDP_DEFAULT_BUCKET_CAP_MB = 25       # torch's DistributedDataParallel default
MERGED_BUCKETS_PER_STEP = 4          # few enough to amortise latency, enough to keep overlap
SPLIT_BUCKETS_PER_STEP = 8           # for one big late all-reduce: start communicating early
MAX_BUCKET_CAP_MB = 256
MIN_SPLIT_BUCKET_CAP_MB = 5          # split buckets stay large enough not to be latency-bound


@dataclass
class DDPSettings:
    """Keyword arguments for DistributedDataParallel, with the reason for each choice."""
    bucket_cap_mb: float = DDP_DEFAULT_BUCKET_CAP_MB
    gradient_as_bucket_view: bool = True
    static_graph: bool = False
    reasons: list[str] = field(default_factory=list)

    def ddp_kwargs(self) -> dict[str, Any]:
        return {"bucket_cap_mb": self.bucket_cap_mb,
                "gradient_as_bucket_view": self.gradient_as_bucket_view,
                "static_graph": self.static_graph}


def _first_number(metrics: Mapping[str, Any], *keys: str) -> float | None:
    for key in keys:
        value = metrics.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def derive_ddp_settings(metrics: Mapping[str, Any] | None = None,
                        thresholds: Mapping[str, float] | None = None) -> DDPSettings:
    """Pick bucket_cap_mb, gradient_as_bucket_view and static_graph from a finding's metrics.

    Unknown or missing metrics leave DDP's default bucket size; every choice says why.
    thresholds: overrides of analyzers.common.thresholds by name (the analysis's own, typically).
    """
    metrics = metrics or {}
    t = th.resolve(thresholds)
    settings = DDPSettings()
    count = _first_number(metrics, "messages_per_step", "collectives_per_step", "count_per_step", "count")
    total = _first_number(metrics, "total_bytes_per_step", "bytes_per_step", "total_bytes")
    mean = _first_number(metrics, "mean_msg_bytes", "mean_message_bytes", "mean_bytes", "avg_bytes", "message_bytes")
    overlap = _first_number(metrics, "comm_overlap_pct", "overlap_pct")
    if total is None and mean is not None and count is not None:
        total = mean * count
    if mean is None and total is not None and count:
        mean = total / count

    if total is None or total <= 0 or count is None or count < 1:
        settings.reasons.append(f"message sizes unknown: keeping DDP's default bucket_cap_mb={DDP_DEFAULT_BUCKET_CAP_MB}")
    elif mean is not None and mean < t["COMM_SMALL_MESSAGE_BYTES"] and count >= MERGED_BUCKETS_PER_STEP:
        total_mb = total / MIB
        cap = min(MAX_BUCKET_CAP_MB, max(math.ceil(total_mb / MERGED_BUCKETS_PER_STEP), 1))
        settings.bucket_cap_mb = cap
        settings.reasons.append(
            f"{count:.0f} all-reduces per step of {mean / MIB:.2f} MiB on average are latency-bound: "
            f"bucket_cap_mb={cap} merges {total_mb:.1f} MiB into about {math.ceil(total_mb / cap)} buckets")
    elif (count <= t["DDP_SPLIT_MAX_COLLECTIVES_PER_STEP"] and total >= t["DDP_SPLIT_MIN_BYTES_PER_STEP"]
          and (overlap is None or overlap < t["COMM_SERIALIZED_OVERLAP_PCT"])):
        total_mb = total / MIB
        cap = max(MIN_SPLIT_BUCKET_CAP_MB, math.ceil(total_mb / SPLIT_BUCKETS_PER_STEP))
        settings.bucket_cap_mb = cap
        settings.reasons.append(
            f"{count:.0f} all-reduce(s) of {total_mb:.0f} MiB per step barely overlap backward: "
            f"bucket_cap_mb={cap} starts communicating while backward still runs")
    else:
        settings.reasons.append(f"message sizes look reasonable: keeping bucket_cap_mb={DDP_DEFAULT_BUCKET_CAP_MB}")

    settings.reasons.append("gradient_as_bucket_view=True: gradients live in the buckets, one copy and one buffer less")
    if metrics.get("static_graph") is True or metrics.get("same_collectives_every_step") is True:
        settings.static_graph = True
        settings.reasons.append("static_graph=True: the same collectives run every step")
    else:
        settings.reasons.append("static_graph=False: not known that the same parameters get gradients every step "
                                "(set it True yourself when they do)")
    return settings


def wrap_ddp(model: torch.nn.Module, metrics: Mapping[str, Any] | None = None, **ddp_kwargs: Any
             ) -> torch.nn.parallel.DistributedDataParallel:
    """DistributedDataParallel(model) with settings derived from `metrics`; ddp_kwargs win."""
    settings = derive_ddp_settings(metrics)
    return torch.nn.parallel.DistributedDataParallel(model, **{**settings.ddp_kwargs(), **ddp_kwargs})
