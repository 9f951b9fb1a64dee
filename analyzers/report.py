"""A run's report: the CLI JSON contract, and the same content as Markdown and as HTML.

build_report reads what is stored (runs, ranks, the findings analyze_run wrote) and computes the
per-rank figures; it does not re-run the analyses. Trace-derived text (file names, kernel and op
names inside summaries and metrics) is untrusted: every string reaches Markdown and HTML through
analyzers.safe_text (markup escaped, controls and bidi overrides shown escaped, no bare URL
linked, long names clipped); the team's own review notes keep their links.
"""
from __future__ import annotations

import html
import json
from typing import Any, Iterable, Mapping

import duckdb

from analyzers.analyses import analysis_specs
from analyzers.contract import finding_contract, where_text
from analyzers.metrics import rank_summary
from analyzers.queries import findings, time_bounds
from analyzers.safe_text import SUMMARY_LIMIT, TRACE_TEXT_LIMIT, clip, html_text, markdown_cell, markdown_text
from analyzers.sqlrun import ensure_loaded

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
    from analyzers.findings import analysis_notes

    ensure_loaded(con)
    run = con.execute("SELECT run_id, name, world_size FROM runs WHERE run_id = ?", [run_id]).fetchone()
    error_list = [_error_dict(e) for e in errors]
    if run is None:
        return {"run": None, "errors": error_list + [{"file": "", "error": f"no stored run with id {run_id!r}"}],
                "ranks": [], "findings": [], "notes": []}
    rank_rows = con.execute("SELECT rank, file_name FROM ranks WHERE run_id = ? ORDER BY rank", [run_id]).fetchall()
    bounds = time_bounds(con, run_id)
    return {
        "run": {"run_id": run[0], "name": run[1], "world_size": run[2],
                "ranks": [r for r, _ in rank_rows], "files": [f for _, f in rank_rows],
                # the run's first event (µs), so finding windows can be read as "ms into the trace"
                "start_us": None if bounds is None else bounds[0] / 1000.0},
        "errors": error_list,
        "ranks": rank_summary(con, run_id),
        "findings": [finding_contract(f) for f in findings(con, run_id, raw=True)],
        "notes": analysis_notes(con, run_id),
    }


# --- formatting helpers -----------------------------------------------------------------------

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


def _consequence(f: Mapping[str, Any]) -> str:
    """What a consequence's cost is (its cause's, seen from the waiting ranks), or ""."""
    if not f.get("caused_by"):
        return ""
    return f"; a consequence of {f['caused_by']}, not counted again"


def _md_cell(value: Any, limit: int = SUMMARY_LIMIT) -> str:
    """A value as one inert Markdown table cell (trace text: no link, markup or line break)."""
    return markdown_cell(clip(_fmt(value), limit))


def _md_text(value: Any, limit: int = SUMMARY_LIMIT) -> str:
    """Trace (or analysis) text as one line of inert Markdown."""
    return markdown_text(clip(_fmt(value), limit))


def _md_note(value: Any) -> str:
    """The team's own note: inert Markdown that keeps its links whole (not clipped either)."""
    return markdown_text(_fmt(value), trace=False)


def _md_ruled_out(finding: Mapping[str, Any], fix_id: str) -> str:
    reason = (finding.get("fixes_ruled_out") or {}).get(fix_id)
    if reason:
        return f" — *probably not the fix here: {_md_text(reason)}*"
    unknown = (finding.get("fixes_unknown") or {}).get(fix_id)
    return f" — *not measured here: {_md_text(unknown)}*" if unknown else ""


