"""Run every analysis on a stored run, cost and rank the findings, store them.

An analysis is a module in analyzers/analyses/ exposing `KIND` (its finding kind) and
`find(con, run_id, ctx) -> list[Finding]`. `ctx` (AnalysisContext) gives each the per-rank step
figures, the thresholds and whether the run has GPU activity; analyses add plain-words notes to
`ctx.notes` (e.g. "rank 3 has no GPU activity") instead of failing.

Cost is one unit everywhere: GPU time lost per step (ns), and that time as a % of the rank's mean
step time (`cost_pct`). Severity follows cost_pct (thresholds.severity: >= 20% high, >= 10%
medium, else low); findings under MIN_FINDING_PCT are dropped as noise.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import duckdb

from analyzers import thresholds as th
from analyzers.metrics import rank_breakdown_rows, rank_summary
from analyzers.contract import clip_strings, finding_contract
from analyzers.integrity import integrity_notes
from analyzers.analyses import analysis_modules, analysis_specs, gap_causes
from analyzers.model import Finding
from analyzers.progress import Progress, teller
from analyzers.root_causes import (SERVING_ENGINES, RunCosts, group_across_ranks, link_consequences,
                                   link_memory_churn, order_findings, run_costs, unmet_needs, workload_mismatch)
from analyzers.safe_text import SUMMARY_LIMIT, clip
from analyzers import partitions
from analyzers.sqlrun import ensure_loaded, run_cache, run_ranks



def _without_prose(path: Path) -> bytes:
    """What of a source file decides findings: Python without docstrings and comments (its AST),
    SQL without comment lines and blank lines."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".sql":
        return "\n".join(line.strip() for line in text.splitlines()
                         if line.strip() and not line.strip().startswith("--")).encode()
    tree = ast.parse(text)
    _drop_docstrings(tree)
    return ast.dump(tree).encode()


def _drop_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]


# Keyword arguments of the registry's Fix entries that are prose (what a user reads), not ranking.
_REGISTRY_PROSE_KEYWORDS = frozenset({"title", "snippet", "description"})


def _registry_fingerprint() -> bytes:
    """accel/registry.py as it ranks fixes: its code and data without docstrings, comments and the
    prose of its entries (titles, snippets, descriptions); empty without accel/."""
    path = Path(__file__).resolve().parents[1] / "accel" / "registry.py"
    if not path.is_file():
        return b""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    _drop_docstrings(tree)
    for node in ast.walk(tree):
        for keyword in getattr(node, "keywords", None) or []:
            if keyword.arg in _REGISTRY_PROSE_KEYWORDS:
                keyword.value = ast.Constant("")
    return ast.dump(tree).encode()


def _analysis_version() -> str:
    """A hash of what turns a run's events into findings (the SQL library, the analyses, costing,
    thresholds, the fix registry's ranking), prose left out: a run whose stored findings carry
    another version was analysed by other code (an older TraceDoctor, or never) and is analysed
    again when opened; a reworded comment, docstring or fix snippet does not force that."""
    package = Path(__file__).resolve().parent
    sources = sorted([*package.glob("analyses/**/*.py"), *package.glob("analyses/*/*.sql"),
                      *package.glob("sql/**/*.sql"), *package.glob("whatif/*.py"), *package.glob("whatif/*.sql"),
                      *(package / name for name in ("findings.py", "root_causes.py", "thresholds.py", "metrics.py",
                                                    "sqlrun.py", "contract.py", "integrity.py"))])
    digest = hashlib.blake2b(digest_size=8)
    for source in sources:
        if source.is_file():
            digest.update(source.relative_to(package).as_posix().encode() + b"\0" + _without_prose(source))
    digest.update(_registry_fingerprint())
    return digest.hexdigest()


@functools.cache
def analysis_version() -> str:
    """This code's analysis version (computed once, on first use: the registry it hashes imports
    this module)."""
    return _analysis_version()


def __getattr__(name: str) -> Any:
    if name == "ANALYSIS_VERSION":    # module constant, computed lazily (see analysis_version)
        return analysis_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class RankInfo:
    """What every analysis needs to know about one rank to cost a finding."""
    rank: int
    n_steps: int              # steps (ProfilerStep windows, else inferred iterations; 0 = none)
    steps_divisor: int        # n_steps, or 1 when there are none: totals / this = per step
    mean_step_ns: float | None  # mean step time; the GPU span without steps; None if neither
    has_gpu: bool


