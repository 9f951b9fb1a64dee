"""accel.data: the CUDA prefetcher (pass-through on CPU) and DataLoader tuning."""
from __future__ import annotations

from collections import OrderedDict, defaultdict, namedtuple

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accel.data.loader_tuning import LoaderSettings, suggest_settings, tuned_dataloader
from accel.data.prefetcher import CudaPrefetcher, _map_tensors

CUDA = torch.cuda.is_available()
Pair = namedtuple("Pair", "x y")


def _batches():
    return [{"x": torch.full((2, 3), float(i)), "meta": f"b{i}", "pair": Pair(torch.ones(1) * i, i)}
            for i in range(4)]


@pytest.mark.skipif(CUDA, reason="checks the CPU pass-through")
def test_prefetcher_is_a_pass_through_without_cuda():
    batches = _batches()
    prefetcher = CudaPrefetcher(batches)
    assert not prefetcher.enabled
    assert len(prefetcher) == 4
    assert [id(b) for b in prefetcher] == [id(b) for b in batches]   # the very same objects


def test_prefetcher_with_cpu_device_is_a_pass_through():
    batches = _batches()
    assert list(CudaPrefetcher(batches, device="cpu")) == batches


def test_map_tensors_keeps_structure():
    nested = {"a": [torch.ones(2), (torch.zeros(1), "s")], "p": Pair(torch.ones(1), 3),
              "o": OrderedDict(k=torch.ones(1)), "d": defaultdict(list, k=torch.ones(1))}
    out = _map_tensors(nested, lambda t: t + 1)
    assert torch.equal(out["a"][0], torch.full((2,), 2.0))
    assert isinstance(out["a"][1], tuple) and out["a"][1][1] == "s"
    assert isinstance(out["p"], Pair) and out["p"].y == 3 and torch.equal(out["p"].x, torch.full((1,), 2.0))
    assert isinstance(out["o"], OrderedDict)
    assert torch.equal(out["d"]["k"], torch.full((1,), 2.0))


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU; this machine has none")
def test_prefetcher_delivers_equal_batches_on_the_gpu():
    batches = _batches()
    out = list(CudaPrefetcher(batches, device="cuda"))
    torch.cuda.synchronize()
    assert len(out) == 4
    for got, want in zip(out, batches):
        assert got["x"].is_cuda and torch.equal(got["x"].cpu(), want["x"])
        assert got["meta"] == want["meta"] and isinstance(got["pair"], Pair)
        assert torch.equal(got["pair"].x.cpu(), want["pair"].x)


def test_workers_sized_from_wait_and_compute():
    # 0 workers: loading = the wait (30 ms), compute = 40 - 30 = 10 ms -> ceil(30/10) + 1 = 4
    s = suggest_settings({"wait_ms_per_step": 30.0, "step_time_ms": 40.0, "num_workers": 0},
                         cpu_count=8, cuda=True)
    assert (s.num_workers, s.pin_memory, s.persistent_workers, s.prefetch_factor) == (4, True, True, 2)
    # 2 workers still waiting 10 of 30 ms: loading = 30 * 2 = 60 ms per batch vs 20 -> 3 + 1
    s = suggest_settings({"wait_ms_per_step": 10.0, "step_time_ms": 30.0, "num_workers": 2},
                         cpu_count=8, cuda=False)
    assert (s.num_workers, s.pin_memory) == (4, False)


def test_a_loader_with_an_unrecorded_worker_count_is_never_advised_fewer_workers():
    # the trace shows a multi-process loader but not its num_workers (the finding says None)
    metrics = {"wait_ms_per_step": 142.0, "step_time_ms": 160.0, "num_workers": None}
    s = suggest_settings(metrics, cpu_count=32, cuda=True)
    assert s.num_workers == 32 and "does not record" in s.reason
    # told the count (4): loading = (18 + 142) * 4 = 640 ms per batch vs 18 ms -> 37, capped at 32
    s = suggest_settings(metrics, cpu_count=32, cuda=True, current_workers=4)
    assert s.num_workers == 32 and "capped at 32" in s.reason
    # already at the CPU count: keep it, and say what would help
    s = suggest_settings(metrics, cpu_count=4, cuda=True, current_workers=6)
    assert s.num_workers == 6 and "already had 6" in s.reason


