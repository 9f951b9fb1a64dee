"""untraced_host_time on a real CPU training job: a loop that tokenises each batch inline in the
main thread (plain Python: a regex split, lower-casing, a vocabulary lookup per word) against the
control, the same loop over batches tokenised once before training (cached).

Both loops are timed without the profiler, step by step interleaved in one process (a loaded
machine slows both alike); the time the job loses is the difference of their median steps. Each
is then profiled with a schedule and analysed: the problem's untraced host time must be found and
costed within 0.75-1.3 of that loss; the control must stay quiet.
"""
from __future__ import annotations

import os
import random
import re
import statistics
import time

import pytest

torch = pytest.importorskip("torch")

from tests.support.analysis import assert_report_costs_within_the_step  # noqa: E402
from analyzers.api import analyze_paths  # noqa: E402

BATCH, SENTENCE_WORDS, VOCAB_SIZE = 32, 300, 3000
ROUNDS, TIMED_STEPS, PROFILED = 5, 8, 6
_WORDS = [f"Word{i}" for i in range(VOCAB_SIZE)]
_VOCAB = {w.lower(): i + 1 for i, w in enumerate(_WORDS)}
_SPLIT = re.compile(r"[A-Za-z0-9]+")


def _corpus(n: int) -> list[str]:
    rng = random.Random(7)
    return [" ".join(rng.choice(_WORDS) + rng.choice(", .;") for _ in range(SENTENCE_WORDS)) for _ in range(n)]


def _tokenize(texts: list[str]) -> torch.Tensor:
    rows = [[_VOCAB.get(word.lower(), 0) for word in _SPLIT.findall(text)] for text in texts]
    width = max(len(r) for r in rows)
    return torch.tensor([r + [0] * (width - len(r)) for r in rows])


def _loop(texts: list[str], inline: bool):
    """One training step per call: the loader yields raw texts (num_workers=0); the inline loop
    tokenises them itself, the control reads the batch tokenised before training."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.EmbeddingBag(VOCAB_SIZE + 1, 128, mode="mean"),
                                torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    cached = [_tokenize(texts[i:i + BATCH]) for i in range(0, len(texts), BATCH)]
    loader = torch.utils.data.DataLoader(list(range(len(cached))), batch_size=None, num_workers=0)
    batches = iter(())

    def step(i: int) -> None:
        nonlocal batches
        try:
            index = next(batches)
        except StopIteration:
            batches = iter(loader)
            index = next(batches)
        tokens = _tokenize(texts[index * BATCH:(index + 1) * BATCH]) if inline else cached[index]
        labels = torch.arange(tokens.shape[0]) % 2
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(tokens), labels).backward()
        optimizer.step()
    return step


def _profile(step, path) -> None:
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=PROFILED)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for i in range(PROFILED + 2):
            step(i)
            prof.step()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """Five rounds of (timed steps of both loops interleaved, then a profile of each): each round's
    loss (median inline step - median control step) is compared with that round's finding, close
    in time, so a load that changes over seconds weighs on both alike."""
    out = tmp_path_factory.mktemp("untraced")
    texts = _corpus(BATCH * 8)
    previous, priority = torch.get_num_threads(), os.getpriority(os.PRIO_PROCESS, 0)
    torch.set_num_threads(1)        # small ops: more threads only spin against a loaded machine
    try:        # on a shared machine, other jobs' time slices would land inside the timed steps
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except OSError:                 # not root: measured at the normal priority
        pass
    losses: list[float] = []
    reports: dict[str, list[dict]] = {"inline": [], "control": []}
    try:
        for round_no in range(ROUNDS):
            steps = {name: _loop(texts, name == "inline") for name in reports}
            times: dict[str, list[float]] = {name: [] for name in reports}
            for i in range(TIMED_STEPS + 3):
                for name, step in steps.items():
                    started = time.perf_counter()
                    step(i)
                    if i >= 3:
                        times[name].append((time.perf_counter() - started) * 1e3)
            losses.append(statistics.median(times["inline"]) - statistics.median(times["control"]))
            for name in reports:
                path = out / f"{name}{round_no}.json"
                _profile(_loop(texts, name == "inline"), path)
                reports[name].append(analyze_paths([str(path)]))
    finally:
        torch.set_num_threads(previous)
        try:
            os.setpriority(os.PRIO_PROCESS, 0, priority)
        except OSError:
            pass
    return {"losses": losses, **reports}


def _untraced(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["kind"] == "untraced_host_time"]


def test_inline_tokenisation_is_found_at_the_time_it_costs(job):
    assert min(job["losses"]) > 2.0, job["losses"]      # the planted cause is real: the inline loop is slower
    ratios = []
    for report, loss_ms in zip(job["inline"], job["losses"]):
        [finding] = _untraced(report)
        assert finding["rank"] == 0 and finding["metrics"]["gpu"] is False
        assert finding["metrics"]["longest_hole_ms"] >= 1.0
        assert finding["metrics"]["before_op"].startswith("enumerate(DataLoader)")   # the hole follows the loader
        assert finding["fixes"][0] == "preprocess_in_workers", finding["fixes"]
        assert_report_costs_within_the_step(report)
        ratios.append(finding["cost_ms_per_step"] / loss_ms)
    assert 0.75 <= statistics.median(ratios) <= 1.3, (ratios, job["losses"])


def test_the_control_with_cached_tokens_stays_quiet(job):
    for report in job["control"]:
        assert not _untraced(report), report["findings"]
        assert not [(f["kind"], f["cost_pct"]) for f in report["findings"] if f["cost_pct"] > 5], report["findings"]


def test_the_what_if_predicts_the_cached_loop(job):
    """The fix model (the untraced work moved off the training thread) predicts what the control
    saves: its saving against the loss measured without the profiler."""
    from analyzers.common.thresholds import DATALOADER_HANDOFF_NS

    # the model is the work moved into loader workers, which keeps one handoff per step; the
    # control is the work moved out of the loop (tokenised once), which keeps none
    handoff_ms = DATALOADER_HANDOFF_NS / 1e6
    savings, afters = [], []
    for report, control, loss_ms in zip(job["inline"], job["control"], job["losses"]):
        [finding] = _untraced(report)
        whatif = finding["whatif"]
        assert whatif is not None and whatif["on_critical_path_ms"] == pytest.approx(finding["cost_ms_per_step"], rel=0.1)
        savings.append((whatif["saving_ms"] + handoff_ms) / loss_ms)
        afters.append(whatif["step_ms_after"] / control["run"]["whatif"]["measured_step_ms"])
    # (the predicted after-step against the profiled control's is reported, not bounded: the
    # inline run's profiled mean step carries the machine's descheduling spikes, 0.8-1.6x here)
    assert 0.75 <= statistics.median(savings) <= 1.3, (savings, job["losses"], afters)
