"""accel/BENCHMARKS.md as data: the rows of its Markdown tables, read by the dashboard (measured
gains per fix) and by accel.gpu_session (the workload each GPU demo runs). Imports no torch."""
from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).with_name("BENCHMARKS.md")


def table_rows(text: str) -> list[tuple[list[str], list[str]]]:
    """(header, row) pairs of every Markdown table row in text."""
    pairs, header = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
        elif not all(set(c) <= set("-: ") for c in cells):
            pairs.append((header, cells))
    return pairs
