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

import hashlib
import importlib
import json
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import duckdb

from analyzers import thresholds as th
from analyzers.metrics import rank_breakdown_rows
from analyzers.model import Finding
from analyzers.sqlrun import ensure_loaded, run_cache

ANALYSES_PACKAGE = "analyzers.analyses"


def _analysis_version() -> str:
    """A hash of the code that turns a run's events into findings (analyses, their SQL, costing,
    thresholds, the fix registry): a run whose stored findings carry another version was analysed
    by other code (an older TraceDoctor, or never) and is analysed again when opened."""
    package = Path(__file__).resolve().parent
    sources = sorted([*package.glob("analyses/*.py"), *package.glob("sql/*.sql"),
                      *(package / name for name in ("findings.py", "thresholds.py", "metrics.py", "sqlrun.py")),
                      package.parent / "accel" / "registry.py"])
    digest = hashlib.blake2b(digest_size=8)
    for source in sources:
        if source.is_file():
            digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


ANALYSIS_VERSION = _analysis_version()


@dataclass(frozen=True)
class RankInfo:
    """What every analysis needs to know about one rank to cost a finding."""
    rank: int
    n_steps: int              # ProfilerStep windows (0 = none)
    steps_divisor: int        # n_steps, or 1 when there are none: totals / this = per step
    mean_step_ns: float | None  # mean ProfilerStep time; the GPU span without steps; None if neither
    has_gpu: bool


@dataclass
class AnalysisContext:
    run_id: str
    thresholds: dict[str, float]
    ranks: dict[int, RankInfo]
    notes: list[str] = field(default_factory=list)
    cache: dict[Any, Any] = field(default_factory=dict)   # query results analyses share

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
                       cost_ns=int(round(cost_ns)), cost_pct=round(pct, 3), summary=summary,
                       metrics=_jsonable(dict(metrics or {})))


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
    extra: dict[str, float] = {}
    for module in analysis_modules():
        extra.update(getattr(module, "DEFAULT_THRESHOLDS", {}) or {})
    ctx = AnalysisContext(run_id=run_id, thresholds=th.resolve(thresholds, extra), ranks=ranks)
    left_out = set()
    if any(not r.has_gpu for r in ranks.values()) and any(r.n_steps for r in ranks.values()):
        # GPU work is counted only when launched inside the rank's steps (HTA's rule), so a
        # rank with GPU work but no steps, in a run whose other ranks have steps, counts none
        left_out = {row[0] for row in con.execute(
            "SELECT DISTINCT rank FROM events WHERE run_id = ? AND kind IN ('kernel', 'memcpy', 'memset')",
            [run_id]).fetchall()}
    ctx.notes.extend(run_notes_from_ranks(ranks, left_out))
    return ctx


def run_notes_from_ranks(ranks: Mapping[int, RankInfo], gpu_work_ranks: set[int] = frozenset()) -> list[str]:
    """Plain-words caveats about what the analyses could look at. gpu_work_ranks: ranks with
    GPU events at all (counted or not); a rank in it without counted activity had its work left out."""
    notes = []
    no_counted = sorted(r.rank for r in ranks.values() if not r.has_gpu)
    left_out = [r for r in no_counted if r in gpu_work_ranks]
    cpu_only = [r for r in no_counted if r not in gpu_work_ranks]
    if ranks and len(cpu_only) == len(ranks):
        notes.append("The trace has no GPU activity (no kernels, copies or memsets): GPU analyses "
                     "(idle time, launch gaps, copies, communication) were skipped.")
    elif cpu_only:
        notes.append(f"Rank(s) {', '.join(map(str, cpu_only))} have no GPU activity; GPU analyses "
                     "skipped them.")
    if left_out:
        notes.append(f"Rank(s) {', '.join(map(str, left_out))} have GPU work but no ProfilerStep#N ranges while "
                     "other ranks have them: only GPU work launched inside the profiled steps counts (HTA's "
                     "rule), so GPU analyses skipped them. Profile every rank with the same schedule.")
    no_steps = sorted(r.rank for r in ranks.values() if r.n_steps == 0 and r.rank not in left_out)
    if no_steps:
        notes.append(f"Rank(s) {', '.join(map(str, no_steps))} have no ProfilerStep#N ranges: costs "
                     "there are per whole trace (treated as one step), not per step.")
    return notes


