"""Byte sizes in words: one formatter for findings, ingest messages, reports and pages."""
from __future__ import annotations

import math
from typing import Any


def human_bytes(value: Any, decimals: int = 2, missing: str = "?") -> str:
    """A byte count in binary units: 1048576 -> '1.00 MiB' (decimals=2), 597688320 -> '570.0 MiB'
    (decimals=1); whole bytes below 1 KiB; `missing` for None or NaN."""
    if value is None:
        return missing
    size = float(value)
    if math.isnan(size):
        return missing
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:,.{decimals}f} {unit}"
        size /= 1024
    return f"{size:,.{decimals}f} TiB"
