"""How the pages' tables read: every column labelled in words with its unit, numbers formatted (no raw
`step_ms` with four decimals), byte counts in binary units, and every table CSV-safe (app.ui.table)."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from streamlit import dataframe_util

from analyzers.store.database import connect
from app import ui
from tests.support.app_store import AFTER_RUN, BEFORE_RUN
from tests.support.app_pages import goto, open_app

PAGES = ["views/overview.py", "views/ranks.py", "views/communication.py", "views/compare.py"]


def test_human_bytes_uses_binary_units():
    assert [ui.human_bytes(v) for v in (0, 1000, 4_000_000, 597_688_320, 3 * 2**40, None, float("nan"))] == \
        ["0 B", "1000 B", "3.8 MiB", "570.0 MiB", "3.0 TiB", "", ""]


def test_csv_safe_covers_string_category_and_list_cells_and_leaves_numbers():
    frame = pd.DataFrame({
        "object": ["=1+1", "ok"], "string": pd.Series(["+cmd", "@x"], dtype="string"),
        "category": pd.Series(["-2", "fine"], dtype="category"), "listed": [["=a", "b"], []],
        "number": [-1.5, 2.0]})
    safe = ui.csv_safe(frame)
    assert safe["object"].tolist() == ["'=1+1", "ok"]
    assert safe["string"].tolist() == ["'+cmd", "'@x"]
    assert safe["category"].tolist() == ["'-2", "fine"]
    assert safe["listed"].tolist() == [["'=a", "b"], []]
    assert safe["number"].tolist() == [-1.5, 2.0]
    assert frame["object"].tolist() == ["=1+1", "ok"]   # the caller's frame is left alone


def test_speed_change_says_faster_or_slower():
    assert ui.speed_change(1.25, 0.8) == ("1.25× faster", "green")
    assert ui.speed_change(1 / 1.61, 1.61) == ("1.61× slower", "red")
    assert ui.speed_change(1.001, 0.999) == ("no change (1.00×)", "gray")


def _tables(monkeypatch, db, page: str) -> list:
    at = open_app(monkeypatch, db, run_id=BEFORE_RUN)
    at.session_state["compare_before"], at.session_state["compare_after"] = BEFORE_RUN, AFTER_RUN
    return list(goto(at, page).dataframe)


@pytest.mark.parametrize("page", PAGES)
def test_every_column_has_a_label_in_words_and_every_number_a_format(hand_built, monkeypatch, page):
    tables = _tables(monkeypatch, hand_built, page)
    assert tables, page
    for table in tables:
        config = json.loads(table.proto.columns or "{}")
        data = table.value
        shown = list(table.proto.column_order) or list(data.columns)
        styled = set()
        if table.proto.arrow_data.styler.display_values:
            display = dataframe_util.convert_arrow_bytes_to_pandas_df(table.proto.arrow_data.styler.display_values)
            styled = {c for c in display.columns if not display[c].astype(str).equals(data[c].astype(str))}
        for column in shown:
            label = config.get(column, {}).get("label")
            assert label and "_" not in label, (page, column, label)
            numeric = column in data.columns and pd.api.types.is_float_dtype(data[column])
            if numeric and column not in styled and len(data):
                assert config[column].get("type_config", {}).get("format"), (page, column)


def test_message_sizes_read_in_binary_units_and_still_sort_as_numbers(hand_built, monkeypatch):
    # the hand-built all-reduce moves 1,000,000 floats: 4,000,000 bytes
    kernels = _tables(monkeypatch, hand_built, "views/communication.py")[-1]
    display = dataframe_util.convert_arrow_bytes_to_pandas_df(kernels.proto.arrow_data.styler.display_values)
    assert display["bytes"].tolist() == ["3.8 MiB"]
    assert kernels.value["bytes"].tolist() == [4_000_000]   # the cell keeps its number


def test_trace_text_starting_with_a_formula_sign_is_shown_csv_safe_on_overview(hand_built, monkeypatch):
    con = connect(hand_built)
    try:
        con.execute("UPDATE ranks SET device_name = '=HYPERLINK(\"http://x\")', file_name = '@rank0.json' "
                    "WHERE run_id = ? AND rank = 0", [BEFORE_RUN])
    finally:
        con.close()
    files = _tables(monkeypatch, hand_built, "views/overview.py")[-1].value
    row = files[files["rank"] == 0].iloc[0]
    assert row["device_name"] == "'=HYPERLINK(\"http://x\")" and row["file_name"] == "'@rank0.json"
