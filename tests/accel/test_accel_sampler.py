"""BalancedDistributedSampler / BalancedBatchSampler: coverage, determinism, balance. No ranks needed."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from accel.data.balanced_sampler import BalancedBatchSampler, BalancedDistributedSampler, deal_by_rounds


def long_tailed_lengths(count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(4.2, 0.8, size=count), 8, 512).astype(np.int64)


def per_rank_orders(make, replicas):
    return [list(make(rank)) for rank in range(replicas)]


def step_matrix(orders, lengths, batch, cost):
    """(steps, ranks) cost of each rank's batch per step: cost='tokens' or 'padded'."""
    steps = len(orders[0]) // batch
    out = np.zeros((steps, len(orders)))
    for r, order in enumerate(orders):
        for s in range(steps):
            chunk = lengths[order[s * batch:(s + 1) * batch]]
            out[s, r] = chunk.sum() if cost == "tokens" else chunk.max() * len(chunk)
    return out


@pytest.mark.parametrize("size,replicas,batch", [(1000, 4, 8), (1003, 4, 8), (64, 2, 4), (7, 3, 2)])
def test_every_sample_once_and_same_length_as_distributed_sampler(size, replicas, batch):
    lengths = long_tailed_lengths(size)
    dataset = range(size)
    orders = per_rank_orders(lambda r: BalancedDistributedSampler(dataset, replicas, r, lengths=lengths,
                                                                  batch_size=batch, seed=3), replicas)
    reference = per_rank_orders(lambda r: DistributedSampler(dataset, replicas, r, seed=3), replicas)
    assert [len(o) for o in orders] == [len(o) for o in reference]          # drop-in __len__
    flat = np.concatenate(orders)
    counts = np.bincount(flat, minlength=size)
    assert counts.min() == 1                                                 # nobody left out
    # DistributedSampler pads to a multiple of replicas by repeating: the same number of extras
    assert counts.sum() - size == len(reference[0]) * replicas - size
    assert (counts > 1).sum() == counts.sum() - size


def test_drop_last_drops_like_distributed_sampler():
    lengths = long_tailed_lengths(1003)
    samplers = [BalancedDistributedSampler(range(1003), 4, r, drop_last=True, lengths=lengths, batch_size=8)
                for r in range(4)]
    flat = np.concatenate([list(s) for s in samplers])
    assert len(flat) == 1000 and len(set(flat.tolist())) == 1000
    assert len(samplers[0]) == len(DistributedSampler(range(1003), 4, 0, drop_last=True))


def test_deterministic_per_seed_and_epoch():
    lengths = long_tailed_lengths(500)
    make = lambda seed: BalancedDistributedSampler(range(500), 2, 1, lengths=lengths, batch_size=4, seed=seed)
    a, b = make(0), make(0)
    assert list(a) == list(b)
    a.set_epoch(1)
    assert list(a) != list(b)
    b.set_epoch(1)
    assert list(a) == list(b)
    assert list(make(1)) != list(make(0))


def test_balances_tokens_per_step_far_better_than_distributed_sampler():
    lengths = long_tailed_lengths(2048, seed=1)
    replicas, batch = 4, 8
    balanced = per_rank_orders(lambda r: BalancedDistributedSampler(range(2048), replicas, r, lengths=lengths,
                                                                    batch_size=batch), replicas)
    plain = per_rank_orders(lambda r: DistributedSampler(range(2048), replicas, r), replicas)
    for cost in ("tokens", "padded"):
        b, p = step_matrix(balanced, lengths, batch, cost), step_matrix(plain, lengths, batch, cost)
        b_ratio = (b.max(1) / b.mean(1)).mean()     # slowest rank / mean rank, per step
        p_ratio = (p.max(1) / p.mean(1)).mean()
        assert b_ratio < 1.03, (cost, b_ratio)
        assert p_ratio > 1.15, (cost, p_ratio)
    # bucketing by length also shrinks the padded work of the slowest rank
    assert step_matrix(balanced, lengths, batch, "padded").max(1).sum() < \
        0.7 * step_matrix(plain, lengths, batch, "padded").max(1).sum()


