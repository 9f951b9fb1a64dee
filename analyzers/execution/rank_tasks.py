"""A partitioned run's analyses as per-rank tasks (analyzers/cluster.py runs them), the rest on the driver.

1. driver: the run facts (sql.engine.RUN_FACTS: how many ProfilerStep numbers the run has), read from
   the Parquet partitions in place;
2. a task per rank (rank_views): that rank's sql.engine.RANK_VIEWS from its partition alone, written
   as Parquet files under <events root>/_analysis/<token>/;
3. driver: those files served as the cached views; the views across ranks (collectives matched
   by sequence, the straggler) and the analysis context (each rank's step figures) from them;
4. a task per rank (analyze_rank): every analysis that looks at one rank, on its partition and
   its view files, with the driver's context; back come its findings, notes and idle split;
   and the integrity conditions that are per rank (integrity.RANK_CONDITIONS: partial steps,
   graph replays and captures, repeated step numbers, the profiler's own log);
5. driver: the ACROSS_RANKS analyses and the integrity notes (those rows merged, and clock skew,
   collective naming and missing ranks from the cached views); then root causes as in-process
   (findings._finish). Of the events, the driver reads only the ProfilerStep ranges (the run facts,
   step 1), and the GPU kinds of every rank when some rank has steps and no GPU work (build_context).
Each task opens its own cursor on its worker's in-memory DuckDB, which holds the SQL library
(loaded once per worker) and the run's catalogue rows; tasks share nothing else. The findings
equal those of the in-process pass (tests/cluster/test_cluster.py).
"""
from __future__ import annotations

import dataclasses
import functools
import posixpath
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import duckdb

from analyzers.store import partitions
from analyzers.sql.engine import VIEW_THRESHOLDS, ACROSS_RANK_VIEWS, RANK_VIEWS, RUN_FACTS, RunCache, ensure_loaded


@dataclass
class Catalogue:
    """The rows of a run the SQL library reads besides its events: its runs row and the task's own
    ranks row (a rank's views and analyses read no other rank's)."""
    run_columns: list[str]
    run_row: tuple
    rank_columns: list[str]
    rank_rows: list[tuple]


@dataclass
class RankTask:
    run_id: str
    rank: int
    events: str                                   # the rank's partition file
    catalogue: Catalogue
    facts: dict[str, tuple[list[str], list[tuple]]]   # RUN_FACTS rows, td_cache_run first
    thresholds: dict[str, float]
    scratch: str                                  # where rank_views writes its files
    view_files: dict[str, str] = field(default_factory=dict)    # analyze_rank: rank_views' files
    view_types: dict[str, dict[str, str]] = field(default_factory=dict)   # and their column types
    context: Any = None                           # analyze_rank: findings.AnalysisContext
    kinds: list[str] = field(default_factory=list)  # analyze_rank: the analyses to run


@dataclass
class RankViews:
    rank: int
    files: dict[str, str]
    types: dict[str, dict[str, str]]     # each view's column types (RunCache.save)
    seconds: float


_worker_lock = threading.Lock()


@functools.cache
def _worker_database() -> duckdb.DuckDBPyConnection:
    """This worker process's in-memory DuckDB with the SQL library (one per process)."""
    from analyzers.cluster import task_connection

    return ensure_loaded(task_connection())


def _task_cursor(task: RankTask) -> duckdb.DuckDBPyConnection:
    """A cursor of its own on the worker's database, which holds the task's run and rank rows (a
    worker may run tasks on several threads: a connection is used by one at a time)."""
    cat = task.catalogue
    with _worker_lock:
        cursor = _worker_database().cursor()
        cursor.execute(f"INSERT OR IGNORE INTO runs ({', '.join(cat.run_columns)}) "
                       f"VALUES ({', '.join(['?'] * len(cat.run_columns))})", list(cat.run_row))
        cursor.executemany(f"INSERT OR IGNORE INTO ranks ({', '.join(cat.rank_columns)}) "
                           f"VALUES ({', '.join(['?'] * len(cat.rank_columns))})",
                           [list(r) for r in cat.rank_rows])
    return ensure_loaded(cursor)


def _rank_cache(con: duckdb.DuckDBPyConnection, task: RankTask) -> RunCache:
    partitions.register(con, [task.events])
    cache = RunCache(con, task.run_id, [task.rank], events_sql=lambda rank: partitions.parquet_events_sql([task.events]))
    for view, (columns, rows) in task.facts.items():
        cache.serve_rows(view, rows, columns)
    for view in ACROSS_RANK_VIEWS:    # a task sees one rank: a view across ranks read here would be wrong
        params = "".join(f", {name.lower()}" for name in VIEW_THRESHOLDS.get(view, ()))
        con.execute(f"CREATE OR REPLACE TEMP MACRO {view}(run{params}) AS TABLE SELECT error("
                    f"'{view} reads every rank: a per-rank analysis cannot use it (mark it ACROSS_RANKS)')")
    return cache


