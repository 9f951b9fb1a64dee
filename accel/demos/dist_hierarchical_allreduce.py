"""Demo: hierarchical vs flat all-reduce on 4 gloo ranks laid out as 2 "nodes" x 2.

Each node is a network namespace; ranks inside a node talk over its loopback, and the two
nodes are joined by a veth pair rate-limited with tc: a slow interconnect between fast nodes,
on one machine (needs root and iproute2; without them the demo runs all 4 ranks on plain
loopback, where every link is equally fast and the extra steps can only cost, and says so).
Before: DDP's flat all-reduce; after: accel.comm.apply_comm_hook(kind="hierarchical"), which
sends 1/2 of each bucket across the slow link instead of all of it. Parameters must match up
to float reassociation (node partial sums first): 1e-6 after a few SGD steps.
"""
from __future__ import annotations

from pathlib import Path

from accel.demos import DemoResult
from accel.demos.dist_ddp_workload import max_param_diff, ranks_agree

DEFAULT_STEPS = 4
NODES, LOCAL_SIZE = 2, 2
LINK_MBIT = 400
CONFIG = {"width": 1024, "layers": 1, "batch": 16, "warmup": 1, "profile_steps": 2, "interleave_variants": True,
          "variants": {"before": {},
                       "after": {"hook": "hierarchical", "hook_options": {"local_size": LOCAL_SIZE}}}}
FIX, KIND = "hierarchical_allreduce", "comm_exposed"


def run(out_dir: Path, device: str, steps: int) -> DemoResult:
    from accel.demos.dist_common import run_ranks, run_ranks_on_nodes, two_node_network

    notes = [f"{NODES * LOCAL_SIZE} ranks on gloo (CPU) as {NODES} nodes x {LOCAL_SIZE}; step time = slowest "
             "rank's median" + ("" if device == "cpu" else f"; --device {device} ignored: CPU ranks")]
    module = "accel.demos.dist_ddp_workload"
    try:
        try:
            network = two_node_network(LINK_MBIT)
            info = network.__enter__()
        except OSError as exc:
            notes.append(f"NO SLOW LINK: could not build two network namespaces here ({exc}); all ranks ran "
                         "on plain loopback, where hierarchical all-reduce only adds steps")
            results = run_ranks(module, ["before", "after"], NODES * LOCAL_SIZE, out_dir, steps, CONFIG)
        else:
            try:
                notes.append(f"link: {info['link']}")
                results = run_ranks_on_nodes(module, ["before", "after"], info["nodes"], LOCAL_SIZE,
                                             info["ifname"], out_dir, steps, CONFIG)
            finally:
                network.__exit__(None, None, None)
    except Exception as exc:   # a broken rank ends the demo with its reason, not a hang
        raise RuntimeError(f"the gloo ranks failed: {type(exc).__name__}: {exc}") from exc   # exit 1, not "skipped"
    before, after = results["before"], results["after"]
    diff = max_param_diff(before.checks_per_rank, after.checks_per_rank)
    return DemoResult(
        fix=FIX, device="cpu", finding_kind=KIND,
        step_ms_before=before.slowest_rank_ms, step_ms_after=after.slowest_rank_ms,
        trace_before=before.trace_dir, trace_after=after.trace_dir,
        checks={"max_abs_param_diff_vs_before": diff,
                "same_result_within_tolerance": f"{diff <= 1e-6} (tolerance 1e-06)",
                "replicas_identical_after": ranks_agree(after.checks_per_rank),
                "step_ms_per_rank_before": [round(t, 2) for t in before.step_ms_per_rank],
                "step_ms_per_rank_after": [round(t, 2) for t in after.step_ms_per_rank]},
        notes=notes)
