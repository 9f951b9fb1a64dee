"""Byte sizes in words: one formatter for findings, ingest messages, reports and pages."""
from __future__ import annotations

import math
from typing import Any


def human_bytes(value: Any, decimals: int = 2, missing: str = "?", significant: int | None = None) -> str:
    """A byte count in binary units: 1048576 -> '1.00 MiB' (decimals=2), 597688320 -> '570.0 MiB'
    (decimals=1); with significant digits instead, a limit as it was set: 262144 -> '256 KiB',
    1.5 GiB -> '1.5 GiB' (significant=3); whole bytes below 1 KiB; `missing` for None or NaN."""
    if value is None:
        return missing
    size = float(value)
    if math.isnan(size):
        return missing
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return _in_unit(size, unit, decimals, significant)
        size /= 1024
    return _in_unit(size, "TiB", decimals, significant)


def _in_unit(size: float, unit: str, decimals: int, significant: int | None) -> str:
    if unit == "B":
        return f"{size:.0f} B"
    return f"{size:.{significant}g} {unit}" if significant else f"{size:,.{decimals}f} {unit}"
