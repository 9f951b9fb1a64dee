"""Shared plumbing for the multi-rank demos (dist_*.py): start ranks, time, profile, slow link.

A demo module defines a top-level `build(rank, world_size, variant, config) -> RankWorkload`
and calls `run_ranks(module, ["before", "after"], ...)`. Every rank, for each variant in turn:
  1. joins a gloo process group on 127.0.0.1 (CPU ranks: NCCL refuses two ranks on one GPU,
     and no multi-GPU NCCL path is written yet),
  2. times `steps` steps with the wall clock (accel.profiling.time_steps, median after warm-up),
  3. profiles a few more steps with torch.profiler into OUT/<variant>/rank-<N>.json.gz,
  4. writes its timings and checks to OUT/timings/<variant>-rank-<N>.json (outside the trace
     directory, so the analyzers see only rank files there).
With config["nice"], the ranks run at that priority (a negative nice needs root: timed tests on a
shared machine). With config["interleave_variants"], every variant is built first and their timed steps alternate
(accel.profiling.time_steps_interleaved): on a machine shared with other jobs the load drifts over
seconds, and alternating exposes before and after to the same load.
Ranks are started with torch.multiprocessing (spawn) and joined with a deadline, so a hung
collective ends the demo with an error instead of hanging it.
"""
from __future__ import annotations

import contextlib
import ctypes
import datetime
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

RANK_TIMEOUT_S = 120


@dataclass
class RankWorkload:
    """What a demo's build() returns for one rank."""
    step: Callable[[int], object]                    # one training step, i = step index
    checks: Callable[[], dict[str, Any]] | None = None   # evidence after the steps (param checksums…)
    teardown: Callable[[], None] | None = None


@dataclass
class VariantResult:
    """The ranks' figures for one variant (before or after)."""
    variant: str
    trace_dir: Path
    step_ms_per_rank: list[float]                     # median wall-clock step time of each rank
    checks_per_rank: list[dict[str, Any]] = field(default_factory=list)

    @property
    def slowest_rank_ms(self) -> float:
        return max(self.step_ms_per_rank)


def collect_results(out_dir: Path, variants: list[str], world_size: int) -> dict[str, "VariantResult"]:
    """Gather what each rank wrote to out_dir/timings: its median step time and its checks, per variant."""
    results = {}
    for variant in variants:
        per_rank = [json.loads((out_dir / "timings" / f"{variant}-rank-{r}.json").read_text())
                    for r in range(world_size)]
        results[variant] = VariantResult(variant, out_dir / variant, [p["median_ms"] for p in per_rank],
                                         [p["checks"] for p in per_rank])
    return results


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank_main(rank: int, world_size: int, port: int, module_name: str, variants: list[str],
               out_dir: str, steps: int, config: dict[str, Any]) -> None:
    # Runs in each spawned rank process: every variant in turn, in one process group (starting
    # processes and importing torch costs seconds on a small machine; pay it once).
    import torch
    import torch.distributed as dist
    from accel.profiling import median_ms, profile_steps, time_steps, time_steps_interleaved

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))   # ranks share the cores
    if config.get("nice") is not None:
        # timed tests on a shared machine: a higher priority (negative nice, needs root) gives the
        # ranks the cores they would have on a machine of their own; threads started later
        # (gloo's, torch's) inherit it
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, int(config["nice"]))
    os.environ.update(MASTER_ADDR=config.get("master_addr", "127.0.0.1"), MASTER_PORT=str(port))
    if config.get("gloo_ifname"):     # multi-"node" demos: gloo talks over the node's link
        os.environ["GLOO_SOCKET_IFNAME"] = config["gloo_ifname"]
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=RANK_TIMEOUT_S))

    def profile_and_record(variant: str, workload: RankWorkload, times: list[float]) -> None:
        dist.barrier()
        trace = Path(out_dir) / variant / f"rank-{rank}.json.gz"
        profile_steps(workload.step, config.get("profile_steps", 3), trace, "cpu", warmup=0,
                      profile_memory=bool(config.get("profile_memory")))
        dist.barrier()
        checks = workload.checks() if workload.checks else {}
        timing_file = Path(out_dir) / "timings" / f"{variant}-rank-{rank}.json"
        timing_file.parent.mkdir(parents=True, exist_ok=True)
        timing_file.write_text(json.dumps({"rank": rank, "step_ms": times, "median_ms": median_ms(times),
                                           "checks": checks}))
        if workload.teardown:
            workload.teardown()

    try:
        build = importlib.import_module(module_name).build
        warmup = config.get("warmup", 2)
        if config.get("interleave_variants"):
            workloads: list[RankWorkload] = [build(rank, world_size, variant, config) for variant in variants]
            timed = time_steps_interleaved([w.step for w in workloads], steps, "cpu", warmup=warmup)
            for variant, workload, times in zip(variants, workloads, timed):
                profile_and_record(variant, workload, times)
        else:
            for variant in variants:
                workload = build(rank, world_size, variant, config)
                profile_and_record(variant, workload, time_steps(workload.step, steps, "cpu", warmup=warmup))
                del workload
    finally:
        dist.destroy_process_group()
    leave_rank_process()


