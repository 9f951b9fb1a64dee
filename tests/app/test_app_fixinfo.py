"""What the Findings page shows about a fix: registry details and BENCHMARKS.md rows."""
from __future__ import annotations

from app.fixinfo import fix_details, measured_gain

BENCH = """# figures

| fix | device | before ms/step | after ms/step | speedup |
| --- | --- | --- | --- | --- |
| fused_optimizer | CPU | 33.7 | 29.8 | 1.13x |
| `cuda_graph` | H100 | 10.0 | 3.0 | 3.3x |

Text between tables.

| fix | goal | measured |
| --- | --- | --- |
| cuda_graph | >= 3x | not yet measured on GPU |
| powersgd_extra | x | y |
"""


def test_measured_gain_returns_the_rows_naming_the_fix_with_their_headers():
    assert measured_gain("cuda_graph", BENCH) == [
        {"fix": "`cuda_graph`", "device": "H100", "before ms/step": "10.0", "after ms/step": "3.0", "speedup": "3.3x"},
        {"fix": "cuda_graph", "goal": ">= 3x", "measured": "not yet measured on GPU"},
    ]
    assert measured_gain("fused_optimizer", BENCH)[0]["speedup"] == "1.13x"
    assert measured_gain("powersgd", BENCH) == []          # a prefix of another id is not a match
    assert measured_gain("cuda_graph", "no tables here") == []


def test_fix_details_from_the_registry_and_a_placeholder_for_unknown_ids():
    known = fix_details("cuda_graph")
    assert known["demo"] == "python -m accel.demo cuda_graph --out DIR"
    assert known["title"] and known["snippet"]
    unknown = fix_details("no_such_fix")
    assert unknown == {"id": "no_such_fix", "title": "no_such_fix", "description": "", "snippet": "", "needs": [],
                       "demo": "python -m accel.demo no_such_fix --out DIR"}


def test_measured_gain_plain_drops_markdown_marks_for_the_table_widget():
    rows = measured_gain("cuda_graph", BENCH.replace("| H100 |", "| **H100** `sm90` |"), plain=True)
    assert rows[0]["fix"] == "cuda_graph" and rows[0]["device"] == "H100 sm90"
