"""The fix registry against the analyses: every metric a fix reads is one the kinds it addresses
emit, a metric that is missing leaves a fix 'unknown' (never 'applies'), and every cut-off the
fix library uses is a named threshold in analyzers/common/thresholds.py."""
from __future__ import annotations

import ast
from collections.abc import Mapping

import pytest

from accel import registry
from analyzers.common import thresholds as th
from analyzers.analysis.kinds import analysis_specs
from analyzers.execution.pipeline import run_analyses
from analyzers.common.model import ACROSS_RANKS_METRIC_KEYS
from tests.support.paths import REPO_ROOT

# modules whose numbers decide whether a fix applies or which setting it picks
CUT_OFF_MODULES = ["accel/fix_predicates.py", "accel/comm/bucket_tuning.py", "accel/data/loader_tuning.py"]

# Metrics under which each checked fix applies, per kind whose metrics its check reads: the
# analyses' own key names and value shapes.
APPLYING = {
    ("cuda_graph", "launch_gap"): {"syncs_per_step": 1.0},
    ("fused_optimizer", "launch_gap"): {"optimizer_kernel_share": 0.5},
    ("triton_fused_elementwise", "launch_gap"): {"gelu_chains_per_step": 2.0, "elementwise_kernel_share": 0.5},
    ("cuda_prefetcher", "h2d_stall"): {"pageable_share": 1.0, "h2d_overlap_pct": 10.0},
    ("cuda_prefetcher", "host_sync"): {"top_callers": [
        {"op": "aten::to", "call": "cudaStreamSynchronize", "calls": 10, "blocked_ms_per_step": 3.0}]},
    ("allocator_tuning", "runtime_stall"): {"allocator_share": 0.8},
    ("drop_empty_cache", "runtime_stall"): {"allocator_share": 0.8},
    ("tf32_matmul", "fp32_matmul"): {"tf32_capable": True, "tf32_in_use": False},
    ("balanced_sampler", "rank_imbalance"): {"imbalance_source": "input", "shapes_compared": True,
                                             "shape_differs": True},
    ("comm_compression", "comm_exposed"): {"mean_msg_bytes": 8 << 20},
    ("no_sync_accumulation", "comm_exposed"): {"allreduce_rounds_per_step": 4.0, "optimizer_steps_per_step": 1.0},
    ("powersgd", "comm_exposed"): {"mean_msg_bytes": 8 << 20, "busbw_gbps": 12.0},
    ("hierarchical_allreduce", "comm_exposed"): {"hosts": 2, "nodes": 2, "world_size": 16,
                                                   "local_world_size": 8},
}
CHECKED = [(fix.id, kind) for fix in registry.FIXES.values() if fix.predicate is not None
           for kind in fix.addresses if fix.reads_for(kind)]


class RecordingMetrics(Mapping):
    """A metrics mapping that remembers every key read from it."""

    def __init__(self, data: Mapping[str, object]):
        self.data, self.read = dict(data), set()

    def __getitem__(self, key):
        self.read.add(key)
        return self.data[key]

    def get(self, key, default=None):
        self.read.add(key)
        return self.data.get(key, default)

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


@pytest.mark.parametrize("fix_id", list(registry.FIXES))
def test_every_metric_a_fix_reads_is_emitted_by_a_kind_it_addresses(fix_id):
    fix = registry.get(fix_id)
    emitted = set().union(*(analysis_specs()[kind].metric_keys for kind in fix.addresses))
    assert set(fix.reads) <= emitted, f"{fix_id} reads {sorted(set(fix.reads) - emitted)}, which no kind it addresses emits"


def test_every_metric_read_is_described_and_every_description_is_read():
    read = {key for fix in registry.FIXES.values() for key in fix.reads}
    assert read == set(registry.READ_METRICS)


def test_every_fix_with_a_check_has_an_applying_example_for_each_kind_it_checks():
    assert sorted(CHECKED) == sorted(APPLYING)


@pytest.mark.parametrize("fix_id, kind", sorted(APPLYING))
def test_a_fix_applies_only_while_every_metric_it_reads_is_measured(fix_id, kind):
    fix, metrics = registry.get(fix_id), APPLYING[fix_id, kind]
    assert set(metrics) <= analysis_specs()[kind].metric_keys
    assert fix.verdict(metrics, kind=kind) == registry.Verdict("applies")
    assert fix.verdict(metrics) == registry.Verdict("applies")          # kind inferred from the keys
    for key in fix.reads_for(kind):
        for absent in ({k: v for k, v in metrics.items() if k != key}, {**metrics, key: None}):
            verdict = fix.verdict(absent, kind=kind)
            assert (verdict.status, verdict.missing) == ("unknown", (key,)), (key, verdict)
            assert key in verdict.reason
            assert registry.fixes_unknown([fix_id], absent, kind=kind) == {fix_id: verdict.reason}
            assert registry.fixes_ruled_out([fix_id], absent, kind=kind) == {}
            assert fix.why_not(absent, kind=kind) is None
        unusable = fix.verdict({**metrics, key: "n/a"}, kind=kind)
        assert (unusable.status, unusable.missing) == ("unknown", (key,)), (key, unusable)


@pytest.mark.parametrize("fix_id, kind", sorted(APPLYING))
def test_checks_read_only_the_metrics_their_fix_declares(fix_id, kind):
    fix = registry.get(fix_id)
    for data in (APPLYING[fix_id, kind], {key: None for key in fix.reads}):
        metrics = RecordingMetrics(data)
        fix.predicate(metrics, th.DEFAULTS)
        if fix.bonus is not None:
            fix.bonus(metrics, th.DEFAULTS)
        assert metrics.read <= set(fix.reads), sorted(metrics.read - set(fix.reads))


