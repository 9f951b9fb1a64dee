"""Small real CPU training jobs profiled with profile_memory=True, each with a planted memory
problem or none (the control), for tests/analyses/memory/test_memory.py. Each writes its Kineto trace and
torch's own memory timeline (export_memory_timeline, its raw rows) and returns what torch says:
the timeline's peak of memory allocated while profiling.
"""
from __future__ import annotations

from pathlib import Path

LEAK_BYTES = 512 * 1024 * 4          # one float32 tensor of 512 x 1024 kept each step
SPIKE_SHAPE = (64, 512, 256)         # a float32 intermediate of 32 MiB, freed within its op chain
SPIKE_BYTES = 64 * 512 * 256 * 4
ACTIVE_STEPS = 6


def run_job(out: Path, *, leak: bool = False, spike: bool = False, checkpoint: bool = False,
            depth: int = 4, width: int = 512, batch: int = 64, block_layers: int = 1) -> dict:
    """Profile ACTIVE_STEPS training steps of an MLP into out/trace.json; returns
    {"trace": path, "torch_peak_bytes": peak of torch's memory timeline above what existed before
    profiling, "timeline": path of its raw rows}."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule
    from torch.utils.checkpoint import checkpoint as recompute

    from accel.profiling import memory_timeline_peak

    torch.manual_seed(0)
    # depth blocks of block_layers Linear+ReLU each: checkpointing a block keeps only its input
    layers = [torch.nn.Sequential(*[module for _ in range(block_layers)
                                    for module in (torch.nn.Linear(width, width), torch.nn.ReLU())])
              for _ in range(depth)]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "trace.json"

    def forward(x):
        if not checkpoint:
            return model(x)
        for layer in layers:
            x = recompute(layer, x, use_reentrant=False)
        return model[-1](x)

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True,
                 schedule=schedule(wait=1, warmup=1, active=ACTIVE_STEPS)) as prof:
        for _ in range(2 + ACTIVE_STEPS):
            x = torch.randn(batch, width)
            if spike:
                big = x.unsqueeze(2) * torch.ones(1, 1, SPIKE_SHAPE[2])     # 32 MiB, gone after the sum
                x = x + big.sum(2) * 1e-6
                del big
            loss = forward(x).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if leak:
                kept.append(torch.randn(512, 1024))
            prof.step()
    prof.export_chrome_trace(str(trace))
    timeline = out / "memory_timeline.raw.json.gz"    # the suffix asks torch for its raw rows
    return {"trace": trace, "timeline": timeline, "torch_peak_bytes": memory_timeline_peak(prof, timeline, "cpu")}


def run_optimizer_job(out: Path, *, set_to_none: bool, steps: int = 3, width: int = 256, depth: int = 4,
                      batch: int = 4096) -> dict:
    """Profile `steps` Adam training steps of an MLP from the first step on (so Adam's state and the
    first gradients are allocated in view) into out/trace.json.gz; returns {"trace", "param_bytes",
    "torch_peak_bytes"}. Activations (batch x width floats per layer) outweigh the parameters, so
    the peak is in the forward/backward, not in the optimizer step."""
    import torch

    from accel.profiling import profile_memory_from_start

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(depth) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)

    def step(i: int) -> None:
        optimizer.zero_grad(set_to_none=set_to_none)
        x = torch.randn(batch, width, generator=torch.Generator().manual_seed(i))
        model(x).square().mean().backward()
        optimizer.step()

    trace = out / "trace.json.gz"
    torch_peak = profile_memory_from_start(step, steps, trace, "cpu")
    return {"trace": trace, "torch_peak_bytes": torch_peak,
            "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}
