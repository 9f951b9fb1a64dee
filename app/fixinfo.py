"""What the dashboard shows about a fix: the registry entry and the gain measured in accel/BENCHMARKS.md."""
from __future__ import annotations

from typing import Any

from accel.benchmarks import BENCHMARKS, table_rows
from analyzers.read.fixes import fix_card, install_hint


def fix_details(fix_id: str) -> dict[str, Any]:
    """title, description, snippet, demo, needs for a fix id (analyzers.read.fixes.fix_card)."""
    card = fix_card(fix_id)
    return {key: card[key] for key in ("id", "title", "description", "snippet", "needs", "demo")}


def measured_gain(fix_id: str, text: str | None = None, plain: bool = False) -> list[dict[str, str]]:
    """Rows of BENCHMARKS.md tables that name this fix id (header -> cell), [] when none.
    plain: without the cells' Markdown code marks (a table widget shows them as typed)."""
    if text is None:
        try:
            text = BENCHMARKS.read_text()
        except OSError:
            return []
    rows = [dict(zip(header, cells)) for header, cells in table_rows(text)
            if any(c.strip("`* ") == fix_id for c in cells)]
    if plain:
        rows = [{key: value.replace("`", "").replace("**", "") for key, value in row.items()} for row in rows]
    return rows


def pasteable(fix_id: str, metrics: Any = None) -> dict[str, Any]:
    """The fix's code as a finding shows it (the finding's metrics filled in where the code reads
    them) and {name: what it stands for} for the names of the user's program it reads; nothing
    for a fix id the registry does not know."""
    card = fix_card(fix_id, metrics)
    if not card["code"]:
        return {"snippet": "", "placeholders": {}, "install": ""}
    return {"snippet": card["code"], "placeholders": card["names"], "install": install_hint()}


# BENCHMARKS.md's column headers -> the dashboard's, in the order shown: the outcome first, so
# the speed-up is never the column a narrow table cuts off. Headers not listed follow, as written.
GAIN_COLUMNS = {
    "speedup (median, range)": "Speed-up (median, range)", "speedup": "Speed-up",
    "before ms/step": "Before (ms/step)", "after ms/step": "After (ms/step)",
    "finding cost before → after": "Finding's cost before → after",
    "goal": "Goal", "measured": "Measured",
    "workload": "Workload", "device": "Device", "date": "Measured on", "correctness check": "Correctness check",
}


def gain_tables(fix_id: str, text: str | None = None) -> list[list[dict[str, str]]]:
    """measured_gain's rows grouped by the BENCHMARKS.md table they come from, each row's cells
    (Markdown, as written there: st.table renders it, so `__len__` stays code) under the
    dashboard's headers in GAIN_COLUMNS order; the fix column dropped (the fix's tab names it).
    [] when BENCHMARKS.md has none for this fix."""
    tables: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for row in measured_gain(fix_id, text):
        keys = [k for k in GAIN_COLUMNS if k in row] + [k for k in row if k not in GAIN_COLUMNS and k != "fix"]
        tables.setdefault(tuple(keys), []).append({GAIN_COLUMNS.get(k, k): row[k] for k in keys})
    return list(tables.values())
