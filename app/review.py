"""The review section added to a run's downloaded report: each marked finding, its status and note.

analyzers.read.report builds the report from the findings; review marks live beside them
(analyzers.store.runs.get_marks), so the dashboard appends them here, escaped like the rest.
"""
from __future__ import annotations

import html
from typing import Any, Mapping

from analyzers.common.safe_text import note_html, note_markdown
from app.ui import MARK_LABELS, kind_title, md


def review_rows(findings: list[Mapping[str, Any]], marks: Mapping[str, Mapping[str, Any]]) -> list[dict[str, str]]:
    """One row per marked finding, in the report's (cost) order: id, kind, status, note."""
    rows = []
    for finding in findings:
        mark = marks.get(finding["id"])
        if mark:
            rows.append({"id": str(finding["id"]), "kind": kind_title(str(finding["kind"])),
                         "status": MARK_LABELS.get(mark["status"], str(mark["status"])),
                         "note": str(mark.get("note") or "")})
    return rows


def review_markdown(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "\n## Review\n\nNo finding has been marked yet.\n"
    lines = ["", "## Review", "", "| Finding | Kind | Status | Note |", "| --- | --- | --- | --- |"]
    # the note is the team's own text: its links stay whole and live (trace-derived ids do not)
    lines += [f"| {md(r['id'])} | {md(r['kind'])} | {md(r['status'])} | {note_markdown(r['note'])} |" for r in rows]
    return "\n".join(lines) + "\n"


def review_html(rows: list[dict[str, str]]) -> str:
    if not rows:
        return '<section class="review"><h2>Review</h2><p>No finding has been marked yet.</p></section>'
    cells = "".join(
        "<tr>" + "".join(f"<td>{html.escape(r[k])}</td>" for k in ("id", "kind", "status"))
        + f"<td>{note_html(r['note'])}</td></tr>"
        for r in rows)
    return ('<section class="review"><h2>Review</h2><table><thead><tr><th>Finding</th><th>Kind</th>'
            f"<th>Status</th><th>Note</th></tr></thead><tbody>{cells}</tbody></table></section>")


def insert_before_body_end(page: str, fragment: str) -> str:
    marker = "</body>"
    index = page.rfind(marker)
    return page[:index] + fragment + page[index:] if index >= 0 else page + fragment
