"""`python -m analyzers`: ingest traces, list, delete and restore runs, print a run's report.

The output is a contract other tools and CI jobs read (see README.md); keep it stable.
Exit codes: 0 success, 1 a --fail-on threshold tripped, 2 nothing could be loaded / bad usage
(also: the report could not be written, the store could not be opened or is read-only for a
command that writes); 130 interrupted (SIGINT), 143 terminated (SIGTERM).

Everything printed that came from a trace, a file name or an argument goes through
safe_text.terminal_safe: no escape sequence, bidi override or undecodable byte reaches the terminal.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

from analyzers.common.safe_text import TRACE_TEXT_LIMIT, clip, is_utf8_text, terminal_safe, terminal_safe_lines

EXIT_OK, EXIT_FAIL_ON, EXIT_NOTHING_LOADED, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143


class _ArgumentParser(argparse.ArgumentParser):
    """argparse quotes the arguments it refuses ("unrecognized arguments: ..."): shown escaped."""

    def _print_message(self, message: str, file=None) -> None:
        super()._print_message(terminal_safe_lines(message), file)


def _add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress lines on stderr (errors and warnings are still printed)")


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="FILE",
                        help="DuckDB store (default: $TRACEDOCTOR_DB or ~/.local/share/tracedoctor/tracedoctor.duckdb)")


def _add_scale(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events-dir", metavar="URL",
                        help="keep the run's events as Parquet files, one per rank, in this folder or fsspec URL "
                             "(memory://..., s3://...) instead of inside the store (default: "
                             "$TRACEDOCTOR_EVENTS_DIR; with --cluster, a folder beside the store)")
    parser.add_argument("--cluster", metavar="ADDRESS",
                        help="parse and analyse each rank as a task on a Dask cluster: local:N starts N worker "
                             "processes here, else a scheduler address (tcp://host:8786); needs dask[distributed]")


MAX_TOP_ROWS = 1_000_000


def _bounded_int(low: int, high: int):
    """An argparse type: an integer from low to high (else argparse's usage error, exit 2)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not between {low:,} and {high:,}")
        return value
    parse.__name__ = "number"
    return parse


def build_parser() -> argparse.ArgumentParser:
    from analyzers.store.runs import TRASH_RETENTION_DAYS
    from analyzers.common.thresholds import MIN_FINDING_PCT

    parser = _ArgumentParser(prog="python -m analyzers",
                                     description="TraceDoctor: find what wastes GPU time in PyTorch profiler traces.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest", help="load trace files (one run: all ranks of one job; files of several "
                                      "jobs: one run per job); prints the run id(s)")
    p.add_argument("paths", nargs="+", metavar="PATH", help=".json, .json.gz, .zip, .tar.gz or a directory")
    p.add_argument("--name", help="run name (default: the first path's base name)")
    _add_scale(p)
    _add_quiet(p)
    _add_db(p)

    p = sub.add_parser("runs", help="list stored runs")
    p.add_argument("--format", choices=("table", "json"), default="table")
    _add_db(p)

    p = sub.add_parser("delete", help=f"move a stored run to the trash (restore brings it back for "
                                      f"{TRASH_RETENTION_DAYS:g} days)")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--purge", action="store_true", help="delete it for good instead (also a run in the trash)")
    _add_db(p)

    p = sub.add_parser("trash", help="list the runs in the trash")
    p.add_argument("--format", choices=("table", "json"), default="table")
    _add_db(p)

    p = sub.add_parser("restore", help="take a run out of the trash")
    p.add_argument("run_id", metavar="RUN_ID")
    _add_db(p)

    p = sub.add_parser("analyze", help="ingest (or reuse) a run and print its report")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="trace files / directories / archives, or the id of a stored run")
    p.add_argument("--name", help="run name (default: the first path's base name)")
    p.add_argument("--format", choices=("json", "md", "html"), default="json")
    p.add_argument("--out", metavar="FILE", help="write the report here instead of stdout")
    p.add_argument("--fail-on", action="append", default=[], metavar="KIND[:PCT]",
                   help=f"exit 1 when a finding of KIND (or 'any') costs >= PCT %% of step time (default 0); "
                        f"repeatable. Findings are reported from {MIN_FINDING_PCT:g}%% of step time, so a PCT "
                        f"below {MIN_FINDING_PCT:g} acts as {MIN_FINDING_PCT:g}")
    _add_scale(p)
    _add_quiet(p)
    _add_db(p)

    p = sub.add_parser("top", help="a stored run's costliest GPU kernels or CPU ops (the dashboard's "
                                   "Operators & kernels view)")
    p.add_argument("run_id", metavar="RUN_ID")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--kernels", dest="of_kind", action="store_const", const="kernels",
                      help="GPU kernels by total time (the default)")
    what.add_argument("--ops", dest="of_kind", action="store_const", const="ops", help="CPU ops by self time")
    p.add_argument("--rank", type=_bounded_int(0, 2**31 - 1), metavar="R", help="one rank only (default: all ranks summed)")
    p.add_argument("--limit", type=_bounded_int(1, MAX_TOP_ROWS), default=20, metavar="N",
                   help=f"rows to show (default 20, at most {MAX_TOP_ROWS:,})")
    p.add_argument("--json", action="store_true", help="JSON on stdout instead of a table")
    _add_db(p)
    return parser


