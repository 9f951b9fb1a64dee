"""Serving engines' own settings for what a launch_gap or host_sync finding shows on a served model.

vLLM, SGLang and TensorRT-LLM replay decode steps from CUDA graphs captured at start-up for a
list of batch sizes, and overlap the scheduler's CPU work with the GPU's step; a batch larger than
the largest captured size, eager mode, or overlap turned off runs each kernel launch from Python
again. The fix is their launch flags, not code around a training step:

    from accel.serving import serving_graph_settings
    for line in serving_graph_settings("sglang", max_batch=64):
        print(line)

Imports nothing but the standard library (no engine is needed to build the lines).
"""
from __future__ import annotations

import json

ENGINES = ("vllm", "sglang", "tensorrt_llm")


def capture_sizes(max_batch: int) -> list[int]:
    """The decode batch sizes to capture up to max_batch: 1, 2, 4, then every multiple of 8 (vLLM's
    default cudagraph_capture_sizes pattern), max_batch itself included."""
    if int(max_batch) < 1:
        raise ValueError(f"max_batch must be at least 1, not {max_batch!r}")
    top = int(max_batch)
    sizes = [s for s in (1, 2, 4) if s <= top] + list(range(8, top + 1, 8))
    return sorted(set(sizes + [top]))


def serving_graph_settings(engine: str, max_batch: int = 256) -> list[str]:
    """The launch lines that keep every decode batch up to max_batch in a CUDA graph and the
    scheduler overlapped with the GPU, for engine 'vllm' | 'sglang' | 'tensorrt_llm'."""
    sizes = capture_sizes(max_batch)
    if engine == "vllm":
        return ["vllm serve MODEL --async-scheduling "
                f"--compilation-config '{json.dumps({'cudagraph_capture_sizes': sizes})}'",
                "# not --enforce-eager (it turns CUDA graphs and torch.compile off)",
                f"# Python: LLM(model=MODEL, enforce_eager=False, "
                f"compilation_config={{'cudagraph_capture_sizes': {sizes}}})"]
    if engine == "sglang":
        return [f"python -m sglang.launch_server --model-path MODEL --cuda-graph-max-bs {sizes[-1]}",
                "# not --disable-cuda-graph, not --disable-overlap-schedule (overlap is the default)",
                f"# small batches also: --enable-torch-compile --torch-compile-max-bs {min(sizes[-1], 32)}"]
    if engine == "tensorrt_llm":
        return ["trtllm-serve MODEL --extra_llm_api_options extra.yaml, where extra.yaml holds:",
                f"cuda_graph_config: {{batch_sizes: {sizes}, enable_padding: true}}",
                "disable_overlap_scheduler: false"]
    raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
