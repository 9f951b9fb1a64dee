"""app.gpu_info against a stand-in NVML (no GPU on the test machine) and against a failing one."""
from __future__ import annotations

import sys
import types

from app.gpu_info import read_gpus


def _fake_nvml(count: int = 2, fail_init: bool = False) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")
    nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM, nvml.NVML_NVLINK_MAX_LINKS = 1, 2, 4
    calls = {"shutdown": 0}

    def init():
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def shutdown():
        calls["shutdown"] += 1

    def nvlink_state(handle, link):
        if link >= 2:
            raise RuntimeError("not supported")   # links a GPU lacks must not break the page
        return 1

    nvml.nvmlInit, nvml.nvmlShutdown, nvml.calls = init, shutdown, calls
    nvml.nvmlDeviceGetCount = lambda: count
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=80 * 2**30, used=2**30)
    nvml.nvmlDeviceGetClockInfo = lambda h, kind: 1980 if kind == 1 else 2619
    nvml.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    nvml.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 5
    nvml.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16
    nvml.nvmlDeviceGetNvLinkState = nvlink_state
    nvml.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: 10
    nvml.nvmlSystemGetDriverVersion = lambda: "570.86"
    return nvml


def test_reads_gpus_memory_clocks_links_and_topology(monkeypatch):
    fake = _fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    info = read_gpus()
    assert info["ok"] and info["driver"] == "570.86"
    assert info["gpus"][1] == {"index": 1, "name": "NVIDIA H100 80GB HBM3", "memory_total_gib": 80.0,
                               "memory_used_gib": 1.0, "sm_clock_mhz": 1980, "max_sm_clock_mhz": 1980,
                               "mem_clock_mhz": 2619, "pcie_gen": 5, "pcie_width": 16, "nvlinks_active": 2}
    assert info["topology"] == [["self", "single PCIe switch"], ["single PCIe switch", "self"]]
    assert fake.calls["shutdown"] == 1


def test_no_driver_is_a_plain_no_gpu_here(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(fail_init=True))
    info = read_gpus()
    assert not info["ok"] and info["gpus"] == []
    assert info["reason"].startswith("No NVIDIA GPU here") and "NVML Shared Library Not Found" in info["reason"]
