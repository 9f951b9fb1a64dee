"""A GPU-shaped trace with [memory] events and an allocator snapshot, both written by hand."""
from __future__ import annotations

import json
from pathlib import Path


def _snapshot(oom: bool = False, expandable: bool = False) -> dict:
    """A snapshot like torch.cuda.memory._snapshot(): two segments, their blocks back to back."""
    mib = 1 << 20
    layout = [[(40 * mib, "active_allocated"), (24 * mib, "inactive"), (16 * mib, "active_allocated"),
               (48 * mib, "inactive")],
              [(2 * mib, "active_allocated"), (6 * mib, "inactive"), (1 * mib, "active_pending_free"),
               (7 * mib, "inactive")]]
    segments, address = [], 1 << 40
    for index, blocks in enumerate(layout):
        total = sum(size for size, _ in blocks)
        seg = {"device": 0, "address": address, "total_size": total, "stream": 0,
               "segment_type": "large" if index == 0 else "small", "is_expandable": expandable,
               "allocated_size": sum(s for s, st in blocks if st == "active_allocated"), "blocks": []}
        offset = 0
        for size, state in blocks:
            seg["blocks"].append({"address": address + offset, "size": size, "requested_size": size, "state": state,
                                  "frames": [{"name": f"layer{index}", "filename": "train.py", "line": 10 + index}]})
            offset += size
        segments.append(seg)
        address += total
    traces = [[{"action": "alloc", "addr": 1 << 40, "size": 40 * mib, "stream": 0, "frames": []}]]
    if oom:
        traces[0].append({"action": "oom", "addr": 0, "size": 96 * mib, "device_free": 5 * mib, "stream": 0,
                          "frames": [{"name": "forward", "filename": "model.py", "line": 42}]})
    return {"segments": segments, "device_traces": traces}


def _gpu_trace(path: Path, steps: int = 6, churn: bool = False) -> Path:
    """[memory] events of a CUDA device (Device Type 1) as Kineto writes them, with a 80 GiB GPU:
    each step allocates 4 GiB of activations then frees them; with churn the allocator reserves
    and releases a 1 GiB segment inside every step."""
    gib = 1 << 30
    events, ts, allocated, reserved = [], 1_000_000.0, 10 * gib, 16 * gib
    for step in range(steps):
        start = ts
        for i in range(4):
            ts += 100
            allocated += gib
            if churn and i == 0:
                reserved += gib
            events.append(_mem(ts, 0x7000 + i, gib, allocated, reserved))
        for i in range(4):
            ts += 100
            allocated -= gib
            if churn and i == 3:
                reserved -= gib
            events.append(_mem(ts, 0x7000 + i, -gib, allocated, reserved))
        ts += 100
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": start, "dur": ts - start})
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100",
                                                                          "totalGlobalMem": 80 * gib}],
                                "traceEvents": events}))
    return path


def _mem(ts, addr, nbytes, allocated, reserved):
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": {"Total Reserved": reserved, "Total Allocated": allocated, "Bytes": nbytes, "Device Id": 0,
                     "Device Type": 1, "Addr": addr}}