@dataclass
class AnalysisContext:
    run_id: str
    thresholds: dict[str, float]
    ranks: dict[int, RankInfo]
    notes: list[str] = field(default_factory=list)
    cache: dict[Any, Any] = field(default_factory=dict)   # query results analyses share
    # what the run does (workload_facts): workload, engine, evidence, job_ranks
    workload: dict[str, Any] = field(default_factory=dict)

    @property
    def has_gpu(self) -> bool:
        return any(r.has_gpu for r in self.ranks.values())

    def gpu_ranks(self) -> list[int]:
        return sorted(r.rank for r in self.ranks.values() if r.has_gpu)

    def cost_pct(self, rank: int | None, cost_ns: float) -> float:
        """cost_ns as % of the rank's mean step time (of the mean over ranks when rank is None)."""
        if rank is not None and rank in self.ranks:
            step = self.ranks[rank].mean_step_ns
        else:
            known = [r.mean_step_ns for r in self.ranks.values() if r.mean_step_ns]
            step = sum(known) / len(known) if known else None
        return 100.0 * cost_ns / step if step else 0.0

    def make(self, kind: str, finding_id: str, *, rank: int | None, cost_ns: float, summary: str,
             metrics: Mapping[str, Any] | None = None, step: int | None = None,
             stream: int | None = None, t_start_ns: int | None = None,
             t_end_ns: int | None = None) -> Finding:
        """A Finding with cost_pct and severity filled in from the shared rules."""
        pct = self.cost_pct(rank, cost_ns)
        return Finding(finding_id=finding_id, kind=kind, severity=th.severity(pct, self.thresholds),
                       rank=rank, step=step, stream=stream, t_start_ns=t_start_ns, t_end_ns=t_end_ns,
                       cost_ns=int(round(cost_ns)), cost_pct=round(pct, 3),
                       # trace names (op, kernel, call names) inside are clipped where they enter
                       summary=clip(summary, SUMMARY_LIMIT), metrics=clip_strings(_jsonable(dict(metrics or {}))))


