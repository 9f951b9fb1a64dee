"""Each named rule of the SQL library is written once: a test fails when its signature (the regex,
the name patterns, the copy-kind strings, the bandwidth formula) shows up in a second file of
analyzers/, app/ or accel/, so a re-derivation that could drift from the definition cannot come back."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from analyzers.common import thresholds

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("analyzers", "app", "accel", "bench")

# rule -> (the one file that defines it, regexes that only a derivation of the rule matches)
DEFINITIONS = {
    "is_profiler_step": ("analyzers/sql/lib/steps.sql", [r"\^ProfilerStep", r"ProfilerStep\\s\*#"]),
    "is_tf32_kernel": ("analyzers/sql/lib/kernel_taxonomy.sql",
                       [r"contains\(\s*\w+\s*,\s*'tf32'\s*\)", r"tensorop_s\(1688", r"==\s*[\"']tf32[\"']\s*in"]),
    "is_h2d_copy": ("analyzers/sql/lib/gpu_activity.sql", [r"[\"']HtoD[\"']", r"Memcpy\\s\+HtoD", r"Memcpy HtoD"]),
    "copy_direction": ("analyzers/sql/lib/gpu_activity.sql", [r"\^Memcpy\\s\+\(", r"\$\.kind"]),
    "collective_busbw_gbps": ("analyzers/sql/lib/collectives.sql", [r"sum\(\s*bytes\s*\*\s*bus_factor\s*\)"]),
    "collective_algbw_gbps": ("analyzers/sql/lib/collectives.sql",
                              [r"sum\(\s*bytes\s*\)\s*FILTER\s*\(\s*WHERE\s+\w*dur_ns\s*>\s*0\s*\)"]),
    "run_kind_costs": ("analyzers/sql/metrics/kind_costs.sql",
                       [r"sum\((?:\w+\.)?cost_ns\)\s*FILTER", r"per_rank\[[^\]]*\]\s*=\s*per_rank\.get"]),
    "run_step_breakdown": ("analyzers/sql/metrics/step_breakdown.sql", [r"avg\(step_ns\)"]),
    # nesting: a running count of open ranges, or a running max of their ends (top-level ops)
    "event_depth": ("analyzers/sql/lib/intervals.sql",
                    [r"sum\(\s*(?:delta|step)\s*\)\s*OVER",
                     r"max\(\s*(?:\w+\.)?(?:end_ns|ts_ns\s*\+\s*dur_ns)\s*\)\s*OVER\s*\(\s*PARTITION BY[^)]*tid"]),
    # a rank's training thread: the ProfilerStep thread, tid = pid, the busiest, a thread named main
    "main_threads": ("analyzers/sql/lib/steps.sql",
                     [r"\btid\s*=\s*(?:\w+\.)?(?:lane_)?pid\b", r"arg_max\(\s*tid", r"ILIKE\s*'%\(python%'",
                      r"DISTINCT\s+rank,\s*pid,\s*tid\s+FROM\s+events",
                      r"GROUP BY\s+(?:\w+\.)?rank,\s*(?:\w+\.)?pid,\s*(?:\w+\.)?tid\s+QUALIFY"]),
    # what runs inside the GPU steps: a sweep counting each category, exposed comm as comm - compute
    "gpu_step_segments": ("analyzers/sql/lib/step_costs.sql",
                          [r"sum\(\s*d\w*\s*\)\s*FILTER\s*\(\s*WHERE\s+category", r"\(category\s*=\s*'\w+'\)::INT",
                           r"interval_subtract\(\s*'\w*comm\w*'\s*,\s*'\w*compute"]),
}
# Re-derivations that are known and not yet moved onto the definition: the what-if model compares
# copy_direction's value in Python (analysis/whatif reads graph.sql's copy_dir column; a
# host_to_device column there would end it).
KNOWN = {("is_h2d_copy", "analyzers/analysis/kinds/h2d_stall/whatif.py")}


def _code(path: Path) -> str:
    """The file without its comments (a comment may name a rule; only code derives it)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".sql":
        return re.sub(r"--[^\n]*", "", text)
    return re.sub(r"(?m)^\s*#[^\n]*|\s#\s[^\n]*", "", text)


def _sources() -> dict[str, str]:
    files = {}
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".sql") and path.is_file():
                files[path.relative_to(ROOT).as_posix()] = _code(path)
    return files


SOURCES = _sources()


