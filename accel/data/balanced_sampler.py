"""Distributed samplers that give every rank the same WORK per step, not the same sample count.

With variable-length inputs (text, audio, graphs) torch's DistributedSampler hands each rank the
same number of samples, but one rank's batch may hold 4x the tokens of another's. Every step,
all ranks then wait in the gradient all-reduce for the rank with the heaviest batch: the
`rank_imbalance` finding. These samplers balance tokens instead:

- BalancedDistributedSampler: a drop-in for DistributedSampler (same constructor arguments,
  plus `lengths` and the `batch_size` the DataLoader uses). Per epoch: shuffle (seed + epoch),
  cut into windows of `window_steps` global steps, sort each window by length (bucketing: a
  step's samples have similar lengths, so padding waste is small too), cut the window into
  global steps of num_replicas × batch_size samples, and deal each step's samples to ranks by
  greedy LPT in rounds (the longest remaining sample goes to the rank with the fewest tokens
  so far; one sample per rank per round, so batch sizes stay equal). Steps are then shuffled
  so an epoch does not run long-to-short. Same __len__, padding and drop_last behaviour as
  DistributedSampler: every sample appears exactly once per epoch when the dataset size is a
  multiple of num_replicas; otherwise padding repeats the first few (drop_last=False) or the
  tail is dropped (drop_last=True), exactly like DistributedSampler.
- BalancedBatchSampler: variable-size batches under a token budget (`max_tokens`, counted as
  batch size × longest sample when padded, or the plain sum when packed), for
  DataLoader(batch_sampler=...). Batches of similar cost are dealt one per rank per step.
  Every sample appears exactly once per epoch and every rank gets the same number of batches
  (batches are split in two where needed to make the count a multiple of num_replicas).

Both are deterministic given seed and epoch, identical on every rank (each rank computes the
same plan and takes its share), and call set_epoch like DistributedSampler.
"""
from __future__ import annotations

import math
from typing import Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Sampler


def _world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    if num_replicas is None or rank is None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("num_replicas and rank are needed when torch.distributed is not initialised")
        num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
        rank = dist.get_rank() if rank is None else rank
    if num_replicas < 1 or not 0 <= rank < num_replicas:
        raise ValueError(f"invalid rank {rank} for {num_replicas} replicas")
    return num_replicas, rank


def _lengths_array(lengths: Sequence[int] | np.ndarray | torch.Tensor | None, dataset=None) -> np.ndarray:
    if lengths is None:
        lengths = getattr(dataset, "lengths", None)
    if lengths is None:
        raise ValueError("lengths (tokens per sample) are required, or a dataset with a .lengths attribute")
    array = np.asarray(lengths.cpu() if isinstance(lengths, torch.Tensor) else lengths, dtype=np.int64).reshape(-1)
    if (array < 0).any():
        raise ValueError("lengths must be non-negative")
    return array


def _epoch_permutation(size: int, shuffle: bool, seed: int, epoch: int) -> tuple[np.ndarray, torch.Generator]:
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    if shuffle:
        return torch.randperm(size, generator=generator).numpy(), generator
    return np.arange(size, dtype=np.int64), generator


def deal_by_rounds(step_items: np.ndarray, step_lengths: np.ndarray, num_replicas: int) -> np.ndarray:
    """Deal each step's items to ranks: greedy LPT, one item per rank per round.

    step_items, step_lengths: (steps, num_replicas × per_rank), each row sorted by length
    descending. Returns (steps, num_replicas, per_rank) item ids. Round j hands the j-th group
    of num_replicas items (the longest left) to the ranks in order of least load so far: the
    longest of them goes to the lightest rank. Vectorised over steps; loops over rounds only.
    """
    steps, width = step_items.shape
    per_rank = width // num_replicas
    dealt = np.empty((steps, num_replicas, per_rank), dtype=np.int64)
    load = np.zeros((steps, num_replicas), dtype=np.int64)
    rows = np.arange(steps)[:, None]
    for round_index in range(per_rank):
        cols = slice(round_index * num_replicas, (round_index + 1) * num_replicas)
        lightest_first = np.argsort(load, axis=1, kind="stable")
        dealt[rows, lightest_first, round_index] = step_items[:, cols]
        load[rows, lightest_first] += step_lengths[:, cols]
    return dealt


