"""Hand-written event rows (µs times) for analysis.hand_written_store: one helper per event shape,
and a two-step trace whose every GPU idle gap has a planted cause."""
from __future__ import annotations


US = 1000  # ns per microsecond
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def ev(kind, name, start_us, end_us, **kw):
    row = {"run_id": "syn", "rank": 0, "kind": kind, "cat": kind, "ph": "X", "name": name,
           "ts_ns": start_us * US, "dur_ns": (end_us - start_us) * US, "args": "{}"}
    row.update(kw)
    return row


def launch(corr, call_start, call_end, gpu_start, gpu_end, name="gemm_kernel", call="cudaLaunchKernel",
           kind="kernel", **kw):
    return [ev("runtime", call, call_start, call_end, correlation=corr),
            ev(kind, name, gpu_start, gpu_end, device=0, stream=7, correlation=corr, **kw)]


def synthetic_events():
    """Two 10 ms steps. Gaps (µs) and their planted causes:
    1000-4010 dataloader, 5000-5010 launch-bound (launch issued at the kernel's end), 6000-6110
    host sync, 7000-7210 launch-bound, 8000-8050 queued work (gpu_wait), 9000-9400 CPU inside a
    pageable HtoD copy call, 9600-10010 launch-bound."""
    rows = [ev("user_annotation", "ProfilerStep#1", 0, 10000), ev("user_annotation", "ProfilerStep#2", 10000, 20000)]
    rows += launch(1, 10, 15, 20, 1000)
    rows += [ev("cpu_op", LOADER, 1000, 4000)]
    rows += launch(2, 4000, 4005, 4010, 5000)
    rows += launch(3, 5000, 5005, 5010, 6000)
    rows += [ev("runtime", "cudaStreamSynchronize", 5006, 6003, external_id=77),
             ev("cpu_op", "aten::item", 5006, 6004, external_id=77)]
    rows += launch(4, 6100, 6105, 6110, 7000)
    rows += [ev("cpu_op", "aten::mul", 6200, 7206)]     # the CPU busy in an op up to the launch
    rows += launch(5, 7200, 7205, 7210, 8000, name="vectorized_elementwise_kernel")
    rows += launch(6, 7300, 7305, 8050, 9000)
    rows += launch(7, 9000, 9500, 9400, 9600, name="Memcpy HtoD (Pageable -> Device)", call="cudaMemcpyAsync",
                   kind="memcpy", bytes=2_000_000)
    rows += launch(8, 10000, 10005, 10010, 19990)
    return rows


GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&)>"
DROPOUT = "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>"