def leave_rank_process() -> None:
    """End a spawned rank that finished its work (outputs written, process group destroyed) without
    the interpreter's finalization, where torch's gloo threads now and then abort the process
    ("terminate called without an active exception", SIGABRT) after everything was written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _clear_rank_outputs(out_dir: Path, variants: list[str]) -> None:
    """Make OUT/<variant>/ and remove what an earlier run of a demo wrote there (its rank traces
    and timings: a 4-rank run's rank-3 trace must not join a 2-rank run's), and nothing else:
    `--out .` in a project with its own before/ folder keeps that folder's files."""
    for variant in variants:
        (out_dir / variant).mkdir(parents=True, exist_ok=True)
        for old in (*(out_dir / variant).glob("rank-*.json.gz"), *(out_dir / "timings").glob(f"{variant}-rank-*.json")):
            old.unlink(missing_ok=True)


def run_ranks(module_name: str, variants: list[str], world_size: int, out_dir: Path, steps: int,
              config: dict[str, Any] | None = None, timeout_s: float = RANK_TIMEOUT_S) -> dict[str, VariantResult]:
    """Start `world_size` gloo ranks that run `module_name`.build(...) for each variant in turn.

    Returns {variant: VariantResult}. Raises TimeoutError when the ranks outlive timeout_s (a
    hung collective) and torch's ProcessRaisedException (with the rank's traceback) on errors.
    """
    import torch.multiprocessing as mp

    out_dir = Path(out_dir)
    _clear_rank_outputs(out_dir, variants)
    context = mp.start_processes(_rank_main, args=(world_size, free_port(), module_name, list(variants),
                                                   str(out_dir), steps, dict(config or {})),
                                 nprocs=world_size, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the ranks did not finish within {timeout_s:.0f} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
    return collect_results(out_dir, variants, world_size)


# --- a slow link for the compression demos -----------------------------------------------------

CLONE_NEWNET = 0x40000000


@contextlib.contextmanager
def slow_loopback(rate_mbit: int | None = None, delay_ms: float | None = None) -> Iterator[str]:
    """Run the enclosed code (and the processes it starts) behind a slow loopback.

    Creates a private network namespace whose loopback is limited to `rate_mbit` (tc token
    bucket) or delayed by `delay_ms` per packet (tc netem; with rate_mbit too when both are
    given), and moves this thread into it; ranks spawned inside inherit it, so their gloo
    traffic crosses the slow link while the rest of the machine is untouched. Needs root (or
    CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2; raises OSError with the reason otherwise.
    Yields a one-line description of the link for the demo's notes.
    """
    if shutil.which("ip") is None or shutil.which("tc") is None:
        raise OSError("iproute2 (ip, tc) is not installed")
    name = f"tdslow-{uuid.uuid4().hex[:8]}"
    libc = ctypes.CDLL(None, use_errno=True)

    def sh(*args: str) -> None:
        done = subprocess.run(args, capture_output=True, text=True)
        if done.returncode:
            raise OSError(f"`{' '.join(args)}` failed: {done.stderr.strip() or done.returncode}")

    sh("ip", "netns", "add", name)
    original = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        sh("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
        if delay_ms:
            shape = ["netem", "delay", f"{delay_ms}ms"] + (["rate", f"{rate_mbit}mbit"] if rate_mbit else [])
            link = f"loopback delayed {delay_ms} ms per packet" + (f", {rate_mbit} Mbit/s" if rate_mbit else "")
        elif rate_mbit:
            shape = ["tbf", "rate", f"{rate_mbit}mbit", "burst", "256kb", "latency", "100ms"]
            link = f"loopback rate-limited to {rate_mbit} Mbit/s"
        else:
            raise ValueError("give rate_mbit, delay_ms or both")
        sh("ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root", *shape)
        target = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
        try:
            if libc.setns(target, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns into the slow-link namespace failed")
        finally:
            os.close(target)
        try:
            yield f"{link} with tc (private network namespace {name})"
        finally:
            libc.setns(original, CLONE_NEWNET)
    finally:
        os.close(original)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@contextlib.contextmanager
def two_node_network(rate_mbit: int) -> Iterator[dict[str, Any]]:
    """Two network namespaces ("nodes") joined by a veth pair rate-limited to `rate_mbit` each way.

    Inside a node, ranks reach each other over the node's own loopback (fast); between nodes
    every byte crosses the veth pair, shaped by tc (slow): the topology hierarchical all-reduce
    is for, on one machine. Both veth ends are named `tdn` inside their namespace, so one
    GLOO_SOCKET_IFNAME fits every rank. Needs root and iproute2 (OSError with the reason else).
    Yields {"nodes": [(netns path, ip), (netns path, ip)], "ifname": "tdn", "link": description}.
    """
    if shutil.which("ip") is None or shutil.which("tc") is None:
        raise OSError("iproute2 (ip, tc) is not installed")
    tag = uuid.uuid4().hex[:6]
    names = [f"tdnode{i}-{tag}" for i in range(2)]
    ends = [f"tdv{i}{tag}" for i in range(2)]
    ips = ["10.77.0.1", "10.77.0.2"]

    def sh(*args: str) -> None:
        done = subprocess.run(args, capture_output=True, text=True)
        if done.returncode:
            raise OSError(f"`{' '.join(args)}` failed: {done.stderr.strip() or done.returncode}")

    created: list[str] = []
    try:
        for name in names:
            sh("ip", "netns", "add", name)
            created.append(name)
        sh("ip", "link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
        for name, end, ip in zip(names, ends, ips):
            sh("ip", "link", "set", end, "netns", name)
            sh("ip", "-n", name, "link", "set", end, "name", "tdn")
            sh("ip", "-n", name, "addr", "add", f"{ip}/24", "dev", "tdn")
            sh("ip", "-n", name, "link", "set", "tdn", "up")
            sh("ip", "-n", name, "link", "set", "lo", "up")
            sh("ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "tdn", "root", "tbf",
               "rate", f"{rate_mbit}mbit", "burst", "256kb", "latency", "100ms")
        yield {"nodes": [(f"/var/run/netns/{n}", ip) for n, ip in zip(names, ips)], "ifname": "tdn",
               "link": f"2 network namespaces as 2 nodes, joined by a veth pair rate-limited to "
                       f"{rate_mbit} Mbit/s each way with tc; loopback inside each"}
    finally:
        for name in created:      # deleting a namespace deletes its veth end, and so the pair
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        # a pair left in this namespace (a move that failed) goes too; usually already gone
        subprocess.run(["ip", "link", "del", ends[0]], capture_output=True)


def run_ranks_on_nodes(module_name: str, variants: list[str], nodes: list[tuple[str, str]], local_size: int,
                       ifname: str, out_dir: Path, steps: int, config: dict[str, Any] | None = None,
                       timeout_s: float = RANK_TIMEOUT_S) -> dict[str, VariantResult]:
    """Like run_ranks, with ranks node by node: rank = node · local_size + local_rank, each
    started inside its node's network namespace (the child inherits this thread's namespace
    at start). The rendezvous is node 0's address."""
    import multiprocessing

    out_dir = Path(out_dir)
    _clear_rank_outputs(out_dir, variants)
    world_size = len(nodes) * local_size
    config = {**(config or {}), "master_addr": nodes[0][1], "gloo_ifname": ifname}
    port = free_port()
    spawn = multiprocessing.get_context("spawn")
    libc = ctypes.CDLL(None, use_errno=True)
    processes = []
    original = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        for node, (netns_path, _) in enumerate(nodes):
            target = os.open(netns_path, os.O_RDONLY)
            try:
                if libc.setns(target, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {netns_path} failed")
            finally:
                os.close(target)
            for local_rank in range(local_size):
                rank = node * local_size + local_rank
                process = spawn.Process(target=_rank_main, args=(rank, world_size, port, module_name, list(variants),
                                                                 str(out_dir), steps, config), daemon=True)
                process.start()
                processes.append(process)
    finally:
        libc.setns(original, CLONE_NEWNET)
        os.close(original)
    deadline = time.monotonic() + timeout_s
    try:
        for rank, process in enumerate(processes):
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                raise TimeoutError(f"the ranks did not finish within {timeout_s:.0f} s")
            if process.exitcode != 0:
                raise RuntimeError(f"rank {rank} exited with code {process.exitcode} (its traceback is on stderr)")
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
    return collect_results(out_dir, variants, world_size)