def _sort_desc(items: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    return items[np.argsort(-lengths[items], kind="stable")]


class BalancedDistributedSampler(Sampler[int]):
    """DistributedSampler that balances tokens per rank per step (see module docstring).

    dataset, num_replicas, rank, shuffle, seed, drop_last: as torch's DistributedSampler.
    lengths: tokens per sample (default: dataset.lengths).
    batch_size: the per-rank batch size the DataLoader uses (balance is per step of that size).
    window_steps: how many global steps are length-sorted together (bigger: better balance and
      less padding, less randomness in which samples share a step).
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False, *,
                 lengths: Sequence[int] | None = None, batch_size: int = 1, window_steps: int = 50) -> None:
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.lengths = _lengths_array(lengths, dataset)
        if len(self.lengths) != len(dataset):
            raise ValueError(f"lengths has {len(self.lengths)} entries for a dataset of {len(dataset)} samples")
        if batch_size < 1 or window_steps < 1:
            raise ValueError("batch_size and window_steps must be at least 1")
        self.dataset = dataset
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.batch_size, self.window_steps = batch_size, window_steps
        self.epoch = 0
        size = len(self.lengths)
        # Same arithmetic as DistributedSampler, so __len__ and padding match the drop-in.
        if drop_last and size % self.num_replicas:
            self.num_samples = math.ceil((size - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(size / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def plan(self) -> np.ndarray:
        """(num_replicas, num_samples) sample ids of this epoch, row r = rank r's order."""
        order, generator = _epoch_permutation(len(self.lengths), self.shuffle, self.seed, self.epoch)
        if self.total_size > len(order):      # pad by repeating, as DistributedSampler does
            repeats = math.ceil((self.total_size - len(order)) / max(len(order), 1))
            order = np.concatenate([order] + [order] * repeats)[: self.total_size]
        order = order[: self.total_size]
        step_size = self.num_replicas * self.batch_size
        window = step_size * self.window_steps
        sorted_order = np.concatenate([_sort_desc(order[i:i + window], self.lengths)
                                       for i in range(0, len(order), window)] or [order])
        full_steps = len(sorted_order) // step_size
        per_rank = [np.empty((self.num_replicas, 0), dtype=np.int64)]
        if full_steps:
            items = sorted_order[: full_steps * step_size].reshape(full_steps, step_size)
            dealt = deal_by_rounds(items, self.lengths[items], self.num_replicas)  # (steps, ranks, B)
            if self.shuffle:
                dealt = dealt[torch.randperm(full_steps, generator=generator).numpy()]
            per_rank.append(dealt.transpose(1, 0, 2).reshape(self.num_replicas, -1))
        tail = sorted_order[full_steps * step_size:]
        if len(tail):   # the last, short step stays last so every earlier batch stays whole
            tail = _sort_desc(tail, self.lengths).reshape(1, -1)
            per_rank.append(deal_by_rounds(tail, self.lengths[tail], self.num_replicas)[0])
        return np.concatenate(per_rank, axis=1)

    def __iter__(self) -> Iterator[int]:
        return iter(self.plan()[self.rank].tolist())


class BalancedBatchSampler(Sampler[list[int]]):
    """Variable-size batches under a token budget, dealt so each rank's step costs the same.

    lengths: tokens per sample. max_tokens: budget per batch; cost = batch size × longest
    sample (padded=True, the cost of a padded batch) or the sum of lengths (padded=False,
    packed sequences). A sample longer than the budget gets a batch of its own.
    window: how many samples are length-sorted together before batching.
    Use as DataLoader(dataset, batch_sampler=BalancedBatchSampler(...)).
    """

    def __init__(self, lengths: Sequence[int], max_tokens: int, num_replicas: int | None = None,
                 rank: int | None = None, shuffle: bool = True, seed: int = 0, *,
                 padded: bool = True, window: int = 4096) -> None:
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.lengths = _lengths_array(lengths)
        if len(self.lengths) < self.num_replicas:
            raise ValueError(f"{len(self.lengths)} samples cannot give each of {self.num_replicas} ranks a batch")
        if max_tokens < 1 or window < 1:
            raise ValueError("max_tokens and window must be at least 1")
        self.max_tokens, self.shuffle, self.seed = max_tokens, shuffle, seed
        self.padded, self.window = padded, window
        self.epoch = 0
        self._cached: tuple[int, list[list[list[int]]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batch_cost(self, batch: Sequence[int]) -> int:
        sizes = self.lengths[np.asarray(batch, dtype=np.int64)]
        return int(len(sizes) * sizes.max()) if self.padded else int(sizes.sum())

    def _batches_of_window(self, items: np.ndarray) -> list[np.ndarray]:
        """Cut length-descending items into batches under the budget (one cut per batch)."""
        batches = []
        start = 0
        item_lengths = self.lengths[items]
        while start < len(items):
            if self.padded:   # sorted descending: the first sample is the batch's longest
                fits = max(1, self.max_tokens // max(int(item_lengths[start]), 1))
            else:
                running = np.cumsum(item_lengths[start:])
                fits = max(1, int(np.searchsorted(running, self.max_tokens, side="right")))
            batches.append(items[start:start + fits])
            start += fits
        return batches

    def plan(self) -> list[list[list[int]]]:
        """Per rank, the list of batches (sample ids) of this epoch."""
        if self._cached is not None and self._cached[0] == self.epoch:
            return self._cached[1]
        order, generator = _epoch_permutation(len(self.lengths), self.shuffle, self.seed, self.epoch)
        batches: list[np.ndarray] = []
        for i in range(0, len(order), self.window):
            batches.extend(self._batches_of_window(_sort_desc(order[i:i + self.window], self.lengths)))
        # Make the batch count a multiple of num_replicas by halving the biggest batches.
        while len(batches) % self.num_replicas:
            splittable = [i for i, b in enumerate(batches) if len(b) > 1]
            if not splittable:
                raise ValueError(f"{len(batches)} single-sample batches cannot be shared equally by "
                                 f"{self.num_replicas} ranks: raise max_tokens (now {self.max_tokens})")
            biggest = max(splittable, key=lambda i: (self.batch_cost(batches[i]), -i))
            batch = batches.pop(biggest)
            half = len(batch) // 2
            batches.extend([batch[:half], batch[half:]])
        costs = np.array([self.batch_cost(b) for b in batches])
        by_cost = np.argsort(-costs, kind="stable").reshape(-1, self.num_replicas)   # similar costs share a step
        if self.shuffle:
            by_cost = by_cost[torch.randperm(len(by_cost), generator=generator).numpy()]
        per_rank = [[batches[i].tolist() for i in by_cost[:, r]] for r in range(self.num_replicas)]
        self._cached = (self.epoch, per_rank)
        return per_rank

    def __len__(self) -> int:
        return len(self.plan()[self.rank])

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.plan()[self.rank])
