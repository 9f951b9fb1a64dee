"""DDP communication hooks in one call: fp16/bf16 compression, PowerSGD, hierarchical all-reduce.

    from accel.comm import apply_comm_hook
    ddp = DistributedDataParallel(model, ...)
    apply_comm_hook(ddp, kind="bf16")          # or "fp16", "powersgd", "hierarchical", "auto"

What each buys, and when it does not:
- fp16 / bf16 (fix `comm_compression`): gradients are cast to 16 bits, all-reduced, cast back:
  half the bytes on the wire. Pays when the all-reduce is bandwidth-bound on a slow link
  (Ethernet between nodes, PCIe without NVLink); on a fast link or loopback the casts cost more
  than the bytes saved. bf16 keeps fp32's exponent range (no overflow of large gradients), fp16
  keeps 3 more mantissa bits; "auto" picks bf16 where the device computes it natively.
  Results differ from fp32 all-reduce by 16-bit rounding: of each rank's gradient (relative
  error ~2^-9 for bf16, ~2^-12 for fp16 per element) and of the 16-bit sum over world_size
  terms.
- powersgd (fix `powersgd`): low-rank compression of each gradient matrix with error feedback,
  compression of 10-100x. Pays on slow links with big layers; costs compute (QR per matrix per
  step) and a warm-up of plain all-reduce (start_powerSGD_iter). Changes the optimisation
  trajectory (it is lossy; error feedback makes it converge like SGD in practice).
- hierarchical (fix `hierarchical_allreduce`): see accel/comm/hierarchical.py.
"""
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from accel.comm.hierarchical import hierarchical_allreduce_hook, new_hierarchical_groups

COMM_HOOK_KINDS = ("fp16", "bf16", "auto", "powersgd", "hierarchical")


@dataclass(frozen=True)
class PowerSGDDefaults:
    """Starting values that work for most models (PowerSGD paper, torch docs).

    matrix_approximation_rank 2: rank 1 often loses accuracy on large models, 4 rarely needed.
    start_powerSGD_iter 1000: plain all-reduce while gradients change fast at the start of
      training (torch advises ~10% of training or the first learning-rate phase); lower it for
      short jobs and demos.
    min_compression_rate 2: layers that would not compress at least 2x are sent uncompressed.
    use_error_feedback / warm_start: keep the compression error for the next step, and reuse
      last step's Q as the starting point (both needed for accuracy and cheap).
    """
    matrix_approximation_rank: int = 2
    start_powerSGD_iter: int = 1000
    min_compression_rate: float = 2
    use_error_feedback: bool = True
    warm_start: bool = True
    random_seed: int = 0


def _backend(process_group: dist.ProcessGroup | None, device: torch.device) -> str:
    """The backend the group runs collectives of tensors on `device` with ("nccl", "gloo", ...).

    A group made without naming one (`init_process_group()`) has a backend per device type,
    "cpu:gloo,cuda:nccl", and get_backend() then answers "undefined": read the per-device
    configuration instead.
    """
    config = str(dist.get_backend_config(process_group)).lower()
    per_device = dict(item.split(":", 1) for item in config.split(",") if ":" in item)
    if per_device:
        return per_device.get(device.type, "undefined")
    return config