def _jsonable(value: Any) -> Any:
    """Metrics must survive json.dumps: numpy/decimal scalars to float, tuples to lists."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def build_context(con: duckdb.DuckDBPyConnection, run_id: str,
                  thresholds: Mapping[str, Any] | None = None) -> AnalysisContext:
    rows = rank_breakdown_rows(con, run_id)
    ranks = {
        row["rank"]: RankInfo(rank=row["rank"], n_steps=row["n_steps"], steps_divisor=row["steps_divisor"],
                              mean_step_ns=row["mean_step_ns"], has_gpu=row["gpu_events"] > 0)
        for row in rows
    }
    ctx = AnalysisContext(run_id=run_id, thresholds=th.resolve(thresholds), ranks=ranks)
    left_out = set()
    if any(not r.has_gpu for r in ranks.values()) and any(r.n_steps for r in ranks.values()):
        # GPU work is counted only when launched inside the rank's steps (HTA's rule), so a
        # rank with GPU work but no steps, in a run whose other ranks have steps, counts none
        left_out = {row[0] for row in con.execute(
            "SELECT DISTINCT rank FROM events WHERE run_id = ? AND kind IN ('kernel', 'memcpy', 'memset')",
            [run_id]).fetchall()}
    # ranks whose steps were inferred from a repeating marker (lib/steps.sql inferred_steps)
    inferred = {rank: InferredSteps(source, marker, count) for rank, source, marker, count in con.execute(
        "SELECT rank, any_value(source), any_value(marker), count(*) FROM steps(?) "
        "WHERE source <> 'profiler_step' GROUP BY rank", [run_id]).fetchall()}
    ctx.notes.extend(run_notes_from_ranks(ranks, left_out, inferred))
    ctx.workload = workload_facts(con, run_id)
    if ctx.workload["workload"] == "inference":
        engine = ENGINE_NAMES.get(ctx.workload["engine"], ctx.workload["engine"])
        ctx.notes.append(f"An inference run{f' under {engine}' if engine else ''} ({ctx.workload['evidence']}): a "
                         "step here is one iteration of its loop (a ProfilerStep: a forward pass, a decode or prefill "
                         "step, an engine step, a denoising pass), not a training step; fixes for training only are "
                         "ruled out.")
    return ctx


# The names a run's engine is shown by (lib/workload.sql run_workload's engine column).
ENGINE_NAMES = {**SERVING_ENGINES, "xdit": "xDiT", "diffusers": "Diffusers", "hf_generate": "Hugging Face generate"}


def workload_facts(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any]:
    """{workload, engine, evidence, job_ranks}: lib/workload.sql run_workload with its evidence in
    words, and the job's rank count where the trace declares more ranks than the run holds."""
    row = next(iter(con.execute("SELECT * FROM run_workload(?)", [run_id]).fetchall()), None)
    job = con.execute("SELECT world_size FROM missing_ranks(?)", [run_id]).fetchone()
    facts = {"workload": "unknown", "engine": None, "evidence": "", "job_ranks": job[0] if job else None}
    if row is None:
        return facts
    workload, engine, backward, optimizer, forward, frames, ranges, example_backward, example_range = row
    said = []
    if backward:
        said.append(f"{backward} backward ops" + (f", e.g. {clip(example_backward, 60)}" if example_backward else ""))
    if optimizer:
        said.append(f"{optimizer} optimizer steps")
    if workload == "inference":
        if engine:
            said.append(f"{ENGINE_NAMES.get(engine, engine)}'s code on the Python stack ({frames} frames)")
        if ranges:
            said.append(f"a range named {clip(example_range, 60)!r}")
        if forward and not engine and not ranges:
            said.append(f"forward only: {forward} model ops (matmul, convolution, attention, normalization) "
                        "and no backward or optimizer op")
    if workload == "unknown":
        said.append("no backward, optimizer, serving-engine or model op in the trace")
    return {**facts, "workload": workload, "engine": engine, "evidence": "; ".join(said)}


@dataclass(frozen=True)
class InferredSteps:
    """How a rank without ProfilerStep ranges got its steps (lib/steps.sql inferred_steps)."""
    source: str     # 'inferred:dataloader' | 'inferred:optimizer' | 'inferred:op'
    marker: str     # the repeating event's name
    count: int      # iterations counted as steps (start-up iterations excluded)

    def describe(self) -> str:
        """The marker in plain words, e.g. "DataLoader.__next__"."""
        if self.source == "inferred:dataloader":
            return "DataLoader.__next__"
        if self.source == "inferred:optimizer":
            return clip(self.marker)      # trace text: clipped where it enters a note
        return f"the top-level op {clip(self.marker)}"