def test_deal_by_rounds_is_lpt_with_equal_counts():
    items = np.array([[0, 1, 2, 3, 4, 5]])
    lengths = np.array([[10, 9, 5, 4, 2, 1]])
    dealt = deal_by_rounds(items, lengths, 2)
    # round 0: 10 -> rank 0, 9 -> rank 1; round 1: rank 1 lighter gets 5, rank 0 gets 4; round 2:
    # rank 0 (14) vs rank 1 (14) tie -> stable order: rank 0 gets 2, rank 1 gets 1
    assert dealt.tolist() == [[[0, 3, 4], [1, 2, 5]]]
    loads = [lengths[0][dealt[0][r]].sum() for r in range(2)]
    assert loads == [16, 15]


def test_works_with_dataloader_and_dataset_lengths_attribute():
    class Sequences(torch.utils.data.Dataset):
        def __init__(self):
            self.lengths = long_tailed_lengths(40)

        def __len__(self):
            return len(self.lengths)

        def __getitem__(self, i):
            return i

    data = Sequences()
    sampler = BalancedDistributedSampler(data, num_replicas=2, rank=0, batch_size=4)
    batches = [b.tolist() for b in DataLoader(data, batch_size=4, sampler=sampler)]
    assert len(batches) == 5 and all(len(b) == 4 for b in batches)
    assert sum(batches, []) == list(sampler)


def test_bad_arguments_are_explained():
    with pytest.raises(ValueError, match="lengths"):
        BalancedDistributedSampler(range(10), 2, 0)
    with pytest.raises(ValueError, match="10 samples"):
        BalancedDistributedSampler(range(10), 2, 0, lengths=[1] * 9)
    with pytest.raises(ValueError, match="invalid rank"):
        BalancedDistributedSampler(range(10), 2, 2, lengths=[1] * 10)
    with pytest.raises(RuntimeError, match="not initialised"):
        BalancedDistributedSampler(range(10), lengths=[1] * 10)
    with pytest.raises(ValueError, match="cannot give"):
        BalancedBatchSampler([5, 6], max_tokens=100, num_replicas=3, rank=0)


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("size,replicas", [(1003, 4), (50, 3), (9, 2)])
def test_batch_sampler_covers_once_under_budget_with_equal_counts(padded, size, replicas):
    lengths = long_tailed_lengths(size, seed=2)
    budget = 2048
    samplers = [BalancedBatchSampler(lengths, budget, replicas, r, seed=5, padded=padded) for r in range(replicas)]
    plans = [list(s) for s in samplers]
    assert len({len(p) for p in plans}) == 1 and len(samplers[0]) == len(plans[0])
    flat = sorted(i for plan in plans for batch in plan for i in batch)
    assert flat == list(range(size))
    for plan in plans:
        for batch in plan:
            assert samplers[0].batch_cost(batch) <= budget or len(batch) == 1


def test_batch_sampler_steps_cost_about_the_same_on_every_rank():
    lengths = long_tailed_lengths(4000, seed=4)
    samplers = [BalancedBatchSampler(lengths, 4096, 4, r, seed=0) for r in range(4)]
    plans = [list(s) for s in samplers]
    costs = np.array([[samplers[0].batch_cost(plans[r][s]) for r in range(4)] for s in range(len(plans[0]))])
    assert (costs.max(1) / costs.mean(1)).mean() < 1.1
    samplers[0].set_epoch(1)
    assert list(samplers[0]) != plans[0]
    assert list(BalancedBatchSampler(lengths, 4096, 4, 0, seed=0)) == plans[0]   # deterministic


def test_batch_sampler_explains_when_batches_cannot_be_shared_equally():
    # every sample alone in its batch (longer than half the budget) and 3 batches for 2 ranks
    sampler = BalancedBatchSampler([100, 100, 100], max_tokens=150, num_replicas=2, rank=0)
    with pytest.raises(ValueError, match="raise max_tokens"):
        list(sampler)