def test_workers_capped_by_cpus_and_unknown_metrics_use_every_cpu():
    s = suggest_settings({"wait_ms_per_step": 90.0, "step_time_ms": 100.0}, cpu_count=2, cuda=False)
    assert s.num_workers == 2 and "capped at 2" in s.reason
    assert suggest_settings(None, cpu_count=6, cuda=False).num_workers == 6
    assert suggest_settings({"wait_ms_per_step": "?"}, cpu_count=3, cuda=False).num_workers == 3
    assert suggest_settings({}, cpu_count=2, cuda=False, max_workers=5).num_workers == 5
    assert suggest_settings({"wait_cv": 1.2}, cpu_count=2, cuda=False).prefetch_factor == 4


def test_zero_worker_settings_drop_options_torch_rejects():
    s = LoaderSettings(num_workers=0, pin_memory=False, persistent_workers=True,
                       prefetch_factor=None, reason="test")
    assert s.kwargs() == {"num_workers": 0, "pin_memory": False, "persistent_workers": False}
    loader = tuned_dataloader(TensorDataset(torch.arange(10)), batch_size=4, settings=s)
    assert loader.num_workers == 0


def test_tuned_loader_yields_the_same_batches():
    dataset = TensorDataset(torch.arange(40).float().view(20, 2), torch.arange(20))
    settings = suggest_settings(None, cpu_count=2, cuda=False)
    tuned = tuned_dataloader(dataset, batch_size=6, settings=settings)
    assert (tuned.num_workers, tuned.persistent_workers, tuned.prefetch_factor) == (2, True, 2)
    plain = DataLoader(dataset, batch_size=6)
    for (xa, ya), (xb, yb) in zip(plain, tuned, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    # an explicit argument wins over the suggestion
    assert tuned_dataloader(dataset, batch_size=6, settings=settings, num_workers=0).num_workers == 0


def test_prefetcher_stream_protocol_with_fake_cuda(monkeypatch):
    """The ordering the prefetcher promises, checked without a GPU on fake streams: batch i+1's
    copy is issued on the side stream before batch i is handed out, the compute stream waits for
    the side stream before each batch is used, and every delivered tensor is recorded on the
    compute stream (so the allocator does not recycle it early)."""
    log: list[tuple] = []

    class FakeStream:
        def __init__(self, name="copy", device=None):
            self.name = name

        def wait_stream(self, other):
            log.append(("wait", self.name, other.name))

    compute = FakeStream("compute")

    class StreamContext:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            log.append(("enter", self.stream.name))

        def __exit__(self, *exc):
            log.append(("exit", self.stream.name))

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", StreamContext)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: compute)
    monkeypatch.setattr(CudaPrefetcher, "_to_device",
                        lambda self, t: (log.append(("copy", int(t[0]))), t.clone())[1])
    monkeypatch.setattr(CudaPrefetcher, "_record",
                        staticmethod(lambda t, stream: log.append(("record", int(t[0]), stream.name))))

    prefetcher = CudaPrefetcher([torch.tensor([i]) for i in range(3)], device="cuda")
    assert prefetcher.enabled
    for batch in prefetcher:
        log.append(("use", int(batch[0])))
    assert log == [
        ("enter", "copy"), ("copy", 0), ("exit", "copy"),
        ("wait", "compute", "copy"), ("record", 0, "compute"),
        ("enter", "copy"), ("copy", 1), ("exit", "copy"), ("use", 0),
        ("wait", "compute", "copy"), ("record", 1, "compute"),
        ("enter", "copy"), ("copy", 2), ("exit", "copy"), ("use", 1),
        ("wait", "compute", "copy"), ("record", 2, "compute"), ("use", 2),
    ]