def bf16_is_native(device: torch.device) -> bool:
    """bf16 gradients are cheap to produce on CPUs and on GPUs from Ampere (sm80) on."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return True


def _ddp_device(ddp_model: torch.nn.Module) -> torch.device:
    first = next(ddp_model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")


def compress_hook_any_backend(dtype: torch.dtype):
    """A cast-to-`dtype` all-reduce hook that also runs on gloo (what torch's fp16/bf16 hooks do).

    torch refuses its own bf16_compress_hook unless NCCL >= 2.10 is there (older NCCL lacked
    bf16 sums); gloo sums bf16 fine, so on other backends this equivalent is registered.
    No annotations on purpose: DDP compares them to real classes, which postponed (string)
    annotations would fail.
    """
    def cast_allreduce_hook(process_group, bucket):
        group = process_group if process_group is not None else dist.group.WORLD
        buffer = bucket.buffer()
        compressed = buffer.to(dtype).div_(group.size())

        def decompress(fut):
            buffer.copy_(fut.value()[0])   # in place: no second full-size buffer
            return buffer

        return dist.all_reduce(compressed, group=group, async_op=True).get_future().then(decompress)

    cast_allreduce_hook.__name__ = f"{str(dtype).replace('torch.', '')}_cast_allreduce_hook"
    return cast_allreduce_hook


def serialised_powersgd_hook(state, bucket):
    """torch's PowerSGD hook, waited on before the next bucket's hook starts.

    Why: torch's PowerSGD hook issues its second and third collectives inside Future.then
    callbacks. With several buckets those callbacks run on other threads, so two ranks can
    issue bucket 1's all-reduce and bucket 2's all-reduce in different orders; on gloo that
    aborts the job ("Received data size doesn't match expected size", seen here with torch
    2.13 and 0.5 MB buckets). torch's unmodified hook is kept for NCCL, where it is the
    common production setup. Waiting here keeps the order identical on every rank, at the price of not
    overlapping PowerSGD's communication with the rest of the backward pass, which on gloo
    (CPU, blocking collectives) was not happening much anyway. The alternative is one bucket
    (bucket_cap_mb larger than the model), which also loses overlap.
    """
    fut = powerSGD_hook.powerSGD_hook(state, bucket)
    fut.wait()
    return fut


def apply_comm_hook(ddp_model: torch.nn.parallel.DistributedDataParallel, kind: str = "auto",
                    process_group: dist.ProcessGroup | None = None, **options: Any) -> Any:
    """Register the communication hook `kind` on a DDP model; returns the hook's state.

    kind: "fp16" | "bf16" | "auto" (bf16 where native, else fp16) | "powersgd" | "hierarchical".
    options: for "powersgd", any PowerSGDState argument (defaults: PowerSGDDefaults);
             for "hierarchical", local_size (ranks per node; default from LOCAL_WORLD_SIZE).
    Call once, before the first backward (DDP allows one hook per model).
    """
    kind = kind.lower()
    if kind not in COMM_HOOK_KINDS:
        raise ValueError(f"unknown comm hook kind {kind!r}; choose one of {', '.join(COMM_HOOK_KINDS)}")
    if kind == "auto":
        kind = "bf16" if bf16_is_native(_ddp_device(ddp_model)) else "fp16"
    if kind in ("fp16", "bf16"):
        if options:
            raise TypeError(f"the {kind} hook takes no options, got {sorted(options)}")
        if _backend(process_group, _ddp_device(ddp_model)) == "nccl":
            hook = default_hooks.fp16_compress_hook if kind == "fp16" else default_hooks.bf16_compress_hook
        else:
            hook = compress_hook_any_backend(torch.float16 if kind == "fp16" else torch.bfloat16)
        ddp_model.register_comm_hook(process_group, hook)
        return process_group
    if kind == "powersgd":
        settings = {**PowerSGDDefaults().__dict__, **options}
        state = powerSGD_hook.PowerSGDState(process_group=process_group, **settings)
        # torch's own hook only where it is proven (NCCL); any other backend gets the serialised one
        on_nccl = _backend(process_group, _ddp_device(ddp_model)) == "nccl"
        ddp_model.register_comm_hook(state, powerSGD_hook.powerSGD_hook if on_nccl else serialised_powersgd_hook)
        return state
    # hierarchical
    if process_group is not None:
        warnings.warn("hierarchical all-reduce builds its own groups over the whole world; "
                      "process_group is ignored", stacklevel=2)
    groups = new_hierarchical_groups(options.pop("local_size", None))
    if options:
        raise TypeError(f"the hierarchical hook takes only local_size, got {sorted(options)}")
    ddp_model.register_comm_hook(groups, hierarchical_allreduce_hook)
    return groups
