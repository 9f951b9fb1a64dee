"""Demo: 2 gloo ranks, variable-length sequences; DistributedSampler vs BalancedDistributedSampler.

Workload: sequences with long-tailed lengths (16..512 tokens), batches padded to their longest
sample, a per-token MLP in DDP (work ∝ batch size × longest length). With DistributedSampler
each step waits for the rank whose batch happens to hold the longest sequence; the balanced
sampler deals samples so both ranks carry the same padded work. Step time is the slowest
rank's median; the analyzers' rank_imbalance cost is compared before/after.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from accel.demos import DemoResult
from accel.demos.dist_common import RankWorkload, run_ranks

DEFAULT_STEPS = 12
CONFIG = {"batch_size": 8, "dim": 64, "samples": 512, "warmup": 2, "profile_steps": 4}
WORLD_SIZE = 2
FIX = "balanced_sampler"
KIND = "rank_imbalance"


def sequence_lengths(count: int, seed: int = 0):
    """Long-tailed lengths, like tokenised text: most short, a few long."""
    import numpy as np
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(mean=4.2, sigma=0.8, size=count), 16, 512).astype(np.int64)


def make_sampler(variant: str, rank: int, world_size: int, config: dict[str, Any]):
    from torch.utils.data import DistributedSampler

    from accel.data.balanced_sampler import BalancedDistributedSampler
    lengths = sequence_lengths(config["samples"])
    dataset = range(len(lengths))
    if variant == "before":
        return DistributedSampler(dataset, world_size, rank, shuffle=True, seed=0)
    return BalancedDistributedSampler(dataset, world_size, rank, shuffle=True, seed=0,
                                      lengths=lengths, batch_size=config["batch_size"])


def padded_work_imbalance(variant: str, world_size: int, config: dict[str, Any]) -> float:
    """Mean over steps of (slowest rank's padded tokens / mean rank's) − 1: the work imbalance
    the sampler plans, independent of timing noise (0 = perfectly balanced)."""
    import numpy as np
    lengths, batch = sequence_lengths(config["samples"]), config["batch_size"]
    orders = [list(make_sampler(variant, r, world_size, config)) for r in range(world_size)]
    steps = min(len(o) for o in orders) // batch
    work = np.array([[lengths[o[s * batch:(s + 1) * batch]].max() * batch for o in orders] for s in range(steps)])
    return float((work.max(1) / work.mean(1)).mean() - 1)


def build(rank: int, world_size: int, variant: str, config: dict[str, Any]) -> RankWorkload:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    batch_size, dim = config["batch_size"], config["dim"]
    lengths = sequence_lengths(config["samples"])
    order = list(make_sampler(variant, rank, world_size, config))
    batches = [order[i:i + batch_size] for i in range(0, len(order) - batch_size + 1, batch_size)]
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim)))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(rank)

    def step(i: int) -> None:
        batch = batches[i % len(batches)]
        longest = int(lengths[batch].max())
        tokens = torch.randn(len(batch), longest, dim, generator=generator)   # padded batch
        loss = model(tokens).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def checks() -> dict[str, Any]:
        padded = [int(lengths[b].max()) * len(b) for b in batches]
        return {"padded_tokens_per_step": sum(padded) / len(padded), "samples": len(order)}

    return RankWorkload(step=step, checks=checks)


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    config = CONFIG
    try:
        results = run_ranks(__name__, ["before", "after"], WORLD_SIZE, out_dir, steps, config)
        before, after = results["before"], results["after"]
    except Exception as exc:   # a broken rank must end the demo with its reason, not a hang
        raise RuntimeError(f"the gloo ranks failed: {type(exc).__name__}: {exc}") from exc   # exit 1, not "skipped"
    padded = lambda v: [round(c["padded_tokens_per_step"]) for c in v.checks_per_rank]
    return DemoResult(
        fix=FIX, device="cpu", finding_kind=KIND,
        step_ms_before=before.slowest_rank_ms, step_ms_after=after.slowest_rank_ms,
        trace_before=before.trace_dir, trace_after=after.trace_dir,
        checks={"padded_work_imbalance_before": round(padded_work_imbalance("before", WORLD_SIZE, config), 4),
                "padded_work_imbalance_after": round(padded_work_imbalance("after", WORLD_SIZE, config), 4),
                "padded_tokens_per_step_per_rank_before": padded(before),
                "padded_tokens_per_step_per_rank_after": padded(after),
                "step_ms_per_rank_before": [round(t, 2) for t in before.step_ms_per_rank],
                "step_ms_per_rank_after": [round(t, 2) for t in after.step_ms_per_rank]},
        notes=[f"{WORLD_SIZE} ranks on gloo (CPU); step time = slowest rank's median"
               + ("" if device == "cpu" else f"; --device {device} ignored: this demo runs on CPU ranks")])