@pytest.mark.parametrize("rule", sorted(DEFINITIONS))
def test_a_named_rule_is_derived_in_its_definition_only(rule):
    home, patterns = DEFINITIONS[rule]
    assert any(re.search(p, SOURCES[home]) for p in patterns), f"{rule}: {home} no longer holds it (update this test)"
    elsewhere = sorted(name for name, code in SOURCES.items()
                       if name != home and (rule, name) not in KNOWN and any(re.search(p, code) for p in patterns))
    assert not elsewhere, f"{rule} is derived again in {elsewhere}: call {rule} ({home}) instead"


def test_the_known_exceptions_still_exist():
    """An exception that is gone is dropped from KNOWN, so it cannot hide a new one."""
    for rule, name in KNOWN:
        assert any(re.search(p, SOURCES[name]) for p in DEFINITIONS[rule][1]), f"{name} no longer derives {rule}"


# What a page may not do with a figure it read: make a percentage, a mean or another statistic of
# it (the SQL library or the analysis defines those); unit conversions for display stay allowed.
PAGE_ARITHMETIC = [r"\b100(?:\.0)?\s*\*", r"\*\s*100(?:\.0)?\b", r"\.(?:mean|median|std|var|quantile|average)\(",
                   r"\bstatistics\.", r"\bnp\.(?:mean|median|average|percentile)\(", r"/\s*len\("]


def test_pages_derive_no_figure_from_what_they_read():
    found = sorted(f"{name}: {match.group(0)!r}" for name, code in SOURCES.items() if name.startswith("app/")
                   for pattern in PAGE_ARITHMETIC for match in re.finditer(pattern, code))
    assert not found, f"a page computes a figure: define it in analyzers/sql or the analysis instead: {found}"


def test_the_page_arithmetic_rule_catches_what_it_names():
    caught = ["share = 100 * a / b", "df['x'].mean()", "statistics.median(xs)", "total / len(rows)", "x * 100.0"]
    assert all(any(re.search(p, line) for p in PAGE_ARITHMETIC) for line in caught)
    assert not any(re.search(p, "(t1 - t0) / 1e6") for p in PAGE_ARITHMETIC)


def test_tf32_kernels_are_the_sql_rule_not_a_python_name_pattern():
    assert not [p for p in thresholds.TENSOR_CORE_KERNEL_PATTERNS if "tf32" in p.lower()]


def test_the_sql_rules_classify_as_documented():
    from analyzers.sql.engine import ensure_loaded
    from analyzers.store.database import connect

    con = ensure_loaded(connect(":memory:"))
    tf32 = con.execute("SELECT is_tf32_kernel(n) FROM (VALUES ('sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n'), "
                       "('cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4'), ('ampere_sgemm_128x64_nn'), "
                       "('ampere_fp16_s16816gemm_fp16_128x128')) v(n)").fetchall()
    assert [r[0] for r in tf32] == [True, True, False, False]
    h2d = con.execute("SELECT is_h2d_copy(k, n, a::JSON) FROM (VALUES ('memcpy', 'Memcpy HtoD (Pageable -> Device)', '{}'), "
                      "('memcpy', 'Memcpy DtoH (Device -> Pinned)', '{}'), ('memcpy', 'Memcpy', '{\"kind\": \"HtoD\"}'), "
                      "('kernel', 'Memcpy HtoD', '{}'), ('memcpy', 'Memcpy', '{}')) v(k, n, a)").fetchall()
    assert [r[0] for r in h2d] == [True, False, True, False, False]
    bw = con.execute("SELECT collective_algbw_gbps(b, t), collective_busbw_gbps(b, f, t) "
                     "FROM (VALUES (1000, 2.0, 100), (NULL, 2.0, 300), (500, NULL, 50)) v(b, f, t)").fetchone()
    # the unsized instance's 300 ns are in neither denominator; busbw leaves out the one without a bus factor
    assert bw == (pytest.approx(1500 / 150), pytest.approx(2000 / 100))


@pytest.fixture(scope="module")
def analysed_samples(tmp_path_factory):
    """A store with the sample runs that have findings of several kinds, ranks and steps, analysed."""
    import json

    from analyzers.execution.pipeline import analyze_run
    from analyzers.ingest import ingest_paths
    from analyzers.store.database import connect

    manifest = ROOT / "sample_traces" / "manifest.json"
    wanted = {"synthetic_all", "cpu_balanced_sampler_before", "gpu_dataloader_tuning_before"}
    con = connect(tmp_path_factory.mktemp("single") / "store.duckdb")
    runs = []
    for entry in json.loads(manifest.read_text()):
        if set(entry["paths"]) & wanted:
            result = ingest_paths(con, [str(manifest.parent / p) for p in entry["paths"]], name=entry["name"])
            assert result.run_id, result.errors
            analyze_run(con, result.run_id)
            runs.append(result.run_id)
    yield con, runs
    con.close()


