"""Trace integrity notes: what in a trace makes figures unreliable, or would fake a finding, said in
plain words with what the analyses did about it.

Each condition is found by one macro of sql/lib/integrity.sql (CUDA/HIP graph replays and
captures, NCCL/RCCL kernels the analyses cannot use, clock skew between ranks, missing ranks,
ProfilerStep numbers that repeat, a trace that begins or ends inside a step, events the profiler
says it dropped). `integrity_notes`
returns one note per condition present, none for a clean trace. Call it inside
`sql.engine.run_cache` to reuse the run's cached views (collective_instances, launches).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import duckdb

from analyzers.common import thresholds as th
from analyzers.analysis.kinds import query
from analyzers.common.contract import rank_list
from analyzers.common.safe_text import clip
from analyzers.sql.engine import ensure_loaded

# Longest trace text (a kernel name, a log line) quoted in a note.
QUOTED_TEXT_LIMIT = 120


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def _ranks(ranks: Sequence[int]) -> str:
    """'rank 3' / 'ranks 0, 1' / 'ranks 0-127 (128 ranks)' for long lists."""
    return f"rank{'s' if len(ranks) > 1 else ''} {rank_list(ranks)}"


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def graph_replay_note(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    launches = sum(r["graph_launches"] for r in rows)
    replayed = sum(r["replayed"] for r in rows)
    busy = sum(r["replayed_ns"] or 0 for r in rows)
    return (f"{_ranks([r['rank'] for r in rows]).capitalize()} replay{'s' if len(rows) == 1 else ''} CUDA/HIP graphs: "
            f"{_plural(launches, 'graph launch', 'graph launches')} ran "
            f"{_plural(replayed, 'kernel or copy', 'kernels and copies')} "
            f"({_ms(busy)} of GPU time). They count as GPU work; the gaps between them are queued work, not launch "
            "gaps, and a graph launch is not counted as a kernel launch in the launch statistics.")


def graph_capture_note(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    captures = sum(r["captures"] for r in rows)
    inside = sum(r["launches_in_capture"] for r in rows)
    never_ran = sum(r["launches_without_work"] for r in rows)
    return (f"The trace of {_ranks([r['rank'] for r in rows])} records {_plural(captures, 'CUDA/HIP graph capture')} "
            f"({_ms(sum(r['capture_ns'] for r in rows))}): the {_plural(inside, 'launch call')} inside only recorded "
            f"work into a graph ({never_ran} of them have no GPU work in the trace: their kernels never ran then). "
            "No idle cause or launch gap is diagnosed from a capture: the GPU time idle during it still shows in "
            "the time breakdown, but no finding counts it. Profile the graph's replays to see how the captured "
            "work runs.")


def comm_name_notes(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    notes = []
    for r in query(con, "SELECT * FROM unrecognised_comm_kernels(?) ORDER BY what", [run_id]):
        example = clip(r["example"], QUOTED_TEXT_LIMIT)
        if r["what"] == "not_comm":
            notes.append(f"{_plural(r['kernels'], 'kernel')} named like NCCL/RCCL (e.g. {example}) do not match the "
                         "communication kernel pattern (^nccl.*Kernel, as in HTA): they count as computation, and "
                         "communication figures leave them out.")
        else:
            notes.append(f"{_plural(r['kernels'], 'communication kernel')} (e.g. {example}) name no collective and "
                         "carry no \"Collective name\": they are matched across ranks by their order only, and "
                         "their bandwidth is unknown.")
    return notes


def clock_skew_note(con: duckdb.DuckDBPyConnection, run_id: str, min_ns: float) -> str | None:
    rows = query(con, "SELECT * FROM clock_skew(?, ?) ORDER BY median_skew_ns DESC, rank", [run_id, int(min_ns)])
    if not rows:
        return None
    parts = [f"rank {r['rank']}'s clock runs ahead of rank {r['behind_rank']}'s by at least "
             f"{_ms(r['median_skew_ns'])} (median; up to {_ms(r['max_skew_ns'])}): {r['instances']} of its "
             f"{r['matched_instances']} matched collectives start on rank {r['rank']} after they had ended on "
             f"rank {r['behind_rank']}"
             for r in rows]
    return ("The ranks' clocks disagree: " + "; ".join(parts) + ". A collective cannot end on one rank before it "
            "starts on another, so anything comparing instants across these ranks (the timeline side by side, who "
            "reached a collective last) is off by as much, and the straggler and wait figures across them are "
            "unreliable: the waits come from each collective's duration on its own rank, which a clock offset "
            "leaves unchanged, but a skew this large can also mean the ranks' traces do not cover the same "
            "collectives. Synchronise the hosts' clocks (NTP/PTP) and profile every rank over the same steps.")


def repeated_steps_note(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    worst = max(rows, key=lambda r: r["most"])
    return (f"On {_ranks([r['rank'] for r in rows])}, ProfilerStep numbers repeat (e.g. #{worst['example']} "
            f"{worst['most']} times): the file joins several profiling sessions, or the loop's step numbering "
            "restarts. Each step is taken from the first range of its number to the last, so step times and "
            "costs per step span the sessions between them. Load each session's file as its own run.")


def missing_ranks_note(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    row = next(iter(query(con, "SELECT * FROM missing_ranks(?)", [run_id])), None)
    # one rank of a larger job: rank_imbalance's own note says so
    if row is None or row["loaded"] < 2:
        return None
    missing = row["world_size"] - row["loaded"]
    return (f"The job has {row['world_size']} ranks (distributedInfo.world_size) but the run holds "
            f"{row['loaded']} ({_ranks(row['loaded_ranks'])}): rank imbalance and communication figures compare only "
            f"these, so a straggler among the other {missing} cannot be seen. Load every rank's file to compare "
            "them all.")


def partial_step_notes(rows: list[dict[str, Any]]) -> list[str]:
    begins = [r for r in rows if r["edge"] == "begins"]
    ends = [r for r in rows if r["edge"] == "ends"]
    notes = []
    if begins:
        where = "; ".join(f"rank {r['rank']}: {_ms(r['dur_ns'])} before ProfilerStep#{r['step']}" for r in begins)
        notes.append(f"The trace begins inside a step ({where}): the GPU was running work launched before "
                     "profiling started. That partial step is no step's cost: costs count only inside "
                     "ProfilerSteps, and GPU work whose launch is not in the trace is not counted.")
    if ends:
        where = "; ".join(f"rank {r['rank']}: ProfilerStep#{r['step']} lasts {_ms(r['dur_ns'])} against a median "
                          f"{_ms(r['median_step_ns'])}" for r in ends)
        notes.append(f"The trace ends inside a step ({where}), with nothing after it on the host: the profiler "
                     "stopped before that step finished. It is counted as a (short) step, so that rank's per-step "
                     "figures average in a partial one. Profile with a schedule, which stops at a step boundary.")
    return notes


_LOG_WORDS = {"dropped": "dropped activity records", "buffer_full": "ran out of trace buffers and stopped recording",
              "stopped_early": "stopped recording GPU activity early"}


def dropped_events_note(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    dropped = sum(r["dropped"] or 0 for r in rows)
    what = sorted({_LOG_WORDS[r["what"]] for r in rows})
    count = f" ({dropped} records in all)" if dropped else ""
    return (f"The profiler's log in the trace of {_ranks(sorted({r['rank'] for r in rows}))} says it "
            f"{' and '.join(what)}{count}, e.g. \"{clip(rows[0]['line'], QUOTED_TEXT_LIMIT)}\". GPU activity may be "
            "missing: idle time, launch gaps and the findings built on them may be work that was not recorded, so "
            "read them as upper bounds. Profile fewer steps at once so the profiler's buffers hold them.")


# The conditions found one rank at a time (their macros read only that rank's events and views), in
# the order their notes list them: (query, its thresholds, the order of its rows). A cluster's rank
# tasks find them (rank_condition_rows) and the driver merges their rows (merge_rank_conditions).
# Collective naming, clock skew and missing ranks read the collectives and ranks of every rank.
RANK_CONDITIONS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "graph_replays": ("SELECT * FROM graph_replays(?) ORDER BY rank", (), ("rank",)),
    "graph_captures": ("SELECT * FROM graph_captures(?) ORDER BY rank", (), ("rank",)),
    "repeated_profiler_steps": ("SELECT * FROM repeated_profiler_steps(?) ORDER BY rank", (), ("rank",)),
    "partial_steps": ("SELECT * FROM partial_steps(?, ?) ORDER BY edge, rank", ("PARTIAL_STEP_MAX_FRACTION",),
                      ("edge", "rank")),
    "kineto_log_warnings": ("SELECT * FROM kineto_log_warnings(?) ORDER BY rank, what, line", (),
                            ("rank", "what", "line")),
}


def rank_condition_rows(con: duckdb.DuckDBPyConnection, run_id: str,
                        thresholds: Mapping[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The rows of every RANK_CONDITIONS query on what `con` shows of the run (a rank, or all)."""
    ensure_loaded(con)
    t = th.resolve(thresholds)
    return {name: query(con, sql, [run_id, *(t[k] for k in names)])
            for name, (sql, names, _) in RANK_CONDITIONS.items()}


