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
# How many times a local cluster runs a task again after its worker died under it (the OOM
# killer, say) before the task counts as lost (Dask's distributed.scheduler.allowed-failures;
# a scheduler given by address keeps its own setting, 3 by default)
TASK_RETRIES = 2
# How long a scheduler given by address has to answer (a service that is no Dask scheduler may
# never answer, or answer bytes Dask reads as a message of exabytes)
CONNECT_TIMEOUT_S = 15


def max_local_workers() -> int:
    """The most worker processes local:N starts: two per core (each runs one task at a time)."""
    return 2 * (os.cpu_count() or 1)


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
            on_done: Callable[[int, Any], None] | None = None,
            on_lost: Callable[[Any, BaseException], Any] | None = None) -> list[Any]:
        """fn over tasks, in order (on_lost: see DaskCluster.map; nothing is lost here)."""
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
            import dask

            with dask.config.set({"distributed.scheduler.allowed-failures": TASK_RETRIES}):
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
            self.client = _connect(address, CONNECT_TIMEOUT_S)
            self.description = f"the Dask cluster at {address}"

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any],
            on_done: Callable[[int, Any], None] | None = None,
            on_lost: Callable[[Any, BaseException], Any] | None = None) -> list[Any]:
        """fn over tasks on the cluster, results in order; on_done(index, result) as each ends.
        A task whose worker died under it more often than the scheduler allows (KilledWorker):
        with on_lost, on_lost(task, error) is its result and the others go on (the temp folders
        the dead workers left are removed at once); without it, or for any other error, no new
        task starts and the error is raised once the running ones finished."""
        from distributed import KilledWorker, as_completed

        from analyzers.common.tempfiles import sweep_stale_temp_dirs

        tasks = list(tasks)
        futures = self.client.map(fn, tasks, pure=False)
        position = {future.key: index for index, future in enumerate(futures)}
        results: list[Any] = [None] * len(futures)
        failure: BaseException | None = None
        for future in as_completed(futures):
            index = position[future.key]
            try:
                results[index] = future.result()
                # forgotten by the scheduler at once: a worker dying later must not recompute it
                # (a task re-run after the map returned would still be writing its temp files)
                future.release()
            except KilledWorker as exc:
                if on_lost is None:
                    failure = failure or exc
                    self.client.cancel([f for f in futures if not f.done()])
                    continue
                results[index] = on_lost(tasks[index], exc)
                sweep_stale_temp_dirs()      # what the dead workers were writing (their locks are free now)
            except Exception as exc:   # noqa: BLE001 (a task's own error)
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


def _connect(address: str, seconds: float):
    """A Client of the scheduler at address, or ConnectionError once it has not answered as one
    within `seconds` (Dask's own timeout does not bound a peer that accepts and then says nothing)."""
    import threading

    from distributed import Client

    outcome: dict[str, Any] = {}

    def attempt() -> None:
        try:
            outcome["client"] = Client(address, timeout=f"{seconds}s")
        except BaseException as exc:   # noqa: BLE001 (MemoryError included: a peer that is no scheduler)
            outcome["error"] = exc

    thread = threading.Thread(target=attempt, name="tracedoctor-dask-connect", daemon=True)
    thread.start()
    thread.join(seconds + 5)
    if "client" in outcome:
        return outcome["client"]
    why = f" ({type(outcome['error']).__name__})" if "error" in outcome else ""
    raise ConnectionError(f"no Dask scheduler answered at {address} within {seconds:g} s{why}: is it a Dask "
                          "scheduler's address (tcp://host:8786)?")


def check_address(address: str) -> str | None:
    """Why `address` cannot name a cluster, or None: local:N, or a scheduler address."""
    text = address.strip()
    if not text:
        return "--cluster needs an address: local:N, or a Dask scheduler's (tcp://host:8786)"
    local = _LOCAL.match(text)
    if text.startswith("local:") and (not local or int(local.group(1)) < 1):
        return f"--cluster {text!r}: local:N needs a number of workers N >= 1"
    if local and int(local.group(1)) > max_local_workers():
        return (f"--cluster {text!r}: at most {max_local_workers()} local workers on this machine "
                f"({os.cpu_count() or 1} cores, two each)")
    return None


@contextlib.contextmanager
def executor(address: str | None) -> Iterator[InProcess | DaskCluster]:
    """The executor for `address` (None: in this process), closed (a local cluster stopped) at the end,
    and then the temp folders of tasks it stopped (an interrupted ingest) removed."""
    runner = InProcess() if address is None else DaskCluster(address)
    try:
        yield runner
    finally:
        runner.close()
        if address is not None:
            from analyzers.common.tempfiles import sweep_stale_temp_dirs

            sweep_stale_temp_dirs()
