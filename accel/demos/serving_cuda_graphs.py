"""Demo: decode-style forward passes (no autograd, fixed batch) eager vs replayed from a CUDA
graph, what a serving engine does for each captured batch size (accel.serving)."""
from __future__ import annotations

from pathlib import Path

import torch

from accel.demos import DemoResult, skip
from accel.demos import launch_bound as wl
from accel.profiling import median_ms, profile_steps, time_steps

DEFAULT_STEPS = 50
PROFILED_STEPS = 10
WARMUP_STEPS = 3


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    if device != "cuda" or not torch.cuda.is_available():
        return skip("serving_cuda_graphs", device, "CUDA graphs need a CUDA GPU", "launch_gap")
    model, _, x, _ = wl.build(device)
    model.eval()

    def eager(_: int) -> torch.Tensor:
        with torch.inference_mode():
            return model(x)

    before_ms = median_ms(time_steps(eager, steps, device))
    profile_steps(eager, PROFILED_STEPS, out_dir / "before.json.gz", device)

    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.inference_mode():
        for _ in range(WARMUP_STEPS):      # lazy initialisation must not be captured
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.inference_mode():
        static_out = model(static_x)

    def replay(_: int) -> torch.Tensor:
        graph.replay()
        return static_out

    after_ms = median_ms(time_steps(replay, steps, device))
    profile_steps(replay, PROFILED_STEPS, out_dir / "after.json.gz", device)
    same = bool(torch.allclose(eager(0), replay(0)))
    return DemoResult(fix="serving_cuda_graphs", device=device, finding_kind="launch_gap",
                      step_ms_before=before_ms, step_ms_after=after_ms,
                      trace_before=out_dir / "before.json.gz", trace_after=out_dir / "after.json.gz",
                      checks={"outputs_match": same},
                      notes=[f"{torch.cuda.get_device_name()}: {wl.N_BLOCKS} blocks, batch {wl.BATCH}, forward only"])
