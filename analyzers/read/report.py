"""A run's report: the CLI JSON contract, and the same content as Markdown and as HTML.

build_report reads what is stored (runs, ranks, the findings analyze_run wrote) and computes the
per-rank figures; it does not re-run the analyses. Trace-derived text (file names, kernel and op
names inside summaries and metrics) is untrusted: every string reaches Markdown and HTML through
analyzers.common.safe_text (markup escaped, controls and bidi overrides shown escaped, no bare URL
linked, long names clipped); the team's own review notes keep their links.
"""
from __future__ import annotations

import html
import json
import re
from typing import Any, Iterable, Mapping

import duckdb

from analyzers.analysis.kinds import analysis_specs
from analyzers.common.units import human_bytes
from analyzers.common.contract import finding_contract, where_text
from analyzers.analysis.metrics import rank_summary
from analyzers.read.fixes import fix_card, install_hint
from analyzers.read.memory_queries import rank_memory, snapshot_summaries
from analyzers.read.queries import findings, time_bounds
from analyzers.store.runs import MARK_LABELS
from analyzers.common.safe_text import (SUMMARY_LIMIT, TRACE_TEXT_LIMIT, clip, html_text, markdown_cell, markdown_text,
                                 note_html, note_markdown, terminal_safe_lines)
from analyzers.sql.engine import ensure_loaded

RANK_COLUMNS = [("rank", "Rank"), ("steps", "Steps"), ("step_time_ms", "Step (ms)"), ("idle_pct", "Idle %"),
                ("compute_pct", "Compute %"), ("non_compute_pct", "Non-compute %"),
                ("comm_time_ms", "Comm (ms/step)"), ("comm_overlap_pct", "Comm overlap %"),
                ("h2d_time_ms", "H2D (ms/step)")]


def _error_dict(err: Any) -> dict[str, str]:
    if isinstance(err, Mapping):
        return {"file": str(err.get("file", "")), "error": str(err.get("error", ""))}
    if hasattr(err, "to_dict"):
        return err.to_dict()
    return {"file": str(getattr(err, "file", "")), "error": str(getattr(err, "error", err))}


def build_report(con: duckdb.DuckDBPyConnection, run_id: str, errors: Iterable[Any] = ()) -> dict[str, Any]:
    """The CLI JSON contract for a stored run (plus "notes": caveats in plain words)."""
    from analyzers.read.stored import all_run_notes, stored_rank_table
    from analyzers.analysis.whatif import stored_whatif

    ensure_loaded(con)
    run = con.execute("SELECT run_id, name, world_size FROM runs WHERE run_id = ?", [run_id]).fetchone()
    error_list = [_error_dict(e) for e in errors]
    if run is None:
        return {"run": None, "errors": error_list + [{"file": "", "error": f"no stored run with id {run_id!r}"}],
                "ranks": [], "memory_snapshots": [], "findings": [], "notes": []}
    rank_rows = con.execute("SELECT rank, file_name FROM ranks WHERE run_id = ? ORDER BY rank", [run_id]).fetchall()
    bounds = time_bounds(con, run_id)
    workload = stored_workload(con, run_id)
    whatif = stored_whatif(con, run_id) or {}
    predictions = whatif.get("findings") or {}
    return {
        "run": {"run_id": run[0], "name": run[1], "world_size": run[2],
                "ranks": [r for r, _ in rank_rows], "files": [f for _, f in rank_rows],
                # the run's first event (µs), so finding windows can be read as "ms into the trace"
                "start_us": None if bounds is None else bounds[0] / 1000.0,
                # training | inference | unknown (lib/workload.sql), the serving engine seen, why
                "workload": workload["workload"], "engine": workload["engine"],
                "workload_evidence": workload["evidence"],
                # what a step is (lib/steps.sql step_units): 'step', or an inference run's 'decode step',
                # 'iteration', ... with its source, recurring range, count, mean and phases
                "step_unit": workload["step_unit"],
                # the replayed step, after all fixes, the greedy order (analyzers/analysis/whatif); None: not replayed
                "whatif": whatif.get("run")},
        "errors": error_list,
        "ranks": _with_memory(stored_rank_table(con, run_id) or rank_summary(con, run_id), rank_memory(con, run_id)),
        "memory_snapshots": snapshot_summaries(con, run_id),
        # each finding's predicted step after its fix alone (None: no model for its kind, or a consequence)
        "findings": [{**finding_contract(f), "whatif": predictions.get(f["id"])}
                     for f in findings(con, run_id, raw=True)],
        "notes": all_run_notes(con, run_id),
    }


