"""Keep the CUDA caching allocator warm: no empty_cache in the loop, expandable segments.

PyTorch's caching allocator keeps freed GPU blocks for reuse, so a training step's allocations
normally never reach the driver after the first step. Two things undo that:

- `torch.cuda.empty_cache()` in the loop (often added "to avoid OOM") returns every unused
  segment to the driver. Its cudaFree synchronises the whole device, so the CPU waits for all
  queued work, and the next step's allocations pay cudaMalloc again for the same memory.
- Fragmentation (shapes that vary between steps) leaves cached blocks too small or split, so
  the allocator keeps cudaMalloc-ing new segments (and frees them when it runs out and retries).

    with keep_cache_warm() as swallowed:   # empty_cache becomes a no-op inside
        for batch in loader:
            train_step(batch)
    print(swallowed.calls, "empty_cache calls skipped")

    print(expandable_segments())   # before the first CUDA allocation: one growable segment

Neither helps when the stalled runtime calls are CUDA start-up (context creation in the first
cudaFree, lazy module loading in a first cudaLaunchKernel): profile after warm-up instead.
Imports torch but needs no GPU: on a CPU machine both are harmless.
"""
from __future__ import annotations

import importlib
import os
import sys
import threading
from collections import Counter
from contextlib import contextmanager
from typing import Callable, Iterator

import torch

# Where code finds empty_cache: torch.cuda's (the same function as torch.cuda.memory's) and the
# device-generic torch.accelerator one, which empties the CUDA cache just the same on a GPU.
# A name bound before the context (`from torch.cuda import empty_cache`) cannot be intercepted.
_EMPTY_CACHE_HOMES = ("torch.cuda", "torch.cuda.memory", "torch.accelerator", "torch.accelerator.memory")

# The allocator reads PYTORCH_ALLOC_CONF first where torch knows it (2.9+), else the older name,
# which every torch 2.x honours (newer ones warn that it is deprecated).
ALLOC_CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
DEFAULT_ALLOC_CONF_VAR = "PYTORCH_CUDA_ALLOC_CONF"


class SwallowedCalls:
    """What keep_cache_warm() swallowed so far: `.calls` empty_cache calls, and `.callers` how
    many came from each line ("file:line" of the code that called empty_cache: the line to delete)."""

    def __init__(self) -> None:
        self.calls = 0
        self.callers: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, caller: str) -> None:
        with self._lock:
            self.calls += 1
            self.callers[caller] += 1

    def __repr__(self) -> str:
        return f"SwallowedCalls(calls={self.calls}, callers={dict(self.callers)})"


# The open keep_cache_warm blocks and the originals they displaced. The no-op goes in when the
# first block opens and the originals come back when the last one closes, in whatever order the
# blocks close (threads, generators): restoring "what was there when I entered" breaks when an
# outer block closes before an inner one.
_state_lock = threading.Lock()
_active: list[SwallowedCalls] = []
_originals: list[tuple[object, str, Callable[..., None]]] = []


def _swallow(*args, **kwargs) -> None:
    """Swallowed by accel.kernels.allocator.keep_cache_warm (frees nothing)."""
    frame = sys._getframe(1)
    caller = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    with _state_lock:
        blocks = list(_active)
    for block in blocks:
        block._count(caller)


