"""Where per-rank tasks run: in this process, or on a Dask distributed cluster.

`python -m analyzers analyze PATH... --cluster ADDRESS` runs each rank's ingest and analyses as
tasks (analyzers/execution/rank_tasks.py) and the cross-rank work here, on the driver. ADDRESS is a Dask
scheduler's address (tcp://host:8786), or local:N to start N worker processes on this machine.
Dask is imported only when a cluster is asked for (bench/README.md says why Dask, not Ray).

Tasks read their rank's trace and write its Parquet partitions where the workers can reach them:
a local cluster shares this machine's disk; workers elsewhere need the traces and the events root
(`--events-dir`) on shared storage (NFS, an object store through fsspec).
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
from typing import Any, Callable, Iterator, Sequence

_LOCAL = re.compile(r"^local:(\d+)$")
# A dashboard's loads run their per-rank tasks on this cluster (local:N or a scheduler address)
CLUSTER_ENV_VAR = "TRACEDOCTOR_CLUSTER"
# The DuckDB threads of a task's connection (unset: DuckDB's default, all cores)
TASK_THREADS_ENV_VAR = "TRACEDOCTOR_TASK_THREADS"


def task_connection():
    """An in-memory store for one task (or a worker's tasks), with the threads its worker may use."""
    from analyzers.store.database import connect

    con = connect(":memory:")
    threads = os.environ.get(TASK_THREADS_ENV_VAR, "")
    if threads.isdigit() and int(threads) > 0:
        con.execute(f"SET threads = {int(threads)}")
    return con


class InProcess:
    """Runs tasks one after another in this process."""
    description = "in this process"

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any],
            on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
        results = []
        for index, task in enumerate(tasks):
            results.append(fn(task))
            if on_done:
                on_done(index, results[-1])
        return results

    def close(self) -> None:
        pass


class DaskCluster:
    """Tasks on a Dask distributed cluster: one at the address given, or local:N worker processes
    (one thread each: a task's DuckDB uses its process's cores, as it does in-process)."""
    hashes_in_tasks = True     # plain trace files are hashed by the tasks that parse them, not the driver

    def __init__(self, address: str):
        from distributed import Client, LocalCluster

        self._cluster = None
        local = _LOCAL.match(address.strip())
        if local:
            workers = int(local.group(1))
            if workers < 1:
                raise ValueError("--cluster local:N needs N >= 1 workers")
            # the machine's cores shared out: each worker's DuckDB gets its part (tasks read TASK_THREADS)
            share = max(1, (os.cpu_count() or 1) // workers)
            self._cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                         dashboard_address=None, silence_logs=logging.ERROR,
                                         env={TASK_THREADS_ENV_VAR: str(share)})
            try:
                self.client = Client(self._cluster)
            except BaseException:
                self._cluster.close()
                raise
            self.description = f"a local Dask cluster of {workers} worker process{'es' if workers != 1 else ''}"
        else:
            self.client = Client(address, timeout="30s")
            self.description = f"the Dask cluster at {address}"

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any],
            on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
        from distributed import as_completed

        futures = self.client.map(fn, list(tasks), pure=False)
        position = {future.key: index for index, future in enumerate(futures)}
        results: list[Any] = [None] * len(futures)
        failure: BaseException | None = None
        for future in as_completed(futures):
            try:
                results[position[future.key]] = future.result()
            except Exception as exc:   # noqa: BLE001 (a task's own error, or a worker lost)
                if failure is None:    # no new task starts; those running finish before the caller
                    failure = exc      # cleans up the folders they write into
                    self.client.cancel([f for f in futures if not f.done()])
                continue
            if on_done and failure is None:
                on_done(position[future.key], results[position[future.key]])
        if failure is not None:
            raise failure
        return results

    def cannot_write(self, root: str) -> str | None:
        """Why tasks on this cluster cannot share an events root (a memory:// one lives in one process)."""
        if root.lower().startswith("memory://"):
            return "a memory:// events root lives in one process; the cluster's workers need a folder or " \
                   "object store they all reach (--events-dir)"
        return None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()
        if self._cluster is not None:
            with contextlib.suppress(Exception):
                self._cluster.close()


def check_address(address: str) -> str | None:
    """Why `address` cannot name a cluster, or None: local:N, or a scheduler address."""
    text = address.strip()
    if not text:
        return "--cluster needs an address: local:N, or a Dask scheduler's (tcp://host:8786)"
    local = _LOCAL.match(text)
    if text.startswith("local:") and (not local or int(local.group(1)) < 1):
        return f"--cluster {text!r}: local:N needs a number of workers N >= 1"
    return None


@contextlib.contextmanager
def executor(address: str | None) -> Iterator[InProcess | DaskCluster]:
    """The executor for `address` (None: in this process), closed (a local cluster stopped) at the end."""
    runner = InProcess() if address is None else DaskCluster(address)
    try:
        yield runner
    finally:
        runner.close()