def rank_views(task: RankTask) -> RankViews:
    """Step 2: the rank's RANK_VIEWS, computed from its partition and written as Parquet."""
    started = time.perf_counter()
    con = _task_cursor(task)
    cache = _rank_cache(con, task)
    try:
        cache.fill_ranks(task.thresholds, [task.rank])
        files, types = {}, {}
        for view in RANK_VIEWS:
            files[view] = posixpath.join(task.scratch, view, f"rank={task.rank}.parquet")
            types[view] = cache.save(view, files[view])
    finally:
        cache.drop()
        con.close()
    return RankViews(task.rank, files, types, time.perf_counter() - started)


def analyze_rank(task: RankTask):
    """Step 4: the analyses of one rank, on its partition and its view files (a findings.PassResult)."""
    from analyzers.analysis.kinds import analysis_modules
    from analyzers.analysis.passes import analysis_pass
    from analyzers.analysis.integrity import rank_condition_rows

    con = _task_cursor(task)
    cache = _rank_cache(con, task)
    try:
        for view in RANK_VIEWS:
            cache.serve_files(view, [task.view_files[view]], task.view_types[view])
        modules = [m for m in analysis_modules() if m.SPEC.kind in task.kinds]
        with cache.only(task.rank):
            result = analysis_pass(con, task.run_id, task.context, modules, with_gaps=task.context.has_gpu)
            result.integrity_rows = rank_condition_rows(con, task.run_id, task.thresholds)
            return result
    finally:
        cache.drop()
        con.close()


def _catalogues(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[int, Catalogue]:
    """Each rank's Catalogue."""
    run = con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
    run_row = tuple(run.fetchone())
    run_columns = [d[0] for d in run.description]
    ranks = con.execute("SELECT * FROM ranks WHERE run_id = ? ORDER BY rank", [run_id])
    rank_columns = [d[0] for d in ranks.description]
    return {row[rank_columns.index("rank")]: Catalogue(run_columns, run_row, rank_columns, [row])
            for row in ranks.fetchall()}


def analyze_on_runner(con: duckdb.DuckDBPyConnection, run_id: str, thresholds: Mapping[str, float],
                      ranks: list[int], modules: list[Any], across: list[Any], runner, tell):
    """Steps 1-5 for a partitioned run: (analysis context, [each rank's PassResult..., the
    across-ranks PassResult], integrity notes, the report's ranks table)."""
    from analyzers.analysis.passes import analysis_pass
    from analyzers.analysis.context import build_context
    from analyzers.analysis.integrity import integrity_notes, merge_rank_conditions
    from analyzers.analysis.metrics import rank_summary

    files = dict(zip(ranks, (partitions.locations(con, run_id, rank)[0] for rank in ranks)))
    scratch = posixpath.join(partitions.events_root_of(files[ranks[0]]), partitions.SCRATCH, partitions.new_token())
    catalogues = _catalogues(con, run_id)
    cache = RunCache(con, run_id, ranks)
    n = len(ranks)
    try:
        tell("analysing", "run facts", 0.0, done=0, total=2 * n)
        cache.fill_run_facts(thresholds)
        facts = {view: cache.rows(view) for view in RUN_FACTS}
        tasks = [RankTask(run_id, rank, files[rank], catalogues[rank], facts, dict(thresholds), scratch)
                 for rank in ranks]
        done = 0

        def told(index: int, _result) -> None:
            nonlocal done
            done += 1
            stage = "views" if done <= n else "analyses"
            tell("analysing", f"rank {tasks[index].rank}: {stage}", done / (2 * n), done=done, total=2 * n)

        views = runner.map(rank_views, tasks, on_done=told)
        for view in RANK_VIEWS:
            cache.serve_files(view, [v.files[view] for v in views], views[0].types[view])
        cache.fill_across(thresholds)
        ctx = build_context(con, run_id, thresholds)
        kinds = [m.SPEC.kind for m in modules if m not in across]
        for task, rank_views_done in zip(tasks, views):
            task.view_files, task.view_types = rank_views_done.files, rank_views_done.types
            task.context, task.kinds = dataclasses.replace(ctx, notes=[]), kinds
        results = runner.map(analyze_rank, tasks, on_done=told)
        for module in across:
            tell("analysing", module.SPEC.title, 1.0, done=2 * n, total=2 * n)
        rank_rows = merge_rank_conditions([r.integrity_rows for r in results])
        results.append(analysis_pass(con, run_id, ctx, across, with_gaps=False))
        integrity = integrity_notes(con, run_id, ctx.thresholds, rank_rows=rank_rows)
        return ctx, results, integrity, rank_summary(con, run_id)
    finally:
        cache.drop()
        partitions.remove([scratch])
