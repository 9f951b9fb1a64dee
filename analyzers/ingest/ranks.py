"""Which rank each file is, and what the `ranks` row says about it (from top-level metadata)."""
from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any

from analyzers.common.model import FileError

_RANK_WORD = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)                           # rank-3, rank_3, rank3
_TRAILING_NUMBER = re.compile(r"[-_](\d+)(?:\.pt\.trace)?\.json", re.IGNORECASE)   # worker_3.json
# trace.3.json; at most 5 digits, so Kineto's own "host_pid.<ms timestamp>.pt.trace.json" is not one
_DOT_NUMBER = re.compile(r"\.(\d{1,5})\.json$", re.IGNORECASE)
MAX_RANK = 2**31 - 1   # ranks are INTEGER in the store
MAX_WORLD_SIZE = 2**31 - 1   # runs.world_size is INTEGER
BIGINT_MIN, BIGINT_MAX = -2**63, 2**63 - 1   # ranks.base_time_ns is BIGINT
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


def _raw_world_size(meta: dict[str, Any]) -> int | None:
    dist = meta.get("distributedInfo")
    return int_or_none(dist.get("world_size")) if isinstance(dist, dict) else None


def declared_world_size(meta: dict[str, Any]) -> int | None:
    size = _raw_world_size(meta)
    return size if size and 0 < size <= MAX_WORLD_SIZE else None


def base_time_ns(meta: dict[str, Any]) -> int | None:
    """baseTimeNanoseconds when it is an integer the store can hold (BIGINT)."""
    value = int_or_none(meta.get("baseTimeNanoseconds"))
    return value if value is not None and BIGINT_MIN <= value <= BIGINT_MAX else None


def metadata_warnings(display: str, meta: dict[str, Any]) -> list[FileError]:
    """Numbers in the metadata the store cannot hold: each is ignored, with a warning naming it."""
    warnings = []
    size = _raw_world_size(meta)
    if size is not None and size > MAX_WORLD_SIZE:
        warnings.append(FileError(display, f"distributedInfo.world_size {_short(size)} is not a usable world size; "
                                           "ignored (the run counts its rank files instead)"))
    base = int_or_none(meta.get("baseTimeNanoseconds"))
    if base is not None and not BIGINT_MIN <= base <= BIGINT_MAX:
        warnings.append(FileError(display, f"baseTimeNanoseconds {_short(base)} is out of range for a 64-bit "
                                           "timestamp; ignored"))
    return warnings


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
        device_name = utf8_text(str(props[0]["name"]))
    schema = meta.get("schemaVersion")
    return {
        "schema_version": None if schema is None else utf8_text(str(schema)),
        "device_name": device_name,
        "base_time_ns": base_time_ns(meta),
        "distributed_info": _json_or_none(meta.get("distributedInfo")),
        "device_properties": _json_or_none(props),
        "trace_meta": _json_text({k: v for k, v in meta.items() if k not in _OWN_COLUMNS}),
    }


def _short(number: int | float) -> str:
    """A number for a message: its digits, or for a long one its first digits and its length (an
    int of 400 digits does not fit a float, and Python refuses to print one of over 4300)."""
    try:
        text = str(number)
    except ValueError:       # int -> str conversion limit (sys.get_int_max_str_digits)
        return "an integer of thousands of digits"
    if len(text) <= 24:
        return text
    return f"{text[:3]}… ({len(text.lstrip('-'))} digits)" if isinstance(number, int) else f"{number:.3g}"


def utf8_text(text: str) -> str:
    """text as DuckDB accepts it (valid UTF-8): an undecodable byte of a file name (held as a
    surrogate escape) or a lone surrogate ("\\ud800" in the JSON) becomes a replacement character."""
    if text.isascii():
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:      # a surrogate that is not a byte escape
        return text.encode("utf-8", "replace").decode("utf-8")


def _json_text(value: Any) -> str:
    return utf8_text(json.dumps(value, ensure_ascii=False))


def _json_or_none(value: Any) -> str | None:
    return None if value is None else _json_text(value)