def _with_memory(rows: list[dict[str, Any]], memory: Mapping[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The ranks table with each rank's `memory` (None without [memory] events); ranks that only
    memory data names (a snapshot without its trace) get a row of their own."""
    out = [{**row, "memory": memory.get(row["rank"])} for row in rows]
    known = {row["rank"] for row in rows}
    out += [{"rank": rank, "memory": figures} for rank, figures in sorted(memory.items()) if rank not in known]
    return out


def stored_workload(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any]:
    """{workload, engine, evidence, step_unit} as the run's last analysis found them (runs.analysis_summary);
    'unknown' for a run not analysed by a version that recorded it."""
    row = con.execute("SELECT analysis_summary::VARCHAR FROM runs WHERE run_id = ?", [run_id]).fetchone()
    try:
        summary = json.loads(row[0]) if row and row[0] else {}
    except ValueError:
        summary = {}
    summary = summary if isinstance(summary, dict) else {}
    return {"workload": summary.get("workload") or "unknown", "engine": summary.get("engine"),
            "evidence": summary.get("workload_evidence") or "",
            "step_unit": summary.get("step_unit") if isinstance(summary.get("step_unit"), dict) else None}


# --- formatting helpers -----------------------------------------------------------------------
COST_HEADER = "Cost (ms/step; memory: bytes)"
COST_PCT_HEADER = "Cost (% of step; memory: % of device)"


def _is_memory(f: Mapping[str, Any]) -> bool:
    return f.get("cost_bytes") is not None


def _cost_cells(f: Mapping[str, Any]) -> list[Any]:
    """The two cost cells of the findings table: ms and % of step, or bytes and % of device memory."""
    if _is_memory(f):
        return [human_bytes(f["cost_bytes"]), f.get("cost_pct_of_device_memory")]
    return [f.get("cost_ms_per_step"), f.get("cost_pct")]


def _cost_words(f: Mapping[str, Any]) -> str:
    if _is_memory(f):
        pct = f.get("cost_pct_of_device_memory")
        return (f"{human_bytes(f['cost_bytes'])} of memory" + (f" ({_fmt(pct)}% of the device's memory)" if pct is not None
                                                               else " (the trace does not give the device's size)")
                + "; no step time (memory findings are not added to time costs)")
    return f"{_fmt(f.get('cost_ms_per_step'), 3)} ms lost per step ({_fmt(f.get('cost_pct'))}% of the mean step)"


def _memory_tables(report: Mapping[str, Any]) -> tuple[list[str], list[list[Any]], list[str], list[list[Any]]]:
    """The report's memory tables: per rank (ranks[].memory) and per snapshot (memory_snapshots)."""
    header = ["Rank", "Device", "Peak allocated", "Peak reserved", "Device memory", "Peak % of device"]
    rows = [[r.get("rank"), m["device"], human_bytes(m["peak_allocated_bytes"]), human_bytes(m["peak_reserved_bytes"]),
             human_bytes(m["device_total_bytes"]) if m["device_total_bytes"] else "", m["peak_pct_of_device"]]
            for r in report.get("ranks") or [] for m in ((r.get("memory") or {}).get("devices") or [])]
    snap_header = ["File", "Rank", "Allocated", "Reserved", "Segments", "Largest free block", "Failed allocation"]
    snap_rows = [[clip(_fmt(s.get("file"))), s.get("rank"), human_bytes(s["allocated_bytes"]),
                  human_bytes(s["reserved_bytes"]), s["segments"], human_bytes(s["largest_free_block_bytes"]),
                  human_bytes(s["oom_requested_bytes"]) if s.get("oom_requested_bytes") else ""]
                 for s in report.get("memory_snapshots") or []]
    return header, rows, snap_header, snap_rows

def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=str)
    return str(value)


def _where(f: Mapping[str, Any], origin_us: float | None = None) -> str:
    """contract.where_text of a contract finding (its window in µs), in ms after origin_us."""
    as_ns = {**f, "start_ns": None if f.get("start_us") is None else f["start_us"] * 1000.0,
             "end_ns": None if f.get("end_us") is None else f["end_us"] * 1000.0}
    return where_text(as_ns, None if origin_us is None else origin_us * 1000.0, separator=", ")


def _title(f: Mapping[str, Any]) -> str:
    """A finding's kind as the dashboard titles it (its AnalysisSpec), the id for an unknown kind."""
    spec = analysis_specs().get(str(f.get("kind")))
    return spec.title if spec is not None else str(f.get("kind"))


def _consequence(f: Mapping[str, Any], by_id: Mapping[str, Mapping[str, Any]]) -> str:
    """What a consequence's cost is (its cause's, seen from the waiting ranks), the cause named by
    its title as the dashboard names it, or ""."""
    cause = f.get("caused_by")
    if not cause:
        return ""
    kind = (by_id.get(cause) or {}).get("kind")
    named = _title({"kind": kind}) if kind else "another finding"
    return f"; a consequence of {named} (finding {cause}): fix that one, this cost is not counted again"


def _mark_label(status: Any) -> str:
    """A review mark as the dashboard names it ('to fix'), the stored value for one it does not know."""
    return MARK_LABELS.get(status, str(status))


_FIX_ID = re.compile(r"[a-z0-9_]+")   # a registry id: safe inside a code span as it is


def _fixes(f: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A finding's fixes as the Findings page shows them (fixes.fix_card: id, title, the code with
    the finding's metrics filled in, the demo), the names of the user's program the code reads and
    what each stands for (registry text, Markdown code spans), and the verdict ("ruled_out" /
    "unknown" with its reason, or None when it applies)."""
    ruled_out, unknown = f.get("fixes_ruled_out") or {}, f.get("fixes_unknown") or {}
    out = []
    for fix_id in f.get("fixes") or []:
        card = fix_card(fix_id, f.get("metrics"))
        out.append({"id": card["id"], "title": card["title"], "code": card["code"],
                    "names": "; ".join(f"`{name}`: {what}" for name, what in card["names"].items()),
                    "demo": card["demo"],
                    "verdict": ("ruled_out", ruled_out[fix_id]) if fix_id in ruled_out else
                               ("unknown", unknown[fix_id]) if fix_id in unknown else None})
    return out


def _top_fix(f: Mapping[str, Any]) -> str:
    """The top-findings table's fix cell: the first fix's title, and how many more there are."""
    fixes = _fixes(f)
    if not fixes:
        return "–"
    return fixes[0]["title"] + (f" (+{len(fixes) - 1} more)" if len(fixes) > 1 else "")


def _md_fence(code: str, language: str) -> list[str]:
    """A fenced code block longer than any backtick run inside the code (controls shown escaped)."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", code)), default=0))
    return [fence + language, terminal_safe_lines(code).rstrip("\n"), fence]


