"""Keep the next batch's host-to-device copy in flight while the current batch computes.

    for batch in CudaPrefetcher(loader, device="cuda"):   # any iterable of tensors/dicts/tuples
        loss = train_step(batch)                           # batch is already on the GPU

How: each batch is pinned (unless the DataLoader already did it with pin_memory=True, the
cheaper place since its pin thread runs beside the loop) and copied with non_blocking=True on a
side stream; the compute stream waits for that copy only when it uses the batch, and
record_stream tells the caching allocator the batch is used on the compute stream, so its
memory is not handed out again while kernels still read it. The copy of batch i+1 is issued
before batch i is yielded, so it overlaps batch i's compute.

On a machine without CUDA (or with a CPU device) it is a plain pass-through: batches come back
unchanged, nothing is copied or pinned.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch


def _map_tensors(obj: Any, fn) -> Any:
    """Apply fn to every tensor in nested dicts, lists, tuples and namedtuples."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, Mapping):
        mapped = {k: _map_tensors(v, fn) for k, v in obj.items()}
        try:
            return type(obj)(mapped)       # keeps OrderedDict, BatchEncoding-like dicts
        except TypeError:                  # e.g. defaultdict: its constructor wants a factory
            return mapped
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(_map_tensors(v, fn) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(v, fn) for v in obj)
    return obj


def _for_each_tensor(obj: Any, fn) -> None:
    if isinstance(obj, torch.Tensor):
        fn(obj)
    elif isinstance(obj, Mapping):
        for value in obj.values():
            _for_each_tensor(value, fn)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _for_each_tensor(value, fn)


class CudaPrefetcher:
    """Wrap an iterable of batches; iterate to get them on `device`, one batch ahead."""

    def __init__(self, loader: Iterable, device: str | torch.device | None = None,
                 pin_memory: bool = True):
        self.loader = loader
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None and torch.cuda.is_available():
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.pin_memory = pin_memory
        # Pass-through when there is no GPU to copy to: say so instead of failing.
        self.enabled = self.device.type == "cuda" and torch.cuda.is_available()

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device.type == "cpu" and self.pin_memory and not tensor.is_pinned():
            tensor = tensor.pin_memory()
        return tensor.to(self.device, non_blocking=True)

    @staticmethod
    def _record(tensor: torch.Tensor, stream) -> None:
        """Mark a delivered GPU tensor as used on `stream` (its memory waits for that work)."""
        if tensor.device.type == "cuda":
            tensor.record_stream(stream)

    def __iter__(self) -> Iterator[Any]:
        if not self.enabled:
            yield from self.loader
            return
        copy_stream = torch.cuda.Stream(device=self.device)
        batches = iter(self.loader)
        done = object()

        def issue_next() -> Any:
            try:
                batch = next(batches)
            except StopIteration:
                return done
            # No wait on the compute stream here: the copy writes fresh allocations from the
            # side stream's pool, and record_stream below keeps blocks the compute stream still
            # reads from being reused, so the copy may start at once.
            with torch.cuda.stream(copy_stream):
                return _map_tensors(batch, self._to_device)

        upcoming = issue_next()
        while upcoming is not done:
            compute_stream = torch.cuda.current_stream(self.device)
            compute_stream.wait_stream(copy_stream)        # this batch's copy is complete
            batch = upcoming
            _for_each_tensor(batch, lambda t: self._record(t, compute_stream))
            upcoming = issue_next()                        # next copy overlaps this compute
            yield batch
