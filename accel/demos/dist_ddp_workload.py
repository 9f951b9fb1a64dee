"""The DDP training workload the communication demos share (a build() for dist_common.run_ranks).

An MLP of `layers` square Linear layers of `width`, trained with SGD under DDP on gloo. The
variant's settings (config["variants"][variant]) choose what the fix changes:
  hook: None | "fp16" | "bf16" | "powersgd" | "hierarchical" (accel.comm.apply_comm_hook)
  hook_options: dict passed to apply_comm_hook (PowerSGD rank, start iteration, local_size)
  ddp: dict of DistributedDataParallel kwargs (bucket_cap_mb, ...)
  tuned_from_metrics: dict of a comm finding's metrics -> accel.comm.wrap_ddp derives DDP kwargs
  micro_batches: gradient accumulation steps per optimizer step (default 1)
  no_sync: accumulate with accel.comm.accumulate_gradients (model.no_sync on all but the last)
Every rank draws its data from a generator seeded by (rank, step), so before and after variants
see identical data and their parameters can be compared after the same number of steps.
"""
from __future__ import annotations

from typing import Any

from accel.demos.dist_common import RankWorkload

PARAM_SAMPLE = 2048   # parameters returned for before/after comparison (first N of the flat vector)


def build(rank: int, world_size: int, variant: str, config: dict[str, Any]) -> RankWorkload:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from accel.comm import accumulate_gradients, apply_comm_hook, derive_ddp_settings

    settings = config["variants"][variant]
    width, layers, batch = config["width"], config["layers"], config["batch"]
    torch.manual_seed(0)
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    module = torch.nn.Sequential(*blocks)
    ddp_kwargs = dict(settings.get("ddp", {}))
    if settings.get("tuned_from_metrics") is not None:
        ddp_kwargs = {**derive_ddp_settings(settings["tuned_from_metrics"]).ddp_kwargs(), **ddp_kwargs}
    model = DistributedDataParallel(module, **ddp_kwargs)
    if settings.get("hook"):
        apply_comm_hook(model, kind=settings["hook"], **settings.get("hook_options", {}))
    optimizer = torch.optim.SGD(model.parameters(), lr=config.get("lr", 0.01))
    micro = settings.get("micro_batches", 1)

    def data(step: int, index: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(((step * 1000 + index) * 64) + rank)
        return torch.randn(batch // micro, width, generator=generator)

    def loss_of(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return (m(x) - x).pow(2).mean()

    def step(i: int) -> None:
        batches = [data(i, j) for j in range(micro)]
        if settings.get("no_sync"):
            accumulate_gradients(model, batches, loss_of)
        else:
            for x in batches:                       # the naive loop: all-reduce every micro-batch
                (loss_of(model, x) / micro).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def checks() -> dict[str, Any]:
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        return {"param_sample": flat[:PARAM_SAMPLE].tolist(), "param_sum": float(flat.double().sum()),
                "ddp_kwargs": {k: v for k, v in ddp_kwargs.items()}}

    return RankWorkload(step=step, checks=checks)


def max_param_diff(before_checks: list[dict[str, Any]], after_checks: list[dict[str, Any]]) -> float:
    """Largest |before − after| over the sampled parameters of rank 0."""
    a, b = before_checks[0]["param_sample"], after_checks[0]["param_sample"]
    return max(abs(x - y) for x, y in zip(a, b))


def ranks_agree(checks: list[dict[str, Any]]) -> bool:
    """DDP keeps replicas identical: every rank's sampled parameters must be equal."""
    return all(c["param_sample"] == checks[0]["param_sample"] for c in checks[1:])


def run_before_after(fix: str, finding_kind: str, out_dir, device: str, steps: int, config: dict[str, Any],
                     world_size: int = 2, slow_link_mbit: int | None = None, link_delay_ms: float | None = None,
                     notes: list[str] | None = None, tolerance: float | None = None):
    """Run the shared workload's before and after variants on gloo ranks; a DemoResult.

    slow_link_mbit / link_delay_ms: run both variants behind a rate-limited and/or delayed
    loopback (dist_common.slow_loopback); when that cannot be set up here, the demo runs on
    plain loopback and says so.
    tolerance: the largest parameter difference after the same steps that still counts as
    "same result" for this fix (None: report the difference without a verdict).
    """
    import contextlib
    from pathlib import Path

    from accel.demos import DemoResult
    from accel.demos.dist_common import run_ranks, slow_loopback

    notes = list(notes or [])
    out_dir = Path(out_dir)
    with contextlib.ExitStack() as stack:
        if slow_link_mbit or link_delay_ms:
            try:
                link_name = stack.enter_context(slow_loopback(slow_link_mbit, link_delay_ms))
            except OSError as exc:
                notes.append(f"NO SLOW LINK: could not slow a loopback down here ({exc}); ran on plain "
                             "loopback, where this fix is expected to gain little or lose")
            else:
                notes.append(f"link: {link_name} (a real tc limit, standing in for a slow network)")
        try:
            results = run_ranks(__name__, ["before", "after"], world_size, out_dir, steps, config)
        except Exception as exc:   # a broken rank ends the demo with its reason, not a hang
            raise RuntimeError(f"the gloo ranks failed: {type(exc).__name__}: {exc}") from exc   # exit 1, not "skipped"
    before, after = results["before"], results["after"]
    diff = max_param_diff(before.checks_per_rank, after.checks_per_rank)
    checks: dict[str, Any] = {
        "max_abs_param_diff_vs_before": diff,
        "replicas_identical_after": ranks_agree(after.checks_per_rank),
        "step_ms_per_rank_before": [round(t, 2) for t in before.step_ms_per_rank],
        "step_ms_per_rank_after": [round(t, 2) for t in after.step_ms_per_rank],
        "ddp_kwargs_after": after.checks_per_rank[0]["ddp_kwargs"],
    }
    if tolerance is not None:
        checks["same_result_within_tolerance"] = f"{diff <= tolerance} (tolerance {tolerance:g})"
    notes.insert(0, f"{world_size} ranks on gloo (CPU); step time = slowest rank's median"
                 + ("" if device == "cpu" else f"; --device {device} ignored: this demo runs on CPU ranks"))
    return DemoResult(fix=fix, device="cpu", finding_kind=finding_kind,
                      step_ms_before=before.slowest_rank_ms, step_ms_after=after.slowest_rank_ms,
                      trace_before=before.trace_dir, trace_after=after.trace_dir, checks=checks, notes=notes)