@contextmanager
def keep_cache_warm() -> Iterator[SwallowedCalls]:
    """Inside the block, torch.cuda.empty_cache() (and torch.accelerator.empty_cache()) do nothing.

    Why: empty_cache returns the allocator's unused segments to the driver; cudaFree synchronises
    the whole device (the CPU waits for every queued kernel) and the next step's allocations pay
    cudaMalloc again for the memory just given back. Called every step, by your loop or by a
    library, that is a GPU idle gap per step for nothing: the memory is needed again at once.

    Yields a SwallowedCalls whose `.calls` counts the calls skipped while it was open. Blocks may
    nest or overlap (threads): a call counts for every open block, and the originals come back
    when the last block closes, also when a block raises.
    """
    swallowed = SwallowedCalls()
    with _state_lock:
        if not _active:
            for name in _EMPTY_CACHE_HOMES:
                try:
                    module = importlib.import_module(name)
                except ImportError:   # an older torch without torch.accelerator
                    continue
                previous = getattr(module, "empty_cache", None)
                if callable(previous):
                    _originals.append((module, "empty_cache", previous))
                    setattr(module, "empty_cache", _swallow)
        _active.append(swallowed)
    try:
        yield swallowed
    finally:
        with _state_lock:
            _active.remove(swallowed)
            if not _active:
                for module, attr, previous in reversed(_originals):
                    setattr(module, attr, previous)
                _originals.clear()


def _split_options(conf: str) -> list[str]:
    """The options of an allocator config string, split at commas outside [...] lists
    (roundup_power2_divisions:[256:1,512:2] holds commas)."""
    options, current, depth = [], [], 0
    for char in conf:
        depth += (char == "[") - (char == "]")
        if char == "," and depth <= 0:
            options.append("".join(current))
            current = []
        else:
            current.append(char)
    options.append("".join(current))
    return [option.strip() for option in options if option.strip()]


def merge_alloc_conf(conf: str | None, key: str, value: str) -> str:
    """`conf` with `key:value` set: replaced where the key was, appended otherwise, every other
    option kept as it was."""
    merged, placed = [], False
    for option in _split_options(conf or ""):
        if option.split(":", 1)[0].strip() != key:
            merged.append(option)
        elif not placed:   # a key given twice keeps one copy, where it first appeared
            merged.append(f"{key}:{value}")
            placed = True
    if not placed:
        merged.append(f"{key}:{value}")
    return ",".join(merged)


def _runtime_setter() -> Callable[[str], None] | None:
    """torch's call that changes allocator settings of a running process, when it has one."""
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)   # torch 2.9+
    if setter is None:   # torch 2.1-2.8 (deprecated alias of the above since 2.9)
        setter = getattr(torch.cuda.memory, "_set_allocator_settings", None)
    return setter


def expandable_segments(enable: bool = True) -> str:
    """Turn the CUDA caching allocator's expandable segments on (or off); say what was done.

    With expandable segments the allocator maps more memory into one growable segment instead of
    cudaMalloc-ing a new segment when no cached block fits, so varying shapes fragment less and
    fewer allocations reach the driver. Before CUDA is initialised this merges
    `expandable_segments:True` into PYTORCH_CUDA_ALLOC_CONF (or into PYTORCH_ALLOC_CONF too where
    that one is set), keeping the other options there; afterwards it changes the running
    allocator, which affects segments reserved from then on. Never raises on a CPU machine.
    """
    value = "True" if enable else "False"
    setting = f"expandable_segments:{value}"
    if torch.cuda.is_initialized():
        setter = _runtime_setter()
        if setter is None:
            return (f"CUDA is already initialised and torch {torch.__version__} cannot change "
                    f"allocator settings at run time: set {DEFAULT_ALLOC_CONF_VAR}={setting} "
                    f"before the process starts")
        setter(setting)
        return (f"CUDA was already initialised: set {setting} on the running allocator "
                f"(segments reserved from now on; memory reserved before keeps its segments)")
    names = [name for name in ALLOC_CONF_VARS if os.environ.get(name)] or [DEFAULT_ALLOC_CONF_VAR]
    for name in names:
        os.environ[name] = merge_alloc_conf(os.environ.get(name), "expandable_segments", value)
    done = "; ".join(f"{name}={os.environ[name]}" for name in names)
    message = f"set {done}: the caching allocator reads it when CUDA initialises"
    if any("cudaMallocAsync" in os.environ[name] for name in names):
        message += " (backend:cudaMallocAsync ignores expandable_segments)"
    if not torch.cuda.is_available():
        message += f" (torch {torch.__version__} sees no CUDA GPU here, so nothing changes on this machine)"
    return message