def _md_cell(value: Any, limit: int = SUMMARY_LIMIT) -> str:
    """A value as one inert Markdown table cell (trace text: no link, markup or line break)."""
    return markdown_cell(clip(_fmt(value), limit))


def _md_text(value: Any, limit: int = SUMMARY_LIMIT) -> str:
    """Trace (or analysis) text as one line of inert Markdown."""
    return markdown_text(clip(_fmt(value), limit))


def _md_note(value: Any) -> str:
    """The team's own note: inert Markdown whose URLs stay whole, live links (not clipped either)."""
    return note_markdown(_fmt(value))


_VERDICT_WORDS = {"ruled_out": "probably not the fix here", "unknown": "not measured here"}


def _md_fix(number: int, fix: Mapping[str, Any]) -> list[str]:
    """One fix of a finding in Markdown: its title and id, its verdict, its code and the demo."""
    fix_id = f"`{fix['id']}`" if _FIX_ID.fullmatch(fix["id"]) else _md_text(fix["id"])
    verdict = fix["verdict"]
    lines = ["", f"**Fix {number}: {_md_text(fix['title'])}** ({fix_id})"
             + (f" — *{_VERDICT_WORDS[verdict[0]]}: {_md_text(verdict[1])}*" if verdict else ""), ""]
    if fix["code"]:
        lines += _md_fence(fix["code"], "python") + [""]
    if fix["names"]:
        lines += [f"Your program's names: {fix['names']}.", ""]
    lines += ["Profile it before and after on your machine:", ""] + _md_fence(fix["demo"], "bash")
    return lines


