"""Event rows (ns times, run "r") inserted straight into the store's events table."""
from __future__ import annotations

import json


EVENT_COLS = ("run_id", "rank", "kind", "cat", "ph", "name", "ts_ns", "dur_ns", "pid", "tid", "device",
              "stream", "correlation", "external_id", "bytes", "args")


def insert_events(con, rows):
    con.executemany(f"INSERT INTO events ({', '.join(EVENT_COLS)}) VALUES ({', '.join('?' * len(EVENT_COLS))})",
                    [[r.get(c) if c != "args" else json.dumps(r.get("args", {})) for c in EVENT_COLS]
                     for r in rows])


def ev(kind, name, ts, dur, **kw):
    row = {"run_id": "r", "rank": 0, "kind": kind, "cat": kind, "ph": "X", "name": name, "ts_ns": ts, "dur_ns": dur}
    row.update(kw)
    return row
