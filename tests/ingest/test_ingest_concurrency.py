"""Several uploads at once (browser tabs, CLI jobs in one process) must never corrupt the store:
different runs all land, and the same files raced twice land once."""
from __future__ import annotations

import json
import threading

from analyzers.ingest import ingest_paths
from analyzers.store.database import connect


def _write_job(directory, ranks: int, offset_us: float) -> str:
    directory.mkdir()
    for rank in range(ranks):
        # ranks differ (a rank's trace is never byte-identical to another's: identical files in
        # one call load once)
        events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7 + rank, "ts": offset_us + 10.0 * i,
                   "dur": 5.0, "args": {"device": 0, "stream": 7, "correlation": i}} for i in range(50)]
        (directory / f"rank-{rank}.json").write_text(json.dumps({"traceEvents": events}))
    return str(directory)


def test_concurrent_ingests_all_land_and_duplicates_collapse(tmp_path):
    jobs = [_write_job(tmp_path / f"job{i}", ranks=2, offset_us=1000.0 * i) for i in range(3)]
    con = connect(tmp_path / "store.duckdb")
    inputs = jobs + [jobs[0], jobs[0]]          # the first job raced three times
    outcomes: dict[int, object] = {}

    def load(i: int, path: str) -> None:
        try:
            outcomes[i] = ingest_paths(con.cursor(), [path])
        except Exception as exc:  # the test reports it rather than losing it in a thread
            outcomes[i] = exc

    threads = [threading.Thread(target=load, args=(i, p)) for i, p in enumerate(inputs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert not [o for o in outcomes.values() if isinstance(o, Exception)], outcomes
    run_ids = [outcomes[i].run_id for i in range(len(inputs))]
    assert None not in run_ids
    assert run_ids[3] == run_ids[4] == run_ids[0]
    assert len(set(run_ids)) == 3
    assert sum(outcomes[i].reused for i in (0, 3, 4)) == 2
    stored = con.execute("SELECT run_id, count(*) FROM events GROUP BY run_id").fetchall()
    assert sorted(stored) == sorted((run_id, 100) for run_id in set(run_ids))
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 3
    assert con.execute("SELECT count(*) FROM ranks").fetchone()[0] == 6
