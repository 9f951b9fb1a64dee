"""A dashboard process exits cleanly while a page thread is still inside a DuckDB query.

At interpreter exit a daemon thread still inside DuckDB is ended with pthread_exit; the unwinding
through DuckDB's C++ frames aborts the process ("terminate called after throwing an instance of
''", "FATAL: exception not rethrown"). StoreLease.shutdown (registered at exit) interrupts the
query and closes the store on the main thread first.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.support.paths import REPO_ROOT as REPO


CHILD = textwrap.dedent("""
    import sys, threading, time
    from app import state
    lease = state._lease(sys.argv[1])
    cursor = lease.acquire()
    started = threading.Event()
    def page_run():
        started.set()
        try:
            cursor.execute("SELECT count(*) FROM range(4000000000) t(x) WHERE x % 7 = 3").fetchall()
            print("query finished", flush=True)
        except Exception as exc:
            print("query interrupted:", type(exc).__name__, flush=True)
        finally:
            lease.release(cursor)
    threading.Thread(target=page_run, daemon=True).start()
    started.wait()
    time.sleep(0.3)
""")


def test_exit_during_a_page_query_does_not_abort(tmp_path):
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "store.duckdb")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "FATAL" not in done.stderr and "terminate called" not in done.stderr, done.stderr[-2000:]
    # the thread was inside DuckDB when the interpreter exited: the shutdown interrupted it
    assert "query interrupted: InterruptException" in done.stdout, done.stdout
