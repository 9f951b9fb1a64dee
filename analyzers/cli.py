"""`python -m analyzers`: ingest traces, list and delete runs, print a run's report.

The output is a contract other tools and CI jobs read (see README.md); keep it stable.
Exit codes: 0 success, 1 a --fail-on threshold tripped, 2 nothing could be loaded / bad usage
(also: the report could not be written, the store could not be opened); 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Sequence

EXIT_OK, EXIT_FAIL_ON, EXIT_NOTHING_LOADED, EXIT_INTERRUPTED = 0, 1, 2, 130


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="FILE",
                        help="DuckDB store (default: $TRACEDOCTOR_DB or ~/.local/share/tracedoctor/tracedoctor.duckdb)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m analyzers",
                                     description="TraceDoctor: find what wastes GPU time in PyTorch profiler traces.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest", help="load trace files (one run: all ranks of one job); prints the run id")
    p.add_argument("paths", nargs="+", metavar="PATH", help=".json, .json.gz, .zip, .tar.gz or a directory")
    p.add_argument("--name", help="run name (default: the first path's base name)")
    _add_db(p)

    p = sub.add_parser("runs", help="list stored runs")
    p.add_argument("--format", choices=("table", "json"), default="table")
    _add_db(p)

    p = sub.add_parser("delete", help="delete a stored run")
    p.add_argument("run_id", metavar="RUN_ID")
    _add_db(p)

    p = sub.add_parser("analyze", help="ingest (or reuse) a run and print its report")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="trace files / directories / archives, or the id of a stored run")
    p.add_argument("--name", help="run name (default: the first path's base name)")
    p.add_argument("--format", choices=("json", "md", "html"), default="json")
    p.add_argument("--out", metavar="FILE", help="write the report here instead of stdout")
    p.add_argument("--fail-on", action="append", default=[], metavar="KIND[:PCT]",
                   help="exit 1 when a finding of KIND (or 'any') costs >= PCT %% of step time (default 0); "
                        "repeatable. Findings are reported from 5%% of step time, so a PCT below 5 acts as 5")
    _add_db(p)
    return parser


def parse_fail_on(specs: Sequence[str]) -> list[tuple[str, float]]:
    """'comm_exposed:10' -> ('comm_exposed', 10.0); 'launch_gap' -> ('launch_gap', 0.0).

    A misspelt kind or a threshold that is not a finite number is refused: a rule that can never
    trip would let a CI job pass silently."""
    if not specs:
        return []
    from analyzers.findings import analysis_modules
    kinds = sorted(module.KIND for module in analysis_modules())
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
            if (kind in ("any", f["kind"])) and (f.get("cost_pct") or 0.0) >= threshold:
                lines.append(f"--fail-on {kind}:{threshold:g} tripped by {f['id']} "
                             f"({f['cost_pct']:.1f}% of step time)")
    return lines


def _print_errors(errors) -> None:
    for e in errors:
        print(f"error: {e.file}: {e.error}", file=sys.stderr)


def _blank_paths(paths: Sequence[str]) -> bool:
    """An empty argument (an unset shell variable) must not mean "the current directory"."""
    if any(not p.strip() for p in paths):
        print("error: an empty path was given", file=sys.stderr)
        return True
    return False


def _cmd_ingest(con, args) -> int:
    from analyzers.ingest import ingest_paths

    if _blank_paths(args.paths):
        return EXIT_NOTHING_LOADED
    result = ingest_paths(con, args.paths, name=args.name)
    _print_errors(result.errors)
    for w in result.warnings:
        print(f"warning: {w.file}: {w.error}", file=sys.stderr)
    if result.run_id is None:
        print("error: nothing could be loaded", file=sys.stderr)
        return EXIT_NOTHING_LOADED
    if result.reused:
        print(f"note: identical files already stored as run {result.run_id}", file=sys.stderr)
    print(result.run_id)
    return EXIT_OK


def _format_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def _cmd_runs(con, args) -> int:
    from analyzers.runs import list_runs

    runs = list_runs(con)
    if args.format == "json":
        print(json.dumps([{
            "run_id": r["run_id"], "name": r["name"], "created_at": r["created_at"].isoformat(),
            "world_size": r["world_size"], "ranks": r["ranks"] or [], "n_events": int(r["n_events"]),
            "tags": list(r["tags"] or []), "source": r["source"],
        } for r in runs], indent=2))
    elif not runs:
        print("no runs stored yet; add one with: python -m analyzers ingest PATH")
    else:
        rows = [{**r, "created_at": r["created_at"].strftime("%Y-%m-%d %H:%M"),
                 "tags": ",".join(r["tags"] or [])} for r in runs]
        print(_format_table(rows, ["run_id", "name", "world_size", "n_events", "created_at", "tags"]))
    return EXIT_OK


def _cmd_delete(con, args) -> int:
    from analyzers.runs import delete_run, matching_run_ids

    wanted = args.run_id.strip()
    if not wanted:       # an unset variable: a blank prefix would match every run
        print("error: no run id given", file=sys.stderr)
        return EXIT_NOTHING_LOADED
    matches = matching_run_ids(con, wanted)
    if len(matches) > 1:
        print(f"error: {wanted!r} matches {len(matches)} runs ({', '.join(matches[:5])}"
              f"{', ...' if len(matches) > 5 else ''}); give more of the id", file=sys.stderr)
        return EXIT_NOTHING_LOADED
    if not matches or not delete_run(con, matches[0]):
        print(f"error: no stored run {wanted!r}", file=sys.stderr)
        return EXIT_NOTHING_LOADED
    run_id = matches[0]
    print(f"deleted {run_id}")
    return EXIT_OK


def _cmd_analyze(con, args) -> int:
    from analyzers.api import analyze_stored_run, ingest_and_analyze
    from analyzers.report import render_html, render_markdown
    from analyzers.runs import resolve_run_id

    try:
        rules = parse_fail_on(args.fail_on)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NOTHING_LOADED
    if _blank_paths(args.paths):
        return EXIT_NOTHING_LOADED

    stored = resolve_run_id(con, args.paths[0]) if len(args.paths) == 1 and not Path(args.paths[0]).exists() else None
    if stored is not None:
        report = analyze_stored_run(con, stored)
    else:
        outcome = ingest_and_analyze(con, args.paths, name=args.name)
        _print_errors(outcome.errors)
        report = outcome.report
        if report is None:
            from analyzers.api import empty_report
            report = empty_report(outcome.errors)
            _emit(json.dumps(report, indent=2, default=str) if args.format == "json" else
                  "nothing could be loaded:\n" + "\n".join(f"- {e.file}: {e.error}" for e in outcome.errors),
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
        print(line, file=sys.stderr)
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


COMMANDS = {"ingest": _cmd_ingest, "runs": _cmd_runs, "delete": _cmd_delete, "analyze": _cmd_analyze}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import duckdb

    from analyzers.store import StoreBusy, connect_waiting

    try:
        con = connect_waiting(args.db)
    except StoreBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NOTHING_LOADED
    except Exception as exc:  # a corrupt store file, a bad path: say which, no traceback
        print(f"error: cannot open store {args.db or 'default'}: {exc}", file=sys.stderr)
        return EXIT_NOTHING_LOADED
    try:
        return COMMANDS[args.command](con, args)
    except _OutputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NOTHING_LOADED
    except BrokenPipeError:
        # the reader went away (`| head`): nothing left to say; keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except (KeyboardInterrupt, duckdb.InterruptException):
        print("interrupted (a run is stored whole or not at all)", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        con.close()
