"""Move per-batch Python preprocessing (tokenising, augmenting, feature building) out of the
training loop into DataLoader workers.

Work the loop does between ops (an inline tokenizer, a Python augmentation) runs serially with the
step and shows in a trace as host time outside every profiled op (untraced_host_time). Given the
raw items and the function that turns a list of them into a batch, `preprocessing_loader` runs
that function in `num_workers` worker processes as the DataLoader's collate_fn, so batches arrive
ready while the loop computes; the loop then only receives them (inside DataLoader.__next__,
traced). Batches and their order are the same as the inline loop's.

    loader = preprocessing_loader(texts, tokenize_batch, batch_size=64, num_workers=2)
    for batch in loader:
        train_step(batch)

When the same items come back every epoch, caching the preprocessed batches once (pre-tokenising)
removes the work altogether; `cached_batches` does that in memory.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from torch.utils.data import DataLoader


def default_workers(reserve: int = 1) -> int:
    """One worker per CPU this process may use, leaving `reserve` for the training loop."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:      # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus - reserve)


def preprocessing_loader(items: Sequence[Any], preprocess_batch: Callable[[list[Any]], Any], batch_size: int,
                         num_workers: int | None = None, shuffle: bool = False, **loader_kwargs: Any) -> DataLoader:
    """A DataLoader over `items` whose workers build each batch with `preprocess_batch(list_of_items)`
    (a picklable, module-level function). num_workers None: default_workers()."""
    workers = default_workers() if num_workers is None else num_workers
    options: dict[str, Any] = {"persistent_workers": True, "prefetch_factor": 4} if workers > 0 else {}
    options.update(loader_kwargs)
    return DataLoader(items, batch_size=batch_size, shuffle=shuffle, num_workers=workers,
                      collate_fn=preprocess_batch, **options)


def cached_batches(items: Sequence[Any], preprocess_batch: Callable[[list[Any]], Any], batch_size: int) -> list[Any]:
    """Every batch preprocessed once, in order: for data that repeats each epoch (pre-tokenising)."""
    return [preprocess_batch(list(items[i:i + batch_size])) for i in range(0, len(items), batch_size)]