def test_the_kind_costs_add_up_to_the_runs_root_cause_total(analysed_samples):
    """root_causes.run_costs sums the findings before they are stored; run_kind_costs reads them
    stored: the two must be the same total."""
    from analyzers.read import queries

    con, runs = analysed_samples
    checked = 0
    for run_id in runs:
        kinds = queries.run_kind_costs(con, run_id)
        total_ms = sum(row["cost_ns"] for row in kinds.values()) / 1e6
        assert total_ms == pytest.approx(queries.run_costs(con, run_id)["root_cause_ms"], abs=1e-6)
        checked += bool(kinds)
    assert checked >= 2


def test_gpu_communication_in_steps_is_one_figure(analysed_samples):
    """rank_balance's comm per step (rank_imbalance, comm_exposed) and the ranks table's comm
    per step are rank_step_costs' one figure."""
    con, runs = analysed_samples
    with_comm = 0
    for run_id in runs:
        rows = con.execute("""
            SELECT b.comm_ns_per_step * b.steps_divisor, c.comm_in_steps_ns, s.comm_time_ms * 1e6 * b.steps_divisor
            FROM rank_balance(?, 0) b JOIN rank_step_costs(?) c USING (rank) JOIN rank_summary(?) s USING (rank)
            WHERE b.has_gpu""", [run_id, run_id, run_id]).fetchall()
        for balance_ns, costs_ns, summary_ns in rows:
            assert balance_ns == pytest.approx(costs_ns) and summary_ns == pytest.approx(costs_ns)
            with_comm += costs_ns > 0
    assert with_comm >= 1


def test_the_run_step_is_the_mean_over_ranks_of_each_ranks_mean(analysed_samples):
    con, runs = analysed_samples
    for run_id in runs:
        per_rank = con.execute("SELECT step_ns FROM rank_step_breakdown(?)", [run_id]).fetchall()
        run_step, ranks = con.execute("SELECT step_ns, ranks FROM run_step_breakdown(?)", [run_id]).fetchone()
        assert ranks == len(per_rank)
        if per_rank:
            assert run_step == pytest.approx(sum(r[0] for r in per_rank) / len(per_rank))


def test_the_idle_gaps_add_up_to_the_ranks_idle_time(analysed_samples):
    """gpu_idle_gaps (the gaps the findings divide among causes) and rank_breakdown's idle_ns (the
    ranks table's idle %) are one idle time: the holes in the union of a one-GPU rank's activity."""
    con, runs = analysed_samples
    checked = 0
    for run_id in runs:
        rows = con.execute("""
            WITH g AS (SELECT rank, sum(dur_ns) AS gaps_ns, count(DISTINCT device) AS devices
                       FROM gpu_idle_gaps(?, 0.5, 1000000) GROUP BY rank)
            SELECT b.idle_ns, coalesce(g.gaps_ns, 0), coalesce(g.devices, 1)
            FROM rank_breakdown(?) b LEFT JOIN g USING (rank) WHERE b.gpu_events > 0""", [run_id, run_id]).fetchall()
        for idle_ns, gaps_ns, devices in rows:
            if devices == 1:
                assert idle_ns == gaps_ns
                checked += idle_ns > 0
    assert checked >= 2


def test_exposed_communication_is_one_figure_per_rank_and_per_step(analysed_samples):
    """rank_balance's exposed comm (rank_gpu_work: comm kernels no compute kernel overlaps, inside
    the steps) is what the step breakdown's comm_exposed parts add up to, and so is comm time."""
    con, runs = analysed_samples
    checked = 0
    for run_id in runs:
        rows = con.execute("""
            WITH s AS (SELECT rank, sum(comm_exposed_ns) AS exposed_ns, sum(comm_ns) AS comm_ns
                       FROM step_breakdown(?) GROUP BY rank)
            SELECT w.exposed_ns, s.exposed_ns, w.comm_ns, s.comm_ns
            FROM rank_gpu_work(?, 0) w JOIN s USING (rank)""", [run_id, run_id]).fetchall()
        for work_exposed, step_exposed, work_comm, step_comm in rows:
            assert (work_exposed or 0) == step_exposed and (work_comm or 0) == step_comm
            checked += step_exposed > 0
    assert checked >= 2


