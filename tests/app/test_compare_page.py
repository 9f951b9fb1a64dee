"""The Compare page: which runs it opens on (app.run_pairs), how it words the change in step time,
and what it warns about (rank counts from the stored rank files, different GPUs, CPU-only runs)."""
from __future__ import annotations

from datetime import datetime

import pytest
from streamlit.proto.Metric_pb2 import Metric

from analyzers.store.database import connect
from app.run_pairs import default_pair
from tests.support.app_store import AFTER_RUN, BEFORE_RUN, MS, add_event, add_run
from tests.support.app_pages import goto, open_app, plain, texts

H100, V100 = "NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB"


def run(run_id: str, name: str, n_ranks: int, source: str = "", tags: tuple[str, ...] = ()) -> dict:
    return {"run_id": run_id, "name": name, "n_ranks": n_ranks, "source": source, "tags": list(tags)}


def test_a_before_after_pair_of_one_workload_wins_over_newer_runs():
    runs = [run("ctl", "synthetic: control", 4), run("all", "synthetic: every problem", 4),
            run("cpu_after", "CPU demo: loader, after fix", 1, "samples/cpu_loader_after"),
            run("cpu_before", "CPU demo: loader, before fix", 1, "samples/cpu_loader_before")]
    devices = {"ctl": [H100] * 4, "all": [H100] * 4, "cpu_after": [None], "cpu_before": [None]}
    pair = default_pair(runs, devices, current="ctl")
    assert (pair.before, pair.after) == ("cpu_before", "cpu_after")
    assert "before/after" in pair.reason


@pytest.mark.parametrize("before, after", [
    (run("a", "resnet_before", 2), run("b", "resnet_after", 2)),
    (run("a", "job 1", 2, "/data/bert/baseline"), run("b", "job 2", 2, "/data/bert/fixed")),
    (run("a", "bert", 2, tags=("baseline",)), run("b", "bert again", 2, tags=("after",))),
])
def test_before_after_is_read_from_names_source_folders_or_tags(before, after):
    # listed newest first, the after run older than the before run: the words decide, not the age
    pair = default_pair([before, run("x", "unrelated", 2), after], {"a": [H100] * 2, "b": [H100] * 2,
                                                                    "x": [H100] * 2})
    assert (pair.before, pair.after) == ("a", "b")


def test_a_before_after_pair_on_different_hardware_is_not_the_default():
    runs = [run("b", "resnet_after", 1), run("a", "resnet_before", 1), run("c", "resnet probe", 1)]
    devices = {"a": [V100], "b": [H100], "c": [H100]}
    pair = default_pair(runs, devices)
    assert {pair.before, pair.after} == {"b", "c"} and "same number of ranks" in pair.reason


def test_without_before_after_names_the_newest_alike_runs_pair_never_cpu_against_gpu():
    # newest first: a CPU loader demo, a 4-rank GPU control, then two more 4-rank GPU runs
    runs = [run("cpu", "CPU demo: loader", 1), run("ctl", "control", 4), run("g2", "trial 2", 4),
            run("g1", "trial 1", 4)]
    devices = {"cpu": [None], "ctl": [H100] * 4, "g2": [H100] * 4, "g1": [H100] * 4}
    pair = default_pair(runs, devices)
    assert (pair.before, pair.after) == ("g2", "ctl")            # the two newest alike, older as before
    pair = default_pair(runs, devices, current="g1")
    assert (pair.before, pair.after) == ("g1", "ctl")            # with the run picked in the sidebar
    pair = default_pair(runs, devices, current="cpu")            # the CPU run has no alike partner
    assert "cpu" not in (pair.before, pair.after)


def test_with_nothing_alike_the_two_newest_pair_and_one_run_gives_none():
    runs = [run("a", "one", 1), run("b", "two", 2), run("c", "three", 4)]
    pair = default_pair(runs, {"a": [None], "b": [H100] * 2, "c": [V100] * 4})
    assert (pair.before, pair.after) == ("b", "a") and "no two stored runs" in pair.reason
    assert default_pair(runs[:1], {}) is None


def _open_compare(monkeypatch, db, before: str, after: str):
    at = open_app(monkeypatch, db, run_id=after)
    at.session_state["compare_before"], at.session_state["compare_after"] = before, after
    return goto(at, "views/compare.py")