def run_notes(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """The notes analyze_run would produce for a stored run (for reports)."""
    return build_context(con, run_id).notes


def kinds_measured_without_gpu() -> frozenset[str]:
    """Kinds an analysis can cost on a trace with no GPU activity (MEASURED_WITHOUT_GPU): there a
    kind's absence means 0, for every other kind it means "not measurable here"."""
    return frozenset(m.KIND for m in analysis_modules() if getattr(m, "MEASURED_WITHOUT_GPU", False))


def analysis_modules() -> list[Any]:
    """Every module of analyzers/analyses exposing KIND and find, in name order."""
    package = importlib.import_module(ANALYSES_PACKAGE)
    modules = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{ANALYSES_PACKAGE}.{info.name}")
        if hasattr(module, "KIND") and callable(getattr(module, "find", None)):
            modules.append(module)
    return modules


def _fix_ids(kind: str, metrics: Mapping[str, Any]) -> list[str]:
    """accel.registry.fixes_for, tolerating its absence (the analyzers work without accel/)."""
    try:
        from accel.registry import fixes_for
    except ImportError:
        return []
    try:
        return list(fixes_for(kind, metrics))
    except Exception:  # a registry bug must not lose the findings
        return []


def fixes_ruled_out(fix_ids: list[str], metrics: Mapping[str, Any]) -> dict[str, str]:
    """{fix id: the plain reason} for the fixes a finding's own metrics rule out (they stay at the
    end of its fixes list: the user may know better). Empty without accel/."""
    try:
        from accel.registry import FIXES
    except ImportError:
        return {}
    out = {}
    for fix_id in fix_ids:
        fix = FIXES.get(fix_id)
        reason = fix.why_not(metrics) if fix is not None else None
        if reason:
            out[fix_id] = reason
    return out


def _unique_ids(findings: list[Finding]) -> None:
    seen: dict[str, int] = {}
    for f in findings:
        if f.finding_id in seen:
            seen[f.finding_id] += 1
            f.finding_id = f"{f.finding_id}#{seen[f.finding_id]}"
        else:
            seen[f.finding_id] = 0


def store_findings(con: duckdb.DuckDBPyConnection, run_id: str, findings: list[Finding]) -> None:
    """Replace the run's rows in `findings` (one transaction)."""
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("DELETE FROM findings WHERE run_id = ?", [run_id])
        if findings:
            con.executemany(
                "INSERT INTO findings (run_id, finding_id, kind, severity, rank, step, stream, t_start_ns, "
                "t_end_ns, cost_ns, cost_pct, metrics, fix_ids, summary) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [[run_id, f.finding_id, f.kind, f.severity, f.rank, f.step, f.stream, f.t_start_ns, f.t_end_ns,
                  f.cost_ns, f.cost_pct, json.dumps(f.metrics), list(f.fix_ids), f.summary] for f in findings])
        con.execute("UPDATE runs SET analysis_version = ? WHERE run_id = ?", [ANALYSIS_VERSION, run_id])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


def run_analyses(con: duckdb.DuckDBPyConnection, run_id: str,
                 thresholds: Mapping[str, Any] | None = None) -> tuple[list[Finding], list[str]]:
    """Every analysis on the run: (findings ranked by cost, notes). Stores nothing."""
    ensure_loaded(con)
    with run_cache(con, run_id):   # the shared per-run views, computed once for all analyses
        ctx = build_context(con, run_id, thresholds)
        findings: list[Finding] = []
        for module in analysis_modules():
            try:
                findings.extend(module.find(con, run_id, ctx))
            except duckdb.Error as exc:  # one broken analysis must not hide the others' findings
                ctx.notes.append(f"The {module.KIND} analysis failed on this run: {exc}")
    min_pct = ctx.thresholds["MIN_FINDING_PCT"]
    findings = [f for f in findings if f.cost_pct >= min_pct]
    for f in findings:
        f.fix_ids = _fix_ids(f.kind, f.metrics)
    findings.sort(key=lambda f: (-f.cost_ns, -f.cost_pct, f.finding_id))
    _unique_ids(findings)
    return findings, ctx.notes


def analyze_run(con: duckdb.DuckDBPyConnection, run_id: str,
                thresholds: Mapping[str, Any] | None = None) -> list[Finding]:
    """Run all analyses, replace the run's rows in `findings`, return findings by cost (desc)."""
    findings, notes = run_analyses(con, run_id, thresholds)
    store_findings(con, run_id, findings)
    _remember_notes(con, run_id, notes)
    return findings


def analysis_is_current(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """Whether the run's stored findings come from this code (False: never analysed, e.g. loaded
    with `python -m analyzers ingest`, or analysed by an older version)."""
    row = con.execute("SELECT analysis_version FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return row is None or row[0] == ANALYSIS_VERSION


def _remember_notes(con: duckdb.DuckDBPyConnection, run_id: str, notes: list[str]) -> None:
    """Keep the analyses' notes for build_report on this connection (a TEMP table: notes are
    cheap to recompute and never go stale in the store)."""
    con.execute("CREATE TEMP TABLE IF NOT EXISTS tracedoctor_analysis_notes (run_id VARCHAR, seq INTEGER, note VARCHAR)")
    con.execute("DELETE FROM tracedoctor_analysis_notes WHERE run_id = ?", [run_id])
    if notes:
        con.executemany("INSERT INTO tracedoctor_analysis_notes VALUES (?, ?, ?)", [[run_id, i, n] for i, n in enumerate(notes)])


def analysis_notes(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """The notes of the last analyze_run of this run on this connection, else the caveats
    derivable without running the analyses (run_notes)."""
    try:
        rows = con.execute("SELECT note FROM temp.tracedoctor_analysis_notes WHERE run_id = ? ORDER BY seq", [run_id]).fetchall()
    except duckdb.Error:    # no analysis ran on this connection yet
        rows = []
    return [r[0] for r in rows] if rows else run_notes(con, run_id)