def test_event_depth_nests_as_documented():
    """At one instant ends, then starts (longer first), then points; a zero-length range or a point
    encloses nothing."""
    from analyzers.sql.engine import ensure_loaded
    from analyzers.store.database import connect

    con = ensure_loaded(connect(":memory:"))
    rows = con.execute("""
        WITH ev(grp, id, start_ns, end_ns) AS (VALUES
            (1, 1, 0, 10),      -- A
            (1, 2, 0, 5),       -- B: starts with A, shorter: inside it
            (1, 3, 5, 8),       -- C: starts where B ends: B is closed
            (1, 4, 8, 8),       -- Z: zero-length, inside A
            (1, 5, 8, 8),       -- Y: zero-length beside Z, not inside it
            (1, 6, 0, NULL),    -- a point at A's and B's first instant: inside both
            (1, 7, 10, NULL),   -- a point at A's end: outside
            (1, 8, 5, NULL),    -- a point where B ends and C starts: inside A and C
            (2, 1, 3, 4))       -- another thread
        SELECT grp, id, depth FROM event_depth('ev') ORDER BY grp, id""").fetchall()
    assert rows == [(1, 1, 0), (1, 2, 1), (1, 3, 1), (1, 4, 1), (1, 5, 1), (1, 6, 2), (1, 7, 0), (1, 8, 2), (2, 1, 0)]


def test_the_training_thread_is_the_profiler_step_thread_and_the_timelines_first_cpu_lane(analysed_samples):
    from analyzers.read import queries

    con, runs = analysed_samples
    for run_id in runs:
        main = {r: (p, t) for r, p, t in con.execute("SELECT rank, pid, tid FROM main_threads(?)", [run_id]).fetchall()}
        stepped = con.execute("""SELECT rank, list(DISTINCT (pid, tid)) FROM events
                                 WHERE run_id = ? AND kind IN ('cpu_op', 'user_annotation') AND is_profiler_step(name)
                                 GROUP BY rank""", [run_id]).fetchall()
        assert {r: tuple(threads[0]) for r, threads in stepped if len(threads) == 1} == main
        bars = queries.timeline_window(con, run_id, *queries.time_bounds(con, run_id), max_events=100_000)
        cpu = bars[~bars["is_gpu"]].sort_values("lane_order").drop_duplicates("rank")
        assert {int(r): (p, t) for r, p, t in zip(cpu["rank"], cpu["pid"], cpu["tid"])} == main


def test_gpu_time_in_the_steps_is_the_union_of_the_activity_in_the_steps(analysed_samples):
    """gpu_step_segments' sweep against unions computed here: step_breakdown's busy time (all
    activity in the windows), rank_gpu_work's compute and rank_step_costs' comm (counted activity)."""
    con, runs = analysed_samples
    checked = 0
    for run_id in runs:
        rows = con.execute("""
            WITH w AS (SELECT rank AS grp, start_ns, end_ns FROM gpu_steps($run)),
            act AS (SELECT rank AS grp, start_ns, end_ns, category, counted FROM gpu_activity($run)),
            clipped AS (SELECT * FROM interval_clip('act', 'w')),
            all_act AS (SELECT grp, start_ns, end_ns FROM clipped),
            counted_compute AS (SELECT grp, start_ns, end_ns FROM clipped WHERE counted AND category = 'compute'),
            counted_comm AS (SELECT grp, start_ns, end_ns FROM clipped WHERE counted AND category = 'comm'),
            busy AS (SELECT rank, sum(gpu_busy_ns) AS busy_ns FROM step_breakdown($run) GROUP BY rank)
            SELECT b.rank, b.busy_ns, u.union_ns, coalesce(g.compute_ns, 0), coalesce(c.union_ns, 0),
                   s.comm_in_steps_ns, coalesce(m.union_ns, 0)
            FROM busy b
            JOIN interval_union_total('all_act') u ON u.grp = b.rank
            LEFT JOIN rank_gpu_work($run, 0) g ON g.rank = b.rank
            LEFT JOIN interval_union_total('counted_compute') c ON c.grp = b.rank
            LEFT JOIN rank_step_costs($run) s ON s.rank = b.rank
            LEFT JOIN interval_union_total('counted_comm') m ON m.grp = b.rank""", {"run": run_id}).fetchall()
        for rank, busy_ns, union_ns, compute_ns, compute_union_ns, comm_ns, comm_union_ns in rows:
            assert busy_ns == union_ns and compute_ns == compute_union_ns, rank
            assert comm_ns is None or comm_ns == comm_union_ns, rank
            checked += 1
    assert checked >= 4
