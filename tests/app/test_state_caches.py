"""The dashboard's per-run figure caches: one per figure, keyed by store, run and code version."""
from __future__ import annotations

from app import state


def test_each_per_run_figure_has_its_own_cache(monkeypatch):
    calls = []
    monkeypatch.setattr(state, "cur", lambda: None)

    def steps_of_test(con, run_id):
        calls.append(("steps", run_id))
        return f"steps of {run_id}"

    def ranks_of_test(con, run_id):
        calls.append(("ranks", run_id))
        return f"ranks of {run_id}"

    steps = state.per_run_figure(steps_of_test, False)
    ranks = state.per_run_figure(ranks_of_test, False)
    # the same arguments reach two figures: each answers its own, each computed once
    assert steps("store.duckdb", "run-a") == "steps of run-a"
    assert ranks("store.duckdb", "run-a") == "ranks of run-a"
    assert steps("store.duckdb", "run-a") == "steps of run-a"
    assert steps("store.duckdb", "run-b") == "steps of run-b"
    assert calls == [("steps", "run-a"), ("ranks", "run-a"), ("steps", "run-b")]