def _md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def _whatif_rows(report: Mapping[str, Any]) -> list[list[Any]]:
    """The what-if waterfall as table rows: the step now, after each fix in the greedy order (fixes
    applied together, replayed), with each one's saving."""
    whatif = (report.get("run") or {}).get("whatif") or {}
    if not whatif.get("measured_step_ms") or not whatif.get("order"):
        return []
    by_id = {f.get("id"): f for f in report.get("findings") or []}
    rows = [["now (measured)", whatif["measured_step_ms"], None]]
    previous = whatif["measured_step_ms"]
    for fid in whatif["order"]:
        prediction = (by_id.get(fid) or {}).get("whatif") or {}
        after = prediction.get("step_ms_after_order")
        if after is None:
            continue
        rows.append([f"+ fix {_title(by_id[fid])}", after, round(previous - after, 3)])
        previous = after
    return rows


def _whatif_line(f: Mapping[str, Any]) -> str:
    """What fixing the finding alone gives, in words ('' without a prediction)."""
    w = f.get("whatif")
    if not w:
        return "no prediction (no fix model for this kind, or a consequence)" if "whatif" in f else ""
    return (f"step {_fmt(w.get('step_ms_after'))} ms after fixing it alone (saves {_fmt(w.get('saving_ms'))} ms; "
            f"{_fmt(w.get('on_critical_path_ms'))} ms of what it changes is on the critical path). Assumes: "
            + "; ".join(str(a) for a in w.get("assumptions") or []))


def render_markdown(report: Mapping[str, Any]) -> str:
    """A human-readable Markdown report: top findings, per-rank figures, then each finding."""
    run = report.get("run") or {}
    origin = run.get("start_us")
    lines = [f"# TraceDoctor report: {_md_text(run.get('name', 'no run'), TRACE_TEXT_LIMIT)}", ""]
    if run:
        lines += [f"Run `{_md_cell(run.get('run_id'))}` · world size {_md_cell(run.get('world_size'))} · "
                  f"ranks {_md_text(', '.join(map(str, run.get('ranks') or [])))}", ""]
    for note in report.get("notes") or []:
        lines.append(f"> Note: {_md_text(note)}")
    if report.get("notes"):
        lines.append("")
    if report.get("errors"):
        lines += ["## Files that could not be loaded", ""]
        lines += _md_table(["File", "Problem"], [[clip(_fmt(e.get("file"))), e.get("error")] for e in report["errors"]])
        lines.append("")
    findings = list(report.get("findings") or [])
    by_id = {f.get("id"): f for f in findings}
    lines += ["## Top findings", ""]
    if findings:
        lines += _md_table(["#", "Severity", "Kind", "Where", COST_HEADER, COST_PCT_HEADER, "Best fix"],
                           [[i + 1, f.get("severity"), _title(f), _where(f, origin), *_cost_cells(f), _top_fix(f)]
                            for i, f in enumerate(findings[:10])])
    else:
        lines.append("No significant findings: nothing costs more than the reporting threshold of step time.")
    whatif_rows = _whatif_rows(report)
    if whatif_rows:
        lines += ["", "## What the fixes will buy (replayed, fixes applied together, largest saving first)", ""]
        lines += _md_table(["Step", "ms per step", "Saves (ms)"], whatif_rows)
    lines += ["", "## Per-rank figures", ""]
    ranks = [r for r in report.get("ranks") or [] if "steps" in r]
    if ranks:
        lines += _md_table([title for _, title in RANK_COLUMNS], [[r.get(k) for k, _ in RANK_COLUMNS] for r in ranks])
    else:
        lines.append("No ranks.")
    memory_header, memory_rows, snapshot_header, snapshot_rows = _memory_tables(report)
    if memory_rows or snapshot_rows:
        lines += ["", "## Memory", ""]
    if memory_rows:
        lines += _md_table(memory_header, memory_rows)
    if snapshot_rows:
        lines += ["", "Allocator snapshots:", ""] + _md_table(snapshot_header, snapshot_rows)
    if any(f.get("fixes") for f in findings) and install_hint():
        lines += ["", f"The fixes' code imports `accel`: {install_hint()}."]
    for i, f in enumerate(findings):
        fixes = _fixes(f)
        lines += ["", f"### {i + 1}. {_md_text(_title(f))} ({_md_text(f.get('severity'))})", "",
                  _md_text(f.get("summary")), "",
                  f"- **Where:** {_md_text(_where(f, origin))} · id {_md_text(f.get('id'))}",
                  f"- **Cost:** {_md_text(_cost_words(f))}" + _md_text(_consequence(f, by_id))]
        if _whatif_line(f):
            lines.append(f"- **What-if:** {_md_text(_whatif_line(f), 2000)}")
        if f.get("review"):
            lines.append(f"- **Review:** {_md_text(_mark_label(f['review']['status']))}"
                         + (f" — {_md_note(f['review']['note'])}" if f["review"].get("note") else ""))
        lines.append("- **Fixes:** " + (f"{len(fixes)}, the likeliest first" if fixes else "none registered"))
        for number, fix in enumerate(fixes, start=1):
            lines += _md_fix(number, fix)
        metrics = f.get("metrics") or {}
        if metrics:
            lines += ["", "<details><summary>Evidence</summary>", ""]
            lines += _md_table(["Metric", "Value"], [[k, v] for k, v in metrics.items()])
            lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1100px;color:#1b1f24;padding:0 1rem}
