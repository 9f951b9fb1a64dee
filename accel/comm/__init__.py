"""Distributed-communication fixes: comm hooks (fp16/bf16, PowerSGD, hierarchical all-reduce),
DDP bucket tuning, and no_sync gradient accumulation. Imports torch (never import from analyzers)."""
from accel.comm.bucket_tuning import DDPSettings, derive_ddp_settings, wrap_ddp
from accel.comm.hierarchical import (HierarchicalGroups, hierarchical_all_reduce,
                                     hierarchical_allreduce_hook, new_hierarchical_groups)
from accel.comm.hooks import COMM_HOOK_KINDS, PowerSGDDefaults, apply_comm_hook
from accel.comm.no_sync import accumulate_gradients, sync_only_on_last

__all__ = ["COMM_HOOK_KINDS", "DDPSettings", "HierarchicalGroups", "PowerSGDDefaults", "accumulate_gradients",
           "apply_comm_hook", "derive_ddp_settings", "hierarchical_all_reduce", "hierarchical_allreduce_hook",
           "new_hierarchical_groups", "sync_only_on_last", "wrap_ddp"]