def _md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


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
    lines += ["## Top findings", ""]
    if findings:
        lines += _md_table(["#", "Severity", "Kind", "Where", "Cost (ms/step)", "Cost (% of step)", "Fixes"],
                           [[i + 1, f.get("severity"), _title(f), _where(f, origin), f.get("cost_ms_per_step"),
                             f.get("cost_pct"), ", ".join(f.get("fixes") or []) or "–"]
                            for i, f in enumerate(findings[:10])])
    else:
        lines.append("No significant findings: nothing costs more than the reporting threshold of step time.")
    lines += ["", "## Per-rank figures", ""]
    ranks = report.get("ranks") or []
    if ranks:
        lines += _md_table([title for _, title in RANK_COLUMNS], [[r.get(k) for k, _ in RANK_COLUMNS] for r in ranks])
    else:
        lines.append("No ranks.")
    for i, f in enumerate(findings):
        lines += ["", f"### {i + 1}. {_md_text(_title(f))} ({_md_text(f.get('severity'))}) — {_md_text(f.get('id'))}", "",
                  _md_text(f.get("summary")), "",
                  f"- **Where:** {_md_text(_where(f, origin))}",
                  f"- **Cost:** {_fmt(f.get('cost_ms_per_step'), 3)} ms lost per step "
                  f"({_fmt(f.get('cost_pct'))}% of the mean step)" + _consequence(f),
                  "- **Fixes:** " + (", ".join(f"`{_md_cell(x)}` (`python -m accel.demo {_md_cell(x)}`)"
                                                + _md_ruled_out(f, x) for x in f.get("fixes") or [])
                                      or "none registered")]
        if f.get("review"):
            lines.append(f"- **Review:** {_md_text(f['review']['status'])}"
                         + (f" — {_md_note(f['review']['note'])}" if f["review"].get("note") else ""))
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
    parts.append("<h2>Top findings</h2>")
    if findings:
        rows = []
        for i, f in enumerate(findings[:10]):
            rows.append([i + 1, f.get("severity"), _title(f), _where(f, origin), f.get("cost_ms_per_step"),
                         f.get("cost_pct"), ", ".join(f.get("fixes") or []) or "–"])
        parts.append(_html_table(["#", "Severity", "Kind", "Where", "Cost (ms/step)", "Cost (% of step)", "Fixes"], rows))
    else:
        parts.append("<p>No significant findings: nothing costs more than the reporting threshold of step time.</p>")
    parts.append("<h2>Per-rank figures</h2>")
    parts.append(_html_table([t for _, t in RANK_COLUMNS],
                             [[r.get(k) for k, _ in RANK_COLUMNS] for r in report.get("ranks") or []]))
    for i, f in enumerate(findings):
        sev = f.get("severity") if f.get("severity") in ("high", "medium", "low") else "low"
        ruled_out, unknown = f.get("fixes_ruled_out") or {}, f.get("fixes_unknown") or {}
        fixes = "".join(f"<li><code>{_h(x)}</code>: <code>python -m accel.demo {_h(x)}</code>"
                        + (f" <i>(probably not the fix here: {_h(ruled_out[x])})</i>" if x in ruled_out else
                           f" <i>(not measured here: {_h(unknown[x])})</i>" if x in unknown else "")
                        + "</li>" for x in f.get("fixes") or []) or "<li>none registered</li>"
        metrics = f.get("metrics") or {}
        parts.append(
            f"<div class=\"finding\"><h3>{i + 1}. {_h(_title(f))} <span class=\"sev-{sev}\">{_h(f.get('severity'))}</span>"
            f" <small><code>{_h(f.get('id'))}</code></small></h3>"
            f"<p>{_h(f.get('summary'))}</p>"
            f"<p><b>Where:</b> {_h(_where(f, origin))}<br><b>Cost:</b> {_h(_fmt(f.get('cost_ms_per_step'), 3))} ms lost "
            f"per step ({_h(f.get('cost_pct'))}% of the mean step){_h(_consequence(f))}</p>"
            + (f"<p><b>Review:</b> {_h(f['review']['status'])}"
               + (f" — {_h(f['review']['note'], limit=None)}" if f["review"].get("note") else "") + "</p>"
               if f.get("review") else "")
            + f"<p><b>Fixes:</b></p><ul>{fixes}</ul>"
            + (f"<details><summary>Evidence</summary>{_html_table(['Metric', 'Value'], [[k, v] for k, v in metrics.items()])}</details>"
               if metrics else "")
            + "</div>")
    parts.append("</body></html>")
    return "\n".join(parts)
