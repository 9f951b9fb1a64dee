"""Small Kineto trace files written by hand, with known steps, kernels and launches."""
from __future__ import annotations

import json
from pathlib import Path


T0_US = 1_700_000_000_000_000  # epoch-scale microseconds, as Kineto writes them


def _trace(rank: int, world_size: int, kernel_us: float, gap_us: float, steps: int = 3) -> dict:
    """A small new-schema trace: per step a ProfilerStep, launches and kernels with fixed gaps."""
    events, corr, t = [], 1000 * (rank + 1), float(T0_US)
    for step in range(steps):
        step_start = t
        for _ in range(4):
            corr += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10,
                           "ts": t, "dur": 5.0, "args": {"correlation": corr, "External id": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": "void gemm_kernel<float>()", "pid": 0, "tid": 7,
                           "ts": t + 10.0, "dur": kernel_us,
                           "args": {"device": 0, "stream": 7, "correlation": corr, "External id": corr}})
            t += 10.0 + kernel_us + gap_us
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 10, "tid": 10,
                       "ts": step_start, "dur": t - step_start, "args": {}})
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size},
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}], "traceEvents": events}


def _rank_trace(rank: int, world: int) -> bytes:
    """A minimal valid rank file: one step, one kernel launched from the host."""
    base = 1_000_000
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1,
         "ts": base, "dur": 1000},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": base + 10, "dur": 5, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": base + 20, "dur": 400 + 100 * rank,
         "args": {"device": 0, "stream": 7, "correlation": 7}},
    ]
    return json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": world},
                       "traceEvents": events}).encode()


BASE_US = 1_000_000.0


class Trace:
    """A one-rank Kineto trace: steps, kernels/copies with their launch calls, collectives."""

    def __init__(self, rank: int = 0, world: int = 1):
        self.rank, self.world = rank, world
        self.events: list[dict] = []
        self.correlation = 100

    def step(self, n: int, ts: float, dur: float) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1,
                            "ts": BASE_US + ts, "dur": dur})

    def gpu(self, name: str, ts: float, dur: float, cat: str = "kernel", stream: int = 7, launch_ts: float | None = None,
            launch: str = "cudaLaunchKernel", **args) -> None:
        self.correlation += 1
        start = ts - 5 if launch_ts is None else launch_ts
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": launch, "pid": 1, "tid": 1,
                            "ts": BASE_US + start, "dur": 2, "args": {"correlation": self.correlation}})
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": BASE_US + ts,
                            "dur": dur, "args": {"device": 0, "stream": stream, "correlation": self.correlation,
                                                 **args}})

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
            "distributedInfo": {"backend": "nccl", "rank": self.rank, "world_size": self.world},
            "traceEvents": self.events}))
        return path
