"""Inference runs' own step unit (analyzers/sql/lib/steps.sql engine_iterations): where an inference
trace shows its engine's iterations (ranges named as an engine step, or a range recurring through
the profiled window on the main thread), they are the steps, each labelled with its phase where the
names tell it; where nothing recurs, the run keeps its ProfilerSteps (or inferred iterations) and
says so. Checked on the real inference traces of ../shared/traces/modern against figures read from
the trace with plain json, on hand-written serving traces (decode iterations after a prefill, and
controls where nothing recurs), on small real CPU jobs measured without the profiler, and on every
training run (sample runs, shared traces): their steps are what they were before."""
from __future__ import annotations

import gzip
import json
import statistics
import time
from pathlib import Path

import pytest

from analyzers.api import analyze_paths
from tests.analysis_support import ingest_clean, sample_run_paths, shared_trace_runs

PROFILER_STEP_THREAD = "ProfilerStep#"


def _trace_events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _main_thread(events: list[dict]) -> tuple:
    """The (pid, tid) of the host thread carrying the ProfilerStep ranges."""
    return next((e["pid"], e["tid"]) for e in events
                if e.get("cat") == "user_annotation" and e["name"].startswith(PROFILER_STEP_THREAD))


def _iterations_of(events: list[dict], name: str) -> list[float]:
    """Durations (ms) of the iterations a recurring range marks on the main thread, read with plain
    json: from one occurrence's start to the next one's, the last to its own end."""
    thread = _main_thread(events)
    marks = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e["name"] == name and (e["pid"], e["tid"]) == thread and e.get("cat") in ("cpu_op", "user_annotation"))
    return [((marks[i + 1][0] if i + 1 < len(marks) else end) - start) / 1e3 for i, (start, end) in enumerate(marks)]


def _profiler_steps_of(events: list[dict]) -> list[float]:
    """Durations (ms) of the host ProfilerStep ranges (one per step number, the widest)."""
    widest: dict[str, float] = {}
    for e in events:
        if e.get("cat") in ("cpu_op", "user_annotation") and e["name"].startswith(PROFILER_STEP_THREAD):
            widest[e["name"]] = max(widest.get(e["name"], 0.0), e["dur"] / 1e3)
    return list(widest.values())


# modern/ inference trace -> (unit, source, marker, phases): what the trace shows (see the module doc)
MODERN_INFERENCE = {
    # four denoising steps, each a torch.compile'd transformer forward (the text encoders before and
    # the VAE after are in none): the ProfilerStep spans the whole pipeline
    "inference__xdit_sd_3.5__profile_trace_rank_0.json.gz":
        ("denoising step", "engine:op", "Torch-Compiled Region: 0/0", {"unknown": 4}),
    # one CUDA-graph capture of a decode forward (capture_32_DECODE) in one ProfilerStep: nothing
    # recurs, the ProfilerStep stays the step, its phase is decode
    "inference__sglang_decode__capture_traces__bs_32_rank0.json.gz": ("step", "profiler_step", None, {"decode": 1}),
    # one forward of an HF model per ProfilerStep: nothing recurs, phase unknown
    "h100__Falconsai_nsfw_image_detection__1016002.json.gz": ("step", "profiler_step", None, {"unknown": 1}),
    "mi300__Falconsai_nsfw_image_detection__1016002.json.gz": ("step", "profiler_step", None, {"unknown": 1}),
    "mi300__gaunernst_bert-small-uncased__1016001.json.gz": ("step", "profiler_step", None, {"unknown": 1}),
}


@pytest.mark.parametrize("trace", list(MODERN_INFERENCE))
def test_modern_inference_traces_step_in_their_engines_iterations(shared_traces, trace):
    path = shared_traces / "modern" / trace
    report = analyze_paths([path])
    unit, source, marker, phases = MODERN_INFERENCE[trace]
    facts = report["run"]["step_unit"]
    assert report["run"]["workload"] == "inference"
    assert (facts["unit"], facts["source"], facts["marker"], facts["phases"]) == (unit, source, marker, phases)
    events = _trace_events(path)
    expected = _iterations_of(events, marker) if marker else _profiler_steps_of(events)
    assert facts["count"] == len(expected) == report["ranks"][0]["steps"]
    assert facts["mean_step_ms"] == pytest.approx(statistics.mean(expected), abs=0.002)
    assert report["ranks"][0]["step_time_ms"] == pytest.approx(statistics.mean(expected), abs=0.002)
    notes = " ".join(report["notes"])
    assert "Steps: " in notes
    if source == "engine:op":
        assert f"per-step figures are per {unit}" in notes
        assert report["findings"] and all(" per step" not in f["summary"] for f in report["findings"])
        assert any(f" per {unit}" in f["summary"] for f in report["findings"])
    else:
        assert "no range on the main thread recurs" in notes


