"""Demo: a training loop that tokenises every batch inline (host time outside every profiled op)
against the same loop fed by DataLoader workers that tokenise (accel.data.preprocess).

The workload: a bag-of-words classifier over synthetic sentences; the tokenizer is plain Python
(lower-casing, stripping punctuation, a vocabulary lookup per word), the usual shape of a
hand-written text pipeline. Both sides see the same batches in the same order (checked).
"""
from __future__ import annotations

import math
import random
import string
import time
from pathlib import Path

import torch

from accel.data.preprocess import cached_batches, default_workers, preprocessing_loader
from accel.demos import DemoResult
from accel.profiling import intra_op_threads, median_ms, profile_steps, synchronize, time_steps

DEFAULT_STEPS = 12
PROFILED_STEPS = 4
EPOCH_REPEATS = 8            # the texts' 16 batches, eight times over: 128 batches per epoch
BATCH, WORDS, VOCAB, MAX_LEN, CLASSES = 32, 400, 5000, 400, 4
WORKERS = min(2, default_workers())    # one core stays the training loop's (the check's loader)
_VOCAB_WORDS = ["".join(random.Random(i).choices(string.ascii_lowercase, k=6)) for i in range(VOCAB)]
_INDEX = {w: i + 1 for i, w in enumerate(_VOCAB_WORDS)}


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_VOCAB_WORDS).capitalize() + rng.choice(",.;!? ") for _ in range(WORDS))
            for _ in range(n)]


def tokenize_batch(texts: list[str]) -> torch.Tensor:
    """(batch, MAX_LEN) token ids: the per-word Python work a hand-written text pipeline does."""
    rows = []
    for text in texts:
        ids = [_INDEX.get(word.strip(string.punctuation).lower(), 0) for word in text.split()][:MAX_LEN]
        rows.append(ids + [0] * (MAX_LEN - len(ids)))
    return torch.tensor(rows)


def build_model(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.EmbeddingBag(VOCAB + 1, 256, mode="mean"), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, CLASSES))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _train_step(model, optimizer, tokens: torch.Tensor, i: int) -> None:
    labels = torch.arange(i, i + tokens.shape[0]) % CLASSES
    optimizer.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(tokens), labels).backward()
    optimizer.step()


def inline_step(texts: list[str]):
    model, optimizer = build_model()

    def step(i: int) -> None:
        start = (i * BATCH) % len(texts)
        _train_step(model, optimizer, tokenize_batch(texts[start:start + BATCH]), i)
    return step


def worker_step(texts: list[str], num_workers: int = WORKERS):
    model, optimizer = build_model()
    # one epoch spans every step a demo runs: at an epoch's start the workers' queue restarts and its
    # first batch waits for them (a real job meets that once per epoch, not every 16 steps)
    epoch = texts * EPOCH_REPEATS
    batches = iter(_cycle(preprocessing_loader(epoch, tokenize_batch, BATCH, num_workers=num_workers)))

    def step(i: int) -> None:
        _train_step(model, optimizer, next(batches), i)
    return step


def cached_step(texts: list[str]):
    model, optimizer = build_model()
    batches = cached_batches(texts, tokenize_batch, BATCH)

    def step(i: int) -> None:
        _train_step(model, optimizer, batches[i % len(batches)], i)
    return step


def _cycle(loader):
    while True:
        yield from loader


def workers_to_keep_up(prepare_ms: float, compute_ms: float) -> int:
    """Workers that prepare a batch as fast as the loop consumes one (accel.data.loader_tuning's rule:
    ceil(prepare / compute) + 1), at most one per CPU left beside the loop."""
    return max(1, min(math.ceil(prepare_ms / max(compute_ms, 1e-3)) + 1, default_workers()))


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    with intra_op_threads(1, device):
        texts = sentences(BATCH * 16)
        started = time.perf_counter()
        tokenize_batch(texts[:BATCH])
        tokenize_ms = (time.perf_counter() - started) * 1e3
        before_ms = median_ms(time_steps(inline_step(texts), steps, "cpu"))
        profile_steps(inline_step(texts), min(PROFILED_STEPS, steps), out_dir / "before.json.gz", "cpu")
        cached_ms = median_ms(time_steps(cached_step(texts), steps, "cpu"))
        workers = workers_to_keep_up(tokenize_ms, cached_ms)
        warmup = workers * 4 + 3            # past worker start-up and the batches queued ahead
        after_ms = median_ms(time_steps(worker_step(texts, workers), steps, "cpu", warmup=warmup))
        profile_steps(worker_step(texts, workers), min(PROFILED_STEPS, steps), out_dir / "after.json.gz", "cpu",
                      warmup=warmup)
        synchronize("cpu")
    result = DemoResult(fix="preprocess_in_workers", device="cpu", finding_kind="untraced_host_time",
                        step_ms_before=before_ms, step_ms_after=after_ms,
                        trace_before=out_dir / "before.json.gz", trace_after=out_dir / "after.json.gz",
                        checks={"same_batches": _same_batches(texts), "cached_step_ms": round(cached_ms, 3),
                                "workers": workers})
    result.notes.append(f"tokenising a batch of {BATCH} sentences of {WORDS} words: {tokenize_ms:.1f} ms of Python; "
                        f"after: {workers} DataLoader worker(s) tokenise while the loop computes (enough to keep up "
                        f"where the CPUs allow, as the what-if assumes: each needs a free core); tokenised once before training (cached_batches): {cached_ms:.2f} ms")
    return result


def _same_batches(texts: list[str], n_batches: int = 3) -> bool:
    loader = iter(preprocessing_loader(texts, tokenize_batch, BATCH, num_workers=WORKERS))
    return all(torch.equal(next(loader), tokenize_batch(texts[i * BATCH:(i + 1) * BATCH])) for i in range(n_batches))
