"""Hierarchical (two-level) all-reduce: reduce inside a node, all-reduce across nodes, share back.

Why: on a cluster the link between nodes is far slower than the links inside one. A flat ring
all-reduce sends about 2·(n−1)/n of every gradient across the slow link from every rank. The
two-level scheme sends only 1/local_size of it per rank across nodes:

  1. intra-node reduce-scatter: each of the L ranks on a node ends up with the node's sum of
     one 1/L slice of the tensor (fast links);
  2. inter-node all-reduce of that slice among the ranks with the same local rank on every node
     (one ring per local rank, all L rings run in parallel over the slow links);
  3. intra-node all-gather: every rank gets all L summed slices back (fast links).

Ranks are laid out node by node (rank = node · L + local_rank), the layout torchrun uses.
On gloo (CPU) this runs on 4 processes as 2 "nodes" × 2; that proves correctness, not speed.

Results equal a plain all-reduce SUM up to float reassociation: the slices are summed in a
different order (node partial sums first), so fp32 results may differ in the last bits
(relative error ~ n·eps); integer-valued floats are summed exactly and match bitwise.
"""
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

# torch ≥ 2.13 renamed the single-tensor collectives; keep working on older releases too.
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass
class HierarchicalGroups:
    """The two process groups one rank uses, and where it sits in the node × local grid."""
    world_size: int
    local_size: int            # ranks per node
    num_nodes: int
    node: int
    local_rank: int
    intra_node: dist.ProcessGroup   # the ranks on my node
    inter_node: dist.ProcessGroup   # my peers with the same local rank on every node


def default_local_size() -> int:
    """Ranks per node as the launcher says (torchrun sets LOCAL_WORLD_SIZE), else GPUs here."""
    from_env = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0)
    if from_env > 0:
        return from_env
    if torch.cuda.is_available():
        return torch.cuda.device_count()
    return dist.get_world_size()


def new_hierarchical_groups(local_size: int | None = None) -> HierarchicalGroups:
    """Create the intra-node and inter-node groups. Every rank must call this (collective).

    new_group is itself collective: all ranks create all groups in the same order, and each
    keeps the two it belongs to.
    """
    if not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialised: call init_process_group first")
    world_size = dist.get_world_size()
    rank = dist.get_rank()
    local_size = local_size or default_local_size()
    if local_size < 1 or world_size % local_size:
        raise ValueError(f"world size {world_size} is not a whole number of nodes of {local_size} ranks")
    num_nodes = world_size // local_size
    node_rank_lists = [list(range(n * local_size, (n + 1) * local_size)) for n in range(num_nodes)]
    peer_rank_lists = [[n * local_size + l for n in range(num_nodes)] for l in range(local_size)]
    intra_node, _ = dist.new_subgroups_by_enumeration(node_rank_lists)
    inter_node, _ = dist.new_subgroups_by_enumeration(peer_rank_lists)
    return HierarchicalGroups(world_size, local_size, num_nodes, rank // local_size,
                              rank % local_size, intra_node, inter_node)


def hierarchical_all_reduce(tensor: torch.Tensor, groups: HierarchicalGroups) -> torch.Tensor:
    """Sum `tensor` over all ranks in place, in two levels; returns the same tensor.

    Collectives are issued synchronously, in the caller's order. On NCCL a "synchronous" call
    only enqueues on the communication stream, so the host is not blocked; on gloo it blocks
    but keeps every rank issuing collectives in the same order (see comm hook note below).
    """
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.reshape(-1)
    n = flat.numel()
    local = groups.local_size
    if groups.num_nodes == 1 or local == 1:
        # One level is enough: a plain all-reduce is the hierarchical one.
        dist.all_reduce(flat, group=dist.group.WORLD)
    else:
        slice_len = -(-n // local)   # ceil: pad so the node's L slices are equal
        padded = flat.new_zeros(slice_len * local)
        padded[:n].copy_(flat)
        my_slice = flat.new_empty(slice_len)
        _reduce_scatter_single(my_slice, padded, group=groups.intra_node)
        dist.all_reduce(my_slice, group=groups.inter_node)
        _all_gather_single(padded, my_slice, group=groups.intra_node)
        flat.copy_(padded[:n])
    if flat.data_ptr() != tensor.data_ptr():   # non-contiguous input: write the result back
        tensor.copy_(flat.view_as(tensor))
    return tensor


def hierarchical_allreduce_hook(groups, bucket):
    """DDP comm hook: average the bucket's gradients with the two-level all-reduce.

    Register with `ddp_model.register_comm_hook(groups, hierarchical_allreduce_hook)` or
    `accel.comm.apply_comm_hook(ddp_model, kind="hierarchical")`.
    The collectives run inside the hook, on the autograd thread, in bucket order. Chaining them
    in Future.then callbacks (as torch's PowerSGD hook does) lets callbacks of different buckets
    run on other threads, so ranks can issue collectives in different orders, which gloo does
    not survive when there are several buckets.
    No annotations on purpose: DDP compares them to real classes (see hooks.py).
    """
    grad = bucket.buffer()
    grad.div_(groups.world_size)      # pre-divide like torch's allreduce_hook (limits overflow)
    hierarchical_all_reduce(grad, groups)
    done: torch.futures.Future = torch.futures.Future()
    done.set_result(grad)
    return done