def test_a_fix_no_metric_decides_applies_to_the_kinds_it_does_not_check():
    prefetcher = registry.get("cuda_prefetcher")
    assert prefetcher.reads_for("dataloader_stall") == ()
    assert prefetcher.verdict({"wait_ms_per_step": 40.0}, kind="dataloader_stall").status == "applies"
    for fix_id in ("compile_reduce_overhead", "dataloader_tuning", "amp_autocast", "ddp_bucket_tuning"):
        assert registry.get(fix_id).verdict({}).status == "applies", fix_id


def test_ruled_out_beats_unknown_and_verdicts_serialise():
    # TF32 already running rules the fix out even though the GPU was not identified
    verdict = registry.get("tf32_matmul").verdict({"tf32_capable": None, "tf32_in_use": True})
    assert verdict.status == "ruled_out" and "already on" in verdict.reason
    assert verdict.to_dict() == {"status": "ruled_out", "reason": verdict.reason, "missing": []}
    both = registry.verdicts(["tf32_matmul", "amp_autocast", "warp_drive"], {"tf32_capable": None,
                                                                            "tf32_in_use": False})
    assert {k: v.status for k, v in both.items()} == {"tf32_matmul": "unknown", "amp_autocast": "applies"}


def test_imbalance_sources_are_the_ones_rank_imbalance_emits():
    source = (REPO_ROOT / "analyzers/analysis/kinds/rank_imbalance/__init__.py").read_text()
    emitted = {node.value.value for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "source" for t in node.targets)
               and isinstance(node.value, ast.Constant)}
    assert emitted == set(registry.IMBALANCE_SOURCES)
    sampler = registry.get("balanced_sampler")
    assert sampler.why_not({"imbalance_source": "stall", "shapes_compared": True, "shape_differs": False})
    assert sampler.verdict({"imbalance_source": "comm", "shapes_compared": True,
                            "shape_differs": False}).status == "unknown"


def _threshold_names_read(path: str) -> set[str]:
    """Names read as t["NAME"] or th.resolve(...)["NAME"] in a module: every string subscript
    key written in capitals."""
    tree = ast.parse((REPO_ROOT / path).read_text())
    return {node.slice.value for node in ast.walk(tree)
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str) and node.slice.value.isupper()}


@pytest.mark.parametrize("path", CUT_OFF_MODULES)
def test_cut_offs_are_named_thresholds_not_numbers(path):
    names = _threshold_names_read(path)
    assert names and names <= set(th.DEFAULTS), sorted(names - set(th.DEFAULTS))
    assert th.resolve({name: th.DEFAULTS[name] for name in names}).keys() == th.DEFAULTS.keys()
    # a comparison with a number other than 0 or 1 is a cut-off that belongs in thresholds.py
    tree = ast.parse((REPO_ROOT / path).read_text())
    literals = [(node.lineno, ast.unparse(node)) for node in ast.walk(tree) if isinstance(node, ast.Compare)
                for operand in (node.left, *node.comparators)
                if isinstance(operand, ast.Constant) and type(operand.value) in (int, float)
                and operand.value not in (0, 1)]
    assert not literals, literals


def test_one_small_message_cut_off_for_the_registry_and_bucket_tuning():
    from accel.comm import derive_ddp_settings

    two_mib = {"collectives_per_step": 48, "mean_msg_bytes": 2 << 20}
    assert registry.get("comm_compression").verdict(two_mib).status == "applies"
    assert derive_ddp_settings(two_mib).bucket_cap_mb == 25                    # not small: kept
    bigger = {"COMM_SMALL_MESSAGE_BYTES": 4 << 20}
    assert registry.get("comm_compression").verdict(two_mib, thresholds=bigger).status == "ruled_out"
    assert derive_ddp_settings(two_mib, thresholds=bigger).bucket_cap_mb == 24  # 96 MiB in 4 buckets


def test_a_late_all_reduce_is_split_only_while_communication_is_serialised():
    from accel.comm import derive_ddp_settings

    late = {"collectives_per_step": 1, "bytes_per_step": 400 << 20}
    serialised = th.DEFAULTS["COMM_SERIALIZED_OVERLAP_PCT"]
    assert derive_ddp_settings({**late, "overlap_pct": serialised - 1}).bucket_cap_mb == 50
    assert derive_ddp_settings({**late, "overlap_pct": serialised}).bucket_cap_mb == 25


@pytest.mark.parametrize("sample", ["synthetic_all", "synthetic_fp32_matmul", "synthetic_allocator_churn"])
def test_every_sample_finding_gets_a_verdict_from_metrics_its_kind_declares(sample):
    from tests.support.analysis import ingest_clean

    con, run_id = ingest_clean([REPO_ROOT / "sample_traces" / sample])
    findings, _ = run_analyses(con, run_id)
    assert findings
    for finding in findings:
        assert set(finding.metrics) <= analysis_specs()[finding.kind].metric_keys | ACROSS_RANKS_METRIC_KEYS, finding.kind
        fix_ids = registry.fixes_for(finding.kind, finding.metrics)
        verdicts = registry.verdicts(fix_ids, finding.metrics, kind=finding.kind)
        assert list(verdicts) == fix_ids
        for fix_id, verdict in verdicts.items():
            assert "could not be checked" not in verdict.reason, (finding.kind, fix_id, verdict)
            assert verdict == registry.get(fix_id).verdict(finding.metrics)     # kind inferred alike
