"""launch_gap's gelu_chains_per_step: the bias+GELU+dropout chains the Triton fusion takes over,
and the Triton fix ruled out (never offered first) on a trace without one."""
from __future__ import annotations

from accel import registry
from tests.support.analysis import hand_written_store
from analyzers.execution.pipeline import analyze_run
from tests.support.events import synthetic_events
from tests.support.events import DROPOUT, GELU


def _launch_gap_metrics(renames: dict[int, str]) -> dict:
    """launch_gap's metrics on the hand-written trace (two steps) with kernels renamed by correlation id."""
    rows = synthetic_events()
    for row in rows:
        if row["kind"] == "kernel" and row.get("correlation") in renames:
            row["name"] = renames[row["correlation"]]
    con = hand_written_store(rows)
    found = [f for f in analyze_run(con, "syn", {"MIN_FINDING_PCT": 0.0}) if f.kind == "launch_gap"]
    con.close()
    assert len(found) == 1
    return found[0].metrics


def test_a_gelu_next_to_a_dropout_kernel_is_a_chain():
    # kernel 5 (GELU) runs right before kernel 6 on the same stream: one chain in two steps
    assert _launch_gap_metrics({5: GELU, 6: DROPOUT})["gelu_chains_per_step"] == 0.5
    # a bias add (an elementwise kernel) before the GELU is a chain too
    assert _launch_gap_metrics({5: "vectorized_elementwise_kernel<add>", 6: GELU})["gelu_chains_per_step"] == 0.5


def test_no_gelu_or_a_gelu_between_matmuls_or_one_already_fused_is_no_chain():
    assert _launch_gap_metrics({})["gelu_chains_per_step"] == 0.0
    assert _launch_gap_metrics({5: "gemm_kernel", 6: GELU, 8: "gemm_kernel"})["gelu_chains_per_step"] == 0.0
    assert _launch_gap_metrics({5: "gemm_kernel", 6: "triton_poi_fused_gelu_native_dropout_0"})[
        "gelu_chains_per_step"] == 0.0


def test_the_triton_fusion_is_ruled_out_without_a_chain_and_listed_after_the_fixes_that_apply():
    metrics = {"syncs_per_step": 1.0, "optimizer_kernel_share": 0.3, "elementwise_kernel_share": 0.9,
               "gelu_chains_per_step": 0.0}
    verdict = registry.get("triton_fused_elementwise").verdict(metrics, kind="launch_gap")
    assert verdict.status == "ruled_out" and "GELU" in verdict.reason
    assert registry.fixes_for("launch_gap", metrics)[-1] == "triton_fused_elementwise"
    # with chains it applies, still after the whole-step fixes (graphs, compile)
    ranked = registry.fixes_for("launch_gap", {**metrics, "gelu_chains_per_step": 4.0})
    assert ranked.index("triton_fused_elementwise") > ranked.index("compile_reduce_overhead")
    assert registry.get("triton_fused_elementwise").verdict({**metrics, "gelu_chains_per_step": 4.0},
                                                            kind="launch_gap").status == "applies"


def test_fixes_read_back_put_the_ruled_out_ones_last_those_the_trace_cannot_use_after_the_rest():
    from analyzers.read.fixes import choose_fixes
    metrics = {"syncs_per_step": 1.0, "optimizer_kernel_share": 0.3, "elementwise_kernel_share": 0.9,
               "gelu_chains_per_step": 0.0}
    on_gpu = choose_fixes("launch_gap", metrics, {"has_gpu": True, "ranks": 1})
    assert on_gpu.ids == registry.fixes_for("launch_gap", metrics)
    assert list(on_gpu.ruled_out) == ["triton_fused_elementwise"] and on_gpu.ids[-1] == "triton_fused_elementwise"
    on_cpu = choose_fixes("launch_gap", metrics, {"has_gpu": False, "ranks": 1})
    needing_cuda = [f for f in on_cpu.ids if {"cuda", "triton", "multi_gpu"} & set(registry.get(f).needs)]
    assert needing_cuda and all("CUDA GPU" in on_cpu.ruled_out[f] for f in needing_cuda)
    # ruled out by the metrics first, then by what the trace lacks; the others keep the registry's order
    assert on_cpu.ids == sorted(on_cpu.ids, key=lambda f: (f in on_cpu.ruled_out, f in needing_cuda))
