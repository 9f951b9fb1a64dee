"""accel.registry: the 21 fixes, their predicates over finding metrics, and the ranking.
(tests/accel/test_registry_metrics.py checks the registry against the metrics the analyses emit.)"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from accel import registry
from tests.support.paths import REPO_ROOT


FIX_IDS = ["cuda_graph", "compile_reduce_overhead", "fused_optimizer", "triton_fused_elementwise",
           "cuda_prefetcher", "dataloader_tuning", "preprocess_in_workers", "allocator_tuning", "drop_empty_cache", "tf32_matmul", "amp_autocast",
           "balanced_sampler", "comm_compression", "powersgd", "ddp_bucket_tuning",
           "no_sync_accumulation", "hierarchical_allreduce", "activation_checkpointing",
           "zero_grad_set_to_none", "autocast_activations", "zero_optimizer", "serving_cuda_graphs"]
CORE_FIXES = FIX_IDS[:11] + ["serving_cuda_graphs"]   # implemented in this package's kernels/ and data/ (not accel/comm)


def test_registry_holds_exactly_the_listed_fixes():
    assert list(registry.FIXES) == FIX_IDS


@pytest.mark.parametrize("fix_id", FIX_IDS)
def test_fix_entry_is_well_formed(fix_id):
    fix = registry.get(fix_id)
    assert fix.id == fix_id
    assert fix.addresses and set(fix.addresses) <= set(registry.FINDING_KINDS)
    assert set(fix.needs) <= registry.NEEDS
    assert fix.demo == f"python -m accel.demo {fix_id} --out DIR"
    assert fix.title and fix.description
    compile(fix.snippet, f"<snippet {fix_id}>", "exec")   # the pasted code is valid Python
    assert set(fix.fit) <= set(fix.addresses)


@pytest.mark.parametrize("fix_id", CORE_FIXES)
def test_core_fix_modules_and_demos_exist(fix_id):
    fix = registry.get(fix_id)
    assert importlib.util.find_spec(fix.module) is not None
    assert importlib.util.find_spec(fix.demo_module) is not None


def test_get_unknown_fix_names_the_known_ones():
    with pytest.raises(KeyError, match="cuda_graph"):
        registry.get("warp_drive")


def test_registry_imports_no_torch():
    code = "import sys, accel.registry; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "False"


def test_measured_metrics_rank_in_fit_order_and_unmeasured_ones_after_fixes_that_apply():
    measured = {"syncs_per_step": 1, "optimizer_kernel_share": 0.2, "elementwise_kernel_share": 0.2}
    # (serving_cuda_graphs has no check: it applies, after the general fixes; the run's workload,
    # not the finding's metrics, rules it out on training and plain inference runs)
    assert registry.fixes_for("launch_gap", measured) == [
        "cuda_graph", "compile_reduce_overhead", "fused_optimizer", "serving_cuda_graphs", "triton_fused_elementwise"]
    # nothing measured: compile and the serving settings have no check (apply); the others are
    # unknown, in fit order
    assert registry.fixes_for("launch_gap", {}) == [
        "compile_reduce_overhead", "serving_cuda_graphs", "cuda_graph", "fused_optimizer", "triton_fused_elementwise"]
    assert registry.fixes_for("launch_gap", None) == registry.fixes_for("launch_gap", {})
    assert registry.fixes_for("comm_exposed", {})[0] == "ddp_bucket_tuning"
    assert registry.fixes_for("comm_exposed", {"mean_msg_bytes": 8 << 20, "busbw_gbps": 150.0,
                                               "nodes": 2, "world_size": 16, "local_world_size": 8})[0] \
        == "comm_compression"


def test_no_fix_for_an_unknown_kind():
    assert registry.fixes_for("cosmic_rays", {}) == []


def test_syncs_in_the_step_rule_out_the_cuda_graph_but_keep_it_listed_last():
    ranked = registry.fixes_for("launch_gap", {"syncs_per_step": 5})
    assert ranked[-1] == "cuda_graph"
    graph = registry.get("cuda_graph")
    assert not graph.applies({"syncs_per_step": 5})
    assert graph.verdict({"syncs_per_step": 2}).status == "applies"     # the loss read after the step
    # the cut-off is CUDA_GRAPH_MAX_SYNCS_PER_STEP, overridable like every threshold
    assert graph.verdict({"syncs_per_step": 5}, thresholds={"CUDA_GRAPH_MAX_SYNCS_PER_STEP": 8}).status == "applies"


def test_optimizer_heavy_gaps_put_the_fused_optimizer_first():
    # fit: fused 0.7 + 0.4 * 0.8 = 1.02 > cuda_graph 0.9
    assert registry.fixes_for("launch_gap", {"optimizer_kernel_share": 0.8})[0] == "fused_optimizer"
    assert registry.get("fused_optimizer").fit_for("launch_gap", {"optimizer_kernel_share": 0.8}) \
        == pytest.approx(1.02)
    assert not registry.get("fused_optimizer").applies({"optimizer_kernel_share": 0.05})


def test_powersgd_ranks_by_link_speed():
    large = {"mean_msg_bytes": 8 << 20}
    slow = registry.fixes_for("comm_exposed", {**large, "busbw_gbps": 6.0})
    assert slow[0] == "powersgd"            # 0.5 + 0.3 * (1 - 6/30) = 0.74 > 0.7
    fast = registry.fixes_for("comm_exposed", {**large, "busbw_gbps": 200.0})
    assert fast[-1] == "powersgd"           # NVLink class (LINK_FAST_GBPS): ruled out
    medium = registry.get("powersgd").verdict({**large, "busbw_gbps": 60.0})
    assert medium.status == "applies"       # between LINK_SLOW_GBPS and LINK_FAST_GBPS
    assert registry.get("powersgd").fit_for("comm_exposed", {**large, "busbw_gbps": 60.0}) == 0.5   # no bonus


def test_hierarchical_allreduce_only_across_nodes():
    fix = registry.get("hierarchical_allreduce")
    assert not fix.applies({"nodes": 1})
    assert fix.applies({"nodes": 4})
    assert not fix.applies({"world_size": 8, "local_world_size": 8})
    assert fix.applies({"world_size": 16, "local_world_size": 8})
    # without `nodes` (GPUs per node unknown) more ranks than local GPUs is not proof of several nodes
    # (nor is it without the traces' host names: either would decide)
    assert fix.verdict({"world_size": 16, "local_world_size": 1}, kind="comm_exposed").missing == ("hosts", "nodes")
    # every trace recorded on one host: ruled out, naming the metric that decided
    assert "hosts = 1" in fix.why_not({"hosts": 1, "world_size": 2})
    assert fix.applies({"hosts": 2, "world_size": 16, "local_world_size": 8})


def test_h2d_and_loader_predicates():
    prefetch = registry.get("cuda_prefetcher")
    assert not prefetch.applies({"pageable_share": 0.0, "h2d_overlap_pct": 95.0})
    assert prefetch.applies({"pageable_share": 1.0, "h2d_overlap_pct": 0.0})
    assert registry.fixes_for("h2d_stall", {"pageable_share": 1.0, "h2d_overlap_pct": 0.0})[0] == "cuda_prefetcher"
    assert registry.fixes_for("h2d_stall", {})[0] == "dataloader_tuning"   # the prefetcher: unknown
    assert registry.fixes_for("dataloader_stall", {})[0] == "dataloader_tuning"
    # the trace does not say how many CPUs the host had: nothing rules more workers out
    assert registry.get("dataloader_tuning").verdict({"num_workers": 8}).status == "applies"


@pytest.mark.parametrize("metrics", [
    {"static_shapes": "yes", "distinct_shapes": "many", "busbw_gbps": None},
    {"optimizer_kernel_share": float("nan"), "nodes": [1, 2]},
    {"imbalance_source": 3},
    "not a dict",
])
def test_odd_metrics_never_raise_and_count_as_unknown(metrics):
    for kind in registry.FINDING_KINDS:
        ranked = registry.fixes_for(kind, metrics)
        assert sorted(ranked) == sorted(f.id for f in registry.FIXES.values() if kind in f.addresses)
        for fix_id in ranked:
            fix = registry.get(fix_id)
            if fix.predicate is not None and fix.reads_for(kind):
                assert fix.verdict(metrics, kind=kind).status == "unknown", (fix_id, kind)
    assert registry.get("cuda_graph").applies(metrics)     # not ruled out, only unknown


def test_list_fixes_shape():
    listed = registry.list_fixes()
    assert [f["id"] for f in listed] == FIX_IDS
    assert all(set(f) == {"id", "title", "addresses", "needs", "workloads"} for f in listed)


def test_why_not_gives_the_plain_reason():
    assert registry.get("cuda_graph").why_not({"syncs_per_step": 5}) == \
        "5 host syncs per step; a captured step cannot sync"
    assert registry.get("fused_optimizer").why_not({"optimizer_kernel_share": 0.05}) == \
        "only 5% of the step's kernels come from the optimizer"
    assert registry.get("cuda_graph").why_not({}) is None
    assert "NVLink class" in registry.get("powersgd").why_not({"busbw_gbps": 200.0})


def test_every_comm_and_balance_rule_out_says_why_in_its_own_words():
    generic = "the finding's metrics rule it out"
    cases = [("balanced_sampler", {"imbalance_source": "stall"}, "stall of its own"),
             ("balanced_sampler", {"imbalance_source": "compute", "shapes_compared": True,
                                   "shape_differs": False}, "same input shapes"),
             ("comm_compression", {"mean_msg_bytes": 16640}, "latency"),
             ("hierarchical_allreduce", {"world_size": 8, "local_world_size": 8}, "one node")]
    for fix_id, metrics, words in cases:
        reason = registry.get(fix_id).why_not(metrics)
        assert reason and reason != generic and words in reason, (fix_id, reason)
    # unequal shapes (or shapes not compared): the sampler stays a candidate
    assert registry.get("balanced_sampler").why_not({"imbalance_source": "input", "shape_differs": True}) is None
    assert registry.get("balanced_sampler").why_not({"imbalance_source": "compute", "shapes_compared": False}) is None


def test_latency_bound_collectives_rank_bucket_tuning_above_compression():
    # 96 all-reduces of 16 KiB per step on a slow link: compressing them cannot help
    metrics = {"collectives_per_step": 96, "mean_msg_bytes": 16640, "busbw_gbps": 1.0, "overlap_pct": 10}
    ranked = registry.fixes_for("comm_exposed", metrics)
    assert ranked[0] == "ddp_bucket_tuning"
    assert ranked.index("powersgd") > ranked.index("no_sync_accumulation")
    assert registry.get("powersgd").why_not(metrics) and registry.get("comm_compression").why_not(metrics)


def test_the_prefetcher_is_ruled_out_for_syncs_that_read_gpu_values():
    item = {"top_callers": [{"call": "cudaStreamSynchronize", "op": "aten::item", "blocked_ms_per_step": 4.0},
                            {"call": "cudaMemcpyAsync", "op": "aten::to", "blocked_ms_per_step": 0.5}]}
    assert ".item()" in registry.get("cuda_prefetcher").why_not(item)
    copies = {"top_callers": [{"call": "cudaStreamSynchronize", "op": "aten::to", "blocked_ms_per_step": 4.0},
                              {"call": "cudaStreamSynchronize", "op": "aten::item", "blocked_ms_per_step": 0.5}]}
    assert registry.get("cuda_prefetcher").why_not(copies) is None
    assert registry.get("cuda_prefetcher").verdict(copies, kind="host_sync").status == "applies"
    unattributed = registry.get("cuda_prefetcher").verdict({"top_callers": []}, kind="host_sync")
    assert (unattributed.status, unattributed.missing) == ("unknown", ("top_callers",))
    assert registry.get("cuda_prefetcher").why_not({"top_callers": []}) is None   # unknown is not ruled out


@pytest.mark.parametrize("fix_id", CORE_FIXES)
def test_core_snippets_import_names_that_exist(fix_id):
    import importlib
    for line in registry.get(fix_id).snippet.splitlines():
        if line.startswith("from accel"):
            module_name, _, names = line.removeprefix("from ").partition(" import ")
            module = importlib.import_module(module_name)
            for name in names.split(","):
                assert hasattr(module, name.strip()), f"{module_name} has no {name.strip()}"


def test_the_registry_holds_the_fixes_and_fix_predicates_their_checks():
    """accel/registry.py is the fixes' data: every predicate and bonus a fix names is
    accel.fix_predicates', and the registry defines none of its own."""
    import ast

    tree = ast.parse(Path(registry.__file__).read_text(encoding="utf-8"))
    checks = [f.name for f in ast.walk(tree)
              if isinstance(f, ast.FunctionDef) and [a.arg for a in f.args.args] == ["m", "t"]]
    assert not checks
    named = [check for fix in registry.FIXES.values() for check in (fix.predicate, fix.bonus) if check is not None]
    assert named and all(check.__module__ == "accel.fix_predicates" for check in named)
    assert registry.number is __import__("accel.fix_predicates", fromlist=["number"]).number   # still importable
