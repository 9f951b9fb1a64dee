"""The interval macros (analyzers/sql/lib/intervals.sql) against a brute-force reference, and the
per-run views of analyzers/sql/lib on hand-written events."""
from __future__ import annotations

import random

import pytest

from analyzers.sql.engine import ensure_loaded
from analyzers.store.database import connect
from tests.support.event_table import ev, insert_events


@pytest.fixture()
def con():
    c = ensure_loaded(connect(":memory:"))
    yield c
    c.close()


def covered_points(intervals):
    """Integer points covered by half-open intervals (brute force reference)."""
    return {t for s, e in intervals for t in range(s, e)}


def as_runs(points):
    """Maximal runs [s, e) of a set of integer points."""
    out, pts = [], sorted(points)
    for t in pts:
        if out and out[-1][1] == t:
            out[-1][1] = t + 1
        else:
            out.append([t, t + 1])
    return [tuple(r) for r in out]


def load(con, table, rows):
    con.execute(f"CREATE OR REPLACE TABLE {table} (grp INTEGER, start_ns BIGINT, end_ns BIGINT)")
    if rows:
        con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", rows)


def random_set(rng, grp, n):
    out = []
    for _ in range(n):
        s = rng.randrange(0, 200)
        out.append((grp, s, s + rng.randrange(0, 25)))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_union_gaps_intersect_subtract_match_brute_force(con, seed):
    rng = random.Random(seed)
    a = random_set(rng, 1, 30) + random_set(rng, 2, 5)
    b = random_set(rng, 1, 20) + random_set(rng, 3, 4)
    load(con, "a", a)
    load(con, "b", b)
    for grp in (1, 2, 3):
        pa = covered_points([(s, e) for g, s, e in a if g == grp])
        pb = covered_points([(s, e) for g, s, e in b if g == grp])
        union = con.execute("SELECT start_ns, end_ns FROM interval_union('a') WHERE grp = ? AND dur_ns > 0 "
                            "ORDER BY 1", [grp]).fetchall()
        assert union == as_runs(pa)
        inter = con.execute("SELECT start_ns, end_ns FROM interval_intersect('a', 'b') WHERE grp = ? ORDER BY 1",
                            [grp]).fetchall()
        assert inter == as_runs(pa & pb)
        sub = con.execute("SELECT start_ns, end_ns FROM interval_subtract('a', 'b') WHERE grp = ? ORDER BY 1",
                          [grp]).fetchall()
        assert sub == as_runs(pa - pb)
        gaps = con.execute("SELECT start_ns, end_ns FROM interval_gaps('a') WHERE grp = ? ORDER BY 1",
                           [grp]).fetchall()
        if pa:
            # a zero-length interval may split a gap in two; the time covered is what matters
            assert covered_points(gaps) == set(range(min(pa), max(pa) + 1)) - pa
            assert all(e > s for s, e in gaps)


def test_union_merges_touching_and_keeps_zero_length(con):
    load(con, "a", [(0, 0, 10), (0, 10, 20), (0, 30, 30), (0, 25, 28)])
    assert con.execute("SELECT start_ns, end_ns FROM interval_union('a') ORDER BY 1").fetchall() == \
        [(0, 20), (25, 28), (30, 30)]


def test_covered_attributes_overlap_to_each_interval(con):
    con.execute("CREATE TABLE gaps AS SELECT * FROM (VALUES (0, 1, 0, 10), (0, 2, 10, 20), (0, 3, 30, 40), "
                "(1, 4, 0, 10)) v(grp, id, start_ns, end_ns)")
    load(con, "spans", [(0, 5, 15), (0, 8, 12), (0, 35, 50), (1, 20, 30)])
    got = con.execute("SELECT id, covered_ns FROM interval_covered('gaps', 'spans') ORDER BY id").fetchall()
    # id 1: [5,10) = 5; id 2: [10,15) = 5 (touching gaps stay apart); id 3: [35,40) = 5; id 4: none
    assert got == [(1, 5), (2, 5), (3, 5), (4, 0)]


def test_macros_accept_cte_names(con):
    got = con.execute("WITH x AS (SELECT 7 AS grp, 3 AS start_ns, 9 AS end_ns UNION ALL SELECT 7, 5, 12) "
                      "SELECT grp, start_ns, end_ns FROM interval_union('x')").fetchall()
    assert got == [(7, 3, 12)]


# --- analyzers/sql/lib on hand-written events -------------------------------------------------------


def test_views_classify_and_join(con):
    insert_events(con, [
        ev("user_annotation", "ProfilerStep#3", 0, 1000),
        ev("user_annotation", "ProfilerStep#4", 1000, 1000),
        ev("runtime", "cudaLaunchKernel", 100, 10, correlation=1),
        ev("kernel", "volta_sgemm_128x64_nn", 150, 200, device=0, stream=7, correlation=1),
        ev("runtime", "cudaLaunchKernel", 120, 10, correlation=2),
        ev("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 200, 400, device=0, stream=20, correlation=2,
           args={"Collective name": "allreduce", "In msg nelems": 1000, "dtype": "Float", "Group size": 4}),
        ev("runtime", "cudaMemcpyAsync", 1100, 50, correlation=3),
        ev("memcpy", "Memcpy HtoD (Pageable -> Device)", 1200, 100, device=0, stream=7, correlation=3, bytes=2000),
        ev("runtime", "cudaMemcpy", 1500, 300, correlation=4),
        ev("memcpy", "Memcpy DtoH (Device -> Pinned)", 1600, 100, device=0, stream=7, correlation=4, bytes=500),
        # launched after the last step ended: HTA's rule leaves it out
        ev("runtime", "cudaLaunchKernel", 2500, 10, correlation=5),
        ev("kernel", "elementwise_kernel", 2600, 50, device=0, stream=7, correlation=5),
    ])
    assert con.execute("SELECT step, start_ns, end_ns, source FROM steps('r') ORDER BY step").fetchall() == \
        [(3, 0, 1000, "profiler_step"), (4, 1000, 2000, "profiler_step")]
    act = con.execute("SELECT correlation, category, counted FROM gpu_activity('r') ORDER BY correlation").fetchall()
    assert act == [(1, "compute", True), (2, "comm", True), (3, "memory", True), (4, "memory", True),
                   (5, "compute", False)]
    delays = con.execute("SELECT correlation, launch_delay_ns FROM launches('r') ORDER BY 1").fetchall()
    assert delays == [(1, 40), (2, 70), (3, 50), (4, 0), (5, 90)]
    copies = con.execute("SELECT direction, src_memory, dst_memory, pageable, synchronous, gbps "
                         "FROM copies('r') ORDER BY start_ns").fetchall()
    assert copies == [("HtoD", "Pageable", "Device", True, False, 20.0),
                      ("DtoH", "Device", "Pinned", False, True, 5.0)]
    coll = con.execute("SELECT collective, nelems, dtype_bytes, bytes, group_size, algbw_gbps, busbw_gbps "
                       "FROM collectives('r')").fetchall()
    assert coll == [("allreduce", 1000, 4, 4000, 4, 10.0, pytest.approx(15.0))]
