"""Real GPU fixtures the analyzers are tested on: a training loop profiled with memory events, an
allocator snapshot of it, and an allocator snapshot dumped at an out-of-memory error.

    python -m accel.gpu_fixtures --out DIR

Writes DIR/memory_profiled.json.gz (torch.profiler with profile_memory=True: `[memory]` events,
CPU and CUDA), DIR/allocator_snapshot.pickle (torch.cuda.memory._dump_snapshot after those steps,
with stack frames) and DIR/oom_snapshot.pickle (the allocator's state when a request failed under
a small per-process memory fraction, so the failed allocation is in the trace), plus
DIR/fixtures.json with the figures torch itself reported (peak allocated/reserved per step,
the OOM request's size), which the tests compare the analyzers' readings with.
Without a CUDA GPU it says so and exits 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

STEPS = 6
WIDTH, DEPTH, BATCH = 1024, 8, 64
# An 80 GB card at this fraction is ~400 MB: the OOM snapshot stays small.
OOM_MEMORY_FRACTION = 0.005
OOM_CHUNK_BYTES = 64 << 20


def _model(device: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def record_memory_profile(out: Path) -> dict:
    """A few training steps under the profiler with memory events, then the allocator snapshot."""
    device = "cuda"
    model, opt = _model(device)
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    peaks = []
    plan = schedule(wait=0, warmup=1, active=STEPS, repeat=1)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=plan,
                 profile_memory=True, record_shapes=True) as prof:
        for step in range(STEPS + 1):
            torch.cuda.reset_peak_memory_stats()
            x = torch.randn(BATCH, WIDTH, device=device)
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            opt.step()
            torch.cuda.synchronize()
            if step >= 1:
                peaks.append({"step": step, "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                              "peak_reserved_bytes": torch.cuda.max_memory_reserved()})
            prof.step()
    prof.export_chrome_trace(str(out / "memory_profiled.json.gz"))
    torch.cuda.memory._dump_snapshot(str(out / "allocator_snapshot.pickle"))
    torch.cuda.memory._record_memory_history(enabled=None)
    stats = torch.cuda.memory_stats()
    return {"steps": peaks, "allocated_bytes_at_snapshot": stats["allocated_bytes.all.current"],
            "reserved_bytes_at_snapshot": stats["reserved_bytes.all.current"],
            "device_total_bytes": torch.cuda.get_device_properties(0).total_memory}


def record_oom_snapshot(out: Path) -> dict:
    """Allocate until the allocator refuses under a small memory fraction; dump the snapshot then."""
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(OOM_MEMORY_FRACTION)
    torch.cuda.memory._record_memory_history(max_entries=10_000)
    held, failed = [], None
    try:
        while len(held) < 1000:
            held.append(torch.empty(OOM_CHUNK_BYTES, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError as exc:
        failed = str(exc).splitlines()[0]
        torch.cuda.memory._dump_snapshot(str(out / "oom_snapshot.pickle"))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
        count = len(held)
        del held
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(1.0)
    return {"chunks_held_at_oom": count, "chunk_bytes": OOM_CHUNK_BYTES, "error": failed,
            "memory_fraction": OOM_MEMORY_FRACTION}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("No CUDA GPU here: no fixture recorded.")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    facts = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
             "memory_profile": record_memory_profile(args.out), "oom": record_oom_snapshot(args.out)}
    (args.out / "fixtures.json").write_text(json.dumps(facts, indent=1))
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
