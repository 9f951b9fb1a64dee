"""Demo: an I/O-bound dataset (simulated per-sample read latency), 0 workers vs tuned loader.

Before: DataLoader(num_workers=0) - the loop reads every sample itself, serially with compute.
After: tuned_dataloader(...) sized from what the before run measured (wait per step, step time),
as a user would size it from the dataloader_stall finding's metrics.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from accel.data.loader_tuning import suggest_settings, tuned_dataloader
from accel.demos import DemoResult
from accel.profiling import intra_op_threads, median_ms, profile_steps, synchronize, time_steps

DEFAULT_STEPS = 12
BATCH = 16
READ_LATENCY_S = 0.0015          # per sample: 24 ms of waiting per batch of 16
FEATURES, HIDDEN, CLASSES = 3 * 32 * 32, 1024, 10
PROFILED_STEPS = 4


class SlowReadDataset(Dataset):
    """Deterministic samples whose reads take READ_LATENCY_S each (like a network filesystem)."""

    def __init__(self, length: int = 100_000, latency_s: float = READ_LATENCY_S):
        self.length, self.latency_s = length, latency_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.latency_s)
        generator = torch.Generator().manual_seed(index)
        return torch.rand(FEATURES, generator=generator), index % CLASSES


def build_model(device: str, seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(),
                                torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
                                torch.nn.Linear(HIDDEN, CLASSES)).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def make_step(loader: DataLoader, device: str, waits_ms: list[float] | None = None):
    model, optimizer = build_model(device)
    batches = iter(loader)

    def step(_: int) -> None:
        start = time.perf_counter()
        x, y = next(batches)
        if waits_ms is not None:
            waits_ms.append((time.perf_counter() - start) * 1e3)
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return step


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    with intra_op_threads(1, device):
        return _run(out_dir, device, steps)


def _run(out_dir: Path, device: str, steps: int) -> DemoResult:
    dataset = SlowReadDataset()
    serial = DataLoader(dataset, batch_size=BATCH, shuffle=False, num_workers=0)
    waits_ms: list[float] = []
    step_times = time_steps(make_step(serial, device, waits_ms), steps, device)
    before_ms = median_ms(step_times)
    wait_ms = median_ms(waits_ms[-steps:])
    profile_steps(make_step(serial, device), min(PROFILED_STEPS, steps), out_dir / "before.json.gz", device)

    # What the dataloader_stall finding would say about the before run.
    metrics = {"wait_ms_per_step": wait_ms, "step_time_ms": before_ms, "num_workers": 0}
    settings = suggest_settings(metrics)
    tuned = tuned_dataloader(dataset, batch_size=BATCH, shuffle=False, settings=settings)
    # Warm up past worker start-up and until the batches the workers queued ahead
    # (prefetch_factor per worker) are drained: the timed steps see the steady state.
    queued = settings.num_workers * (settings.prefetch_factor or 0)
    after_ms = median_ms(time_steps(make_step(tuned, device), steps, device, warmup=3 * queued + 2))
    profile_steps(make_step(tuned, device), min(PROFILED_STEPS, steps), out_dir / "after.json.gz", device,
                  warmup=3 * queued + 2)
    synchronize(device)

    result = DemoResult(fix="dataloader_tuning", device=device, finding_kind="dataloader_stall",
                        step_ms_before=before_ms, step_ms_after=after_ms,
                        trace_before=out_dir / "before.json.gz", trace_after=out_dir / "after.json.gz",
                        checks={"same_batches": _same_batches(dataset, settings)})
    result.notes.append(f"before: num_workers=0, waiting {wait_ms:.1f} ms/step for data; after: "
                        f"{settings.kwargs()} ({settings.reason})")
    return result


def _same_batches(dataset: Dataset, settings, n_batches: int = 3) -> bool:
    """The tuned loader yields exactly the batches the serial one does (order preserved)."""
    serial = iter(DataLoader(dataset, batch_size=BATCH, num_workers=0))
    tuned = iter(tuned_dataloader(dataset, batch_size=BATCH, settings=settings))
    for _ in range(n_batches):
        (xa, ya), (xb, yb) = next(serial), next(tuned)
        if not (torch.equal(xa, xb) and torch.equal(ya, yb)):
            return False
    return True