def merge_rank_conditions(parts: Sequence[Mapping[str, list[dict[str, Any]]]]) -> dict[str, list[dict[str, Any]]]:
    """Ranks' rank_condition_rows as the whole run's: concatenated, in each query's order."""
    return {name: sorted((row for part in parts for row in part.get(name, [])),
                         key=lambda row, keys=keys: tuple(row[k] for k in keys))
            for name, (_, _, keys) in RANK_CONDITIONS.items()}


def integrity_notes(con: duckdb.DuckDBPyConnection, run_id: str,
                    thresholds: Mapping[str, Any] | None = None,
                    rank_rows: Mapping[str, list[dict[str, Any]]] | None = None) -> list[str]:
    """Plain-words notes on what in the run's traces makes figures unreliable, one per condition
    present (see the module docstring); empty for a clean trace. rank_rows: the RANK_CONDITIONS
    rows found rank by rank elsewhere (merge_rank_conditions); None: found here, on the whole run."""
    ensure_loaded(con)
    t = th.resolve(thresholds)
    rows = rank_rows if rank_rows is not None else rank_condition_rows(con, run_id, t)
    notes = [graph_replay_note(rows["graph_replays"]), graph_capture_note(rows["graph_captures"]),
             *comm_name_notes(con, run_id),
             clock_skew_note(con, run_id, t["CLOCK_SKEW_MIN_NS"]), missing_ranks_note(con, run_id),
             repeated_steps_note(rows["repeated_profiler_steps"]),
             *partial_step_notes(rows["partial_steps"]), dropped_events_note(rows["kineto_log_warnings"])]
    return [n for n in notes if n]
