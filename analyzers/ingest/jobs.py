"""Which job each rank file belongs to: one load of a parent folder of unrelated jobs must not
become one mixed run (its timeline "1,666,178,633,367 ms into the trace", its ranks compared
across jobs).

Files are of different jobs when they were traced far apart in time, or when their
distributedInfo declares different world sizes or backends, or when two files claim the same
rank and sit in different folders (a before/ and an after/ run). When is a file traced: its
baseTimeNanoseconds (the wall clock at profiler start, which newer Kineto writes beside
timestamps of its own clock), else its first timestamps (older Kineto writes wall-clock µs), read
from the head on until they come, however long the first events are. A file with neither (no
timed event) is a job of its own: nothing says which job it belongs to. A file without distributedInfo joins the one
declared job of its time group whose folder holds it; the others of a time group are one job.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import PurePosixPath
from typing import Any

from .sources import default_name
from .ranks import base_time_ns, declared_rank, declared_world_size, rank_from_name, utf8_text

# Ranks of one job run the same profiled steps, held in step by their collectives, so their first
# events lie within a step (plus host clock offsets of ms) of each other; 5 minutes is above any
# training step we know yet far below the days between separate jobs' traces. TraceDoctor's
# choice, in µs as traces write ts.
JOB_START_GAP_US = 300 * 1_000_000
_EPOCH_MIN_US = 10**15          # ts this large is microseconds since 1970 (2001 on): printable as a date


@dataclass
class JobFile:
    display: str                 # as the user knows it (errors, messages)
    where: str                   # its path inside the given folder or archive
    meta: dict[str, Any]
    start_us: float | None       # when it was traced, µs (clock_start_us)


@dataclass
class Job:
    members: list[int]           # indexes into the files given to group_jobs, in input order
    label: str                   # its folder, else its first file's name
    description: str             # label, file count, what sets it apart
    undated: bool = False        # one file with no timestamp to place it by, beside dated ones


def clock_start_us(meta: dict[str, Any], head_start: float | None) -> float | None:
    """When a file was traced, µs: its baseTimeNanoseconds, else the median ts of its first events."""
    base = base_time_ns(meta)
    return base / 1000 if base else head_start


def _declared(meta: dict[str, Any]) -> tuple[int | None, str | None] | None:
    dist = meta.get("distributedInfo")
    if not isinstance(dist, dict):
        return None
    backend = dist.get("backend")
    key = (declared_world_size(meta), backend if isinstance(backend, str) else None)
    return key if key != (None, None) else None


def group_jobs(files: list[JobFile]) -> list[Job]:
    """The jobs among the files, in input order of their first file; one Job for one job."""
    if not files:
        return []
    timed = sorted((f.start_us, i) for i, f in enumerate(files) if f.start_us is not None)
    time_group = {}
    group = 0
    for k, (start, index) in enumerate(timed):
        if k and start - timed[k - 1][0] > JOB_START_GAP_US:
            group += 1
        time_group[index] = group
    # an undated file holds no timestamp in its first _HEAD_MAX_BYTES: beside dated files nothing
    # says which job it belongs to, so it is a job of its own (never merged into another)
    undated = {i for i, f in enumerate(files) if f.start_us is None} if timed else set()
    keyed: dict[tuple[int, Any], list[int]] = {}
    loose: dict[int, list[int]] = {}
    for index, f in enumerate(files):
        if index in undated:
            continue
        when = time_group.get(index, 0)
        declared = _declared(f.meta)
        if declared is None:
            loose.setdefault(when, []).append(index)
        else:
            keyed.setdefault((when, declared), []).append(index)
    for when, indexes in loose.items():
        declared_here = [key for key in keyed if key[0] == when]
        roots = {key: _common_folder([files[i] for i in keyed[key]]) for key in declared_here}
        for index in indexes:
            # a file that declares nothing joins the one declared job whose folder holds it
            holders = [key for key in declared_here if _within(_folder(files[index]), roots[key])]
            # the others of the time group stay together (per-host folders of one job declare nothing)
            keyed.setdefault(holders[0] if len(holders) == 1 else (when, None), []).append(index)
    groups = sorted([part for members in keyed.values() for part in _split_repeated_ranks(files, sorted(members))]
                    + [[i] for i in sorted(undated)], key=lambda members: members[0])
    # an undated file is labelled by its own name, not its folder (the dated job's label)
    labels = _labels([[replace(files[i], where=PurePosixPath((files[i].where or files[i].display).replace("\\", "/")).name)
                       if i in undated else files[i] for i in members] for members in groups])
    return [Job(members, label, _describe(label, [files[i] for i in members]), undated=members[0] in undated)
            for members, label in zip(groups, labels)]


def _folder(f: JobFile) -> str:
    return str(PurePosixPath(f.where.replace("\\", "/")).parent) if f.where else "."


def _common_folder(members: list[JobFile]) -> str:
    folders = [_folder(f) for f in members]
    return os.path.commonpath(folders) if folders and all(f != "." for f in folders) else "."


def _within(folder: str, root: str) -> bool:
    return root in ("", ".") or folder == root or folder.startswith(root.rstrip("/") + "/")


def _split_repeated_ranks(files: list[JobFile], members: list[int]) -> list[list[int]]:
    """members as one job, or one job per folder when two of its files claim the same rank (a
    before/ and an after/ run of one set-up, traced minutes apart) and the folders tell them apart."""
    claimed = [declared_rank(files[i].meta) for i in members]
    claimed = [rank if rank is not None else rank_from_name(files[i].where or files[i].display, len(members) > 1)
               for rank, i in zip(claimed, members)]
    known = [rank for rank in claimed if rank is not None]
    if len(known) == len(set(known)):
        return [members]
    by_folder: dict[str, list[int]] = {}
    for i in members:
        by_folder.setdefault(_folder(files[i]), []).append(i)
    return list(by_folder.values()) if len(by_folder) > 1 else [members]


def _labels(groups: list[list[JobFile]]) -> list[str]:
    """Each job's folder (the deepest folder holding all its files), else its first file's name
    without trace suffixes; made unique with " (2)", " (3)" when two jobs would share one."""
    labels = []
    for members in groups:
        folders = [str(PurePosixPath(f.where.replace("\\", "/")).parent) for f in members if f.where]
        common = os.path.commonpath(folders) if folders and len(folders) == len(members) else "."
        if common not in ("", ".", "/"):
            label = PurePosixPath(common).name
        else:
            label = default_name([PurePosixPath((f.where or f.display).replace("\\", "/")).name for f in members])
        labels.append(utf8_text(label))
    seen: dict[str, int] = {}
    unique = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        unique.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return unique


def _describe(label: str, members: list[JobFile]) -> str:
    sizes = sorted({s for s in (declared_world_size(f.meta) for f in members) if s})
    starts = [f.start_us for f in members if f.start_us is not None]
    details = [f"{len(members)} file{'' if len(members) == 1 else 's'}"]
    if sizes:
        details.append("world size " + "/".join(map(str, sizes)))
    if starts and min(starts) >= _EPOCH_MIN_US:
        try:
            when = datetime.fromtimestamp(min(starts) / 1e6, tz=timezone.utc)
            details.append(f"traced {when:%Y-%m-%d %H:%M} UTC")
        except (OverflowError, OSError, ValueError):
            pass
    elif starts:
        details.append(f"clock at {min(starts) / 1e6:,.0f} s")
    else:
        details.append("no timestamp to date it")
    return f"{label} ({', '.join(details)})"


MIXED_JOBS = "these files come from {n} different jobs (traced far apart in time, or their distributedInfo disagrees)"
_REFUSAL_END = ". Load each job on its own"


UNDATED_IN_RUN = ("it holds no timestamp (in its first GiB) to tell which job it belongs to; loaded with the "
                  "other files as asked, though nothing shows it is of their job (split by job, it is a run of its own)")


def mixed_jobs_message(jobs: list[Job]) -> str:
    """Why an input of several jobs is refused, naming them."""
    return MIXED_JOBS.format(n=len(jobs)) + ": " + "; ".join(job.description for job in jobs) + _REFUSAL_END


def is_mixed_jobs_refusal(error: str) -> bool:
    head, _, _ = MIXED_JOBS.partition("{n}")
    return error.startswith(head) and error.endswith(_REFUSAL_END)
