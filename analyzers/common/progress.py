"""Progress of long loads and analyses, told to a callback and worded once for the CLI and the dashboard.

A callback is called as progress(stage, item, fraction) — item a file as the user named it, a
rank or an analysis, fraction of the stage done in [0, 1] — and, when it takes keyword arguments,
with details too: done, total (i of n), rank, rows (events stored for that rank), job (i of n
jobs when one input held several), findings (how many the analysis found). Stages, in order: "reading" (files read and hashed),
"parsing" (files handed to the parser), "parsed" (files parsed), "writing" (one rank's rows
stored), "analysing" (one analysis of the run), "analysed".
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

Progress = Callable[..., None]

STAGE_WORDS = {"reading": "Reading", "parsing": "Parsing", "parsed": "Parsed", "writing": "Stored",
               "analysing": "Analysing", "analysed": "Analysed"}


def teller(callback: Progress | None) -> Callable[..., None]:
    """callback made safe to call with details, whether it takes them or only (stage, item, fraction);
    a callback that fails does not stop the load (progress is a courtesy)."""
    if callback is None:
        return lambda *args, **details: None
    takes_details = _takes_keywords(callback)

    def tell(stage: str, item: str, fraction: float, **details: Any) -> None:
        fraction = min(max(float(fraction or 0.0), 0.0), 1.0)
        try:
            if takes_details:
                callback(stage, item, fraction, **details)
            else:
                callback(stage, item, fraction)
        except Exception:   # a broken progress display must not fail the load (a rerun's control flow still passes)
            pass
    return tell


def _takes_keywords(callback: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):   # a builtin without a signature
        return False
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def progress_text(stage: str, item: str = "", fraction: float = 0.0, done: int | None = None,
                  total: int | None = None, rank: int | None = None, rows: int | None = None,
                  job: tuple[int, int] | None = None, findings: int | None = None, **_: Any) -> str:
    """One line for a progress event, e.g. "Stored 3/8: rank 2 (rank2.json), 1,234,567 events".
    item is trace text: the caller escapes the line for where it shows it."""
    words = [STAGE_WORDS.get(stage, stage.capitalize())]
    if done is not None and total:
        words.append(f"{done}/{total}")
    elif 0 < fraction < 1:
        words.append(f"{fraction:.0%}")
    what = []
    if rank is not None:
        what.append(f"rank {rank}" + (f" ({item})" if item else ""))
    elif item:
        what.append(item)
    if rows is not None:
        what.append(f"{rows:,} events")
    if findings is not None:
        what.append(f"{findings} finding{'' if findings == 1 else 's'}")
    line = " ".join(words) + (": " + ", ".join(what) if what else "")
    if job is not None and job[1] > 1:
        line = f"job {job[0]}/{job[1]} · " + line
    return line
