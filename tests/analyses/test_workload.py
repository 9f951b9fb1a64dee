"""Workload recognition (lib/workload.sql), fixes judged for the run's workload, one class for tiny
blocking copies, and runs holding some ranks of a larger job."""
from __future__ import annotations

import json

import pytest

from accel import registry
from accel.serving import capture_sizes, serving_graph_settings
from analyzers.api import analyze_paths
from analyzers.read.fixes import unmet_needs, workload_mismatch
from tests.support.analysis import hand_written_store

TRAINING_ONLY = {fix.id for fix in registry.FIXES.values() if set(fix.workloads) == {"training"}}

# modern/ trace -> (workload, engine)
MODERN = {
    "h100__Falconsai_nsfw_image_detection__1016002.json.gz": ("inference", None),
    "mi300__Falconsai_nsfw_image_detection__1016002.json.gz": ("inference", None),
    "mi300__gaunernst_bert-small-uncased__1016001.json.gz": ("inference", None),
    "inference__sglang_decode__capture_traces__bs_32_rank0.json.gz": ("inference", "sglang"),
    "inference__xdit_sd_3.5__profile_trace_rank_0.json.gz": ("inference", "xdit"),
    "perf_model__normalization__normalization_layer_test.json.gz": ("training", None),   # forward and backward
}


@pytest.mark.parametrize("trace", list(MODERN))
def test_modern_traces_workload_and_no_training_fix_on_inference(shared_traces, trace):
    report = analyze_paths([shared_traces / "modern" / trace])
    workload, engine = MODERN[trace]
    assert (report["run"]["workload"], report["run"]["engine"]) == (workload, engine)
    assert report["run"]["workload_evidence"]
    for finding in report["findings"]:
        offered = [f for f in finding["fixes"] if f not in finding["fixes_ruled_out"]]
        if workload == "inference":
            assert not TRAINING_ONLY & set(offered), (finding["kind"], offered)
            for fix in TRAINING_ONLY & set(finding["fixes"]):
                assert "training-only" in finding["fixes_ruled_out"][fix]
        else:
            assert "serving_cuda_graphs" not in offered


def _profile(tmp_path, train: bool):
    """A small real job on CPU: 4 steps of an MLP, trained (forward, backward, AdamW) or served
    (forward under inference_mode), profiled with a schedule."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(32, 64), torch.randn(32, 8)
    out = tmp_path / ("train.json" if train else "infer.json")
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out))) as prof:
        for _ in range(4):
            if train:
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            else:
                with torch.inference_mode():
                    model(x)
            prof.step()
    return out


def test_real_training_and_inference_jobs_are_told_apart(tmp_path):
    trained = analyze_paths([_profile(tmp_path, train=True)])["run"]
    served = analyze_paths([_profile(tmp_path, train=False)])["run"]
    assert trained["workload"] == "training" and "backward ops" in trained["workload_evidence"]
    assert "optimizer steps" in trained["workload_evidence"]
    assert served["workload"] == "inference" and "forward only" in served["workload_evidence"]


def test_fixes_follow_the_workload():
    assert "training-only" in workload_mismatch(("training",), "inference", None, "forward only")
    assert workload_mismatch(("training",), "training", None, "") is None
    assert workload_mismatch(("training",), "unknown", None, "") is None          # unknown rules nothing out
    assert "serving engine" in workload_mismatch(("serving",), "inference", None, "forward only")
    assert workload_mismatch(("serving",), "inference", "sglang", "") is None
    assert "SGLang" in workload_mismatch(("training", "inference"), "inference", "sglang", "")
    assert {"cuda_graph", "fused_optimizer", "ddp_bucket_tuning", "powersgd"} <= TRAINING_ONLY


def test_serving_settings_name_each_engines_flags():
    assert capture_sizes(32) == [1, 2, 4, 8, 16, 24, 32]
    assert capture_sizes(6) == [1, 2, 4, 6]
    sglang = "\n".join(serving_graph_settings("sglang", 32))
    assert "--cuda-graph-max-bs 32" in sglang and "--disable-cuda-graph" in sglang
    vllm = "\n".join(serving_graph_settings("vllm", 16))
    assert json.dumps({"cudagraph_capture_sizes": [1, 2, 4, 8, 16]}) in vllm and "--enforce-eager" in vllm
    assert "cuda_graph_config" in "\n".join(serving_graph_settings("tensorrt_llm", 8))
    with pytest.raises(ValueError):
        serving_graph_settings("ollama")


def test_a_slice_of_a_job_keeps_comm_fixes(shared_traces):
    """nccl_allreduce_with_sizes is rank 0 of a 2-rank job (distributedInfo): its comm finding's
    fixes stay applicable and say how much of the job the run holds."""
    assert unmet_needs(["multi_rank"], True, 1, 8) is None
    assert unmet_needs(["multi_rank"], True, 1, None) == "it needs several ranks and this run has one"
    report = analyze_paths([shared_traces / "nccl_allreduce_with_sizes.json.gz"])
    comm = next(f for f in report["findings"] if f["kind"] == "comm_exposed")
    assert "Seen on 1 of the job's 2 ranks" in comm["summary"]
    for fix in ("powersgd", "comm_compression", "ddp_bucket_tuning"):
        assert "several ranks" not in comm["fixes_ruled_out"].get(fix, "")


def _gap_with_copy(copy_bytes: int):
    """A kernel, then the host blocked 400 us in a pageable cudaMemcpy HtoD of copy_bytes, then a kernel."""
    kernel = {"run_id": "syn", "rank": 0, "kind": "kernel", "ph": "X", "name": "k", "device": 0, "stream": 7}
    launch = {"run_id": "syn", "rank": 0, "kind": "runtime", "ph": "X", "name": "cudaLaunchKernel"}
    return [
        {**launch, "ts_ns": 0, "dur_ns": 5_000, "correlation": 1},
        {**kernel, "ts_ns": 10_000, "dur_ns": 50_000, "correlation": 1},
        {**launch, "name": "cudaMemcpy", "ts_ns": 60_000, "dur_ns": 400_000, "correlation": 2},
        {"run_id": "syn", "rank": 0, "kind": "memcpy", "ph": "X", "name": "Memcpy HtoD (Pageable -> Device)",
         "device": 0, "stream": 7, "ts_ns": 455_000, "dur_ns": 3_000, "correlation": 2, "bytes": copy_bytes},
        {**launch, "ts_ns": 460_000, "dur_ns": 5_000, "correlation": 3},
        {**kernel, "ts_ns": 470_000, "dur_ns": 50_000, "correlation": 3},
    ]


@pytest.mark.parametrize("copy_bytes, cause", [(60, "host_sync"), (64 * 2**20, "h2d_copy")])
def test_a_tiny_blocking_copy_is_a_host_sync(copy_bytes, cause):
    con = hand_written_store(_gap_with_copy(copy_bytes))
    causes = [r[0] for r in con.execute("SELECT cause FROM gpu_idle_gaps('syn', 0.5, 1000000)").fetchall()]
    assert set(causes) == {cause}   # the copy splits the idle time in two gaps, both of one cause
