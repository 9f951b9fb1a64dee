"""The per-op performance model (analyzers/sql/metrics/op_perf.sql) against AMD TraceLens' own perf
report of the same traces (modern/tracelens_reference: GEMM, CONV_fwd and SDPA_fwd tables of the
H100 and MI300X Falconsai runs), the peak table, and `top --json` rows carrying the rates."""
from __future__ import annotations

import csv
import json

import pytest

from analyzers.cli import main
from analyzers.read.queries import op_perf
from tests.support.analysis import hand_written_store, ingest_clean

PAIR = {"h100": "h100__Falconsai_nsfw_image_detection__1016002.json.gz",
        "mi300": "mi300__Falconsai_nsfw_image_detection__1016002.json.gz"}


@pytest.fixture(scope="module")
def modelled(shared_traces):
    out = {}
    for gpu, trace in PAIR.items():
        con, run = ingest_clean([shared_traces / "modern" / trace])
        out[gpu] = (con, run, op_perf(con, run, limit=None))
    return out


def _reference_rows(shared_traces, gpu):
    for table in ("GEMM", "CONV_fwd", "SDPA_fwd"):
        with open(shared_traces / "modern" / "tracelens_reference" / f"{gpu}__Falconsai__{table}.csv", encoding="utf-8") as f:
            yield from csv.DictReader(f)


@pytest.mark.parametrize("gpu", list(PAIR))
def test_flops_bytes_and_rates_agree_with_tracelens(modelled, shared_traces, gpu):
    _, _, perf = modelled[gpu]
    ours = {(row.name, json.dumps(json.loads(row.shape))): row for row in perf.itertuples()}
    compared = 0
    for ref in _reference_rows(shared_traces, gpu):
        dims = [d for d in json.loads(ref["Input Dims_first"]) if d]
        row = ours[(ref["name"], json.dumps(dims))]
        assert row.gflops == pytest.approx(float(ref["GFLOPS_first"]), rel=1e-9)
        assert row.mb == pytest.approx(float(ref["Data Moved (MB)_first"]), rel=1e-9)
        assert row.calls == int(ref["name_count"])
        # ours: all calls' FLOPs over all their GPU time; TraceLens: the mean of per-call rates
        assert row.tflops == pytest.approx(float(ref["TFLOPS/s_mean"]), rel=0.02)
        assert row.tbps == pytest.approx(float(ref["TB/s_mean"]), rel=0.02)
        assert row.gpu_ms * 1e3 == pytest.approx(float(ref["Kernel Time (µs)_sum"]), rel=0.005)
        compared += 1
    assert compared == 6      # 4 GEMM shapes, 1 convolution, 1 attention


def test_peaks_come_from_the_gpu_named_in_the_trace(modelled):
    for gpu, name, bf16, hbm in (("h100", "NVIDIA H100 SXM", 989.4, 3.35), ("mi300", "AMD Instinct MI300X", 1307.4, 5.3)):
        _, _, perf = modelled[gpu]
        gemm = perf[perf.category == "GEMM"].iloc[0]
        assert (gemm.gpu, gemm.peak_tflops, gemm.peak_tbps) == (name, bf16, hbm)
        assert gemm.pct_peak_flops == pytest.approx(100 * gemm.tflops / bf16)
        assert 0 <= gemm.lost_ms <= gemm.gpu_ms
        assert gemm.roofline_ms + gemm.lost_ms == pytest.approx(gemm.gpu_ms)


def test_top_json_rows_carry_rates_and_occupancy(modelled, tmp_path, capsys):
    con, run, _ = modelled["h100"]
    db = tmp_path / "td.duckdb"
    con.execute(f"ATTACH '{db}' AS copy")
    con.execute("COPY FROM DATABASE memory TO copy")
    con.execute("DETACH copy")
    assert main(["top", run, "--kernels", "--json", "--limit", "3", "--db", str(db)]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["tflops"] == pytest.approx(111.9, rel=0.02)       # the 788x768x768 GEMMs' kernel
    assert all(r["tbps"] > 0 for r in rows)
    assert rows[0]["occupancy_pct"] is not None and rows[0]["registers_per_thread"] == 152
    assert main(["top", run, "--ops", "--json", "--db", str(db)]) == 0
    ops = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert ops["aten::addmm"]["tflops"] > 100 and ops["aten::empty"]["tflops"] is None


def test_batched_and_causal_shapes():
    """bmm counts its batch; causal attention half the score matrix; each op's time is its kernels'."""
    def op(name, ts, dims, types, concrete, corr):
        return [{"run_id": "syn", "rank": 0, "kind": "cpu_op", "ph": "X", "name": name, "ts_ns": ts, "dur_ns": 10_000,
                 "args": json.dumps({"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete})},
                {"run_id": "syn", "rank": 0, "kind": "runtime", "ph": "X", "name": "cudaLaunchKernel", "ts_ns": ts + 1_000,
                 "dur_ns": 2_000, "correlation": corr},
                {"run_id": "syn", "rank": 0, "kind": "kernel", "ph": "X", "name": f"k{corr}", "ts_ns": ts + 5_000,
                 "dur_ns": 100_000, "device": 0, "stream": 7, "correlation": corr}]
    bf16 = "c10::BFloat16"
    rows = op("aten::bmm", 0, [[8, 64, 32], [8, 32, 16]], [bf16, bf16], ["", ""], 1) + op(
        "aten::_scaled_dot_product_flash_attention", 200_000, [[2, 4, 128, 64]] * 3 + [[], [], [], []],
        [bf16] * 3 + ["Scalar"] * 4, ["", "", "", "0.", "True", "False", ""], 2)
    perf = {r[0]: r[1:] for r in hand_written_store(rows).execute(
        "SELECT name, gflops * 1e9, mb * 1048576, gpu_ms FROM op_perf('syn')").fetchall()}
    assert perf["aten::bmm"] == pytest.approx((2 * 8 * 64 * 16 * 32, 2 * 8 * (64 * 32 + 32 * 16 + 64 * 16), 0.1))
    assert perf["aten::_scaled_dot_product_flash_attention"] == pytest.approx(
        (0.5 * 2 * 2 * 4 * 128 * 128 * 128, 2 * 4 * (2 * 4 * 128 * 64), 0.1))