def run_notes_from_ranks(ranks: Mapping[int, RankInfo], gpu_work_ranks: set[int] = frozenset(),
                         inferred: Mapping[int, InferredSteps] | None = None) -> list[str]:
    """Plain-words caveats about what the analyses could look at. gpu_work_ranks: ranks with
    GPU events at all (counted or not); a rank in it without counted activity had its work left out.
    inferred: the ranks without ProfilerStep ranges whose steps were inferred, and how."""
    notes = []
    inferred = inferred or {}
    no_counted = sorted(r.rank for r in ranks.values() if not r.has_gpu)
    left_out = [r for r in no_counted if r in gpu_work_ranks]
    cpu_only = [r for r in no_counted if r not in gpu_work_ranks]
    if ranks and len(cpu_only) == len(ranks):
        notes.append("The trace has no GPU activity (no kernels, copies or memsets): the GPU analyses (idle "
                     "time, launch gaps, copies, FP32 matmuls) were skipped; the data loader, rank balance and "
                     "communication are measured on the host (time the training thread waits).")
    elif cpu_only:
        notes.append(f"Rank(s) {', '.join(map(str, cpu_only))} have no GPU activity; GPU analyses "
                     "skipped them.")
    if left_out:
        notes.append(f"Rank(s) {', '.join(map(str, left_out))} have GPU work but no ProfilerStep#N ranges while "
                     "other ranks have them: only GPU work launched inside the profiled steps counts (HTA's "
                     "rule), so GPU analyses skipped them. Profile every rank with the same schedule.")
    inferred_ranks = sorted(r for r in inferred if r in ranks and r not in left_out)
    if inferred_ranks:
        # ranks inferred alike share one clause: "ranks 0, 1: 11 iterations from DataLoader.__next__"
        alike: dict[tuple[int, str], list[int]] = {}
        for rank in inferred_ranks:
            alike.setdefault((inferred[rank].count, inferred[rank].describe()), []).append(rank)
        how = "; ".join(f"rank{'s' if len(group) > 1 else ''} {', '.join(map(str, group))}: {count} "
                        f"iteration{'s' if count != 1 else ''} inferred from {marker}"
                        for (count, marker), group in alike.items())
        notes.append(f"Rank(s) {', '.join(map(str, inferred_ranks))} have no ProfilerStep#N ranges: steps are "
                     f"the iterations where the trace repeats ({how}), each from one occurrence to the next. "
                     "Start-up is not counted: what comes before the second occurrence (CUDA context, lazy "
                     "loading, the first batch), nor the iterations right after it that still take over twice "
                     "the median; costs are per inferred iteration.")
    no_steps = sorted(r.rank for r in ranks.values()
                      if r.n_steps == 0 and r.rank not in left_out and r.rank not in inferred)
    if no_steps:
        notes.append(f"Rank(s) {', '.join(map(str, no_steps))} have no ProfilerStep#N ranges and nothing in them "
                     "repeats to infer iterations from: costs there are per whole trace (treated as one step), "
                     "not per step.")
    return notes