def test_xdit_per_step_figures_are_per_denoising_step(shared_traces):
    """The launch-gap finding and the GPU idle of the xDiT run count inside its denoising steps and
    divide by their number: its cost is at most the mean denoising step."""
    report = analyze_paths([shared_traces / "modern" / "inference__xdit_sd_3.5__profile_trace_rank_0.json.gz"])
    step_ms = report["run"]["step_unit"]["mean_step_ms"]
    assert report["run"]["whatif"]["measured_step_ms"] == pytest.approx(step_ms, abs=0.01)
    costed = [f for f in report["findings"] if f["cost_ms_per_step"] is not None]
    assert costed
    for finding in costed:
        assert 0 < finding["cost_ms_per_step"] <= step_ms


# --- hand-written serving traces -----------------------------------------------------------------

def _serving_trace(path: Path, phases: list[str | None], *, iteration_us: float = 1000.0,
                   busy_fraction: float = 0.9) -> Path:
    """A Kineto trace of one ProfilerStep over a serving loop: per iteration a range named by its
    phase ('prefill', 'decode'; None: no range, its ops only), holding a matmul that launches a
    kernel, then the scheduler's gap. Forward only, so the run is inference."""
    events, t = [], 1000.0
    pid, tid = 7, 7
    total = iteration_us * len(phases)
    events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "pid": pid, "tid": tid,
                   "ts": t - 10, "dur": total + 20, "args": {}})
    for i, phase in enumerate(phases):
        busy = iteration_us * busy_fraction
        if phase is not None:
            events.append({"ph": "X", "cat": "user_annotation", "name": phase, "pid": pid, "tid": tid,
                           "ts": t, "dur": busy, "args": {}})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": pid, "tid": tid,
                       "ts": t + 10, "dur": busy - 20, "args": {"External id": i + 1}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
                       "ts": t + 20, "dur": 5, "args": {"correlation": i + 1}})
        events.append({"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32", "pid": 0, "tid": 7,
                       "ts": t + 30, "dur": busy / 2, "args": {"correlation": i + 1, "device": 0, "stream": 7}})
        t += iteration_us
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}), encoding="utf-8")
    return path


def test_decode_iterations_after_a_prefill_are_the_steps(tmp_path):
    phases = ["prefill"] + ["decode"] * 7
    report = analyze_paths([_serving_trace(tmp_path / "serving.json", phases)])
    facts = report["run"]["step_unit"]
    assert report["run"]["workload"] == "inference"
    assert (facts["source"], facts["count"], facts["phases"]) == ("engine:step", 8, {"prefill": 1, "decode": 7})
    assert facts["unit"] == "engine step"                       # both phases: an engine step
    assert report["ranks"][0]["step_time_ms"] == pytest.approx((7 * 1000 + 900) / 8 / 1e3, abs=1e-9)
    assert report["ranks"][0]["steps"] == 8
    assert any("engine steps" in n and "1 prefill, 7 decode" in n for n in report["notes"])


def test_decode_only_iterations_are_decode_steps(tmp_path):
    report = analyze_paths([_serving_trace(tmp_path / "decode.json", ["decode"] * 6)])
    facts = report["run"]["step_unit"]
    assert (facts["unit"], facts["count"], facts["phases"]) == ("decode step", 6, {"decode": 6})
    for finding in report["findings"]:
        assert " per step" not in finding["summary"]


@pytest.mark.parametrize("phases, busy_fraction", [
    ([None] * 8, 0.9),                  # nothing named: aten ops are never an iteration
    (["decode", "decode"], 0.9),        # two are no loop (INFERRED_STEP_MIN_REPEATS)
])
def test_nothing_recurring_keeps_the_profiler_step_and_says_so(tmp_path, phases, busy_fraction):
    report = analyze_paths([_serving_trace(tmp_path / "control.json", phases, busy_fraction=busy_fraction)])
    facts = report["run"]["step_unit"]
    assert (facts["unit"], facts["source"], facts["count"]) == ("step", "profiler_step", 1)
    assert report["ranks"][0]["steps"] == 1
    assert any("no range on the main thread recurs" in n for n in report["notes"])


def test_a_recurring_range_covering_little_of_the_window_is_no_iteration(tmp_path):
    """'layer' recurs 8 times but covers 20% of the ProfilerStep: a layer's op, not the loop."""
    path = _serving_trace(tmp_path / "layers.json", [None] * 8)
    trace = json.loads(path.read_text())
    trace["traceEvents"] += [{"ph": "X", "cat": "user_annotation", "name": "layer", "pid": 7, "tid": 7,
                              "ts": 1000 + i * 1000 + 400, "dur": 200, "args": {}} for i in range(8)]
    path.write_text(json.dumps(trace))
    facts = analyze_paths([path])["run"]["step_unit"]
    assert (facts["source"], facts["count"]) == ("profiler_step", 1)


# --- small real jobs (CPU) ------------------------------------------------------------------------