table{border-collapse:collapse;margin:.5rem 0 1.2rem;font-size:.9rem}
th,td{border:1px solid #d0d7de;padding:.3rem .6rem;text-align:left;vertical-align:top}
th{background:#f6f8fa} td.num{text-align:right;font-variant-numeric:tabular-nums}
.sev-high{color:#b42318;font-weight:600}.sev-medium{color:#b54708;font-weight:600}.sev-low{color:#475467}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.4rem .8rem;margin:.4rem 0}
.finding{border:1px solid #d0d7de;border-radius:6px;padding:.6rem 1rem;margin:1rem 0}
code{background:#f6f8fa;padding:0 .2rem}
pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:.6rem .8rem;overflow-x:auto;font-size:.85rem}
pre code{padding:0;background:none;display:block}
.fix{border-top:1px solid #eaeef2;margin-top:.6rem;padding-top:.2rem}
"""


def _h(value: Any, limit: int | None = SUMMARY_LIMIT) -> str:
    """value as escaped HTML text, clipped to limit characters (None: whole, for the team's notes)."""
    return html_text(_fmt(value) if limit is None else clip(_fmt(value), limit))


def _html_table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(
        f"<td class=\"num\">{_h(c)}</td>" if isinstance(c, (int, float)) and not isinstance(c, bool) else f"<td>{_h(c)}</td>"
        for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _h_code_spans(text: str) -> str:
    """Markdown-ish registry text (`code` spans) as escaped HTML with <code> elements."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html_text(text))


def _html_fix(number: int, fix: Mapping[str, Any]) -> str:
    """One fix of a finding in HTML: its title and id, its verdict, its code and the demo command."""
    verdict = fix["verdict"]
    return (f"<div class=\"fix\"><h4>Fix {number}: {_h(fix['title'])} <small><code>{_h(fix['id'])}</code></small></h4>"
            + (f"<p><i>{_VERDICT_WORDS[verdict[0]]}: {_h(verdict[1])}</i></p>" if verdict else "")
            + (f"<pre><code>{html.escape(terminal_safe_lines(fix['code']))}</code></pre>" if fix["code"] else "")
            + (f"<p><small>Your program's names: {_h_code_spans(fix['names'])}.</small></p>" if fix["names"] else "")
            + "<p>Profile it before and after on your machine:</p>"
            + f"<pre><code>{html.escape(terminal_safe_lines(fix['demo']))}</code></pre></div>")


def render_html(report: Mapping[str, Any]) -> str:
    """A self-contained HTML page (inline CSS, no scripts, no external resources); every string
    from the report is escaped."""
    run = report.get("run") or {}
    origin = run.get("start_us")
    parts = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<title>TraceDoctor report: {_h(run.get('name', 'no run'), TRACE_TEXT_LIMIT)}</title>",
             f"<style>{_CSS}</style></head><body>",
             f"<h1>TraceDoctor report: {_h(run.get('name', 'no run'), TRACE_TEXT_LIMIT)}</h1>"]
    if run:
        parts.append(f"<p>Run <code>{_h(run.get('run_id'))}</code> · world size {_h(run.get('world_size'))} · "
                     f"ranks {_h(', '.join(map(str, run.get('ranks') or [])))}</p>")
    for note in report.get("notes") or []:
        parts.append(f"<div class=\"note\">{_h(note)}</div>")
    if report.get("errors"):
        parts.append("<h2>Files that could not be loaded</h2>")
        parts.append(_html_table(["File", "Problem"], [[clip(_fmt(e.get("file"))), e.get("error")]
                                                       for e in report["errors"]]))
    findings = list(report.get("findings") or [])
    by_id = {f.get("id"): f for f in findings}
    parts.append("<h2>Top findings</h2>")
    if findings:
        rows = []
        for i, f in enumerate(findings[:10]):
            rows.append([i + 1, f.get("severity"), _title(f), _where(f, origin), *_cost_cells(f), _top_fix(f)])
        parts.append(_html_table(["#", "Severity", "Kind", "Where", COST_HEADER, COST_PCT_HEADER, "Best fix"], rows))
    else:
        parts.append("<p>No significant findings: nothing costs more than the reporting threshold of step time.</p>")
    whatif_rows = _whatif_rows(report)
    if whatif_rows:
        parts.append("<h2>What the fixes will buy</h2><p>The run's dependency graph replayed with each fix, the "
                     "largest predicted saving first, fixes applied together (not added up).</p>")
        parts.append(_html_table(["Step", "ms per step", "Saves (ms)"], whatif_rows))
    parts.append("<h2>Per-rank figures</h2>")
    parts.append(_html_table([t for _, t in RANK_COLUMNS],
                             [[r.get(k) for k, _ in RANK_COLUMNS] for r in report.get("ranks") or [] if "steps" in r]))
    memory_header, memory_rows, snapshot_header, snapshot_rows = _memory_tables(report)
    if memory_rows or snapshot_rows:
        parts.append("<h2>Memory</h2>")
    if memory_rows:
        parts.append(_html_table(memory_header, memory_rows))
    if snapshot_rows:
        parts.append("<p>Allocator snapshots:</p>" + _html_table(snapshot_header, snapshot_rows))
    if any(f.get("fixes") for f in findings) and install_hint():
        parts.append(f"<p>The fixes' code imports <code>accel</code>: {_h_code_spans(install_hint())}.</p>")
    for i, f in enumerate(findings):
        sev = f.get("severity") if f.get("severity") in ("high", "medium", "low") else "low"
        fixes = "".join(_html_fix(number, fix) for number, fix in enumerate(_fixes(f), start=1)) \
            or "<p>No fix in the library addresses this finding yet.</p>"
        metrics = f.get("metrics") or {}
        parts.append(
            f"<div class=\"finding\"><h3>{i + 1}. {_h(_title(f))} <span class=\"sev-{sev}\">{_h(f.get('severity'))}</span></h3>"
            f"<p>{_h(f.get('summary'))}</p>"
            f"<p><b>Where:</b> {_h(_where(f, origin))} · id <code>{_h(f.get('id'))}</code><br>"
            f"<b>Cost:</b> {_h(_cost_words(f))}{_h(_consequence(f, by_id))}"
            + (f"<br><b>What-if:</b> {_h(_whatif_line(f), 2000)}" if _whatif_line(f) else "") + "</p>"
            + (f"<p><b>Review:</b> {_h(_mark_label(f['review']['status']))}"
               + (f" — {note_html(_fmt(f['review']['note']))}" if f["review"].get("note") else "") + "</p>"
               if f.get("review") else "")
            + fixes
            + (f"<details><summary>Evidence</summary>{_html_table(['Metric', 'Value'], [[k, v] for k, v in metrics.items()])}</details>"
               if metrics else "")
            + "</div>")
    parts.append("</body></html>")
    return "\n".join(parts)