def run_notes(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """The notes analyze_run would produce for a stored run (for reports)."""
    return build_context(con, run_id).notes


def kinds_measured_without_gpu() -> frozenset[str]:
    """Kinds an analysis can cost on a trace with no GPU activity (AnalysisSpec.measured_without_gpu):
    there a kind's absence means 0, for every other kind it means "not measurable here"."""
    return frozenset(kind for kind, spec in analysis_specs().items() if spec.measured_without_gpu)


def _fix_ids(kind: str, metrics: Mapping[str, Any], thresholds: Mapping[str, float]) -> list[str]:
    """accel.registry.fixes_for, tolerating its absence (the analyzers work without accel/)."""
    try:
        from accel.registry import fixes_for
    except ImportError:
        return []
    try:
        return list(fixes_for(kind, metrics, thresholds))
    except Exception:  # a registry bug must not lose the findings
        return []


def _fix_needs_unmet(fix_id: str, trace: RunCosts | Mapping[str, Any] | None) -> str | None:
    """Why the trace cannot use this fix (it needs CUDA or several ranks the trace lacks), or None."""
    try:
        from accel.registry import FIXES
    except ImportError:
        return None
    fix = FIXES.get(fix_id)
    if fix is None or trace is None:
        return None
    facts = trace.to_dict() if isinstance(trace, RunCosts) else trace
    job_ranks = facts.get("job_ranks")
    return (unmet_needs(fix.needs, bool(facts.get("has_gpu", True)), int(facts.get("ranks") or 1),
                        int(job_ranks) if isinstance(job_ranks, int) else None)
            or workload_mismatch(getattr(fix, "workloads", ()) or ("training", "inference", "serving"),
                                 str(facts.get("workload") or "unknown"), facts.get("engine"),
                                 str(facts.get("workload_evidence") or "")))


def fix_verdicts(kind: str, fix_ids: list[str], metrics: Mapping[str, Any],
                 trace: Mapping[str, Any] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """({fix id: why it cannot help here}, {fix id: what the finding does not measure that its
    check needs}) for a finding's fixes: ruled out by the trace (a CUDA fix on a CPU trace, a
    multi-rank fix on one rank; `trace` is the run's stored RunCosts) or by the finding's own
    metrics. Both stay in its fixes list (ruled out last: the user may know better). Empty
    without accel/."""
    try:
        from accel.registry import fixes_ruled_out, fixes_unknown
    except ImportError:
        return {}, {}
    thresholds = th.resolve((trace or {}).get("thresholds") if isinstance(trace, Mapping) else None)
    ruled_out = fixes_ruled_out(fix_ids, metrics, kind=kind, thresholds=thresholds)
    for fix_id in fix_ids:
        unmet = _fix_needs_unmet(fix_id, trace)
        if unmet:
            ruled_out[fix_id] = unmet
    unknown = {k: v for k, v in fixes_unknown(fix_ids, metrics, kind=kind, thresholds=thresholds).items()
               if k not in ruled_out}
    return ruled_out, unknown


def order_fixes(fix_ids: list[str], ruled_out: Mapping[str, str], unknown: Mapping[str, str]) -> list[str]:
    """fix_ids with the ones that apply first, then the unknown ones, then those ruled out, each
    part in the order given (the registry's fit): a fix whose precondition the trace does not show
    (ruled out by the finding's metrics or by the trace, as fix_verdicts says) is never first."""
    return sorted(fix_ids, key=lambda fix_id: 2 if fix_id in ruled_out else 1 if fix_id in unknown else 0)


def _unique_ids(findings: list[Finding]) -> None:
    seen: dict[str, int] = {}
    for f in findings:
        if f.finding_id in seen:
            seen[f.finding_id] += 1
            f.finding_id = f"{f.finding_id}#{seen[f.finding_id]}"
        else:
            seen[f.finding_id] = 0


def store_findings(con: duckdb.DuckDBPyConnection, run_id: str, findings: list[Finding],
                   notes: list[str] = (), costs: RunCosts | None = None) -> None:
    """Replace the run's findings, analysis notes and run-level costs (one transaction)."""
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("DELETE FROM analysis_notes WHERE run_id = ?", [run_id])
        if notes:
            con.executemany("INSERT INTO analysis_notes VALUES (?, ?, ?)", [[run_id, i, n] for i, n in enumerate(notes)])
        con.execute("DELETE FROM findings WHERE run_id = ?", [run_id])
        if findings:
            con.executemany(
                "INSERT INTO findings (run_id, finding_id, kind, severity, rank, ranks, caused_by, position, step, "
                "stream, t_start_ns, t_end_ns, cost_ns, cost_pct, metrics, fix_ids, summary) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [[run_id, f.finding_id, f.kind, f.severity, f.rank, list(f.ranks), f.caused_by, position, f.step,
                  f.stream, f.t_start_ns, f.t_end_ns, f.cost_ns, f.cost_pct, json.dumps(f.metrics), list(f.fix_ids),
                  f.summary]
                 for position, f in enumerate(findings)])
        _carry_marks_to_root_causes(con, run_id)
        con.execute("UPDATE runs SET analysis_version = ?, analysis_summary = ?, rank_table = ? WHERE run_id = ?",
                    [analysis_version(), None if costs is None else json.dumps(costs.to_dict()),
                     None if costs is None or costs.rank_table is None else json.dumps(costs.rank_table), run_id])
        con.execute("COMMIT")
    except Exception:
        try:    # DuckDB may have ended the transaction already (a failed COMMIT)
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass
        raise


