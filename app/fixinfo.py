"""What the dashboard shows about a fix: the registry entry and the gain measured in accel/BENCHMARKS.md."""
from __future__ import annotations

from typing import Any

from accel.benchmarks import BENCHMARKS, table_rows


def fix_details(fix_id: str) -> dict[str, Any]:
    """title, description, snippet, demo, needs for a fix id; a plain placeholder when unknown."""
    try:
        from accel import registry

        fix = registry.get(fix_id)
    except Exception:  # registry missing or id unknown: still show the id
        fix = None
    if fix is None:
        return {"id": fix_id, "title": fix_id, "description": "", "snippet": "", "needs": [],
                "demo": f"python -m accel.demo {fix_id} --out DIR"}
    return {"id": fix.id, "title": fix.title, "description": fix.description, "snippet": fix.snippet,
            "needs": list(fix.needs), "demo": fix.demo}


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