def test_the_change_in_step_time_reads_faster_or_slower_with_both_step_times(hand_built, monkeypatch):
    con = connect(hand_built)
    try:
        _add_gpu_run(con, "ten_ms_steps", 1, 2)
    finally:
        con.close()
    # BEFORE_RUN's mean step is the mean over its ranks of each rank's mean: (10 + 6) / 2 = 8 ms
    at = _open_compare(monkeypatch, hand_built, "ten_ms_steps", BEFORE_RUN)   # 10.00 ms -> 8.00 ms
    ratio = next(m for m in at.metric if m.label == "After vs before (mean step)")
    assert ratio.value == "1.25× faster"
    assert ratio.delta == "10.00 → 8.00 ms per step"
    assert Metric.MetricColor.Name(ratio.proto.color) == "GREEN"

    at = _open_compare(monkeypatch, hand_built, BEFORE_RUN, "ten_ms_steps")   # the same two runs swapped
    ratio = next(m for m in at.metric if m.label == "After vs before (mean step)")
    assert ratio.value == "1.25× slower"
    assert ratio.delta == "8.00 → 10.00 ms per step"
    assert Metric.MetricColor.Name(ratio.proto.color) == "RED"


def _add_gpu_run(con, run_id: str, world_size: int, day: int, device: str | None = None) -> None:
    """A one-rank-file run with a 10 ms step and a 9 ms kernel, from a job of world_size ranks."""
    add_run(con, run_id, run_id, [0])
    con.execute("UPDATE runs SET world_size = ?, created_at = ? WHERE run_id = ?",
                [world_size, datetime(2026, 1, day), run_id])
    con.execute("UPDATE ranks SET device_name = ? WHERE run_id = ?", [device, run_id])
    add_event(con, run_id, 0, "user_annotation", "ProfilerStep#1", 0, 10 * MS)
    add_event(con, run_id, 0, "kernel", "gemm_kernel", 0, 9 * MS, stream=7)


def test_rank_counts_are_the_stored_rank_files_not_the_declared_job_size(hand_built, monkeypatch):
    con = connect(hand_built)
    try:   # one file of an 8-rank job against one file of a 2-rank job
        _add_gpu_run(con, "job_of_8", 8, 2)
        _add_gpu_run(con, "job_of_2", 2, 3)
    finally:
        con.close()
    page = texts(_open_compare(monkeypatch, hand_built, "job_of_8", "job_of_2"))
    assert "different numbers of ranks" not in page and "8 vs 2" not in page
    assert "Both runs hold 1 rank file, from jobs of 8 and 2 ranks" in page

    at = _open_compare(monkeypatch, hand_built, BEFORE_RUN, AFTER_RUN)   # 2 rank files against 1
    assert "different numbers of ranks (2 ranks before, 1 after)" in texts(at)


def test_different_gpus_are_named_in_a_warning_and_equal_ones_are_not(hand_built, monkeypatch):
    con = connect(hand_built)
    try:
        _add_gpu_run(con, "on_a100", 1, 2, "NVIDIA A100-SXM4-80GB")
        _add_gpu_run(con, "on_v100", 1, 3, V100)
        _add_gpu_run(con, "on_v100_too", 1, 4, V100)
    finally:
        con.close()
    page = plain(texts(_open_compare(monkeypatch, hand_built, "on_a100", "on_v100")))
    assert "different GPUs (before: 1× NVIDIA A100-SXM4-80GB; after: 1× Tesla V100-SXM2-16GB)" in page
    assert "different GPUs" not in texts(_open_compare(monkeypatch, hand_built, "on_v100", "on_v100_too"))


def test_a_cpu_only_run_against_a_gpu_run_is_called_a_different_set_up(hand_built, monkeypatch):
    con = connect(hand_built)
    try:
        add_run(con, "cpu_run", "cpu_run", [0])
        add_event(con, "cpu_run", 0, "user_annotation", "ProfilerStep#1", 0, 10 * MS)
        add_event(con, "cpu_run", 0, "cpu_op", "aten::mm", 0, 9 * MS)
    finally:
        con.close()
    at = _open_compare(monkeypatch, hand_built, "cpu_run", AFTER_RUN)
    assert "The before run is a CPU-only trace" in texts(at) and "different set-ups" in texts(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["GPU idle / step"] == "–" and metrics["Mean step time"] == "8.00 ms"


def test_the_page_opens_on_a_before_after_pair_and_says_why(hand_built, monkeypatch):
    con = connect(hand_built)
    try:   # two more one-rank runs named as a before/after of one job, newer than the hand-built pair
        for run_id, name, day in (("run_x_before", "bert_before", 3), ("run_x_after", "bert_after", 4),
                                  ("run_y_probe", "probe", 5)):
            add_run(con, run_id, name, [0])
            con.execute("UPDATE runs SET created_at = ? WHERE run_id = ?", [datetime(2026, 1, day), run_id])
            add_event(con, run_id, 0, "user_annotation", "ProfilerStep#1", 0, 10 * MS)
    finally:
        con.close()
    at = goto(open_app(monkeypatch, hand_built, run_id=BEFORE_RUN), "views/compare.py")
    assert (at.selectbox(key="compare_before").value, at.selectbox(key="compare_after").value) == \
        ("run_x_before", "run_x_after")
    assert "Opened on a before/after of one workload" in texts(at)
