"""Which two runs the Compare page opens on: a before/after of one workload when the store has one,
else two runs of the same shape (rank count and GPU model). Pure functions over the run list
(analyzers.store.runs.list_runs rows plus each run's per-rank device names), so they are tested alone."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Sequence

# Words that mark a run as one side of a before/after experiment (in its name, tags or source).
# Loose words ("fix", "new", "base") are left out: "before fix" names the before side.
BEFORE_WORDS = ("before", "baseline", "pre", "orig", "original", "unfixed")
AFTER_WORDS = ("after", "fixed", "post", "optimized", "optimised", "tuned")
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Pair:
    before: str
    after: str
    reason: str   # one line saying why these two, shown under the pickers


def _words(text: object) -> list[str]:
    return _WORD.findall(str(text or "").lower())


def _side_and_stem(texts: Sequence[object]) -> tuple[str | None, tuple[str, ...]]:
    """('before' | 'after' | None, the words left once the side words are taken out) of the first
    text that names a side; (None, ()) when none does."""
    for text in texts:
        words = _words(text)
        sides = {"before" for w in words if w in BEFORE_WORDS} | {"after" for w in words if w in AFTER_WORDS}
        if len(sides) == 1:
            return sides.pop(), tuple(w for w in words if w not in BEFORE_WORDS and w not in AFTER_WORDS)
    return None, ()


def _marked(run: dict[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """(side, stem) read from each of the run's name, source folder name and tags."""
    source = PurePath(str(run.get("source") or "")).name
    found = []
    for texts in ([run.get("name")], [source], list(run.get("tags") or [])):
        side, stem = _side_and_stem(texts)
        if side is not None:
            found.append((side, stem))
    return found


def _shape(run: dict[str, Any], devices: dict[str, Sequence[str | None]]) -> tuple[int, tuple[str | None, ...]]:
    """Rank count (rank files stored) and the sorted per-rank GPU names (None: no GPU named)."""
    names = tuple(devices.get(run["run_id"], ()))
    return int(run.get("n_ranks") or len(names)), tuple(sorted(names, key=lambda n: (n is None, n or "")))


def _before_after(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """a is marked 'before' and b 'after' with the same other words, in their names, their source
    folders' names or their tags (`resnet_before/` and `resnet_after/`)."""
    for side_a, stem_a in _marked(a):
        for side_b, stem_b in _marked(b):
            if side_a == "before" and side_b == "after" and stem_a == stem_b:
                return True
    return False


def default_pair(runs: Sequence[dict[str, Any]], devices: dict[str, Sequence[str | None]],
                 current: str | None = None) -> Pair | None:
    """The pair the Compare page opens on; runs newest first (as list_runs returns them).

    1. a before/after of one workload: names, source folders or tags alike but for a side word
       (`*_before` / `*_after`, baseline / fixed, ...), with the same rank count and GPUs; the one
       with the current run, else the newest;
    2. else two runs with the same rank count and GPUs: the current run and the newest such other
       run, else the two newest such runs (older one as before);
    3. else the two newest runs (the page then says what differs). None with fewer than two runs.
    """
    if len(runs) < 2:
        return None
    order = {run["run_id"]: i for i, run in enumerate(runs)}   # 0 = newest
    same_shape = [(a, b) for a in runs for b in runs
                  if a["run_id"] != b["run_id"] and _shape(a, devices) == _shape(b, devices)]

    def prefer(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, Any]] | None:
        with_current = [p for p in pairs if current in (p[0]["run_id"], p[1]["run_id"])]
        return min(with_current or pairs, key=lambda p: (max(order[p[0]["run_id"]], order[p[1]["run_id"]]),
                                                         order[p[1]["run_id"]]), default=None)

    marked = prefer([(a, b) for a, b in same_shape if _before_after(a, b)])
    if marked:
        return Pair(marked[0]["run_id"], marked[1]["run_id"],
                    "a before/after of one workload (their names, folders or tags say so), same ranks and GPUs")
    alike = prefer([(a, b) for a, b in same_shape if order[a["run_id"]] > order[b["run_id"]]])
    if alike:
        return Pair(alike[0]["run_id"], alike[1]["run_id"],
                    "the most recent runs with the same number of ranks and the same GPUs (older one as before)")
    return Pair(runs[1]["run_id"], runs[0]["run_id"],
                "the two newest runs: no two stored runs share a rank count and GPU model")
