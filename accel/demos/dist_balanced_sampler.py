"""Demo: 2 gloo ranks, variable-length sequences; DistributedSampler vs BalancedDistributedSampler.

Workload: sequences with long-tailed lengths (16..512 tokens), packed without padding (a batch's
sequences concatenated into one token tensor), a per-token MLP in DDP: a rank's work per step is
the number of tokens it was dealt. With DistributedSampler each rank gets 8 samples per step, but
one rank's 8 may hold twice the other's tokens, so every step the lighter rank waits in the
gradient all-reduce; which rank is late changes from step to step. The balanced sampler deals
each step's samples so both ranks carry the same tokens. Step time is the slowest rank's median;
the analyzers' rank_imbalance cost is compared before/after.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from accel.demos import DemoResult
from accel.demos.dist_common import RankWorkload, run_ranks

WORLD_SIZE = 2
BATCH_SIZE = 8
EPOCH_STEPS = 32            # 512 samples in steps of 2 ranks x 8
# The balanced sampler deals each step's samples (window_steps 1: no length-sorting across steps),
# so over one epoch both variants run the same steps' work, split differently between the ranks.
# Both time one epoch (their steps alternating, so both see the same load) and profile one: on a
# loaded machine a rank descheduled for a few ms makes the other wait too, and a whole epoch of
# steps keeps that noise from deciding the comparison.
CONFIG = {"batch_size": BATCH_SIZE, "dim": 256, "samples": WORLD_SIZE * BATCH_SIZE * EPOCH_STEPS,
          "window_steps": 1, "warmup": 2, "profile_steps": EPOCH_STEPS, "interleave_variants": True}
DEFAULT_STEPS = EPOCH_STEPS
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
                                      lengths=lengths, batch_size=config["batch_size"],
                                      window_steps=config["window_steps"])


def token_imbalance(variant: str, world_size: int, config: dict[str, Any]) -> float:
    """Mean over steps of (heaviest rank's tokens / mean rank's) − 1: the work imbalance the
    sampler plans, independent of timing noise (0 = perfectly balanced)."""
    import numpy as np
    lengths, batch = sequence_lengths(config["samples"]), config["batch_size"]
    orders = [list(make_sampler(variant, r, world_size, config)) for r in range(world_size)]
    steps = min(len(o) for o in orders) // batch
    work = np.array([[lengths[o[s * batch:(s + 1) * batch]].sum() for o in orders] for s in range(steps)])
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
        tokens = torch.randn(int(lengths[batch].sum()), dim, generator=generator)   # packed: no padding
        loss = model(tokens).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def checks() -> dict[str, Any]:
        tokens = [int(lengths[b].sum()) for b in batches]
        return {"tokens_per_step": sum(tokens) / len(tokens), "samples": len(order)}

    return RankWorkload(step=step, checks=checks)


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    config = CONFIG
    try:
        results = run_ranks(__name__, ["before", "after"], WORLD_SIZE, out_dir, steps, config)
        before, after = results["before"], results["after"]
    except Exception as exc:   # a broken rank must end the demo with its reason, not a hang
        raise RuntimeError(f"the gloo ranks failed: {type(exc).__name__}: {exc}") from exc   # exit 1, not "skipped"
    tokens = lambda v: [round(c["tokens_per_step"]) for c in v.checks_per_rank]
    return DemoResult(
        fix=FIX, device="cpu", finding_kind=KIND,
        step_ms_before=before.slowest_rank_ms, step_ms_after=after.slowest_rank_ms,
        trace_before=before.trace_dir, trace_after=after.trace_dir,
        checks={"token_imbalance_before": round(token_imbalance("before", WORLD_SIZE, config), 4),
                "token_imbalance_after": round(token_imbalance("after", WORLD_SIZE, config), 4),
                "tokens_per_step_per_rank_before": tokens(before),
                "tokens_per_step_per_rank_after": tokens(after),
                "step_ms_per_rank_before": [round(t, 2) for t in before.step_ms_per_rank],
                "step_ms_per_rank_after": [round(t, 2) for t in after.step_ms_per_rank]},
        notes=[f"{WORLD_SIZE} ranks on gloo (CPU); step time = slowest rank's median"
               + ("" if device == "cpu" else f"; --device {device} ignored: this demo runs on CPU ranks")])
