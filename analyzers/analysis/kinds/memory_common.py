"""What the memory analyses share: their findings' cost in bytes and % of device memory, and
bytes in words. Memory findings cost no GPU time (cost_ns 0): they never add to a run's time
costs; their cost is metrics.cost_bytes, and metrics.cost_pct_of_device_memory where the trace
gives the device's size (deviceProperties.totalGlobalMem; CPU memory has none).
"""
from __future__ import annotations

from typing import Any, Mapping

from analyzers.analysis.context import jsonable
from analyzers.common.contract import clip_strings
from analyzers.common.model import Finding
from analyzers.common.safe_text import SUMMARY_LIMIT, clip
from analyzers.common.units import human_bytes

MEMORY_METRIC_KEYS = frozenset({"cost_bytes", "cost_pct_of_device_memory", "device", "device_total_bytes",
                                "peak_allocated_bytes", "peak_reserved_bytes"})


def memory_severity(pct: float | None, thresholds: Mapping[str, float]) -> str:
    if pct is None:
        return "low"
    if pct >= thresholds["MEMORY_SEVERITY_HIGH_PCT"]:
        return "high"
    if pct >= thresholds["MEMORY_SEVERITY_MEDIUM_PCT"]:
        return "medium"
    return "low"


def memory_finding(ctx: Any, kind: str, *, rank: int | None, cost_bytes: float, device: str | None,
                   device_total_bytes: int | None, peak_allocated_bytes: int | None, summary: str,
                   metrics: Mapping[str, Any], step: int | None = None, t_start_ns: int | None = None,
                   t_end_ns: int | None = None) -> Finding:
    """A Finding costed in bytes: cost_pct_of_device_memory when the device's size is known; its
    severity from that share (else from the share of the peak allocated)."""
    pct = 100.0 * cost_bytes / device_total_bytes if device_total_bytes else None
    of_peak = 100.0 * cost_bytes / peak_allocated_bytes if peak_allocated_bytes else None
    full = {**metrics, "cost_bytes": int(round(cost_bytes)),
            "cost_pct_of_device_memory": None if pct is None else round(pct, 3),
            "device": device, "device_total_bytes": device_total_bytes,
            "peak_allocated_bytes": peak_allocated_bytes}
    return Finding(finding_id=f"{kind}:r{rank}", kind=kind,
                   severity=memory_severity(pct if pct is not None else of_peak, ctx.thresholds),
                   rank=rank, step=step, stream=None, t_start_ns=t_start_ns, t_end_ns=t_end_ns, cost_ns=0,
                   cost_pct=0.0, summary=clip(summary, SUMMARY_LIMIT), metrics=clip_strings(jsonable(full)))


def of_device(cost_bytes: float, device_total_bytes: int | None) -> str:
    """" (12.5% of the device's 80.00 GiB)" or ""."""
    if not device_total_bytes:
        return ""
    return f" ({100.0 * cost_bytes / device_total_bytes:.1f}% of the device's {human_bytes(device_total_bytes)})"


def memory_evidence():
    """The evidence chart of a memory finding: the step breakdown has no memory column, so the
    chart shows step time and the words say where the memory figures are (the Memory page)."""
    from analyzers.common.model import EvidenceSeries

    return EvidenceSeries("step_ms", "Step time (the memory figures are on the Memory page)",
                          "Memory findings cost bytes, not time: see the Memory page for allocated and reserved "
                          "over time.")
