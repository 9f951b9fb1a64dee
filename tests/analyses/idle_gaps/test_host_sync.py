"""host_sync on real traces: blocking synchronize calls on AlexNet's CUDA trace, and ROCm's
hipMemcpyWithStream counted as a copy the host waits for."""
from __future__ import annotations

import pytest


def test_alexnet_host_syncs_are_found(real):
    findings, _ = real["alexnet_single_gpu"]
    sync = next(f for f in findings if f.kind == "host_sync")
    # 21 blocking calls (16 cudaStreamSynchronize + 5 cudaDeviceSynchronize), no ProfilerStep:
    # the whole trace is one step; the GPU idles 23.6 ms after them
    assert sync.metrics["syncs_per_step"] == 21
    assert sync.cost_ns / 1e6 == pytest.approx(23.58, abs=0.05)


def test_rocm_copies_through_hipmemcpywithstream_block_the_host(shared_traces):
    # ATen's memcpy_and_sync on ROCm is hipMemcpyWithStream: a copy the host waits for, like a
    # cudaMemcpy (the minitoy trace's two HtoD batch copies)
    from tests.support.analysis import ingest_clean
    con, run_id = ingest_clean([shared_traces / "rocm_mi250_minitoy.json.gz"])
    copies = con.execute("SELECT launch_name, synchronous FROM copies(?) WHERE direction = 'HtoD'", [run_id]).fetchall()
    assert copies == [("hipMemcpyWithStream", True)] * 2
    syncs = con.execute("SELECT name, count(*) FROM sync_calls(?) GROUP BY name ORDER BY name", [run_id]).fetchall()
    assert syncs == [("hipDeviceSynchronize", 1), ("hipMemcpyWithStream", 2)]
    con.close()
