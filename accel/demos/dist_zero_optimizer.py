"""Demo: Adam's state sharded across data-parallel ranks (ZeroRedundancyOptimizer) on 2 gloo ranks.

An MLP of 4 Linear(1024) layers (16 MiB of parameters) under DDP, batch 16, Adam with foreach
updates. Before: every rank keeps Adam's full state (32 MiB) and updates every parameter; after
(accel.memory.sharded_optimizer.shard_optimizer): each rank keeps and updates half, then
broadcasts. Both are profiled with profile_memory=True; the checks give each rank's peak of
allocated memory as TraceDoctor reads it from the re-profiled traces (on CPU, what was allocated
while profiling: the gradients and the optimizer step's working memory; the state itself was
allocated before profiling began) and the state each rank holds, counted from the optimizer.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from accel.demos import DemoResult
from accel.demos.dist_common import RankWorkload

DEFAULT_STEPS = 4
CONFIG = {"width": 1024, "layers": 4, "batch": 16, "warmup": 1, "profile_steps": 3, "profile_memory": True,
          "variants": {"before": {"sharded": False}, "after": {"sharded": True}}}


def build(rank: int, world_size: int, variant: str, config: dict[str, Any]) -> RankWorkload:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from accel.memory.sharded_optimizer import shard_optimizer, state_bytes

    torch.manual_seed(0)
    width = config["width"]
    module = torch.nn.Sequential(*[m for _ in range(config["layers"])
                                   for m in (torch.nn.Linear(width, width), torch.nn.Tanh())])
    model = DistributedDataParallel(module)
    if config["variants"][variant]["sharded"]:
        optimizer = shard_optimizer(model.parameters(), torch.optim.Adam, lr=1e-3, foreach=True)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)

    def step(i: int) -> None:
        x = torch.randn(config["batch"], width, generator=torch.Generator().manual_seed(i * 100 + rank))
        (model(x) - x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def checks() -> dict[str, Any]:
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        return {"state_bytes": state_bytes(optimizer), "param_sample": flat[:2048].tolist()}

    return RankWorkload(step=step, checks=checks)


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    from accel.demos.dist_common import run_ranks
    from accel.demos.dist_ddp_workload import max_param_diff, ranks_agree
    from accel.profiling import trace_rank_memory

    out_dir = Path(out_dir)
    results = run_ranks(__name__, ["before", "after"], 2, out_dir, steps, CONFIG)
    before, after = results["before"], results["after"]
    peaks = {variant: [m["peak_allocated_bytes"] for m in trace_rank_memory(result.trace_dir)] for variant, result in results.items()}
    mib = float(1 << 20)
    checks = {
        "peak_allocated_mib_per_rank_before": [round(p / mib, 2) for p in peaks["before"]],
        "peak_allocated_mib_per_rank_after": [round(p / mib, 2) for p in peaks["after"]],
        "peak_ratio": round(max(peaks["after"]) / max(peaks["before"]), 3) if peaks["before"] and peaks["after"] else None,
        "optimizer_state_mib_per_rank_before": [round(c["state_bytes"] / mib, 2) for c in before.checks_per_rank],
        "optimizer_state_mib_per_rank_after": [round(c["state_bytes"] / mib, 2) for c in after.checks_per_rank],
        "max_abs_param_diff_vs_before": max_param_diff(before.checks_per_rank, after.checks_per_rank),
        "replicas_identical_after": ranks_agree(after.checks_per_rank),
    }
    result = DemoResult(fix="zero_optimizer", device="cpu", finding_kind="memory_spike",
                        step_ms_before=before.slowest_rank_ms, step_ms_after=after.slowest_rank_ms,
                        trace_before=before.trace_dir, trace_after=after.trace_dir, checks=checks)
    result.notes.append("2 ranks on gloo (CPU)" + ("" if device == "cpu" else f"; --device {device} ignored"))
    result.notes.append("on CPU the trace sees memory allocated while profiling (gradients, the optimizer's "
                        "working memory); the state allocated before is counted from the optimizer")
    return result