def parse_fail_on(specs: Sequence[str]) -> list[tuple[str, float]]:
    """'comm_exposed:10' -> ('comm_exposed', 10.0); 'launch_gap' -> ('launch_gap', 0.0).

    A misspelt kind or a threshold that is not a finite number is refused: a rule that can never
    trip would let a CI job pass silently."""
    if not specs:
        return []
    from analyzers.analysis.kinds import analysis_specs
    kinds = sorted(analysis_specs())
    rules = []
    for spec in specs:
        kind, _, pct = spec.partition(":")
        kind = kind.strip()
        if not kind:
            raise ValueError(f"--fail-on {spec!r}: expected KIND[:PCT]")
        if kind != "any" and kind not in kinds:
            raise ValueError(f"--fail-on {spec!r}: unknown finding kind {kind!r}; "
                             f"expected 'any' or one of {', '.join(kinds)}")
        try:
            threshold = float(pct) if pct.strip() else 0.0
        except ValueError:
            raise ValueError(f"--fail-on {spec!r}: PCT must be a number") from None
        if not math.isfinite(threshold):
            raise ValueError(f"--fail-on {spec!r}: PCT must be a finite number")
        rules.append((kind, threshold))
    return rules


def tripped_rules(report: dict[str, Any], rules: list[tuple[str, float]]) -> list[str]:
    """Human-readable lines for each finding that trips a --fail-on rule."""
    lines = []
    for kind, threshold in rules:
        for f in report.get("findings", []):
            if f.get("cost_bytes") is not None:    # a memory finding: its share of the device's memory
                pct = f.get("cost_pct_of_device_memory")
                # named by its kind, one on a device of unknown size (CPU memory) trips at any size
                if kind == f["kind"] and (pct is None or pct >= threshold):
                    lines.append(f"--fail-on {kind}:{threshold:g} tripped by {f['id']} ("
                                 + ("memory" if pct is None else f"{pct:.1f}% of the device's memory") + ")")
            elif (kind in ("any", f["kind"])) and (f.get("cost_pct") or 0.0) >= threshold:
                lines.append(f"--fail-on {kind}:{threshold:g} tripped by {f['id']} "
                             f"({f['cost_pct']:.1f}% of step time)")
    return lines


def _say(line: str) -> None:
    """One line on stderr, whatever trace text or argument it quotes."""
    print(terminal_safe(line), file=sys.stderr)


def _print_problems(errors, label: str = "error") -> None:
    for e in errors:
        _say(f"{label}: {e.file}: {e.error}")


def _blank_paths(paths: Sequence[str]) -> bool:
    """An empty argument (an unset shell variable) must not mean "the current directory"."""
    if any(not p.strip() for p in paths):
        _say("error: an empty path was given")
        return True
    return False


