"""Demo: image batches from a DataLoader, copied synchronously from pageable memory vs
CudaPrefetcher over a pinned-memory loader (the copy of batch i+1 overlaps batch i's compute).

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
WORKERS = 4


class Images(Dataset):
    """Random images: slices of one tensor, so loading costs a collate copy and no decode."""

    def __init__(self, length: int = 100_000):
        self.length = length
        self.pool = torch.randn(256, *SHAPE)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.pool[index % len(self.pool)], index % 1000


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
    return DataLoader(Images(), batch_size=BATCH, num_workers=WORKERS, pin_memory=pin,
                      persistent_workers=True, prefetch_factor=4)


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
                      notes=[f"{torch.cuda.get_device_name()}: batch {BATCH}x{SHAPE} float32, "
                             f"{WORKERS} loader workers"])
