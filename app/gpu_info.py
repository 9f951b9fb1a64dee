"""This machine's NVIDIA GPUs through NVML (nvidia-ml-py); a plain reason when there are none."""
from __future__ import annotations

import warnings
from typing import Any


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _maybe(call, *args, default=None):
    """NVML calls a driver or GPU may not support: the value, or default."""
    try:
        return call(*args)
    except Exception:
        return default


def read_gpus() -> dict[str, Any]:
    """{"ok": bool, "reason": str, "driver": str, "gpus": [...], "topology": [[...]]}.

    Each GPU: index, name, memory_total_gib, memory_used_gib, sm_clock_mhz, max_sm_clock_mhz,
    mem_clock_mhz, pcie_gen, pcie_width, nvlinks_active. topology[i][j] is NVML's common
    ancestor level between GPU i and j (NVLink shown when a link joins them).
    """
    try:
        with warnings.catch_warnings():  # a stray `pynvml` wrapper package warns on import; nvidia-ml-py is what runs
            warnings.simplefilter("ignore", FutureWarning)
            import pynvml
    except ImportError:
        return {"ok": False, "reason": "nvidia-ml-py (pynvml) is not installed.", "gpus": []}
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"ok": False, "reason": f"No NVIDIA GPU here (NVML could not start: {exc}).", "gpus": []}
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = []
        for index, handle in enumerate(handles):
            memory = _maybe(pynvml.nvmlDeviceGetMemoryInfo, handle)
            nvlinks = 0
            for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
                if _maybe(pynvml.nvmlDeviceGetNvLinkState, handle, link, default=0) == 1:
                    nvlinks += 1
            gpus.append({
                "index": index,
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "memory_total_gib": memory.total / 2**30 if memory else None,
                "memory_used_gib": memory.used / 2**30 if memory else None,
                "sm_clock_mhz": _maybe(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
                "max_sm_clock_mhz": _maybe(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
                "mem_clock_mhz": _maybe(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM),
                "pcie_gen": _maybe(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
                "pcie_width": _maybe(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
                "nvlinks_active": nvlinks,
            })
        levels = {0: "same board", 10: "single PCIe switch", 20: "multiple PCIe switches",
                  30: "PCIe host bridge", 40: "same CPU (NUMA node)", 50: "across CPUs (SMP)"}
        topology = [[("self" if i == j else levels.get(
            _maybe(pynvml.nvmlDeviceGetTopologyCommonAncestor, a, b, default=-1), "unknown"))
            for j, b in enumerate(handles)] for i, a in enumerate(handles)]
        driver = _text(_maybe(pynvml.nvmlSystemGetDriverVersion, default="unknown"))
        return {"ok": bool(gpus), "reason": "" if gpus else "NVML started but reports no GPU.",
                "driver": driver, "gpus": gpus, "topology": topology}
    finally:
        _maybe(pynvml.nvmlShutdown)