def _bad_name(name: str | None) -> bool:
    """--name given blank (an unset variable) or not UTF-8: refused, as rename in the dashboard is."""
    from analyzers.store.runs import clean_run_name

    if name is None:
        return False
    try:
        clean_run_name(name)
    except ValueError as exc:
        _say(f"error: --name: {exc}")
        return True
    return False


def _actor() -> str:
    """Who runs the command, for the audit log: the OS account of the process's user id (never
    $LOGNAME or $USER, which anyone sets), else 'uid N'."""
    import pwd

    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:   # no account for this uid (a bare container)
        return f"uid {uid}"
    return user if user and is_utf8_text(user) else f"uid {uid}"


def _purge_expired_trash(con) -> None:
    """Every write command first deletes the runs trashed longer ago than the retention, so the
    trash empties itself without a scheduler."""
    from analyzers.store.runs import purge_trash

    purge_trash(con, actor="retention")   # the retention rule, not the user running this command


def _writable(con, what: str) -> bool:
    """False, after saying why, when the store is open read-only and the command must write to it;
    else True, once the expired trash is purged."""
    from analyzers.store.database import read_only_reason

    reason = read_only_reason(con)
    if reason is not None:
        _say(f"error: {reason}; {what} needs to write to it: run this where the store is writable, "
             "or pass --db with a writable store file")
        return False
    _purge_expired_trash(con)
    return True


def _record_ingest(con, result) -> None:
    from analyzers.store.runs import record_audit

    if result.run_id is not None and not result.reused:
        record_audit(con, "ingest", result.run_id, _actor(), f"{len(result.files)} file(s)")


class _StderrProgress:
    """Progress on stderr (never stdout, which carries the run id or the report): one line
    rewritten in place on a terminal, else one plain line per event worth a line."""

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.width = 0

    def __call__(self, stage: str, item: str, fraction: float, **details: Any) -> None:
        from analyzers.common.progress import progress_text

        if not self.tty and details.get("done") == 0:   # "starting": the next line says more
            return
        line = terminal_safe(clip(progress_text(stage, item, fraction, **details), TRACE_TEXT_LIMIT))
        if self.tty:
            self.stream.write("\r" + line.ljust(self.width))
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        """Ends the rewritten line, so the next message starts on a line of its own."""
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


@contextlib.contextmanager
def _progress(args):
    """The stderr progress line for a long command (None with --quiet), finished however it ends."""
    progress = None if getattr(args, "quiet", False) else _StderrProgress()
    try:
        yield progress
    finally:
        if progress is not None:
            progress.done()


def _events_root(args) -> str | None:
    """Where the run's events go as Parquet partitions (partitions.root_for); None: inside the store."""
    from analyzers.store.partitions import root_for
    from analyzers.store.database import default_db_path

    from analyzers.store.partitions import root_problem

    root = root_for(getattr(args, "events_dir", None), getattr(args, "cluster", None), args.db or default_db_path())
    problem = root_problem(root, args.db or default_db_path())
    if problem:
        raise _UsageError(problem)
    return root


@contextlib.contextmanager
def _runner(args):
    """The executor --cluster names (None without it); usage problems raise _UsageError."""
    address = getattr(args, "cluster", None)
    if address is None:
        yield None
        return
    from analyzers.cluster import check_address, executor

    problem = check_address(address)
    if problem:
        raise _UsageError(problem)
    try:
        import distributed  # noqa: F401  (only to say plainly that it is missing)
    except ImportError:
        raise _UsageError("--cluster needs Dask: pip install 'dask[distributed]'") from None
    try:
        opened = executor(address)
        runner = opened.__enter__()
    except (OSError, TimeoutError, ValueError) as exc:
        raise _UsageError(f"--cluster {address}: could not reach or start the cluster ({exc})") from None
    try:
        _say(f"note: per-rank tasks run on {runner.description}")
        yield runner
    finally:
        opened.__exit__(None, None, None)