ITERATIONS = 8
SCHEDULER_S = 0.004       # host work between iterations (the engine's scheduling), outside the ranges
FORWARD_S = 0.02          # each iteration's forward waits this long besides its matmuls


def _serve(torch, model, x, named: bool) -> list[float]:
    """A prefill then decodes; each iteration's wall time (s). named: each under
    record_function('prefill'/'decode') as engines annotate them, else under 'model_forward'."""
    from torch.profiler import record_function

    times = []
    for i in range(ITERATIONS):
        start = time.perf_counter()
        with record_function(("prefill" if i == 0 else "decode") if named else "model_forward"):
            with torch.inference_mode():
                model(x)
            time.sleep(FORWARD_S)
        time.sleep(SCHEDULER_S)
        times.append(time.perf_counter() - start)
    return times


@pytest.mark.parametrize("named", [True, False])
def test_real_serving_loop_steps_in_its_iterations(tmp_path, named):
    """A real forward-only loop profiled in one ProfilerStep: its iterations are found (by their
    names, or as the range recurring through the window), their mean within 10% of the loop's
    iterations timed by the loop itself."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
    x = torch.randn(16, 256)
    out = tmp_path / "serve.json"
    with profile(activities=[ProfilerActivity.CPU], schedule=torch.profiler.schedule(wait=0, warmup=1, active=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out))) as prof:
        for _ in range(2):          # a warm-up pass, then the profiled one: ProfilerStep#1
            measured = _serve(torch, model, x, named)
            prof.step()
    report = analyze_paths([out])
    facts = report["run"]["step_unit"]
    assert report["run"]["workload"] == "inference"
    assert facts["count"] == ITERATIONS
    if named:
        assert (facts["source"], facts["unit"], facts["phases"]) == ("engine:step", "engine step",
                                                                     {"prefill": 1, "decode": ITERATIONS - 1})
    else:
        assert (facts["source"], facts["marker"], facts["unit"]) == ("engine:op", "model_forward", "iteration")
    # the loop's own clock (a loaded machine stretches every sleep alike); the last iteration ends
    # with its range, without the scheduler's gap after it
    assert facts["mean_step_ms"] == pytest.approx(1e3 * (sum(measured) - SCHEDULER_S) / ITERATIONS, rel=0.1)
    assert facts["mean_step_ms"] >= 1e3 * (FORWARD_S + SCHEDULER_S * (ITERATIONS - 1) / ITERATIONS)


def test_real_serving_loop_without_a_recurring_range_keeps_its_profiler_step(tmp_path):
    """The same loop with nothing wrapping its iterations (no name, only its ops): no unit is
    invented, the ProfilerStep is the step."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Linear(64, 64)
    x = torch.randn(4, 64)
    out = tmp_path / "plain.json"
    with profile(activities=[ProfilerActivity.CPU], schedule=torch.profiler.schedule(wait=0, warmup=1, active=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out))) as prof:
        for _ in range(2):          # a warm-up pass, then the profiled one: ProfilerStep#1
            for _ in range(ITERATIONS):
                with torch.inference_mode():
                    model(x)
                time.sleep(SCHEDULER_S)
            prof.step()
    facts = analyze_paths([out])["run"]["step_unit"]
    assert (facts["source"], facts["count"], facts["unit"]) == ("profiler_step", 1, "step")


# --- training and other runs: steps as before -------------------------------------------------------

# steps(run) as it was before inference runs got their own unit: ProfilerSteps, else inferred iterations
STEPS_BEFORE = """
    SELECT rank, step, start_ns, end_ns, 'profiler_step' AS source, NULL::VARCHAR AS marker FROM profiler_steps($1)
    UNION ALL
    SELECT rank, step, start_ns, end_ns, source, marker FROM inferred_steps($1)
    ORDER BY ALL"""
RUNS = [[p] for p in sample_run_paths()] + shared_trace_runs()


@pytest.mark.parametrize("paths", RUNS, ids=[p[0].parent.name + "/" + p[0].name for p in RUNS])
def test_runs_without_engine_iterations_keep_their_steps(paths):
    """Every sample run and real trace but xDiT's (the one whose engine's iterations recur) steps as
    before; training runs' steps carry no phase."""
    con, run_id = ingest_clean(paths)
    try:
        now = con.execute("SELECT rank, step, start_ns, end_ns, source, marker FROM steps($1) ORDER BY ALL",
                          [run_id]).fetchall()
        if "xdit" in paths[0].name:
            assert {row[4] for row in now} == {"engine:op"}
            return
        assert now == con.execute(STEPS_BEFORE, [run_id]).fetchall()
        workload = con.execute("SELECT workload FROM run_workload($1)", [run_id]).fetchone()[0]
        if workload != "inference":
            assert con.execute("SELECT count(*) FROM steps($1) WHERE phase IS NOT NULL", [run_id]).fetchone()[0] == 0
    finally:
        con.close()
