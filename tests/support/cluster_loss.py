"""A cluster whose worker dies (SIGKILL, as the OOM killer would) whenever it runs the task of
one chosen file, after writing into its temp folder: tests/cluster/test_cluster.py. A module of its own so
that Dask's worker processes can import the task function."""
from __future__ import annotations

import functools
import os
import signal


def _dies_on(victim: str, fn, task):
    if task.source.display.endswith(victim):
        from analyzers.common.tempfiles import INGEST_PREFIX, make_temp_dir, temp_root

        scratch = make_temp_dir(INGEST_PREFIX, temp_root())
        with open(os.path.join(scratch, "inflated.part.json"), "wb") as out:
            out.write(b" " * (4 << 20))
        os.kill(os.getpid(), signal.SIGKILL)
    return fn(task)


class DyingCluster:
    """An executor (analyzers/cluster.py) whose worker dies under `victim`'s task, every try."""

    def __init__(self, inner, victim: str):
        self.inner, self.victim = inner, victim
        self.hashes_in_tasks = inner.hashes_in_tasks
        self.description = inner.description

    def map(self, fn, tasks, on_done=None, on_lost=None):
        lost = {"on_lost": on_lost} if on_lost is not None else {}
        return self.inner.map(functools.partial(_dies_on, self.victim, fn), tasks, on_done=on_done, **lost)

    def cannot_write(self, root: str):
        return self.inner.cannot_write(root)