class _UsageError(Exception):
    """An option that cannot be honoured (an unreachable cluster, Dask missing): said, exit 2."""


def _cmd_ingest(con, args) -> int:
    from analyzers.ingest import ingest_jobs

    if _blank_paths(args.paths) or _bad_name(args.name) or not _writable(con, "ingest"):
        return EXIT_NOTHING_LOADED
    with _progress(args) as progress, _runner(args) as runner:
        results = ingest_jobs(con, args.paths, name=args.name, progress=progress, events_root=_events_root(args),
                              runner=runner, actor=_actor())
    for result in results:
        _print_problems(result.errors)
        _print_problems(result.warnings, "warning")
    loaded = [result for result in results if result.run_id is not None]
    if not loaded:
        _say("error: nothing could be loaded")
        return EXIT_NOTHING_LOADED
    if len(results) > 1:
        from analyzers.ingest.jobs import MIXED_JOBS
        from analyzers.read.queries import run_info

        failed = len(results) - len(loaded)
        stored = f"{len(loaded)} run{'s' if len(loaded) != 1 else ''}"
        _say(f"note: {MIXED_JOBS.format(n=len(results))}: stored as {stored}, one per job"
             + (f" ({failed} job{'s' if failed != 1 else ''} not loaded: see the errors above)" if failed else "") + ":")
        for result in loaded:
            _say(f"  {result.run_id}  {(run_info(con, result.run_id) or {}).get('name', '')} "
                 f"({len(result.files)} file(s))")
    for result in loaded:
        _record_ingest(con, result)
        if result.reused:
            _say(f"note: identical files already stored as run {result.run_id}")
        print(result.run_id)
    return EXIT_OK


