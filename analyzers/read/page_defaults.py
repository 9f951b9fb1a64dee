"""The stored whole-run tables of the pages' default views (table page_defaults, store/schema.sql):
written once per analysis while its views are cached (queries.store_page_defaults), read back by
the query that would otherwise compute them (queries.PAGE_DEFAULTS). Each table is kept as the
Parquet bytes of its frame, so it reads back with the columns and types it was written with."""
from __future__ import annotations

import io
from typing import TYPE_CHECKING

import duckdb

from analyzers.analysis.version import analysis_version

if TYPE_CHECKING:    # pandas is imported when a table is read or written (the CLI's start-up stays lean)
    import pandas as pd


def read(con: duckdb.DuckDBPyConnection, run_id: str, name: str) -> pd.DataFrame | None:
    """The stored table `name` of the run, written by this code's analysis version; None when there
    is none (a run analysed by another version or on a cluster, a store made before the table)."""
    try:
        rows = con.execute("SELECT data FROM page_defaults WHERE run_id = ? AND name = ? AND version = ?",
                           [run_id, name, analysis_version()]).fetchall()
    except duckdb.CatalogException:
        return None
    if not rows:
        return None
    import pandas as pd

    return pd.read_parquet(io.BytesIO(rows[0][0]))


def write(con: duckdb.DuckDBPyConnection, run_id: str, tables: dict[str, pd.DataFrame]) -> None:
    """Replace the run's stored tables with `tables` (the frames as the queries return them)."""
    version = analysis_version()
    rows = []
    for name, frame in tables.items():
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        rows.append([run_id, name, version, buffer.getvalue()])
    con.execute("DELETE FROM page_defaults WHERE run_id = ?", [run_id])
    if rows:
        con.executemany("INSERT INTO page_defaults VALUES (?, ?, ?, ?)", rows)