def _carry_marks_to_root_causes(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Review marks made on per-rank findings ("launch_gap:r3", "launch_gap:r0:s7", as older versions
    named them) move to the finding of their cause ("launch_gap"), the newest mark winning, unless
    that finding already has its own mark: a re-analysis after an upgrade keeps the team's reviews."""
    con.execute("""
        INSERT INTO finding_marks (run_id, finding_id, status, note, updated_at)
        SELECT m.run_id, m.cause_id, arg_max(m.status, m.updated_at), arg_max(m.note, m.updated_at), max(m.updated_at)
        FROM (SELECT *, regexp_extract(finding_id, '^([A-Za-z0-9_]+):r-?\\d+', 1) AS cause_id
              FROM finding_marks WHERE run_id = $run_id) m
        WHERE m.cause_id <> ''
          AND m.cause_id IN (SELECT finding_id FROM findings WHERE run_id = $run_id)
          AND m.cause_id NOT IN (SELECT finding_id FROM finding_marks WHERE run_id = $run_id)
        GROUP BY m.run_id, m.cause_id""", {"run_id": run_id})
    con.execute("""
        DELETE FROM finding_marks
        WHERE run_id = $run_id AND regexp_matches(finding_id, '^[A-Za-z0-9_]+:r-?\\d+')""", {"run_id": run_id})


def run_analyses(con: duckdb.DuckDBPyConnection, run_id: str,
                 thresholds: Mapping[str, Any] | None = None,
                 progress: Progress | None = None) -> tuple[list[Finding], list[str]]:
    """Every analysis on the run: (findings, root causes first, each consequence after its cause;
    notes). Stores nothing. progress: told each analysis (analyzers/progress.py)."""
    findings, notes, _ = analyze_root_causes(con, run_id, thresholds, progress)
    return findings, notes


def analyze_root_causes(con: duckdb.DuckDBPyConnection, run_id: str,
                        thresholds: Mapping[str, Any] | None = None,
                        progress: Progress | None = None,
                        per_rank: bool = True, runner=None) -> tuple[list[Finding], list[str], RunCosts]:
    """Every analysis on the run, its per-rank findings grouped into one finding per cause
    (analyzers.root_causes), consequences linked to their cause: (findings, notes, RunCosts).
    progress: told "analysing" before each stage (the shared views, each rank's analyses, each
    analysis across ranks) and "analysed" at the end.
    per_rank: the analyses that look at one rank at a time (all but ACROSS_RANKS ones) run rank
    by rank on that rank's events (sqlrun.RunCache.only), so their cost and memory stay those of
    a one-rank run; False runs them once on the whole run (the same findings).
    runner: an analyzers.cluster executor; for a run kept as Parquet partitions, each rank's views
    and analyses are then its tasks (analyzers/rank_tasks.py), the cross-rank ones run here."""
    tell = teller(progress)
    ensure_loaded(con)
    resolved = th.resolve(thresholds)
    modules = analysis_modules()
    across = [m for m in modules if getattr(m, "ACROSS_RANKS", False)] if per_rank else []
    ranks = run_ranks(con, run_id)
    if runner is not None and per_rank and ranks and partitions.locations(con, run_id):
        from analyzers.rank_tasks import analyze_on_runner

        ctx, results, integrity, rank_table = analyze_on_runner(con, run_id, resolved, ranks, modules, across,
                                                                runner, tell)
    else:
        # (rank, its analyses): a pass per rank with all but the ACROSS_RANKS analyses, then those on
        # the whole run (rank None); per_rank False: one whole-run pass with every analysis
        passes = [(rank, [m for m in modules if m not in across]) for rank in ranks] if per_rank else []
        passes += [(None, across if per_rank else modules)]
        total = 1 + sum(len(pass_modules) for _, pass_modules in passes)
        tell("analysing", "shared per-run views", 0.0, done=1, total=total)
        with run_cache(con, run_id, resolved, per_rank=per_rank) as cache:   # the shared views, computed once
            ctx = build_context(con, run_id, resolved)
            results = []
            done = 1
            for rank, pass_modules in passes:
                def told(module, _rank=rank):
                    nonlocal done
                    done += 1
                    tell("analysing", module.SPEC.title if _rank is None else f"rank {_rank}: {module.SPEC.title}",
                         (done - 1) / total, done=done, total=total)
                with contextlib.nullcontext() if rank is None else cache.only(rank):
                    # idle split by cause: none after a pass it failed on (the run then gets no split)
                    with_gaps = pass_modules is not across and ctx.has_gpu and not any(r.gap_error for r in results)
                    results.append(analysis_pass(con, run_id, ctx, pass_modules, with_gaps=with_gaps, told=told))
            integrity = integrity_notes(con, run_id, ctx.thresholds)
            rank_table = rank_summary(con, run_id)     # from the cached views, not the events again
    found, notes = _merge_passes(modules, results, per_rank)
    ctx.notes.extend(notes + integrity)
    findings, notes, costs = _finish(ctx, found, results)
    return findings, notes, dataclasses.replace(costs, rank_table=rank_table)


@dataclass
class PassResult:
    """What one analysis pass (one rank's analyses, or those across ranks) found."""
    found: dict[str, list[Finding]]     # by kind, in analysis order
    noted: dict[str, list[str]]
    gap_rows: list[dict[str, Any]] = field(default_factory=list)   # idle time by cause (gap_causes)
    gap_error: str | None = None
    seconds: float = 0.0
    integrity_rows: dict[str, list[dict[str, Any]]] | None = None   # a rank task's integrity.RANK_CONDITIONS rows


def analysis_pass(con: duckdb.DuckDBPyConnection, run_id: str, ctx: AnalysisContext, modules: list[Any],
                  with_gaps: bool, told=None) -> PassResult:
    """Run `modules` on what `con` shows of the run (one rank inside RunCache.only, on a cluster
    worker, or the whole run); with_gaps: also split its GPU idle time by cause."""
    import time

    started = time.perf_counter()
    shared: dict[Any, Any] = {}     # query results the analyses of one pass share
    result = PassResult({m.SPEC.kind: [] for m in modules}, {m.SPEC.kind: [] for m in modules})
    for module in modules:
        if told:
            told(module)
        pass_ctx = dataclasses.replace(ctx, notes=[], cache=shared)
        try:
            result.found[module.SPEC.kind].extend(module.find(con, run_id, pass_ctx))
        except Exception as exc:  # one broken analysis must not hide the others' findings
            pass_ctx.notes.append(f"The {module.SPEC.kind} analysis failed on this run: {exc}")
        result.noted[module.SPEC.kind].extend(pass_ctx.notes)
    if with_gaps:
        try:      # the idle time by cause, for run_costs
            result.gap_rows = gap_causes(con, run_id, dataclasses.replace(ctx, cache=shared))
        except duckdb.Error as exc:    # costs that cannot be split by cause: no "unexplained idle" figure
            result.gap_error = str(exc)
    result.seconds = time.perf_counter() - started
    return result


def _merge_passes(modules: list[Any], results: list[PassResult], per_rank: bool) -> tuple[list[Finding], list[str]]:
    """(the passes' findings, each analysis' in pass order; their notes)."""
    found: dict[str, list[Finding]] = {m.SPEC.kind: [] for m in modules}
    noted: dict[str, list[str]] = {m.SPEC.kind: [] for m in modules}
    for result in results:
        for kind, rows in result.found.items():
            found[kind].extend(rows)
        for kind, rows in result.noted.items():
            noted[kind].extend(rows)
    notes: list[str] = []
    for kind in noted:       # a note several rank passes made, once
        notes.extend(dict.fromkeys(noted[kind]) if per_rank else noted[kind])
    gap_errors = [r.gap_error for r in results if r.gap_error]
    if gap_errors:
        notes.append(f"GPU idle time could not be split by cause on this run: {gap_errors[0]}")
    return [f for kind in found for f in found[kind]], notes


def _finish(ctx: AnalysisContext, findings: list[Finding], results: list[PassResult]
            ) -> tuple[list[Finding], list[str], RunCosts]:
    """Root causes from the passes' findings: grouped across ranks, consequences linked, fixes
    chosen and ordered, the run's costs."""
    gap_rows = [] if any(r.gap_error for r in results) else [row for r in results for row in r.gap_rows]
    min_pct = ctx.thresholds["MIN_FINDING_PCT"]
    memory_kinds = {kind for kind, spec in analysis_specs().items() if spec.cost_unit == "memory"}
    # memory findings cost bytes (their analyses apply their own cut-offs), no step time
    findings = group_across_ranks([f for f in findings if f.kind in memory_kinds or f.cost_pct >= min_pct])
    link_memory_churn(findings)
    link_consequences(findings, ctx.thresholds["STRAGGLER_EXPLAINED_FRACTION"],
                      {kind: spec.title for kind, spec in analysis_specs().items()})
    for f in findings:
        f.fix_ids = _fix_ids(f.kind, f.metrics, ctx.thresholds)
    findings = order_findings(findings)
    _unique_ids(findings)
    costs = dataclasses.replace(
        run_costs(findings, {r.rank: r.mean_step_ns for r in ctx.ranks.values()}, gap_rows,
                  {r.rank: r.steps_divisor for r in ctx.ranks.values()}, ctx.has_gpu),
        thresholds={k: v for k, v in ctx.thresholds.items() if th.DEFAULTS.get(k) != v},
        job_ranks=ctx.workload.get("job_ranks"), workload=ctx.workload.get("workload", "unknown"),
        engine=ctx.workload.get("engine"), workload_evidence=ctx.workload.get("evidence", ""))
    job_ranks, held = ctx.workload.get("job_ranks"), len(ctx.ranks)
    if job_ranks and job_ranks > held:   # some ranks of a larger job: say how much of it a finding covers
        for f in findings:
            f.summary = clip(f"{f.summary} Seen on {len(f.ranks) or 1} of the job's {job_ranks} ranks "
                             f"(this run holds {held}).", SUMMARY_LIMIT)
    for f in findings:   # fixes needing what the trace lacks (CUDA, several ranks, another workload) go last
        f.fix_ids = sorted(f.fix_ids, key=lambda fix_id: _fix_needs_unmet(fix_id, costs) is not None)
    if costs.step_ms and costs.root_cause_ms > costs.step_ms * 1.001:
        ctx.notes.append(f"The findings' costs add up to {costs.root_cause_ms:.2f} ms per step, more than the "
                         f"{costs.step_ms:.2f} ms step: some of them overlap (e.g. on different ranks), so fixing "
                         f"all of them saves at most the step time.")
    return findings, ctx.notes, costs


def analyze_run(con: duckdb.DuckDBPyConnection, run_id: str,
                thresholds: Mapping[str, Any] | None = None, progress: Progress | None = None,
                runner=None) -> list[Finding]:
    """Run all analyses, replace the run's rows in `findings`, return findings by cost (desc);
    progress: told each analysis stage (analyzers/progress.py); runner: see analyze_root_causes."""
    findings, notes, costs = analyze_root_causes(con, run_id, thresholds, progress, runner=runner)
    store_findings(con, run_id, findings, notes, costs)
    from analyzers.whatif import whatif_after_analysis   # (imports this module)

    whatif_after_analysis(con, run_id, findings, costs, thresholds)
    teller(progress)("analysed", "", 1.0, findings=len(findings))
    return findings


def analysis_is_current(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """Whether the run's stored findings come from this code (False: never analysed, e.g. loaded
    with `python -m analyzers ingest`, or analysed by an older version)."""
    row = con.execute("SELECT analysis_version FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return row is None or row[0] == analysis_version()


def stored_rank_table(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]] | None:
    """The ranks table the run's current analysis stored (metrics.rank_summary's rows); None when it
    stored none or is not current (then compute it: metrics.rank_summary)."""
    try:
        row = con.execute("SELECT rank_table::VARCHAR, analysis_version FROM runs WHERE run_id = ?", [run_id]).fetchone()
    except duckdb.BinderException:     # an old store opened read-only, without the column
        return None
    if row is None or row[0] is None or row[1] != analysis_version():
        return None
    return json.loads(row[0])


def analysis_notes(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """The notes stored with the run's findings by its last analyze_run; for a run analysed by a
    version that did not store them, the caveats derivable without running the analyses."""
    try:
        rows = con.execute("SELECT note FROM analysis_notes WHERE run_id = ? ORDER BY seq", [run_id]).fetchall()
    except duckdb.CatalogException:    # an old store opened read-only, without the table
        rows = []
    if rows or analysis_is_current(con, run_id):
        return [r[0] for r in rows]
    return run_notes(con, run_id)


def computed_finding_contract(finding: Finding, trace: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A Finding an analysis just made (not yet stored, so not reviewed), in the contract's shape;
    trace: its run's RunCosts as a dict (what the trace can show decides which fixes apply)."""
    ruled_out, unknown = fix_verdicts(finding.kind, list(finding.fix_ids), finding.metrics, trace)
    return finding_contract({
        "id": finding.finding_id, "kind": finding.kind, "severity": finding.severity, "rank": finding.rank,
        "ranks": finding.ranks, "caused_by": finding.caused_by,
        "step": finding.step, "stream": finding.stream, "start_ns": finding.t_start_ns, "end_ns": finding.t_end_ns,
        "cost_ms_per_step": finding.cost_ns / 1e6, "cost_pct": finding.cost_pct, "summary": finding.summary,
        "metrics": finding.metrics, "fixes": order_fixes(list(finding.fix_ids), ruled_out, unknown),
        "fixes_ruled_out": ruled_out, "fixes_unknown": unknown,
        "mark_status": None, "mark_note": None,
    })