def _format_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """Aligned columns; each cell terminal-safe and clipped (names come from traces and users)."""
    cells = [[("" if r.get(c) is None else terminal_safe(clip(r.get(c), TRACE_TEXT_LIMIT))) for c in columns]
             for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def _print_json(value: Any) -> None:
    """JSON on stdout. json.dumps escapes every control character, and (ensure_ascii, its default)
    every non-ASCII one too, U+202E included: the text cannot drive the terminal."""
    print(json.dumps(value, indent=2, default=str))


def _cmd_runs(con, args) -> int:
    from analyzers.store.runs import list_runs

    runs = list_runs(con)
    if args.format == "json":
        _print_json([{
            "run_id": r["run_id"], "name": r["name"], "created_at": r["created_at"].isoformat(),
            "world_size": r["world_size"], "ranks": r["ranks"] or [], "n_events": int(r["n_events"]),
            "tags": list(r["tags"] or []), "source": r["source"],
        } for r in runs])
    elif not runs:
        print("no runs stored yet; add one with: python -m analyzers ingest PATH")
    else:
        rows = [{**r, "created_at": r["created_at"].strftime("%Y-%m-%d %H:%M"),
                 "tags": ",".join(r["tags"] or [])} for r in runs]
        print(_format_table(rows, ["run_id", "name", "world_size", "n_events", "created_at", "tags"]))
    return EXIT_OK


def _cmd_trash(con, args) -> int:
    from analyzers.store.runs import TRASH_RETENTION_DAYS, list_trash

    trashed = list_trash(con)
    if args.format == "json":
        _print_json([{**r, "deleted_at": r["deleted_at"].isoformat()} for r in trashed])
    elif not trashed:
        print("the trash is empty")
    else:
        print(_format_table([{**r, "deleted_at": r["deleted_at"].strftime("%Y-%m-%d %H:%M")} for r in trashed],
                            ["run_id", "name", "deleted_at", "deleted_by"]))
        print(f"runs stay here {TRASH_RETENTION_DAYS:g} days; bring one back with: python -m analyzers restore RUN_ID")
    return EXIT_OK


def _unique_match(matches: list[str], wanted: str, nothing: str) -> str | None:
    """The one run id matching the user's prefix, else None after saying why (none, or several)."""
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        _say(f"error: '{wanted}' matches {len(matches)} runs ({', '.join(matches[:5])}"
             f"{', ...' if len(matches) > 5 else ''}); give more of the id")
    else:
        _say(f"error: {nothing}")
    return None


def _wanted_id(args) -> str | None:
    wanted = args.run_id.strip()
    if not wanted:       # an unset variable: a blank prefix would match every run
        _say("error: no run id given")
        return None
    return wanted


def _cmd_delete(con, args) -> int:
    from analyzers.store.runs import delete_run, matching_run_ids, purge_run

    wanted = _wanted_id(args)
    if wanted is None or not _writable(con, "delete"):
        return EXIT_NOTHING_LOADED
    trashed = matching_run_ids(con, wanted, in_trash=True)
    if args.purge:
        run_id = _unique_match(matching_run_ids(con, wanted) + trashed, wanted, f"no stored run '{wanted}'")
        if run_id is None or not purge_run(con, run_id, actor=_actor()):
            return EXIT_NOTHING_LOADED
        print(f"deleted {run_id} for good")
        return EXIT_OK
    nothing = (f"run {trashed[0]} is already in the trash; delete it for good with: "
               f"python -m analyzers delete --purge {trashed[0]}" if len(trashed) == 1 else f"no stored run '{wanted}'")
    run_id = _unique_match(matching_run_ids(con, wanted), wanted, nothing)
    if run_id is None or not delete_run(con, run_id, actor=_actor()):
        return EXIT_NOTHING_LOADED
    print(f"deleted {run_id} (moved to the trash; bring it back with: python -m analyzers restore {run_id})")
    return EXIT_OK


def _cmd_restore(con, args) -> int:
    from analyzers.store.runs import matching_run_ids, restore_run

    wanted = _wanted_id(args)
    if wanted is None or not _writable(con, "restore"):
        return EXIT_NOTHING_LOADED
    run_id = _unique_match(matching_run_ids(con, wanted, in_trash=True), wanted, f"no run '{wanted}' in the trash")
    if run_id is None or not restore_run(con, run_id, actor=_actor()):
        return EXIT_NOTHING_LOADED
    print(f"restored {run_id}")
    return EXIT_OK


def _stored_report(con, run_id: str, args=None) -> dict[str, Any] | None:
    """A stored run's report: re-analysed where the store is writable; on a read-only store the
    findings already stored, when this version wrote them (else None, after saying why)."""
    from analyzers.api import analyze_stored_run
    from analyzers.read.stored import analysis_is_current
    from analyzers.read.report import build_report
    from analyzers.store.database import read_only_reason

    from analyzers.store.partitions import require_readable

    require_readable(con, run_id)   # else its figures would be those of the other ranks only
    reason = read_only_reason(con)
    if reason is None:
        _purge_expired_trash(con)
        from analyzers.store.partitions import locations

        if args is not None and args.cluster is not None and not locations(con, run_id):
            _say(f"note: run {run_id} keeps its events inside the store, where tasks cannot read them: "
                 "it is analysed in this process (ingest with --events-dir to run it as tasks)")
            return analyze_stored_run(con, run_id)
        with _runner(args) as runner:
            return analyze_stored_run(con, run_id, runner=runner)
    if analysis_is_current(con, run_id):
        return build_report(con, run_id)
    _say(f"error: run {run_id} has not been analysed by this version, and {reason}; analyze it once where "
         "the store is writable")
    return None


def _cmd_analyze(con, args) -> int:
    from analyzers.api import ingest_and_analyze
    from analyzers.read.report import render_html, render_markdown
    from analyzers.store.runs import matching_run_ids, resolve_run_id

    try:
        rules = parse_fail_on(args.fail_on)
    except ValueError as exc:
        _say(f"error: {exc}")
        return EXIT_NOTHING_LOADED
    if _blank_paths(args.paths) or _bad_name(args.name):
        return EXIT_NOTHING_LOADED

    maybe_id = args.paths[0] if len(args.paths) == 1 and not Path(args.paths[0]).exists() else None
    stored = resolve_run_id(con, maybe_id) if maybe_id is not None else None
    if stored is not None:
        report = _stored_report(con, stored, args)
        if report is None:
            return EXIT_NOTHING_LOADED
    else:
        trashed = matching_run_ids(con, maybe_id, in_trash=True) if maybe_id is not None else []
        if len(trashed) == 1:
            _say(f"error: run {trashed[0]} is in the trash; bring it back with: python -m analyzers restore {trashed[0]}")
            return EXIT_NOTHING_LOADED
        if not _writable(con, "analyze of trace files (they are ingested first)"):
            return EXIT_NOTHING_LOADED
        with _progress(args) as progress, _runner(args) as runner:
            outcome = ingest_and_analyze(con, args.paths, name=args.name, progress=progress,
                                         events_root=_events_root(args), runner=runner, actor=_actor())
        _print_problems(outcome.errors)
        from analyzers.ingest.jobs import is_mixed_jobs_refusal

        if any(is_mixed_jobs_refusal(e.error) for e in outcome.errors):
            _say("note: store one run per job with: python -m analyzers ingest PATH..., then analyze each "
                 "printed RUN_ID")
        _record_ingest(con, outcome.ingest)
        report = outcome.report
        if report is None:
            from analyzers.api import empty_report
            report = empty_report(outcome.errors)
            _emit(json.dumps(report, indent=2, default=str) if args.format == "json" else
                  "nothing could be loaded:\n" + "\n".join(terminal_safe(f"- {e.file}: {e.error}")
                                                           for e in outcome.errors),
                  args.out)
            return EXIT_NOTHING_LOADED

    if args.format == "json":
        text = json.dumps(report, indent=2, default=str)
    elif args.format == "md":
        text = render_markdown(report)
    else:
        text = render_html(report)
    _emit(text, args.out)

    tripped = tripped_rules(report, rules)
    for line in tripped:
        _say(line)
    return EXIT_FAIL_ON if tripped else EXIT_OK


class _OutputError(Exception):
    """The report could not be written where --out asked."""


def _emit(text: str, out: str | None) -> None:
    if out:
        try:
            Path(out).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        except OSError as exc:
            raise _OutputError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    else:
        print(text)


def _cmd_top(con, args) -> int:
    """The top kernels or ops of a stored run over the whole run, as a terminal-safe table or JSON."""
    from analyzers.read import queries
    from analyzers.store.runs import matching_run_ids

    wanted = _wanted_id(args)
    if wanted is None:
        return EXIT_NOTHING_LOADED
    run_id = _unique_match(matching_run_ids(con, wanted), wanted, f"no stored run '{wanted}'")
    if run_id is None:
        return EXIT_NOTHING_LOADED
    from analyzers.store.partitions import require_readable

    require_readable(con, run_id)
    of_kind = args.of_kind or "kernels"
    top = queries.top_kernels if of_kind == "kernels" else queries.top_ops
    frame = top(con, run_id, rank=args.rank, limit=args.limit)
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
    # achieved TFLOP/s and TB/s (the per-op performance model, whole run), occupancy where recorded
    perf = queries.perf_by_name(con, run_id, of_kind)
    blank = dict.fromkeys(next(iter(perf.values()), {"tflops": None, "tbps": None}))
    for r in rows:
        r.update({k: (None if v != v else v) for k, v in perf.get(r["name"], blank).items()})   # NaN -> None
    if args.json:
        _print_json({"run_id": run_id, "of": of_kind, "rank": args.rank, "rows": rows})
        return EXIT_OK
    if not rows:
        print(f"no {'GPU kernels' if of_kind == 'kernels' else 'CPU ops'} in run {run_id}"
              + ("" if args.rank is None else f" on rank {args.rank}"))
        return EXIT_OK

    def ms(v):
        return "" if v is None else f"{v:,.2f}"

    def pct(v):
        return "" if v is None else f"{v:.1f}%"

    def rate(v):
        return "" if v is None else f"{v:,.3g}"

    if of_kind == "kernels":
        table = [{"kernel": r["name"], "calls": f"{r['calls']:,}", "total ms": ms(r["total_ms"]),
                  "mean ms": ms(r["mean_ms"]), "% busy": pct(r["busy_pct"]), "% step": pct(r["step_pct"]),
                  "tensor cores": "yes" if r["tensor_core"] else ("FP32, could" if r["fp32_cuda_core"] else ""),
                  "TFLOP/s": rate(r.get("tflops")), "TB/s": rate(r.get("tbps"))}
                 for r in rows]
    else:
        table = [{"op": r["name"], "calls": f"{r['calls']:,}", "self ms": ms(r["self_ms"]),
                  "total ms": ms(r["total_ms"]), "% step (self)": pct(r["self_pct"]), "GPU ms": ms(r["gpu_total_ms"]),
                  "tensor cores": ("eligible" + ("" if r["tc_pct"] is None else f", {r['tc_pct']:.0f}% used"))
                                  if r["tensor_core_eligible"] else "",
                  "TFLOP/s": rate(r.get("tflops")), "TB/s": rate(r.get("tbps"))}
                 for r in rows]
    print(_format_table(table, list(table[0])))
    return EXIT_OK


COMMANDS = {"ingest": _cmd_ingest, "runs": _cmd_runs, "trash": _cmd_trash, "delete": _cmd_delete,
            "restore": _cmd_restore, "analyze": _cmd_analyze, "top": _cmd_top}

# The signals that stopped the command, in order: DuckDB turns the KeyboardInterrupt raised in the
# handler into its own error ("Query interrupted", a RuntimeError in DuckDB 2.0), so the exit
# code is chosen from what was received, not from the exception that arrives.
_received_signals: list[int] = []
_SIGNAL_EXITS = {signal.SIGINT: (EXIT_INTERRUPTED, "interrupted"), signal.SIGTERM: (EXIT_TERMINATED, "terminated")}


def _stop_on_signal(signum: int, frame) -> None:
    _received_signals.append(signum)
    raise KeyboardInterrupt


def _stopped() -> int:
    """One line on stderr and the exit code of the first signal received (Ctrl-C when none was)."""
    code, what = _SIGNAL_EXITS[_received_signals[0] if _received_signals else signal.SIGINT]
    _say(f"{what} (a run is stored whole or not at all)")
    return code


def _catch_stop_signals() -> dict[int, Any]:
    """Route SIGINT and SIGTERM to _stop_on_signal (only the main thread may set handlers; a
    caller on another thread keeps Python's own); returns the handlers to put back."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, _stop_on_signal) for signum in _SIGNAL_EXITS}


def _run_command(args) -> int:
    import duckdb

    from analyzers.store.database import StoreBusy, connect_waiting
    from analyzers.store.partitions import PartitionsMissing

    try:
        con = connect_waiting(args.db, read_only=None)   # read-only where it cannot be written: reads still work
    except StoreBusy as exc:
        _say(f"error: {exc}")
        return EXIT_NOTHING_LOADED
    except KeyboardInterrupt:
        return _stopped()
    except Exception as exc:  # a corrupt store file, a bad path: say which, no traceback
        if _received_signals:
            return _stopped()
        _say(f"error: cannot open store {args.db or 'default'}: {exc}")
        return EXIT_NOTHING_LOADED
    try:
        return COMMANDS[args.command](con, args)
    except (_OutputError, _UsageError, PartitionsMissing) as exc:
        _say(f"error: {exc}")
        return EXIT_NOTHING_LOADED
    except BrokenPipeError:
        # the reader went away (`| head`): nothing left to say; keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except (KeyboardInterrupt, duckdb.InterruptException):
        return _stopped()
    except Exception:
        if _received_signals:   # DuckDB's own error for the interrupted query
            return _stopped()
        raise
    finally:
        con.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _received_signals.clear()
    previous_handlers = _catch_stop_signals()
    try:
        return _run_command(args)
    finally:
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
