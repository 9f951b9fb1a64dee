"""Which rank each file is, and what the `ranks` row says about it (from top-level metadata)."""
from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any

from ..model import FileError

_RANK_WORD = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)                           # rank-3, rank_3, rank3
_TRAILING_NUMBER = re.compile(r"[-_](\d+)(?:\.pt\.trace)?\.json", re.IGNORECASE)   # worker_3.json
# trace.3.json; at most 5 digits, so Kineto's own "host_pid.<ms timestamp>.pt.trace.json" is not one
_DOT_NUMBER = re.compile(r"\.(\d{1,5})\.json$", re.IGNORECASE)
MAX_RANK = 2**31 - 1   # ranks are INTEGER in the store
_OWN_COLUMNS = ("distributedInfo", "deviceProperties", "schemaVersion", "baseTimeNanoseconds")


def int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def rank_from_name(name: str, several_files: bool) -> int | None:
    """The rank a file's name or folder gives: rank-3 / rank3 in the file name; a bare trailing
    _3.json or .3.json only when several files make up the run (a lone
    "resnet50_num_workers_4.json" is not rank 4); else rank3/ in its folders (nearest first),
    as torchrun log directories and per-rank profiler outputs are often laid out."""
    parts = PurePosixPath(name.replace("\\", "/")).parts or (name,)
    base = parts[-1]
    match = _RANK_WORD.search(base) or (
        (_TRAILING_NUMBER.search(base) or _DOT_NUMBER.search(base)) if several_files else None)
    for folder in reversed(parts[:-1]):
        if match:
            break
        match = _RANK_WORD.search(folder)
    rank = int(match.group(1)) if match else None
    return rank if rank is not None and rank <= MAX_RANK else None


def declared_rank(meta: dict[str, Any]) -> int | None:
    dist = meta.get("distributedInfo")
    return int_or_none(dist.get("rank")) if isinstance(dist, dict) else None


def _usable(rank: int | None) -> bool:
    return rank is not None and 0 <= rank <= MAX_RANK


def assign_ranks(files: list[tuple[str, str, dict]]
                 ) -> tuple[list[int | None], list[FileError], list[FileError]]:
    """files: (display, path inside its folder or archive, metadata). distributedInfo.rank, else
    a number in the file's name or folders, else the lowest free number in input order. A second
    file claiming a taken rank is an error naming both; its slot in the result is None.
    Returns (ranks, errors, warnings); a declared rank that cannot be one (negative, too large)
    is a warning, and the file is numbered as if it had none."""
    several = len(files) > 1
    ranks: list[int | None] = [None] * len(files)
    owner: dict[int, str] = {}
    errors: list[FileError] = []
    warnings: list[FileError] = []
    unnumbered: list[int] = []
    for index, (display, member, meta) in enumerate(files):
        rank = declared_rank(meta)
        if rank is not None and not _usable(rank):
            warnings.append(FileError(display, f"distributedInfo.rank {rank} is not a usable rank number; "
                                               "the rank is taken from the file name or order instead"))
            rank = None
        if rank is None:
            rank = rank_from_name(member, several)
        if rank is None:
            unnumbered.append(index)
        elif rank in owner:
            errors.append(FileError(display, f"duplicate rank {rank}: {owner[rank]} is already rank {rank}"))
        else:
            owner[rank] = display
            ranks[index] = rank
    next_free = 0
    for index in unnumbered:
        while next_free in owner:
            next_free += 1
        owner[next_free] = files[index][0]
        ranks[index] = next_free
    return ranks, errors, warnings


def declared_world_size(meta: dict[str, Any]) -> int | None:
    dist = meta.get("distributedInfo")
    size = int_or_none(dist.get("world_size")) if isinstance(dist, dict) else None
    return size if size and size > 0 else None


def world_size(metas: list[dict[str, Any]]) -> int:
    """distributedInfo.world_size of any rank, else the number of rank files."""
    return next((size for size in map(declared_world_size, metas) if size), len(metas))


def world_size_mismatch(files: list[tuple[str, dict[str, Any]]]) -> list[FileError]:
    """files: (display, metadata). A warning when their distributedInfo disagree on the job's
    world size: traces of different jobs loaded as one run give meaningless rank comparisons."""
    first_with: dict[int, str] = {}
    for display, meta in files:
        size = declared_world_size(meta)
        if size:
            first_with.setdefault(size, display)
    if len(first_with) < 2:
        return []
    listed = ", ".join(f"{size} in {display}" for size, display in sorted(first_with.items()))
    return [FileError(next(iter(first_with.values())),
                      f"the files disagree on the job's world size ({listed}): they may come from different "
                      "jobs; load each job as its own run")]


def rank_columns(meta: dict[str, Any]) -> dict[str, Any]:
    """schema_version, device_name, base_time_ns, distributed_info, device_properties, trace_meta."""
    props = meta.get("deviceProperties")
    device_name = None
    if isinstance(props, list) and props and isinstance(props[0], dict) and props[0].get("name") is not None:
        device_name = str(props[0]["name"])
    schema = meta.get("schemaVersion")
    return {
        "schema_version": None if schema is None else str(schema),
        "device_name": device_name,
        "base_time_ns": int_or_none(meta.get("baseTimeNanoseconds")),
        "distributed_info": _json_or_none(meta.get("distributedInfo")),
        "device_properties": _json_or_none(props),
        "trace_meta": json.dumps({k: v for k, v in meta.items() if k not in _OWN_COLUMNS}),
    }


def _json_or_none(value: Any) -> str | None:
    return None if value is None else json.dumps(value)
