"""The stored whole-run tables of the pages' default views (table page_defaults, store/schema.sql):
written once per analysis while its views are cached (queries.store_page_defaults), read back by
the query that would otherwise compute them (queries.PAGE_DEFAULTS). Each table is kept as the
Parquet file DuckDB writes of the query's result, so it reads back with its columns and types."""
from __future__ import annotations

import io
from typing import TYPE_CHECKING

import duckdb

from analyzers.analysis.version import analysis_version

if TYPE_CHECKING:    # pandas is imported when a table is read (the CLI's start-up stays lean)
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
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(rows[0][0]))
    # DECIMAL columns as DuckDB's .df() hands them: float64
    schema = pa.schema([f.with_type(pa.float64()) if pa.types.is_decimal(f.type) else f for f in table.schema])
    return table.cast(schema).to_pandas()


def write(con: duckdb.DuckDBPyConnection, run_id: str, tables: dict[str, bytes]) -> None:
    """Replace the run's stored tables with `tables` (each a Parquet file's bytes)."""
    version = analysis_version()
    con.execute("DELETE FROM page_defaults WHERE run_id = ?", [run_id])
    if tables:
        con.executemany("INSERT INTO page_defaults VALUES (?, ?, ?, ?)",
                        [[run_id, name, version, data] for name, data in tables.items()])
