"""accel.comm pieces that need no process group: bucket settings, no_sync helper, argument checks."""
from __future__ import annotations

import contextlib

import pytest
import torch

from accel.comm import accumulate_gradients, apply_comm_hook, derive_ddp_settings, sync_only_on_last
from accel.comm.bucket_tuning import DDP_DEFAULT_BUCKET_CAP_MB, MIB


def test_many_small_messages_merge_into_about_four_buckets():
    settings = derive_ddp_settings({"collectives_per_step": 48, "mean_msg_bytes": 66 * 1024})
    total_mb = 48 * 66 / 1024
    assert settings.bucket_cap_mb == max(1, -(-total_mb // 4))       # ceil(total/4) MiB
    assert settings.gradient_as_bucket_view is True and settings.static_graph is False
    assert "latency-bound" in settings.reasons[0]


def test_large_model_small_messages_capped():
    settings = derive_ddp_settings({"count": 2000, "total_bytes_per_step": 1500 * MIB})   # 0.75 MiB each: small
    assert settings.bucket_cap_mb == 256            # merging stops at MAX_BUCKET_CAP_MB


def test_one_late_huge_allreduce_gets_split():
    settings = derive_ddp_settings({"collectives_per_step": 1, "total_bytes_per_step": 400 * MIB,
                                    "overlap_pct": 5})
    assert settings.bucket_cap_mb == 50             # 400 MiB / 8 buckets
    assert "barely overlap" in settings.reasons[0]
    # well overlapped already: leave it alone
    assert derive_ddp_settings({"collectives_per_step": 1, "total_bytes_per_step": 400 * MIB,
                                "overlap_pct": 90}).bucket_cap_mb == DDP_DEFAULT_BUCKET_CAP_MB


@pytest.mark.parametrize("metrics", [None, {}, {"collectives_per_step": "many"}, {"mean_bytes": float("nan")},
                                     {"count": True, "total_bytes": 10}])
def test_unknown_or_odd_metrics_keep_defaults(metrics):
    settings = derive_ddp_settings(metrics)
    assert settings.bucket_cap_mb == DDP_DEFAULT_BUCKET_CAP_MB
    assert settings.ddp_kwargs() == {"bucket_cap_mb": 25, "gradient_as_bucket_view": True, "static_graph": False}


def test_static_graph_only_when_known():
    assert derive_ddp_settings({"static_graph": True}).static_graph is True
    assert derive_ddp_settings({"static_graph": "yes"}).static_graph is False


def test_apply_comm_hook_rejects_unknown_kind_before_touching_the_model():
    with pytest.raises(ValueError, match="unknown comm hook kind 'zip'"):
        apply_comm_hook(object(), kind="zip")


class CountingNoSync(torch.nn.Module):
    """A plain module with a no_sync() like DDP's, counting how often it was entered."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(6, 3)
        self.no_sync_entered = 0

    def forward(self, x):
        return self.linear(x)

    @contextlib.contextmanager
    def no_sync(self):
        self.no_sync_entered += 1
        yield


def test_sync_only_on_last_uses_no_sync_for_all_but_the_last():
    model = CountingNoSync()
    for i in range(4):
        with sync_only_on_last(model, i, 4):
            pass
    assert model.no_sync_entered == 3
    with sync_only_on_last(torch.nn.Linear(2, 2), 0, 4):   # no no_sync: a no-op
        pass


def test_accumulated_gradient_equals_full_batch_gradient():
    torch.manual_seed(0)
    model = CountingNoSync()
    x, y = torch.randn(32, 6, dtype=torch.float64), torch.randn(32, 3, dtype=torch.float64)
    model.double()
    loss_fn = lambda m, batch: torch.nn.functional.mse_loss(m(batch[0]), batch[1])
    full_loss = loss_fn(model, (x, y))
    full_loss.backward()
    full_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    micro = list(zip(x.chunk(4), y.chunk(4)))
    mean_loss = accumulate_gradients(model, micro, loss_fn)
    assert model.no_sync_entered == 3
    # float64 and a mean loss: equal up to reassociation of the sum, ~1e-15 relative
    assert torch.allclose(mean_loss, full_loss.detach(), rtol=1e-12, atol=0)
    for full, acc in zip(full_grads, (p.grad for p in model.parameters())):
        assert torch.allclose(full, acc, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="no micro-batches"):
        accumulate_gradients(model, [], loss_fn)


MY_FIXES = ["balanced_sampler", "comm_compression", "powersgd", "ddp_bucket_tuning", "no_sync_accumulation",
            "hierarchical_allreduce"]


@pytest.mark.parametrize("fix_id", MY_FIXES)
def test_registry_entries_point_at_real_code(fix_id):
    import importlib
    import importlib.util

    from accel import registry
    fix = registry.get(fix_id)
    assert importlib.util.find_spec(fix.module) is not None
    demo = importlib.import_module(fix.demo_module)
    assert callable(demo.run) and demo.DEFAULT_STEPS >= 1
    # the snippet's accel imports name things that exist
    for line in fix.snippet.splitlines():
        if line.startswith("from accel"):
            module_name, names = line[len("from "):].split(" import ")
            module = importlib.import_module(module_name)
            for name in names.split(","):
                assert hasattr(module, name.strip()), (fix_id, name)


def test_slow_links_explain_what_is_missing(monkeypatch):
    # the demos catch this OSError and run on plain loopback, saying so in their notes
    from accel.demos import dist_common
    monkeypatch.setattr(dist_common.shutil, "which", lambda name: None)
    with pytest.raises(OSError, match="iproute2"):
        with dist_common.slow_loopback(800):
            pass
    with pytest.raises(OSError, match="iproute2"):
        with dist_common.two_node_network(400):
            pass
