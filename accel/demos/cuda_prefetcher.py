"""Demo: image batches copied to the GPU synchronously from pageable memory (before) vs
CudaPrefetcher over pinned batches (after: the copy of batch i+1 runs on a side stream while
batch i computes).

The loader hands out ready batches from a small pool (batch_size=None, no workers), so the step
holds the H2D copy and the compute and nothing of the loader's own work: the figure is what the
copy costs and what the prefetcher hides of it. (A loader that cannot keep up, e.g. one pin
thread copying 38 MB batches, is dataloader_tuning's finding, not this one's.) The pinned pool
stands for a DataLoader with pin_memory=True whose pin thread keeps up.
Also times the compute alone (batch already on the GPU), so the share of the exposed H2D time
the prefetcher hid can be stated: (before - after) / (before - compute_only).
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from accel.data.prefetcher import CudaPrefetcher
from accel.demos import DemoResult, skip
from accel.profiling import median_ms, profile_steps, time_steps

DEFAULT_STEPS = 30
PROFILED_STEPS = 8
BATCH, SHAPE = 64, (3, 224, 224)        # 38.5 MB of float32 per batch
POOL = 4                                # distinct batches, reused round-robin


class PooledBatches(Dataset):
    """Whole batches (images, labels) from a pool: loading costs nothing, copying is all."""

    def __init__(self, pin: bool, length: int = 100_000):
        generator = torch.Generator().manual_seed(0)
        self.length = length
        self.images = [torch.randn(BATCH, *SHAPE, generator=generator) for _ in range(POOL)]
        self.labels = [torch.randint(0, 1000, (BATCH,), generator=generator) for _ in range(POOL)]
        if pin:
            self.images = [t.pin_memory() for t in self.images]
            self.labels = [t.pin_memory() for t in self.labels]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.images[index % POOL], self.labels[index % POOL]


def _model(device: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 7, stride=2, padding=3), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 128, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(128, 256, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(256, 1000)).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def _train_step(model, optimizer, x, y) -> None:
    optimizer.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()


def _loader(pin: bool) -> DataLoader:
    return DataLoader(PooledBatches(pin), batch_size=None, num_workers=0)


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    if device != "cuda" or not torch.cuda.is_available():
        return skip("cuda_prefetcher", device,
                    "no H2D copies to hide without a CUDA GPU (on CPU the prefetcher is a "
                    "pass-through)", "h2d_stall")
    model, opt = _model(device)

    def plain_steps():
        batches = iter(_loader(pin=False))

        def step(_: int) -> None:
            x, y = next(batches)
            _train_step(model, opt, x.to(device), y.to(device))   # pageable: synchronous copy
        return step

    def prefetched_steps():
        batches = iter(CudaPrefetcher(_loader(pin=True), device=device))

        def step(_: int) -> None:
            x, y = next(batches)
            _train_step(model, opt, x, y)
        return step

    resident_x = torch.randn(BATCH, *SHAPE, device=device)
    resident_y = torch.randint(0, 1000, (BATCH,), device=device)
    compute_ms = median_ms(time_steps(lambda _: _train_step(model, opt, resident_x, resident_y),
                                      steps, device))
    before_ms = median_ms(time_steps(plain_steps(), steps, device, warmup=5))
    profile_steps(plain_steps(), PROFILED_STEPS, out_dir / "before.json.gz", device, warmup=5)
    after_ms = median_ms(time_steps(prefetched_steps(), steps, device, warmup=5))
    profile_steps(prefetched_steps(), PROFILED_STEPS, out_dir / "after.json.gz", device, warmup=5)

    exposed = before_ms - compute_ms
    hidden = None if exposed <= 0 else round(100.0 * (before_ms - after_ms) / exposed, 1)
    return DemoResult(fix="cuda_prefetcher", device=device, finding_kind="h2d_stall",
                      step_ms_before=before_ms, step_ms_after=after_ms,
                      trace_before=out_dir / "before.json.gz", trace_after=out_dir / "after.json.gz",
                      checks={"compute_only_ms": round(compute_ms, 3),
                              "exposed_h2d_hidden_pct": hidden},
                      notes=[f"{torch.cuda.get_device_name()}: batch {BATCH}x{SHAPE} float32 from a "
                             f"pool of {POOL} ready batches (the copy alone, no loader work)"])
