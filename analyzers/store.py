"""The DuckDB store: where it lives, how to open it, and its schema."""
from __future__ import annotations

import os
from pathlib import Path

import duckdb

SCHEMA_FILE = Path(__file__).with_name("schema.sql")
DB_ENV_VAR = "TRACEDOCTOR_DB"


def default_db_path() -> Path:
    """$TRACEDOCTOR_DB, else $XDG_DATA_HOME/tracedoctor/tracedoctor.duckdb (~/.local/share by default)."""
    if os.environ.get(DB_ENV_VAR):
        return Path(os.environ[DB_ENV_VAR]).expanduser()
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data_home / "tracedoctor" / "tracedoctor.duckdb"


def connect(db_path: str | os.PathLike | None = None, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) the store and make sure the schema exists.

    db_path None means default_db_path(); ":memory:" gives a throwaway in-memory store.
    """
    path = str(db_path) if db_path is not None else str(default_db_path())
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(path, read_only=read_only)
    if not read_only:
        con.execute(SCHEMA_FILE.read_text())
    return con
